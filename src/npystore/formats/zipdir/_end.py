"""Where the central directory is: the end of central directory record (EOCD), and for
ZIP64 archives the locator and end record before it, found in the archive's tail.

Byte layout (PKWARE APPNOTE.TXT 4.3, integers little endian)::

    End of central directory record (EOCD): the last record, 22 bytes + comment
    0   4  signature b"PK\\x05\\x06"
    4   2  this disk; 6 2 disk where the directory starts       both 0 (or 0xFFFF, ZIP64)
    8   2  entries on this disk; 10 2 entries in total           0xFFFF: see ZIP64 record
    12  4  directory size; 16 4 directory offset                 0xFFFFFFFF: see ZIP64 record
    20  2  comment length n; 22 n comment, reaching exactly to the end of the archive

    ZIP64 end of central directory locator: exactly the 20 bytes before the EOCD
    0   4  signature b"PK\\x06\\x07"
    4   4  disk holding the ZIP64 record (0); 8 8 offset of the ZIP64 record
    16  4  number of disks (1, or 0 from some writers)

    ZIP64 end of central directory record: 56 bytes + extensible data, before the locator
    0   4  signature b"PK\\x06\\x06"; 4 8 size of the rest of the record (>= 44)
    12  2  version made by; 14 2 version needed
    16  4  this disk; 20 4 disk where the directory starts     both 0
    24  8  entries on this disk; 32 8 entries in total
    40  8  directory size; 48 8 directory offset
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Final

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.need import NeedMoreBytes
from npystore.formats.zipdir._common import CENTRAL_HEADER_SIZE, U16, U32

__all__ = [
    "EOCD_SEARCH", "ZIP64_RECORD_SIZE", "EndRecord", "check_end", "parse_end_record",
    "parse_zip64_end_record", "tail_size",
]  # fmt: skip

#: Bytes at the end of an archive that can hold the EOCD: 22 + the longest comment.
EOCD_SEARCH: Final = 65_557
#: Fixed part of the ZIP64 end of central directory record.
ZIP64_RECORD_SIZE: Final = 56

_EOCD: Final = struct.Struct("<4s4H2IH")
_LOCATOR: Final = struct.Struct("<4sIQI")
_ZIP64_RECORD: Final = struct.Struct("<4sQ2H2I4Q")
_EOCD_SIG: Final = b"PK\x05\x06"
_LOCATOR_SIG: Final = b"PK\x06\x07"
_ZIP64_SIG: Final = b"PK\x06\x06"


@dataclass(frozen=True, slots=True)
class EndRecord:
    """Where the central directory is: the EOCD, completed by the ZIP64 end record.

    Attributes
    ----------
    entries, cd_offset, cd_size : int
        Number of members; absolute offset and size in bytes of the central directory.
    eocd_offset : int
        Absolute offset of the EOCD signature.
    comment : bytes
        The archive comment.
    zip64_locator_offset, zip64_record_offset : int or None
        Offsets of the ZIP64 locator and of the ZIP64 end record it names, if present.
    trailing_bytes : int
        Bytes after the comment: 0 unless the EOCD was found by the fallback search.
    zip64_pending : bool
        The ZIP64 end record has not been read yet, so ``entries``, ``cd_offset`` and
        ``cd_size`` are the EOCD's raw (possibly sentinel) values: pass the bytes at
        ``zip64_record_offset`` to :func:`parse_zip64_end_record`.
    """

    entries: int
    cd_offset: int
    cd_size: int
    eocd_offset: int
    comment: bytes
    zip64_locator_offset: int | None
    zip64_record_offset: int | None
    trailing_bytes: int = 0
    zip64_pending: bool = False


def tail_size(archive_size: int, initial: int = 256 * 1024) -> int:
    """Return how many bytes to read from the end of the archive first.

    Parameters
    ----------
    archive_size : int
        Size of the archive in bytes.
    initial : int
        Preferred read size; raised to :data:`EOCD_SEARCH`, so the EOCD is always inside.

    Returns
    -------
    int
        ``min(archive_size, max(initial, EOCD_SEARCH))``, never negative.
    """
    return max(0, min(archive_size, max(initial, EOCD_SEARCH)))


def parse_end_record(tail: bytes, tail_offset: int, archive_size: int, *, source: str) -> EndRecord:
    """Find the EOCD in the archive's tail, with the ZIP64 locator and record if present.

    The last EOCD signature whose comment reaches exactly the end of the archive wins. If
    there is none, the last plausible one does (its directory lies before it, disks are 0)
    and the bytes after its comment are counted in ``trailing_bytes``.

    Parameters
    ----------
    tail : bytes
        ``archive[tail_offset:archive_size]``, normally :func:`tail_size` bytes.
    tail_offset, archive_size : int
        Absolute offset of ``tail[0]``; size of the archive.
    source : str
        URL of the archive, for messages.

    Returns
    -------
    EndRecord
        Complete, or ``zip64_pending`` when the ZIP64 record lies before ``tail``.

    Raises
    ------
    FormatError
        No EOCD, a bad ZIP64 locator or record, or a directory outside the archive.
    UnsupportedError
        A split (multi-disk) archive.
    NeedMoreBytes
        ``tail`` is shorter than :data:`EOCD_SEARCH` and holds no EOCD, or cuts off the
        20 bytes before it, where a ZIP64 locator may be.
    """
    if tail_offset < 0 or tail_offset + len(tail) != archive_size:
        raise FormatError(
            f"{source}: the tail read holds {len(tail)} bytes from offset {tail_offset}, "
            f"expected {archive_size - tail_offset} (to the end of {archive_size} bytes)"
        )
    pos = _find_eocd(tail, tail_offset)
    window = min(archive_size, EOCD_SEARCH)
    if pos is None and len(tail) < window:
        raise NeedMoreBytes(
            f"{source}: no end record in the last {len(tail)} bytes, read {window}",
            offset=archive_size - window,
            needed=window,
        )
    if pos is None:
        raise FormatError(
            f"{source}: not a ZIP archive: no end of central directory record ({_EOCD_SIG!r}) "
            f"in the last {len(tail)} bytes"
        )
    _, disk, cd_disk, _, entries, cd_size, cd_offset, comment_len = _EOCD.unpack_from(tail, pos)
    comment_end = pos + _EOCD.size + comment_len
    eocd = tail_offset + pos
    loc = pos - _LOCATOR.size
    end = EndRecord(
        entries, cd_offset, cd_size, eocd, bytes(tail[pos + _EOCD.size : comment_end]),
        None, None, trailing_bytes=len(tail) - comment_end,
    )  # fmt: skip
    if loc < 0 <= eocd - _LOCATOR.size:
        raise NeedMoreBytes(
            f"{source}: the tail read starts only {pos} bytes before the end record at {eocd}, "
            "too few to see whether a ZIP64 locator precedes it",
            offset=eocd - _LOCATOR.size,
            needed=archive_size - eocd + _LOCATOR.size,
        )
    if loc < 0 or tail[loc : loc + 4] != _LOCATOR_SIG:
        _check_disks(disk, cd_disk, source)
        try:
            check_end(end, archive_size, source)
        except FormatError as exc:
            if U32 not in (cd_offset, cd_size) and entries != U16:
                raise
            raise FormatError(f"{exc}; it holds ZIP64 sentinels, but no ZIP64 locator") from None
        return end
    _, record_disk, record, disks = _LOCATOR.unpack_from(tail, loc)
    if record_disk != 0 or disks > 1:
        raise UnsupportedError(
            f"{source}: the ZIP64 locator describes a split archive ({disks} disks, ZIP64 end "
            f"record on disk {record_disk}), expected a single-file archive"
        )
    if record + ZIP64_RECORD_SIZE > tail_offset + loc:
        raise FormatError(
            f"{source}: the ZIP64 locator at offset {tail_offset + loc} names a ZIP64 end "
            f"record at offset {record}, expected at most {tail_offset + loc - ZIP64_RECORD_SIZE}"
        )
    end = replace(
        end, zip64_locator_offset=tail_offset + loc, zip64_record_offset=record, zip64_pending=True
    )
    return (
        _read_zip64(tail, tail_offset, end, archive_size, source) if record >= tail_offset else end
    )


def parse_zip64_end_record(
    data: bytes, offset: int, end: EndRecord, archive_size: int, *, source: str
) -> EndRecord:
    """Complete an end record with the 64-bit values of its ZIP64 end record.

    Parameters
    ----------
    data : bytes
        Archive bytes from ``offset`` on, holding the 56 bytes at ``end.zip64_record_offset``.
    offset, archive_size : int
        Absolute offset of ``data[0]``; size of the archive.
    end : EndRecord
        The result of :func:`parse_end_record`.
    source : str
        URL of the archive, for messages.

    Returns
    -------
    EndRecord
        ``entries``, ``cd_offset`` and ``cd_size`` from the ZIP64 record, ``zip64_pending``
        cleared; ``end`` itself if the archive has no ZIP64 record.

    Raises
    ------
    FormatError
        Bad signature or size of the record, or a directory outside the archive.
    UnsupportedError
        A split (multi-disk) archive.
    NeedMoreBytes
        ``data`` does not cover the record.
    """
    if end.zip64_record_offset is None:
        return end
    return _read_zip64(data, offset, end, archive_size, source)


def _find_eocd(tail: bytes, tail_offset: int) -> int | None:
    """Index of the EOCD in ``tail``: the last exact one, else the last plausible one."""
    fallback: int | None = None
    pos = len(tail)
    while (pos := tail.rfind(_EOCD_SIG, 0, pos)) >= 0:
        if pos + _EOCD.size > len(tail):
            continue
        _, disk, cd_disk, _, _, cd_size, cd_offset, comment_len = _EOCD.unpack_from(tail, pos)
        comment_end = pos + _EOCD.size + comment_len
        if comment_end == len(tail):
            return pos
        if fallback is None and comment_end < len(tail) and disk == cd_disk == 0:
            zip64 = pos >= _LOCATOR.size and tail[pos - _LOCATOR.size :].startswith(_LOCATOR_SIG)
            if zip64 or cd_offset + cd_size <= tail_offset + pos:
                fallback = pos
    return fallback


def _read_zip64(
    data: bytes, data_offset: int, end: EndRecord, archive_size: int, source: str
) -> EndRecord:
    """Complete ``end`` from the ZIP64 end record at ``end.zip64_record_offset`` in ``data``."""
    record = end.zip64_record_offset or 0
    locator = end.zip64_locator_offset or 0
    pos = record - data_offset
    if pos < 0 or pos + ZIP64_RECORD_SIZE > len(data):
        raise NeedMoreBytes(
            f"{source}: the ZIP64 end record at offset {record} is not inside the {len(data)} "
            f"bytes read from offset {data_offset}",
            offset=record,
            needed=ZIP64_RECORD_SIZE,
        )
    sig, rest, _, _, disk, cd_disk, _, entries, cd_size, cd_offset = _ZIP64_RECORD.unpack_from(
        data, pos
    )
    if sig != _ZIP64_SIG:
        raise FormatError(
            f"{source}: expected the ZIP64 end record signature {_ZIP64_SIG!r} at offset "
            f"{record} (named by the locator at offset {locator}), found {sig!r}"
        )
    if not ZIP64_RECORD_SIZE <= 12 + rest <= locator - record:
        raise FormatError(
            f"{source}: the ZIP64 end record at offset {record} claims {12 + rest} bytes, "
            f"expected {ZIP64_RECORD_SIZE} to {locator - record} (up to the locator)"
        )
    _check_disks(disk, cd_disk, source)
    complete = replace(end, entries=entries, cd_offset=cd_offset, cd_size=cd_size)
    check_end(complete, archive_size, source)
    return replace(complete, zip64_pending=False)


def _check_disks(disk: int, cd_disk: int, source: str) -> None:
    """Split archives (a disk number other than 0) are unsupported."""
    if disk != 0 or cd_disk != 0:
        raise UnsupportedError(
            f"{source}: the archive spans several disks (disk numbers {disk} and {cd_disk}), "
            "expected a single-file archive"
        )


def check_end(end: EndRecord, archive_size: int, source: str) -> None:
    """The directory lies before the (ZIP64) end record and can hold its entries."""
    limit = end.eocd_offset if end.zip64_record_offset is None else end.zip64_record_offset
    if end.eocd_offset + _EOCD.size > archive_size or limit > end.eocd_offset:
        raise FormatError(
            f"{source}: end records at offsets {limit} and {end.eocd_offset} do not fit in "
            f"{archive_size} bytes"
        )
    if end.cd_offset + end.cd_size > limit:
        raise FormatError(
            f"{source}: the central directory at offset {end.cd_offset} ({end.cd_size} bytes) "
            f"runs past the end record at offset {limit} ({archive_size}-byte archive)"
        )
    if end.entries * CENTRAL_HEADER_SIZE > end.cd_size:
        raise FormatError(
            f"{source}: the end record counts {end.entries} members, too many for "
            f"{end.cd_size} bytes of central directory ({CENTRAL_HEADER_SIZE} bytes each)"
        )
