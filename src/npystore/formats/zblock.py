"""Inflating raw deflate into the caller's buffers, and learning where a piece ends.

Python's :mod:`zlib` (and ISA-L's and zlib-ng's modules) hand out every step's output as
a new ``bytes`` object, and say whether a stream ended, not where the decoder stands when
the input runs out: between two deflate blocks, or inside one (a stored block's bytes, a
Huffman block's codes, a block header). zlib's own ``inflate()`` writes into the buffer it
is given, and says where it stands when called with ``Z_BLOCK``: it stops at every block
boundary and sets ``data_type`` to the number of bits left unused in the last byte, plus
64 once a final block was started, plus 128 when it stands right before a block header
(zlib.h; the zran example and indexed_gzip use it to place their checkpoints).

:class:`Inflater` calls ``inflate()`` through :mod:`ctypes`: zlib-ng's native API from the
library the ``zlib-ng`` package ships (zlib's inflate, the same checks, about twice as
fast), else the zlib the interpreter links (``libz``); where neither loads,
:func:`available` is False.

:func:`inflate_piece` inflates a piece in bounded steps (the output is handed on as it
comes, never allocated whole, or written straight into the caller's buffer) and reports
how it ended: ``BOUNDARY`` (the whole piece consumed, the decoder between blocks,
byte-aligned, no final block seen: a fresh decoder at the next byte is in the same state),
``END`` (the final block ended with the piece's last byte) or ``INSIDE`` (anything else).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import importlib.util
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

__all__ = ["STEP", "Inflater", "Piece", "PieceEnd", "available", "inflate_piece", "library"]

_Z_OK: Final = 0
_Z_STREAM_END: Final = 1
_Z_BUF_ERROR: Final = -5
_Z_NO_FLUSH: Final = 0
_Z_BLOCK: Final = 5
#: ``data_type`` right before a block header, no bits left over, no final block seen ...
_BETWEEN_BLOCKS: Final = 128
#: ... and after the final block (the bits left in its last byte are padding).
_AFTER_FINAL: Final = 128 | 64
#: The bits of ``data_type`` that describe the decoder's state (256: within a block's data).
_STATE_BITS: Final = 7 | 64 | 128 | 256
#: Output produced per ``inflate()`` call when nothing else bounds it.
STEP: Final = 1 << 20
#: Most input given to one ``inflate()`` call (``avail_in`` is 32 bits wide).
_MAX_FEED: Final = 2**31


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
    """zlib's ``z_stream`` (LP64: ``uLong`` totals and check value)."""

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


class _ZngStream(ctypes.Structure):
    """zlib-ng's ``zng_stream`` (native API: ``size_t`` totals, a 32-bit check value)."""

    _fields_ = [
        ("next_in", ctypes.c_void_p),
        ("avail_in", ctypes.c_uint32),
        ("total_in", ctypes.c_size_t),
        ("next_out", ctypes.c_void_p),
        ("avail_out", ctypes.c_uint32),
        ("total_out", ctypes.c_size_t),
        ("msg", ctypes.c_char_p),
        ("state", ctypes.c_void_p),
        ("zalloc", ctypes.c_void_p),
        ("zfree", ctypes.c_void_p),
        ("opaque", ctypes.c_void_p),
        ("data_type", ctypes.c_int),
        ("adler", ctypes.c_uint32),
        ("reserved", ctypes.c_ulong),
    ]


@dataclass(frozen=True, slots=True)
class _Library:
    """The loaded inflate functions: ``init(stream)`` (raw deflate), ``inflate``, ``end``."""

    name: str
    stream: type[ctypes.Structure]
    init: Callable[[Any], int]
    inflate: Any
    end: Any


_lib: _Library | None = None
_lib_lock = threading.Lock()
_lib_tried = False


def _zlib_ng() -> _Library | None:
    """zlib-ng 2.x's native API, from the library of the ``zlib-ng`` package (which exports
    it), or None."""
    try:
        spec = importlib.util.find_spec("zlib_ng.zlib_ng")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
        lib.zlibng_version.restype = ctypes.c_char_p
        version = lib.zlibng_version()
        ptr = ctypes.POINTER(_ZngStream)
        lib.zng_inflateInit2.argtypes = [ptr, ctypes.c_int32]
        lib.zng_inflateInit2.restype = ctypes.c_int32
        lib.zng_inflate.argtypes = [ptr, ctypes.c_int32]
        lib.zng_inflate.restype = ctypes.c_int32
        lib.zng_inflateEnd.argtypes = [ptr]
        lib.zng_inflateEnd.restype = ctypes.c_int32
    except (OSError, AttributeError):
        return None
    if not version or not version.startswith(b"2."):
        return None  # the stream layout above is zlib-ng 2's
    return _Library(
        f"zlib-ng {version.decode('ascii', 'replace')}",
        _ZngStream,
        lambda strm: int(lib.zng_inflateInit2(ctypes.byref(strm), -15)),
        lib.zng_inflate,
        lib.zng_inflateEnd,
    )


def _system_zlib() -> _Library | None:
    """The zlib the interpreter links, or None."""
    name = ctypes.util.find_library("z")
    try:
        lib = ctypes.CDLL(name) if name else None
        if lib is None:
            return None
        lib.zlibVersion.restype = ctypes.c_char_p
        ptr = ctypes.POINTER(_ZStream)
        lib.inflateInit2_.argtypes = [ptr, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.inflate.argtypes = [ptr, ctypes.c_int]
        lib.inflateEnd.argtypes = [ptr]
        version = lib.zlibVersion()
    except (OSError, AttributeError):
        return None
    if not version or not version.startswith(b"1."):
        return None
    size = ctypes.sizeof(_ZStream)
    return _Library(
        f"zlib {version.decode('ascii', 'replace')}",
        _ZStream,
        lambda strm: int(lib.inflateInit2_(ctypes.byref(strm), -15, version, size)),
        lib.inflate,
        lib.inflateEnd,
    )


def _library() -> _Library | None:
    """zlib-ng, else the system zlib (``None`` when neither loads)."""
    global _lib, _lib_tried  # noqa: PLW0603 - loaded on first use
    with _lib_lock:
        if not _lib_tried:
            _lib_tried = True
            _lib = _zlib_ng() or _system_zlib()
        return _lib


def available() -> bool:
    """Whether an inflate library can be called (else block boundaries cannot be checked)."""
    return _library() is not None


def library() -> str | None:
    """The inflate library :class:`Inflater` calls (``"zlib-ng 2.x"``, ``"zlib 1.x"``)."""
    lib = _library()
    return None if lib is None else lib.name


class Inflater:
    """One raw deflate stream, inflated into buffers the caller owns.

    :meth:`feed` gives it compressed bytes (the buffer must stay alive and unchanged until
    they are consumed, :attr:`avail_in` 0); :meth:`inflate` writes output into a writable
    buffer, stopping at the next block boundary with ``block=True``. :meth:`close` frees
    the decoder (also on exit of a ``with`` block).

    Raises
    ------
    RuntimeError
        No inflate library can be loaded (check :func:`available` first).
    MemoryError
        The decoder could not be made.
    """

    def __init__(self) -> None:
        lib = _library()
        if lib is None:
            raise RuntimeError("zlib cannot be loaded: block boundaries cannot be checked")
        self._lib = lib
        self._strm = lib.stream()
        self._ref = ctypes.byref(self._strm)
        ret = lib.init(self._strm)
        if ret != _Z_OK:
            raise MemoryError(f"{lib.name}: inflateInit2 failed ({ret})")
        self._input: Any = None
        self._open = True

    def __enter__(self) -> Inflater:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Free the decoder (once)."""
        if self._open:
            self._open = False
            self._lib.end(self._ref)
            self._input = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """The next compressed bytes (replaces what is left of the previous ones)."""
        arr = np.frombuffer(data, np.uint8)  # no copy, read-only buffers included
        if arr.size >= _MAX_FEED:
            raise ValueError(f"feed at most {_MAX_FEED - 1} bytes at once, got {arr.size}")
        self._input = arr
        self._strm.next_in = arr.ctypes.data if arr.size else None
        self._strm.avail_in = arr.size

    def inflate(self, out: memoryview, *, block: bool = False) -> tuple[int, int]:
        """Inflate into ``out`` (a writable, contiguous byte buffer of less than 2 GiB):
        zlib's return code and the bytes written. With ``block``, stop at the next block
        boundary (``Z_BLOCK``)."""
        if not self._open:
            raise ValueError("the inflater is closed")
        n = out.nbytes
        strm = self._strm
        strm.next_out = ctypes.addressof(ctypes.c_char.from_buffer(out)) if n else None
        strm.avail_out = n
        ret = int(self._lib.inflate(self._ref, _Z_BLOCK if block else _Z_NO_FLUSH))
        return ret, n - strm.avail_out

    @property
    def avail_in(self) -> int:
        """Fed bytes not consumed yet."""
        return int(self._strm.avail_in)

    @property
    def total_in(self) -> int:
        """Compressed bytes consumed."""
        return int(self._strm.total_in)

    @property
    def total_out(self) -> int:
        """Output bytes produced."""
        return int(self._strm.total_out)

    @property
    def message(self) -> str:
        """zlib's message of the last error."""
        msg = self._strm.msg
        return msg.decode("ascii", "replace") if msg else "invalid deflate data"

    def boundary(self) -> int | None:
        """After a ``block`` call: the bit offset in the stream of the next block's header,
        when the decoder stands right before one (no final block seen); else ``None``."""
        state = int(self._strm.data_type) & _STATE_BITS
        if state & ~7 != _BETWEEN_BLOCKS:
            return None
        return 8 * self.total_in - (state & 7)

    def state(self) -> PieceEnd:
        """After a ``block`` call that consumed the input: where the decoder stands."""
        state = int(self._strm.data_type) & _STATE_BITS
        if state & ~7 == _AFTER_FINAL:
            return PieceEnd.END
        return PieceEnd.BOUNDARY if state == _BETWEEN_BLOCKS else PieceEnd.INSIDE


def inflate_piece(
    piece: bytes | memoryview,
    limit: int,
    on_output: Callable[[memoryview], None] | None = None,
    *,
    into: memoryview | None = None,
) -> Piece:
    """Inflate ``piece`` as the start of a raw deflate stream, stopping at block boundaries.

    Parameters
    ----------
    piece : bytes or memoryview
        The compressed bytes.
    limit : int
        Most output expected: inflating stops once the output passes it (the caller
        compares ``produced`` with what it expects).
    on_output : callable, optional
        Called with each step's output (a view valid during the call only).
    into : memoryview, optional
        A writable buffer the first ``len(into)`` output bytes are written into (no copy);
        output past it, or all of it without ``into``, goes through a buffer of at most
        :data:`STEP` bytes.

    Returns
    -------
    Piece
        Output size and where the decoder stood when the input was consumed.

    Raises
    ------
    RuntimeError
        No inflate library can be loaded (check :func:`available` first).
    """
    room = 0 if into is None else into.nbytes
    scratch: memoryview | None = None
    with Inflater() as inf:
        inf.feed(piece)
        produced = 0
        while True:
            if produced < room and into is not None:
                dst = into[produced:]
            else:
                if scratch is None:
                    scratch = memoryview(bytearray(max(1, min(STEP, limit + 1 - produced))))
                dst = scratch
            ret, n = inf.inflate(dst, block=True)
            if n and on_output is not None:
                on_output(dst[:n])
            produced += n
            if ret == _Z_STREAM_END:
                end = PieceEnd.END if inf.avail_in == 0 else PieceEnd.INSIDE
                return Piece(produced, end)
            if ret not in (_Z_OK, _Z_BUF_ERROR):
                return Piece(produced, PieceEnd.INSIDE, inf.message)
            if produced > limit:
                return Piece(produced, PieceEnd.INSIDE)
            if inf.avail_in == 0 and n < dst.nbytes:
                # (with Z_BLOCK, zlib stops before it would notice the end of the stream)
                return Piece(produced, inf.state())
            if ret == _Z_BUF_ERROR:  # no progress with input left: cannot happen, be safe
                return Piece(produced, PieceEnd.INSIDE, "no progress")
