"""Independent raw deflate blocks for the writers, at zlib's compression levels 1-9.

A block starts with an empty dictionary and ends with a full flush (byte-aligned; the next
block needs nothing before it) or, for the last, with the end of the stream: blocks made in
any order, on any thread, and joined in order are one valid raw deflate stream, which
``numpy.load`` and :mod:`zipfile` inflate, and each of which inflates alone (npystore's
block index, a ``RawDeflate`` chunk).

``compresslevel`` follows zlib's scale: 1-3 are ISA-L's levels 1-3 (many times zlib's
speed, larger output on text and repeating values); 4-9 are zlib's levels (zlib-ng's when
installed: 2-3x faster at the same sizes), and a block that compresses below 1/8 of its size
is also compressed with ISA-L level 3 and the smaller kept. Without ISA-L every level is
zlib's. Measured sizes and speeds: ``benchmarks/FINDINGS.md`` ("compresslevel").

This module is pure: bytes in, bytes out.
"""

from __future__ import annotations

import zlib
from types import ModuleType
from typing import Final

__all__ = ["DEFAULT_LEVEL", "ISAL_LEVELS", "check_level", "deflate_block"]

#: ``compresslevel`` of :func:`deflate_block` (and ``savez_compressed``) by default.
DEFAULT_LEVEL: Final = 6
#: Levels 1..ISAL_LEVELS compress with ISA-L at that level (zlib's when it is missing).
ISAL_LEVELS: Final = 3
#: A block at a zlib level compressed below this fraction of its input is also compressed
#: with ISA-L level 3, and the smaller kept: on highly repetitive data (periodic values)
#: ISA-L's longer matches win (measured 0.81x zlib's size), elsewhere zlib does.
_TRY_ISAL_BELOW: Final = 1 / 8


def _zlib_compressor() -> ModuleType:
    """zlib-ng when installed (2-3x zlib's speed at the same levels), else zlib."""
    try:
        from zlib_ng import zlib_ng  # noqa: PLC0415 - optional accelerator
    except ImportError:
        return zlib
    return zlib_ng


def _deflate(module: ModuleType, level: int, data: bytes | memoryview, final: bool) -> bytes:
    c = module.compressobj(level, module.DEFLATED, -15)
    out: bytes = c.compress(data) + c.flush(module.Z_FINISH if final else module.Z_FULL_FLUSH)
    return out


def _isal() -> ModuleType | None:
    try:
        from isal import isal_zlib  # noqa: PLC0415 - optional accelerator
    except ImportError:
        return None
    return isal_zlib


def check_level(level: int) -> int:
    """``level`` if it is a compression level :func:`deflate_block` takes (an int in 1..9).

    Raises
    ------
    ValueError
        Anything else (0, stored data, is ``savez``'s).
    """
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 9:
        raise ValueError(
            f"compresslevel must be an integer from 1 (fastest) to 9 (smallest), got "
            f"{level!r}; for stored (uncompressed) members use savez"
        )
    return level


def deflate_block(data: bytes | memoryview, *, final: bool, level: int = DEFAULT_LEVEL) -> bytes:
    """``data`` deflated as an independent block of a raw stream (see the module doc),
    ending the stream when ``final``, at ``level`` (1-9, checked by :func:`check_level`)."""
    isal = _isal()
    if level <= ISAL_LEVELS and isal is not None:
        return _deflate(isal, level, data, final)
    out = _deflate(_zlib_compressor(), level, data, final)
    if isal is not None and len(out) < _TRY_ISAL_BELOW * memoryview(data).nbytes:
        other = _deflate(isal, ISAL_LEVELS, data, final)
        if len(other) < len(out):
            return other
    return out
