"""The ZIP central directory of ``.npz`` archives, parsed from byte ranges read back to front.

Reading order (what the IO layer does; every step gets only the bytes it names)::

    1. tail = archive[size - tail_size(size):]              -> parse_end_record
    2. if end.zip64_pending: 56 bytes at zip64_record_offset  -> parse_zip64_end_record
    3. [cd_offset, cd_offset + cd_size), often inside tail    -> parse_central_directory,
                                                                 check_members
    4. per member: 30 + len(name) + slack bytes at its local header offset
                                                              -> parse_local_header
    A NeedMoreBytes from any step says which range to read instead; it is not an error.

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

    Central directory header: one per member, back to back from the directory offset
    0   4  signature b"PK\\x01\\x02"; 4 2 version made by; 6 2 version needed
    8   2  flags: bit 0 encrypted, 3 data descriptor follows the data, 5 patched data,
           6 strong encryption, 11 name is UTF-8 (else cp437), 13 local header masked
    10  2  method: 0 stored, 8 deflated; 12 4 DOS time and date; 16 4 CRC-32
    20  4  compressed size; 24 4 uncompressed size              0xFFFFFFFF: ZIP64 extra
    28  2  name length n; 30 2 extra length m; 32 2 comment length k
    34  2  disk where the member starts                         0xFFFF: ZIP64 extra
    36  2  internal attributes; 38 4 external attributes
    42  4  local header offset                                  0xFFFFFFFF: ZIP64 extra
    46  n  name; 46+n m extra fields (uint16 id, uint16 size, data)...; then k comment

    ZIP64 extra field, id 0x0001: only the values whose fixed field holds the sentinel,
    in the order uncompressed size (8), compressed size (8), local header offset (8), disk (4).

    Local file header: at the local header offset, directly followed by the data
    0   4  signature b"PK\\x03\\x04"; 4 2 version needed; 6 2 flags; 8 2 method
    10  4  DOS time and date; 14 4 CRC-32; 18 4 compressed size; 22 4 uncompressed size
           (CRC and sizes are 0 with flag bit 3: the data descriptor after the data has them)
    26  2  name length n; 28 2 extra length m
    30  n  name, the same bytes as in the central directory
    30+n m  extra; it may differ from the central one: numpy.savez writes a 20-byte ZIP64
           extra into every local header and none into the directory
    30+n+m  the member's data, compressed size bytes

The central directory is authoritative for method, flags, CRC and sizes; the local header
only decides where the data starts. Split (multi-disk) archives raise UnsupportedError.
Offsets are taken as absolute: data prepended to an archive (self-extracting stubs) is not
supported and shows up as a FormatError.

This module is pure: bytes in, frozen dataclasses out.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from typing import Final

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.deflate import MAX_INFLATE_RATIO, max_inflated_size

__all__ = [
    "EOCD_SEARCH", "LOCAL_HEADER_SIZE", "EndRecord", "LocalHeader", "NeedMoreBytes",
    "ZipDirectory", "ZipEntry", "check_members", "member_name_problem",
    "parse_central_directory", "parse_end_record", "parse_local_header",
    "parse_zip64_end_record", "tail_size",
]  # fmt: skip

#: Bytes at the end of an archive that can hold the EOCD: 22 + the longest comment.
EOCD_SEARCH: Final = 65_557
#: Fixed part of a local file header.
LOCAL_HEADER_SIZE: Final = 30
#: Fixed part of a central directory header: the least one member takes in the directory.
CENTRAL_HEADER_SIZE: Final = 46
#: Fixed part of the ZIP64 end of central directory record.
ZIP64_RECORD_SIZE: Final = 56

_EOCD: Final = struct.Struct("<4s4H2IH")
_LOCATOR: Final = struct.Struct("<4sIQI")
_ZIP64_RECORD: Final = struct.Struct("<4sQ2H2I4Q")
_CENTRAL: Final = struct.Struct("<4s6H3I5H2I")
_LOCAL: Final = struct.Struct("<4s5H3I2H")
_EXTRA: Final = struct.Struct("<2H")
_EOCD_SIG: Final = b"PK\x05\x06"
_LOCATOR_SIG: Final = b"PK\x06\x07"
_ZIP64_SIG: Final = b"PK\x06\x06"
_CENTRAL_SIG: Final = b"PK\x01\x02"
_LOCAL_SIG: Final = b"PK\x03\x04"
_U16: Final = 0xFFFF
_U32: Final = 0xFFFF_FFFF
_ZIP64_EXTRA_ID: Final = 0x0001
_DEFLATED: Final = 8
#: Flag bits: encrypted (0), data descriptor (3), patched data (5), strong encryption (6),
#: UTF-8 name (11), masked local header (13).
_F_ENCRYPTED, _F_DESCRIPTOR, _F_PATCHED, _F_STRONG, _F_UTF8, _F_MASKED = (
    0x0001, 0x0008, 0x0020, 0x0040, 0x0800, 0x2000,
)  # fmt: skip
_DRIVE: Final = re.compile(r"[A-Za-z]:")


class NeedMoreBytes(Exception):
    """The bytes passed in stop short of a record: read ``needed`` bytes at ``offset``.

    Not a :class:`~npystore.errors.FormatError`; the archive may be fine. Raised only for
    ranges inside the archive, so a retry with exactly that range cannot ask again.

    Attributes
    ----------
    offset : int
        Absolute offset to read from (for a local header: its local header offset).
    needed : int
        Total number of bytes needed from ``offset``.
    """

    def __init__(self, message: str, *, offset: int, needed: int) -> None:
        super().__init__(message)
        self.offset = offset
        self.needed = needed


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


@dataclass(frozen=True, slots=True)
class ZipEntry:
    """One member as the central directory describes it, ZIP64 values resolved.

    Attributes
    ----------
    index : int
        Position in the central directory.
    name : str
        UTF-8 if flag bit 11 is set, else cp437 (as :mod:`zipfile` decodes it).
    method : int
        Compression method: 0 stored, 8 deflated, others kept as they are.
    flags, crc32 : int
        General purpose bit flags; CRC-32 of the uncompressed data.
    compressed_size, uncompressed_size : int
        Sizes in bytes.
    local_header_offset : int
        Absolute offset of the member's local file header.
    """

    index: int
    name: str
    method: int
    flags: int
    crc32: int
    compressed_size: int
    uncompressed_size: int
    local_header_offset: int

    @property
    def encrypted(self) -> bool:
        """Whether the member is encrypted (flag bit 0, 6 or 13)."""
        return bool(self.flags & (_F_ENCRYPTED | _F_STRONG | _F_MASKED))

    @property
    def has_data_descriptor(self) -> bool:
        """Whether a data descriptor follows the data (flag bit 3: a streamed write)."""
        return bool(self.flags & _F_DESCRIPTOR)

    @property
    def raw_name(self) -> bytes:
        """The name as stored: UTF-8 or cp437, following flag bit 11."""
        return self.name.encode("utf-8" if self.flags & _F_UTF8 else "cp437", errors="replace")


@dataclass(frozen=True, slots=True)
class ZipDirectory:
    """The parsed central directory: the (complete) end record and the members in order."""

    end: EndRecord
    entries: tuple[ZipEntry, ...]

    def by_name(self) -> dict[str, ZipEntry]:
        """Map names to entries; a later duplicate wins, as in :mod:`zipfile`."""
        return {entry.name: entry for entry in self.entries}


@dataclass(frozen=True, slots=True)
class LocalHeader:
    """A member's local file header: where its data starts.

    Attributes
    ----------
    entry : ZipEntry
        The central directory entry it belongs to.
    header_offset, data_offset : int
        Absolute offsets of the header (``entry.local_header_offset``) and of the member's
        (compressed) data, ``header_offset + 30 + n + m``.
    name : str
        The local header's name, equal to ``entry.name``.
    extra_length : int
        Length ``m`` of the local extra field.
    """

    entry: ZipEntry
    header_offset: int
    data_offset: int
    name: str
    extra_length: int


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
            _check_end(end, archive_size, source)
        except FormatError as exc:
            if _U32 not in (cd_offset, cd_size) and entries != _U16:
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


def parse_central_directory(
    data: bytes,
    data_offset: int,
    end: EndRecord,
    archive_size: int,
    *,
    source: str,
    max_entries: int = 1_000_000,
) -> ZipDirectory:
    """Parse every central directory header.

    Parameters
    ----------
    data : bytes
        Archive bytes from ``data_offset`` on, covering ``[end.cd_offset, end.cd_offset +
        end.cd_size)``; the tail read often does.
    data_offset, archive_size : int
        Absolute offset of ``data[0]``; size of the archive.
    end : EndRecord
        A complete end record.
    source : str
        URL of the archive, for messages.
    max_entries : int
        Refuse archives with more members than this.

    Returns
    -------
    ZipDirectory

    Raises
    ------
    FormatError
        A bad header, name or extra field, a missing ZIP64 value, or a member count that
        does not end the directory exactly at ``cd_offset + cd_size``.
    UnsupportedError
        More than ``max_entries`` members.
    NeedMoreBytes
        ``data`` does not cover the directory, or ``end.zip64_pending``.
    """
    if end.zip64_pending and end.zip64_record_offset is not None:
        raise NeedMoreBytes(
            f"{source}: read the ZIP64 end record at offset {end.zip64_record_offset} and pass "
            "it to parse_zip64_end_record first",
            offset=end.zip64_record_offset,
            needed=ZIP64_RECORD_SIZE,
        )
    _check_end(end, archive_size, source)
    if end.entries > max_entries:
        raise UnsupportedError(
            f"{source}: {end.entries} members, more than the limit of {max_entries}"
        )
    start = end.cd_offset - data_offset
    stop = start + end.cd_size
    if end.cd_size and (start < 0 or stop > len(data)):  # an empty directory needs no read
        raise NeedMoreBytes(
            f"{source}: the central directory at offset {end.cd_offset} ({end.cd_size} bytes) "
            f"is not inside the {len(data)} bytes read from offset {data_offset}",
            offset=end.cd_offset,
            needed=end.cd_size,
        )
    entries: list[ZipEntry] = []
    pos = start
    for index in range(end.entries):
        entry, pos = _parse_central_entry(data, pos, stop, data_offset, index, end, source)
        entries.append(entry)
    if pos != stop:
        raise FormatError(
            f"{source}: the end record counts {end.entries} members, but {stop - pos} bytes of "
            f"central directory follow them at offset {data_offset + pos}, expected none"
        )
    return ZipDirectory(end=end, entries=tuple(entries))


def parse_local_header(
    data: bytes,
    entry: ZipEntry,
    archive_size: int,
    *,
    source: str,
    cd_offset: int | None = None,
) -> LocalHeader:
    """Parse a member's local file header and locate its data.

    Parameters
    ----------
    data : bytes
        Archive bytes from ``entry.local_header_offset`` on: at least 30, best
        ``30 + len(name) + slack``.
    entry : ZipEntry
        The member's central directory entry.
    archive_size : int
        Size of the archive.
    source : str
        URL of the archive, for messages.
    cd_offset : int, optional
        Offset of the central directory: the member must end before it (else before the end
        of the archive).

    Returns
    -------
    LocalHeader

    Raises
    ------
    FormatError
        A bad signature, a name other than the central one, or a header or data running
        into the central directory (or past the archive).
    NeedMoreBytes
        ``data`` is too short for the name and extra; ``needed`` counts from the header.
    """
    lho = entry.local_header_offset
    limit, region = (archive_size, "archive end") if cd_offset is None else (cd_offset, "directory")
    member = f"{source}: member {_short(entry.name)!r}"
    if lho + LOCAL_HEADER_SIZE > limit:
        raise FormatError(
            f"{member}: a {LOCAL_HEADER_SIZE}-byte local header at offset {lho} runs into the "
            f"{region} at offset {limit}"
        )
    if len(data) < LOCAL_HEADER_SIZE:
        raise NeedMoreBytes(
            f"{member}: {len(data)} bytes of local header, expected {LOCAL_HEADER_SIZE}",
            offset=lho,
            needed=LOCAL_HEADER_SIZE,
        )
    sig, _, flags, _, _, _, _, _, _, name_len, extra_len = _LOCAL.unpack_from(data, 0)
    if sig != _LOCAL_SIG:
        raise FormatError(
            f"{member}: expected the local header signature {_LOCAL_SIG!r} at offset {lho}, "
            f"found {sig!r}"
        )
    data_offset = lho + LOCAL_HEADER_SIZE + name_len + extra_len
    if data_offset > limit:
        raise FormatError(
            f"{member}: the local header at offset {lho} ({name_len}-byte name, {extra_len}-"
            f"byte extra) runs into the {region} at offset {limit}"
        )
    if len(data) < data_offset - lho:
        raise NeedMoreBytes(
            f"{member}: {len(data)} bytes of local header, expected {data_offset - lho}",
            offset=lho,
            needed=data_offset - lho,
        )
    raw = bytes(data[LOCAL_HEADER_SIZE : LOCAL_HEADER_SIZE + name_len])
    if raw != entry.raw_name:
        local = raw.decode("utf-8" if flags & _F_UTF8 else "cp437", errors="replace")
        raise FormatError(
            f"{member}: the local header at offset {lho} names {_short(local)!r} instead"
        )
    if data_offset + entry.compressed_size > limit:
        raise FormatError(
            f"{member}: {entry.compressed_size} bytes of data at offset {data_offset} run into "
            f"the {region} at offset {limit}"
        )
    return LocalHeader(entry, lho, data_offset, entry.name, extra_len)


def member_name_problem(name: str) -> str | None:
    """Return why a member name is unsafe as a relative path, or None if it is fine.

    Parameters
    ----------
    name : str
        A member name.

    Returns
    -------
    str or None
        A reason for empty names, NUL characters, absolute paths (leading ``/`` or ``\\``,
        drive letters such as ``C:``), backslashes and ``..`` path components.
    """
    if not name:
        return "the name is empty"
    if "\x00" in name:
        return "the name contains a NUL character"
    if name[0] in "/\\":
        return "the name is an absolute path"
    if _DRIVE.match(name):
        return "the name starts with a drive letter"
    if "\\" in name:
        return "the name contains a backslash, a path separator on Windows"
    if ".." in name.split("/"):
        return "the name has a '..' path component"
    return None


def check_members(directory: ZipDirectory, *, source: str) -> None:
    """Reject hostile, duplicate, overlapping, misplaced and encrypted members.

    Each member takes at least ``[local_header_offset, local_header_offset + 30 + len(name)
    + compressed_size)`` (its local extra is unknown until read); that range must not run
    into the next member's local header or into the central directory.

    Parameters
    ----------
    directory : ZipDirectory
        The parsed central directory.
    source : str
        URL of the archive, for messages.

    Raises
    ------
    FormatError
        A hostile or duplicate name, overlapping members, a member at or past the
        central directory, or a deflated member declaring more bytes than deflate can
        produce from its compressed size; checked for every member before any
        UnsupportedError.
    UnsupportedError
        An encrypted member, or one with compressed patched data (flag bit 5).
    """
    seen: dict[str, int] = {}
    for entry in directory.entries:
        member = f"{source}: member {_short(entry.name)!r} (entry {entry.index})"
        if (problem := member_name_problem(entry.name)) is not None:
            raise FormatError(f"{member} has a hostile name: {problem}")
        if entry.name in seen:
            raise FormatError(f"{member} has the same name as entry {seen[entry.name]}")
        seen[entry.name] = entry.index
    cd_offset = directory.end.cd_offset
    ordered = sorted(directory.entries, key=lambda e: (e.local_header_offset, e.index))
    for after, entry in enumerate(ordered, start=1):
        lho = entry.local_header_offset
        stop = lho + LOCAL_HEADER_SIZE + len(entry.raw_name) + entry.compressed_size
        member = f"{source}: member {_short(entry.name)!r} at [{lho}, {stop})"
        if after < len(ordered) and stop > (nxt := ordered[after]).local_header_offset:
            raise FormatError(
                f"{member} overlaps member {_short(nxt.name)!r} at offset {nxt.local_header_offset}"
            )
        if stop > cd_offset:
            raise FormatError(f"{member} runs into the central directory at offset {cd_offset}")
    for entry in directory.entries:
        if entry.method == _DEFLATED and entry.uncompressed_size > max_inflated_size(
            entry.compressed_size
        ):
            raise FormatError(
                f"{source}: member {_short(entry.name)!r} (entry {entry.index}) declares "
                f"{entry.uncompressed_size} bytes deflated into {entry.compressed_size}, "
                f"expected at most {MAX_INFLATE_RATIO} per compressed byte"
            )
    for entry in directory.entries:
        if entry.encrypted or entry.flags & _F_PATCHED:
            what = "is encrypted" if entry.encrypted else "holds compressed patched data"
            raise UnsupportedError(
                f"{source}: member {_short(entry.name)!r} {what} (flags 0x{entry.flags:04x})"
            )


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
    _check_end(complete, archive_size, source)
    return replace(complete, zip64_pending=False)


def _check_disks(disk: int, cd_disk: int, source: str) -> None:
    """Split archives (a disk number other than 0) are unsupported."""
    if disk != 0 or cd_disk != 0:
        raise UnsupportedError(
            f"{source}: the archive spans several disks (disk numbers {disk} and {cd_disk}), "
            "expected a single-file archive"
        )


def _check_end(end: EndRecord, archive_size: int, source: str) -> None:
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


def _parse_central_entry(
    data: bytes, pos: int, stop: int, base: int, index: int, end: EndRecord, source: str
) -> tuple[ZipEntry, int]:
    """Parse the central header at ``data[pos:]``; return it and the next header's index."""
    where = f"{source}: central directory entry {index} at offset {base + pos}"
    if pos + CENTRAL_HEADER_SIZE > stop:
        raise FormatError(
            f"{where}: the directory ends after {index} of the {end.entries} members the end "
            f"record counts ({stop - pos} bytes left, expected {CENTRAL_HEADER_SIZE})"
        )
    fields = _CENTRAL.unpack_from(data, pos)
    sig, _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len = fields[:12]
    comment_len, disk, _, _, lho = fields[12:]
    if sig != _CENTRAL_SIG:
        raise FormatError(f"{where}: expected signature {_CENTRAL_SIG!r}, found {sig!r}")
    name_end = pos + CENTRAL_HEADER_SIZE + name_len
    after = name_end + extra_len + comment_len
    if after > stop:
        raise FormatError(
            f"{where}: takes {after - pos} bytes ({name_len}-byte name, {extra_len}-byte extra, "
            f"{comment_len}-byte comment), only {stop - pos} are left in the directory"
        )
    raw = bytes(data[pos + CENTRAL_HEADER_SIZE : name_end])
    try:
        name = raw.decode("utf-8" if flags & _F_UTF8 else "cp437")
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{where}: the name {_short(raw)!r} is flagged UTF-8 but is not: {exc.reason}"
        ) from None
    if _U32 in (csize, usize, lho) or disk == _U16:
        extra = bytes(data[name_end : name_end + extra_len])
        usize, csize, lho = _zip64_values(extra, usize, csize, lho, disk, f"{where} {name!r}")
    return ZipEntry(index, name, method, flags, crc, csize, usize, lho), after


def _zip64_values(
    extra: bytes, usize: int, csize: int, lho: int, disk: int, where: str
) -> tuple[int, int, int]:
    """Replace the sentinel values by those in the ZIP64 extra field (id 0x0001)."""
    pos = 0
    while pos + _EXTRA.size <= len(extra):
        tag, size = _EXTRA.unpack_from(extra, pos)
        body = extra[pos + _EXTRA.size : pos + _EXTRA.size + size]
        if len(body) < size:
            raise FormatError(
                f"{where}: extra field 0x{tag:04x} at byte {pos} of the extra claims {size} "
                f"bytes, {len(body)} are left"
            )
        if tag == _ZIP64_EXTRA_ID:
            break
        pos += _EXTRA.size + size
    else:
        raise FormatError(
            f"{where}: sizes, offset or disk hold the ZIP64 sentinel, but there is no ZIP64 "
            f"extra field (id 0x{_ZIP64_EXTRA_ID:04x})"
        )
    values = [usize, csize, lho]
    at = 0
    for i, label in enumerate(("uncompressed size", "compressed size", "local header offset")):
        if values[i] == _U32:
            if at + 8 > len(body):
                raise FormatError(
                    f"{where}: the {label} is in the ZIP64 extra field, which ends first "
                    f"({len(body)} bytes)"
                )
            values[i] = int.from_bytes(body[at : at + 8], "little")
            at += 8
    if disk == _U16 and at + 4 > len(body):
        raise FormatError(
            f"{where}: the disk number is in the ZIP64 extra field, which ends first "
            f"({len(body)} bytes)"
        )
    return values[0], values[1], values[2]


def _short(value: str | bytes, limit: int = 80) -> str | bytes:
    """``value`` cut to about ``limit`` characters, for messages."""
    if len(value) <= limit:
        return value
    return value[:limit] + "..." if isinstance(value, str) else value[:limit] + b"..."
