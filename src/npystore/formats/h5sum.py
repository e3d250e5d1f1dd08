"""The checksum of HDF5 metadata: Bob Jenkins' lookup3 ``hashlittle`` with an initial value
of 0, over bytes (HDF5's ``H5_checksum_lookup3``).

Superblocks of version 2 and 3, version-2 object headers, fixed arrays and the other
structures of the newer file format end in this 4-byte little-endian checksum of the bytes
before it. Pure Python: about a microsecond per 12 bytes, for metadata of kilobytes.
"""

from __future__ import annotations

import sys
from typing import Final

from npystore.errors import FormatError

__all__ = ["check", "lookup3"]

_M: Final = 0xFFFF_FFFF
_LITTLE: Final = sys.byteorder == "little"


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def lookup3(data: bytes, initval: int = 0) -> int:
    """The lookup3 hash of ``data`` (32 bits)."""
    n = len(data)
    a = b = c = (0xDEADBEEF + n + initval) & _M
    if n == 0:
        return c
    # the last 1..12 bytes are zero-padded to a whole block and mixed by the final step
    tail = n - ((n - 1) // 12) * 12
    padded = bytes(data) + bytes(12 - tail)
    words = memoryview(padded).cast("I") if _LITTLE else _words(padded)
    last = len(words) - 3
    for i in range(0, last, 3):
        a = (a + words[i]) & _M
        b = (b + words[i + 1]) & _M
        c = (c + words[i + 2]) & _M
        a = (a - c) & _M
        a ^= _rot(c, 4)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 6)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 8)
        b = (b + a) & _M
        a = (a - c) & _M
        a ^= _rot(c, 16)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 19)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 4)
        b = (b + a) & _M
    a = (a + words[last]) & _M
    b = (b + words[last + 1]) & _M
    c = (c + words[last + 2]) & _M
    c ^= b
    c = (c - _rot(b, 14)) & _M
    a ^= c
    a = (a - _rot(c, 11)) & _M
    b ^= a
    b = (b - _rot(a, 25)) & _M
    c ^= b
    c = (c - _rot(b, 16)) & _M
    a ^= c
    a = (a - _rot(c, 4)) & _M
    b ^= a
    b = (b - _rot(a, 14)) & _M
    c ^= b
    return (c - _rot(b, 24)) & _M


def _words(data: bytes) -> list[int]:  # pragma: no cover - big-endian hosts
    return [int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data), 4)]


def check(block: bytes, what: str) -> None:
    """Raise FormatError unless the last 4 bytes of ``block`` are the lookup3 checksum of
    the bytes before them."""
    if len(block) < 4:
        raise FormatError(f"{what}: {len(block)} bytes, too short for its checksum")
    stored = int.from_bytes(block[-4:], "little")
    computed = lookup3(block[:-4])
    if stored != computed:
        raise FormatError(
            f"{what}: checksum {stored:#010x} stored, {computed:#010x} computed over its "
            f"{len(block) - 4} bytes (corrupt metadata)"
        )
