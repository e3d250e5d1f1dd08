"""ZIP records as npystore writes them: local headers, data descriptors, the central
directory and its end records (PKWARE APPNOTE.TXT 4.3; the layouts are in :mod:`._members`,
:mod:`._central` and :mod:`._end`).

Members are written as a stream: each local header has flag bit 3 set (CRC-32 and sizes
zero; they follow the data in a data descriptor, ``PK\\x07\\x08``, with 8-byte sizes for a
ZIP64 member), so a member's bytes can go out before its CRC-32 and compressed size are
known. The central directory holds the real values (and a ZIP64 extra, id 0x0001, for those
that do not fit 32 bits), and for compressed members npystore's block index
(:mod:`._blocks`). The end record is preceded by the ZIP64 end record and locator when the
directory's offset, size or count needs them (or when asked). Names are UTF-8 (bit 11) when
not ASCII. Version needed: 2.0, or 4.5 for ZIP64; made by 4.5 on Unix (3); external
attributes ``0o600 << 16``, as :mod:`zipfile` gives ``numpy.savez``'s members.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from npystore.formats.zipdir._common import F_DESCRIPTOR, F_UTF8, U16, U32

__all__ = [
    "ZIP64_LIMIT",
    "CentralRecord",
    "data_descriptor",
    "dos_time",
    "end_records",
    "central_record",
    "local_header",
]

#: Sizes and offsets from this value on are written in ZIP64 fields.
ZIP64_LIMIT: Final = U32
_LOCAL: Final = struct.Struct("<4s5H3I2H")
_CENTRAL: Final = struct.Struct("<4s6H3I5H2I")
_EOCD: Final = struct.Struct("<4s4H2IH")
_ZIP64_END: Final = struct.Struct("<4sQ2H2I4Q")
_ZIP64_LOCATOR: Final = struct.Struct("<4sIQI")
_MADE_BY: Final = (3 << 8) | 45
_ATTRIBUTES: Final = 0o600 << 16


def _name(name: str) -> tuple[bytes, int]:
    try:
        return name.encode("ascii"), 0
    except UnicodeEncodeError:
        return name.encode("utf-8"), F_UTF8


def dos_time(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    """DOS date and time packed as the 32-bit ``time | date << 16`` of the headers."""
    year = min(max(year, 1980), 2107)
    date = (year - 1980) << 9 | month << 5 | day
    time = hour << 11 | minute << 5 | second // 2
    return time | date << 16


def local_header(name: str, method: int, zip64: bool, when: int) -> bytes:
    """A streamed member's local header: bit 3 set, CRC and sizes left to the descriptor
    (a ZIP64 member has the 0xFFFFFFFF sentinels and a zeroed ZIP64 extra)."""
    raw, utf8 = _name(name)
    extra = struct.pack("<HHQQ", 1, 16, 0, 0) if zip64 else b""
    size = U32 if zip64 else 0
    fields = (b"PK\x03\x04", 45 if zip64 else 20, F_DESCRIPTOR | utf8, method)
    head = _LOCAL.pack(*fields, when & 0xFFFF, when >> 16, 0, size, size, len(raw), len(extra))
    return head + raw + extra


def data_descriptor(crc: int, csize: int, usize: int, zip64: bool) -> bytes:
    """The data descriptor after a streamed member's data."""
    if zip64:
        return struct.pack("<4sIQQ", b"PK\x07\x08", crc, csize, usize)
    return struct.pack("<4sIII", b"PK\x07\x08", crc, csize, usize)


@dataclass(frozen=True, slots=True)
class CentralRecord:
    """What the central directory says about one written member."""

    name: str
    method: int
    crc32: int
    compressed_size: int
    uncompressed_size: int
    local_header_offset: int
    zip64: bool
    when: int
    extra: bytes = b""


def central_record(rec: CentralRecord) -> bytes:
    """The member's central directory header (ZIP64 values in an extra when needed)."""
    raw, utf8 = _name(rec.name)
    values = []
    usize, csize, lho = rec.uncompressed_size, rec.compressed_size, rec.local_header_offset
    if usize >= ZIP64_LIMIT or rec.zip64:
        values.append(usize)
        usize = U32
    if csize >= ZIP64_LIMIT or rec.zip64:
        values.append(csize)
        csize = U32
    if lho >= ZIP64_LIMIT:
        values.append(lho)
        lho = U32
    extra = b""
    if values:
        extra = struct.pack(f"<HH{len(values)}Q", 1, 8 * len(values), *values)
    extra += rec.extra
    needed = 45 if values or rec.zip64 else 20
    head = _CENTRAL.pack(
        b"PK\x01\x02", _MADE_BY, needed, F_DESCRIPTOR | utf8, rec.method,
        rec.when & 0xFFFF, rec.when >> 16, rec.crc32, csize, usize,
        len(raw), len(extra), 0, 0, 0, _ATTRIBUTES, lho,
    )  # fmt: skip
    return head + raw + extra


def end_records(entries: int, cd_offset: int, cd_size: int, *, force_zip64: bool = False) -> bytes:
    """The end of central directory record, preceded by the ZIP64 end record and locator
    when the count, offset or size does not fit (or ``force_zip64``)."""
    zip64 = force_zip64 or entries >= U16 or cd_offset >= U32 or cd_size >= U32
    out = b""
    if zip64:
        out += _ZIP64_END.pack(
            b"PK\x06\x06", _ZIP64_END.size - 12, _MADE_BY, 45, 0, 0,
            entries, entries, cd_size, cd_offset,
        )  # fmt: skip
        out += _ZIP64_LOCATOR.pack(b"PK\x06\x07", 0, cd_offset + cd_size, 1)
    out += _EOCD.pack(
        b"PK\x05\x06", 0, 0, min(entries, U16), min(entries, U16),
        min(cd_size, U32), min(cd_offset, U32), 0,
    )  # fmt: skip
    return out
