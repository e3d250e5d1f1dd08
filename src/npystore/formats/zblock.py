"""Inflating a piece of a raw deflate stream and learning where it ends: zlib's ``Z_BLOCK``.

Python's :mod:`zlib` says whether a stream ended, not where the decoder stands when the
input runs out: between two deflate blocks, or inside one (a stored block's bytes, a
Huffman block's codes, a block header). zlib's own ``inflate()`` says it when called with
``Z_BLOCK``: it stops at every block boundary and sets ``data_type`` to the number of bits
left unused in the last byte, plus 64 once a final block was started, plus 128 when it
stands right before a block header (zlib.h; the zran example and indexed_gzip use it to
place their checkpoints). This module calls the zlib library the interpreter links
(``libz``) through :mod:`ctypes`; where none can be loaded, :func:`available` is False.

:func:`inflate_piece` inflates a piece in bounded steps (the output is handed on as it
comes, never allocated whole) and reports how it ended: ``BOUNDARY`` (the whole piece
consumed, the decoder between blocks, byte-aligned, no final block seen: a fresh decoder
at the next byte is in the same state), ``END`` (the final block ended with the piece's
last byte) or ``INSIDE`` (anything else).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

__all__ = ["PieceEnd", "Piece", "available", "inflate_piece"]

_Z_OK: Final = 0
_Z_STREAM_END: Final = 1
_Z_BUF_ERROR: Final = -5
_Z_BLOCK: Final = 5
#: ``data_type`` right before a block header, no bits left over, no final block seen ...
_BETWEEN_BLOCKS: Final = 128
#: ... and after the final block (the bits left in its last byte are padding).
_AFTER_FINAL: Final = 128 | 64
#: The bits of ``data_type`` that describe the decoder's state (256: within a block's data).
_STATE_BITS: Final = 7 | 64 | 128 | 256
#: Output produced per ``inflate()`` call.
STEP: Final = 1 << 20


class PieceEnd(enum.Enum):
    """Where the decoder stands once a piece is consumed."""

    BOUNDARY = "between two blocks, byte-aligned, no final block seen"
    END = "at the end of the stream"
    INSIDE = "inside a block, or past a final block's header, or not byte-aligned"


@dataclass(frozen=True, slots=True)
class Piece:
    """How inflating a piece alone went.

    Attributes
    ----------
    produced : int
        Output bytes (at most ``limit + 1``: inflating stops past the limit).
    end : PieceEnd
        Where the decoder stood at the end.
    error : str or None
        zlib's message when the data is not valid deflate (``end`` is then ``INSIDE``).
    """

    produced: int
    end: PieceEnd
    error: str | None = None


class _ZStream(ctypes.Structure):
    _fields_ = [
        ("next_in", ctypes.c_void_p),
        ("avail_in", ctypes.c_uint),
        ("total_in", ctypes.c_ulong),
        ("next_out", ctypes.c_void_p),
        ("avail_out", ctypes.c_uint),
        ("total_out", ctypes.c_ulong),
        ("msg", ctypes.c_char_p),
        ("state", ctypes.c_void_p),
        ("zalloc", ctypes.c_void_p),
        ("zfree", ctypes.c_void_p),
        ("opaque", ctypes.c_void_p),
        ("data_type", ctypes.c_int),
        ("adler", ctypes.c_ulong),
        ("reserved", ctypes.c_ulong),
    ]


_lib: Any = None
_lib_lock = threading.Lock()
_lib_tried = False


def _zlib() -> Any:
    """The zlib library (``None`` when it cannot be loaded)."""
    global _lib, _lib_tried  # noqa: PLW0603 - loaded on first use
    with _lib_lock:
        if not _lib_tried:
            _lib_tried = True
            name = ctypes.util.find_library("z")
            try:
                lib = ctypes.CDLL(name) if name else None
                if lib is not None:
                    lib.zlibVersion.restype = ctypes.c_char_p
                    lib.inflateInit2_.argtypes = [
                        ctypes.POINTER(_ZStream),
                        ctypes.c_int,
                        ctypes.c_char_p,
                        ctypes.c_int,
                    ]
                    lib.inflate.argtypes = [ctypes.POINTER(_ZStream), ctypes.c_int]
                    lib.inflateEnd.argtypes = [ctypes.POINTER(_ZStream)]
                    version = lib.zlibVersion()
                    if not version or not version.startswith(b"1."):
                        lib = None
            except (OSError, AttributeError):
                lib = None
            _lib = lib
        return _lib


def available() -> bool:
    """Whether zlib can be called (else block boundaries cannot be checked)."""
    return _zlib() is not None


def inflate_piece(
    piece: bytes | memoryview,
    limit: int,
    on_output: Callable[[memoryview], None] | None = None,
) -> Piece:
    """Inflate ``piece`` as the start of a raw deflate stream, in steps of :data:`STEP`.

    Parameters
    ----------
    piece : bytes or memoryview
        The compressed bytes.
    limit : int
        Most output expected: inflating stops once the output passes it (the caller
        compares ``produced`` with what it expects).
    on_output : callable, optional
        Called with each step's output (a view valid during the call only).

    Returns
    -------
    Piece
        Output size and where the decoder stood when the input was consumed.

    Raises
    ------
    RuntimeError
        zlib cannot be loaded (check :func:`available` first).
    """
    lib = _zlib()
    if lib is None:
        raise RuntimeError("zlib cannot be loaded: block boundaries cannot be checked")
    data = np.frombuffer(piece, np.uint8)  # no copy, read-only views included
    out = np.empty(min(STEP, limit + 1) or 1, np.uint8)
    view = memoryview(out.data)
    strm = _ZStream()
    ret = lib.inflateInit2_(ctypes.byref(strm), -15, lib.zlibVersion(), ctypes.sizeof(_ZStream))
    if ret != _Z_OK:
        raise MemoryError(f"zlib's inflateInit2 failed ({ret})")
    try:
        strm.next_in = data.ctypes.data if data.size else None
        strm.avail_in = data.size  # (pieces are at most a block index's u32 size)
        produced = 0
        while True:
            strm.next_out = out.ctypes.data
            strm.avail_out = out.size
            ret = lib.inflate(ctypes.byref(strm), _Z_BLOCK)
            n = out.size - strm.avail_out
            if n and on_output is not None:
                on_output(view[:n])
            produced += n
            if ret == _Z_STREAM_END:
                end = PieceEnd.END if strm.avail_in == 0 else PieceEnd.INSIDE
                return Piece(produced, end)
            if ret not in (_Z_OK, _Z_BUF_ERROR):
                message = strm.msg.decode("ascii", "replace") if strm.msg else f"error {ret}"
                return Piece(produced, PieceEnd.INSIDE, message)
            if produced > limit:
                return Piece(produced, PieceEnd.INSIDE)
            if strm.avail_in == 0 and strm.avail_out > 0:
                # (with Z_BLOCK, zlib stops before it would notice the end of the stream)
                state = strm.data_type & _STATE_BITS
                if state & ~7 == _AFTER_FINAL:
                    return Piece(produced, PieceEnd.END)
                between = state == _BETWEEN_BLOCKS
                return Piece(produced, PieceEnd.BOUNDARY if between else PieceEnd.INSIDE)
            if ret == _Z_BUF_ERROR:  # no progress with input left: cannot happen, be safe
                return Piece(produced, PieceEnd.INSIDE, "no progress")
    finally:
        lib.inflateEnd(ctypes.byref(strm))
