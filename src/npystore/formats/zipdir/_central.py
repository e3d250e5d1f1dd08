"""The central directory: one header per member, back to back, ZIP64 extra fields resolved.

Byte layout (PKWARE APPNOTE.TXT 4.3, integers little endian)::

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
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.need import NeedMoreBytes
from npystore.formats.zipdir._blocks import BLOCKS_EXTRA_ID, BlockIndex, parse_blocks
from npystore.formats.zipdir._common import (
    CENTRAL_HEADER_SIZE,
    F_DESCRIPTOR,
    F_ENCRYPTED,
    F_MASKED,
    F_STRONG,
    F_UTF8,
    U16,
    U32,
    short,
)
from npystore.formats.zipdir._end import ZIP64_RECORD_SIZE, EndRecord, check_end

__all__ = ["ZipDirectory", "ZipEntry", "parse_central_directory"]

_CENTRAL: Final = struct.Struct("<4s6H3I5H2I")
_EXTRA: Final = struct.Struct("<2H")
_CENTRAL_SIG: Final = b"PK\x01\x02"
_ZIP64_EXTRA_ID: Final = 0x0001
_DEFLATED: Final = 8


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
    blocks : BlockIndex or None
        npystore's block index of a deflated member (its extra field, id 0x7A6E, see
        :mod:`._blocks`), when present and consistent with the sizes.
    """

    index: int
    name: str
    method: int
    flags: int
    crc32: int
    compressed_size: int
    uncompressed_size: int
    local_header_offset: int
    blocks: BlockIndex | None = field(default=None, compare=False, repr=False)

    @property
    def encrypted(self) -> bool:
        """Whether the member is encrypted (flag bit 0, 6 or 13)."""
        return bool(self.flags & (F_ENCRYPTED | F_STRONG | F_MASKED))

    @property
    def has_data_descriptor(self) -> bool:
        """Whether a data descriptor follows the data (flag bit 3: a streamed write)."""
        return bool(self.flags & F_DESCRIPTOR)

    @property
    def raw_name(self) -> bytes:
        """The name as stored: UTF-8 or cp437, following flag bit 11."""
        return self.name.encode("utf-8" if self.flags & F_UTF8 else "cp437", errors="replace")


@dataclass(frozen=True, slots=True)
class ZipDirectory:
    """The parsed central directory: the (complete) end record and the members in order."""

    end: EndRecord
    entries: tuple[ZipEntry, ...]

    def by_name(self) -> dict[str, ZipEntry]:
        """Map names to entries; a later duplicate wins, as in :mod:`zipfile`."""
        return {entry.name: entry for entry in self.entries}


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
    check_end(end, archive_size, source)
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
        name = raw.decode("utf-8" if flags & F_UTF8 else "cp437")
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{where}: the name {short(raw)!r} is flagged UTF-8 but is not: {exc.reason}"
        ) from None
    extra = bytes(data[name_end : name_end + extra_len])
    if U32 in (csize, usize, lho) or disk == U16:
        usize, csize, lho = _zip64_values(extra, usize, csize, lho, disk, f"{where} {name!r}")
    blocks = None
    if method == _DEFLATED:
        body = _extra_body(extra, BLOCKS_EXTRA_ID)
        if body is not None:
            blocks = parse_blocks(body, csize, usize)
    return ZipEntry(index, name, method, flags, crc, csize, usize, lho, blocks), after


def _extra_body(extra: bytes, tag: int) -> bytes | None:
    """The data of the extra field ``tag`` (None when absent or the fields are malformed)."""
    pos = 0
    while pos + _EXTRA.size <= len(extra):
        found, size = _EXTRA.unpack_from(extra, pos)
        body = extra[pos + _EXTRA.size : pos + _EXTRA.size + size]
        if len(body) < size:
            return None
        if found == tag:
            return body
        pos += _EXTRA.size + size
    return None


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
        if values[i] == U32:
            if at + 8 > len(body):
                raise FormatError(
                    f"{where}: the {label} is in the ZIP64 extra field, which ends first "
                    f"({len(body)} bytes)"
                )
            values[i] = int.from_bytes(body[at : at + 8], "little")
            at += 8
    if disk == U16 and at + 4 > len(body):
        raise FormatError(
            f"{where}: the disk number is in the ZIP64 extra field, which ends first "
            f"({len(body)} bytes)"
        )
    return values[0], values[1], values[2]
