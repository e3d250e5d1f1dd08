"""Random access into raw deflate streams: checkpoint indexes and inflating from them.

A deflated ZIP member (``numpy.savez_compressed``) is one raw deflate stream (RFC 1951): no
byte range maps to an element. A *checkpoint* records a point where a deflate block starts:

==============  =====================================================================
``bit_offset``  position of the block's first bit in the compressed stream (LSB first)
``out_offset``  number of uncompressed bytes produced before that point
``window``      the (up to) 32 KiB of output preceding it: the back-references' dictionary
==============  =====================================================================

Resuming at a checkpoint: take the compressed bytes from ``bit_offset // 8``, shift them right
by ``bit_offset % 8`` bits so the block starts at bit 0, and inflate them as a raw stream with
``zdict=window``. With checkpoints every few MiB of output, any range of the member costs one
range read and a short inflate.

Indexes come from a sequential pass; rapidgzip and indexed_gzip export them in the
``GZIDX`` format (over a gzip wrapper of the member), which :func:`parse_gzidx` reads::

    offset  size  field
    0       5     b"GZIDX"
    5       1     version (0 or 1)
    6       1     flags (0)
    7       8     compressed size (u64 LE, of the gzip stream)
    15      8     uncompressed size (u64)
    23      4     spacing (u32)
    27      4     window size (u32)
    31      4     number of points (u32)
    35      ...   points: cmp_offset u64, uncmp_offset u64, bits u8 (+ data flag u8 in v1)
    ...     ...   one window of `window size` bytes per point with data

A point's block starts ``bits`` bits before byte ``cmp_offset`` (zran's convention), so its
bit offset is ``8 * cmp_offset - bits``, minus the gzip header for member-relative offsets.

This module is pure: bytes in, values out. It inflates with ISA-L (``isal``) when installed,
else zlib-ng, else the standard library's zlib.
"""

from __future__ import annotations

import bisect
import itertools
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

import numpy as np

from npystore.errors import FormatError

__all__ = [
    "GZIP_HEADER",
    "INFLATE_ERRORS",
    "MAX_INFLATE_RATIO",
    "WINDOW_SIZE",
    "Checkpoint",
    "DeflateIndex",
    "crc32",
    "deflate_block",
    "gzip_trailer",
    "inflate_from",
    "inflate_from_into",
    "inflater_name",
    "inflate_zlib_exact",
    "max_inflated_size",
    "parse_gzidx",
    "raw_decompressobj",
    "shift_bits",
]

WINDOW_SIZE: Final = 32 * 1024
#: Most bytes one byte of a raw deflate stream can inflate to: a 258-byte match costs at
#: least 2 bits (1-bit codes for length 258 and distance 1, no extra bits).
MAX_INFLATE_RATIO: Final = 1032
#: A minimal gzip header (no name, no mtime, OS unknown) that turns a raw deflate stream
#: into a gzip stream for index builders that only read gzip.
GZIP_HEADER: Final = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_MAX_POINTS: Final = 10_000_000


def _pick_inflater() -> tuple[str, ModuleType]:
    try:
        from isal import isal_zlib  # noqa: PLC0415 - optional accelerator
    except ImportError:
        pass
    else:
        return "isal", isal_zlib
    try:
        from zlib_ng import zlib_ng  # noqa: PLC0415 - optional accelerator
    except ImportError:
        return "zlib", zlib
    return "zlib-ng", zlib_ng


_INFLATER_NAME, _INFLATER = _pick_inflater()
#: What a corrupt stream raises in the standard and the accelerated implementations.
INFLATE_ERRORS: Final[tuple[type[BaseException], ...]] = (
    zlib.error,
    getattr(_INFLATER, "error", zlib.error),
)


def _pick_whole_inflater() -> tuple[Callable[[Any, int], bytearray] | None, type[Exception]]:
    try:
        import deflate  # noqa: PLC0415 - optional: libdeflate, for whole small streams
    except ImportError:
        return None, ValueError
    decompress: Callable[[Any, int], bytearray] = deflate.zlib_decompress
    error: type[Exception] = deflate.DeflateError
    return decompress, error


_WHOLE_INFLATER, _WHOLE_INFLATE_ERROR = _pick_whole_inflater()


def inflate_zlib_exact(data: bytes | bytearray | memoryview, size: int) -> bytearray | None:
    """A whole zlib stream inflated straight into one new buffer of ``size`` bytes, by
    libdeflate (the ``deflate`` package, when installed), or None.

    None means: libdeflate is not installed, or the stream is not one valid zlib stream
    (Adler-32 checked) of exactly ``size`` bytes. The caller then inflates it with its own
    streaming inflater (:func:`zlib_module`), which says what is wrong. libdeflate never
    writes past ``size`` bytes: a stream that would give more is refused, not inflated.
    It releases the GIL, and on small streams (HDF5 chunks of tens of KiB) it is measured
    0-35% faster than ISA-L, which pays a fixed cost per stream.
    """
    if _WHOLE_INFLATER is None or size <= 0:
        return None
    try:
        out = _WHOLE_INFLATER(data, size)
    except _WHOLE_INFLATE_ERROR:
        return None
    return out if len(out) == size else None


def max_inflated_size(compressed_size: int) -> int:
    """The most bytes a raw deflate stream of ``compressed_size`` bytes can inflate to.

    A declared uncompressed size above it is a lie (a ZIP directory entry, a MAT-file's
    miCOMPRESSED element): refuse it before allocating anything of that size.
    """
    return MAX_INFLATE_RATIO * max(0, compressed_size) + 258


def inflater_name() -> str:
    """Name of the inflate implementation in use: ``"isal"``, ``"zlib-ng"`` or ``"zlib"``."""
    return _INFLATER_NAME


def zlib_module() -> ModuleType:
    """The fastest available module with zlib's API (``isal_zlib``, ``zlib_ng`` or ``zlib``)."""
    return _INFLATER


def raw_decompressobj(zdict: bytes = b"") -> Any:
    """A raw-deflate decompressor of the fastest available implementation."""
    make: Callable[..., Any] = _INFLATER.decompressobj
    if zdict:
        return make(wbits=-15, zdict=zdict)
    return make(wbits=-15)


def crc32(data: bytes | memoryview, value: int = 0) -> int:
    """CRC-32 of ``data`` continuing from ``value`` (fastest implementation available)."""
    result: int = _INFLATER.crc32(data, value)
    return result


def gzip_trailer(crc: int, uncompressed_size: int) -> bytes:
    """The 8-byte gzip trailer (CRC-32, size mod 2**32) for a wrapped member."""
    return struct.pack("<II", crc & 0xFFFFFFFF, uncompressed_size & 0xFFFFFFFF)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A point where inflating can resume.

    Attributes
    ----------
    bit_offset : int
        First bit of a deflate block in the raw stream (member-relative, LSB first).
    out_offset : int
        Uncompressed bytes produced before this point.
    window : bytes
        Up to 32 KiB of output preceding the point (empty at the start of the stream).
    """

    bit_offset: int
    out_offset: int
    window: bytes


@dataclass(frozen=True, slots=True)
class DeflateIndex:
    """Checkpoints of one raw deflate stream, sorted by ``out_offset``, the first at 0.

    Attributes
    ----------
    compressed_size : int
        Bytes of the raw deflate stream.
    uncompressed_size : int
        Bytes it inflates to.
    checkpoints : tuple of Checkpoint
        Resume points; the first is ``(0, 0, b"")``.
    """

    compressed_size: int
    uncompressed_size: int
    checkpoints: tuple[Checkpoint, ...]

    def __post_init__(self) -> None:
        cps = self.checkpoints
        if not cps or cps[0].bit_offset != 0 or cps[0].out_offset != 0:
            raise FormatError("a deflate index must start with the checkpoint (0, 0)")
        for a, b in itertools.pairwise(cps):
            if not (a.out_offset < b.out_offset and a.bit_offset < b.bit_offset):
                raise FormatError("deflate index checkpoints are not strictly increasing")
        last = cps[-1]
        if last.bit_offset > 8 * self.compressed_size or last.out_offset > self.uncompressed_size:
            raise FormatError("deflate index checkpoint lies beyond the stream")

    @property
    def out_offsets(self) -> list[int]:
        """The checkpoints' output offsets."""
        return [cp.out_offset for cp in self.checkpoints]

    def locate(self, out_start: int, out_stop: int) -> tuple[Checkpoint, int, int]:
        """Where to resume for output ``[out_start, out_stop)``.

        Returns
        -------
        checkpoint : Checkpoint
            The last checkpoint at or before ``out_start``.
        byte_start, byte_stop : int
            The compressed bytes to read: from the checkpoint's byte to the byte holding the
            first checkpoint at or after ``out_stop`` (or the stream's end).
        """
        offsets = self.out_offsets
        i = max(0, bisect.bisect_right(offsets, out_start) - 1)
        j = bisect.bisect_left(offsets, out_stop)
        cp = self.checkpoints[i]
        if j < len(offsets):
            stop = min(self.compressed_size, (self.checkpoints[j].bit_offset + 7) // 8 + 1)
        else:
            stop = self.compressed_size
        return cp, cp.bit_offset // 8, stop

    def to_bytes(self) -> bytes:
        """Serialize (for a local cache); :meth:`from_bytes` reads it back."""
        parts = [
            b"NPYSTORE-DFLIDX1",
            struct.pack(
                "<QQI", self.compressed_size, self.uncompressed_size, len(self.checkpoints)
            ),
        ]
        for cp in self.checkpoints:
            parts.append(struct.pack("<QQI", cp.bit_offset, cp.out_offset, len(cp.window)))
            parts.append(cp.window)
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "<index>") -> DeflateIndex:
        """Read what :meth:`to_bytes` wrote; FormatError on anything else."""
        magic = b"NPYSTORE-DFLIDX1"
        try:
            if data[: len(magic)] != magic:
                raise FormatError(f"{source}: not an npystore deflate index")
            pos = len(magic)
            csize, usize, n = struct.unpack_from("<QQI", data, pos)
            pos += 20
            if n > _MAX_POINTS:
                raise FormatError(f"{source}: deflate index declares {n} checkpoints")
            cps = []
            for _ in range(n):
                bit, out, wlen = struct.unpack_from("<QQI", data, pos)
                pos += 20
                if wlen > WINDOW_SIZE or pos + wlen > len(data):
                    raise FormatError(f"{source}: deflate index window of {wlen} bytes")
                cps.append(Checkpoint(bit, out, bytes(data[pos : pos + wlen])))
                pos += wlen
        except struct.error as exc:
            raise FormatError(f"{source}: truncated deflate index ({exc})") from None
        if pos != len(data):
            raise FormatError(f"{source}: {len(data) - pos} trailing bytes after deflate index")
        return cls(csize, usize, tuple(cps))


def parse_gzidx(
    data: bytes, *, header_size: int, compressed_size: int, source: str = "<index>"
) -> DeflateIndex:
    """Read a ``GZIDX`` export (rapidgzip, indexed_gzip) of a gzip-wrapped raw stream.

    Parameters
    ----------
    data : bytes
        The exported index.
    header_size : int
        Bytes of gzip header before the raw stream (subtracted from every offset).
    compressed_size : int
        Bytes of the raw deflate stream (the member's compressed size).
    source : str
        Name for error messages.

    Returns
    -------
    DeflateIndex
        Member-relative checkpoints (points without a window other than the first, and the
        end-of-stream point, are dropped).
    """
    try:
        if data[:5] != b"GZIDX" or data[5] not in (0, 1):
            raise FormatError(f"{source}: not a GZIDX index (starts {bytes(data[:6])!r})")
        version = data[5]
        pos = 7
        _gz_size, usize, _spacing, wsize, npoints = struct.unpack_from("<QQIII", data, pos)
        pos += 28
        if npoints > _MAX_POINTS or wsize > WINDOW_SIZE:
            raise FormatError(f"{source}: GZIDX declares {npoints} points of window {wsize}")
        point_fmt = "<QQBB" if version == 1 else "<QQB"
        point_size = struct.calcsize(point_fmt)
        raw_points = []
        for _ in range(npoints):
            fields = struct.unpack_from(point_fmt, data, pos)
            pos += point_size
            has_data = bool(fields[3]) if version == 1 else fields[1] > 0
            raw_points.append((fields[0], fields[1], fields[2], has_data))
        cps = [Checkpoint(0, 0, b"")]
        for cmp_offset, out_offset, bits, has_data in raw_points:
            window = b""
            if has_data:
                if pos + wsize > len(data):
                    raise FormatError(f"{source}: GZIDX window runs past the index's end")
                window = bytes(data[pos : pos + wsize])
                pos += wsize
            bit = 8 * (cmp_offset - header_size) - bits
            if not has_data or out_offset == 0 or out_offset >= usize or bit <= cps[-1].bit_offset:
                continue
            cps.append(Checkpoint(bit, out_offset, window))
    except (struct.error, IndexError) as exc:
        raise FormatError(f"{source}: truncated GZIDX index ({exc})") from None
    return DeflateIndex(compressed_size, usize, tuple(cps))


def shift_bits(data: bytes | memoryview, shift: int) -> bytes:
    """``data`` as one little-endian bit string shifted right by ``shift`` (0..7) bits."""
    return _shifted(data, shift).tobytes()


def _shifted(data: bytes | memoryview, shift: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    if not 0 <= shift < 8:
        raise ValueError(f"shift must be 0..7, got {shift}")
    a = np.frombuffer(data, dtype=np.uint8)
    if shift == 0:
        return a
    out = a >> np.uint8(shift)
    out[:-1] |= (a[1:] << np.uint8(8 - shift)).astype(np.uint8)
    return out


#: Output produced per decompress call, and compressed input fed per call: bound the memory
#: of inflating a large range to about the output buffer itself.
_OUT_PIECE: Final = 4 * 2**20
_IN_PIECE: Final = 1 * 2**20


def inflate_from_into(
    checkpoint: Checkpoint,
    compressed: bytes | memoryview,
    skip: int,
    out: memoryview,
    *,
    source: str = "<stream>",
) -> None:
    """Fill ``out`` with the output that starts ``skip`` bytes past a checkpoint.

    Parameters
    ----------
    checkpoint : Checkpoint
        Where to resume.
    compressed : bytes
        The raw stream from byte ``checkpoint.bit_offset // 8`` on (enough of it).
    skip : int
        Output bytes to discard first.
    out : memoryview
        Writable byte view, filled exactly.
    source : str
        Name for error messages.

    Raises
    ------
    FormatError
        The stream is corrupt or ends before filling ``out``.
    """
    data = memoryview(_shifted(compressed, checkpoint.bit_offset % 8).data)
    try:
        produced = _inflate_into(raw_decompressobj(checkpoint.window), data, skip, out)
    except INFLATE_ERRORS as exc:
        if _INFLATER is zlib:
            raise FormatError(
                f"{source}: corrupt deflate data after output byte {checkpoint.out_offset}: {exc}"
            ) from None
        # ISA-L refuses some valid blocks when resuming mid-stream (seen with indexed_gzip
        # checkpoints that zlib resumes from): the standard library's zlib decides
        try:
            produced = _inflate_into(_zlib_decompressobj(checkpoint.window), data, skip, out)
        except zlib.error as exc2:
            raise FormatError(
                f"{source}: corrupt deflate data after output byte {checkpoint.out_offset}: {exc2}"
            ) from None
    want = skip + out.nbytes
    if produced < want:
        raise FormatError(
            f"{source}: deflate stream ended after {checkpoint.out_offset + produced} output "
            f"bytes, expected at least {checkpoint.out_offset + want}"
        )


def _zlib_decompressobj(zdict: bytes) -> Any:
    """A raw-deflate decompressor of the standard library's zlib."""
    return zlib.decompressobj(wbits=-15, zdict=zdict) if zdict else zlib.decompressobj(wbits=-15)


def _inflate_into(d: Any, data: memoryview, skip: int, out: memoryview) -> int:
    """Inflate ``data`` with ``d``, writing output bytes ``[skip, skip + len(out))`` into
    ``out``; return the number of bytes produced (less than wanted if the stream ended)."""
    want = skip + out.nbytes
    produced = 0
    fed = 0
    tail: bytes | memoryview = b""
    while produced < want:
        if not tail:
            if fed >= len(data) or d.eof:
                break
            tail = data[fed : fed + _IN_PIECE]
            fed += len(tail)
        chunk = d.decompress(tail, min(_OUT_PIECE, want - produced))
        tail = d.unconsumed_tail
        lo, hi = max(produced, skip), min(produced + len(chunk), want)
        if hi > lo:
            out[lo - skip : hi - skip] = memoryview(chunk)[lo - produced : hi - produced]
        produced += len(chunk)
        if not chunk and tail:
            break  # no progress despite input: a stream that cannot continue
    return produced


def inflate_from(
    checkpoint: Checkpoint,
    compressed: bytes | memoryview,
    skip: int,
    length: int,
    *,
    source: str = "<stream>",
) -> bytes:
    """``length`` bytes of output, ``skip`` bytes past a checkpoint (see
    :func:`inflate_from_into`)."""
    buf = bytearray(length)
    inflate_from_into(checkpoint, compressed, skip, memoryview(buf), source=source)
    return bytes(buf)


#: ISA-L's compression level for written members (0-3; 2 is zlib's level-6 ratio on
#: numeric data at several times its speed) and zlib's when ISA-L is not installed.
ISAL_LEVEL: Final = 2
ZLIB_LEVEL: Final = 6


def deflate_block(data: bytes | memoryview, *, final: bool) -> bytes:
    """``data`` deflated as an independent block of a raw stream.

    It starts with an empty dictionary and ends with a full flush (byte-aligned, the next
    block needs nothing before it) or, when ``final``, with the end of the stream: blocks
    made in any order and joined in order are one valid raw deflate stream.
    """
    c: Any
    try:
        from isal import isal_zlib  # noqa: PLC0415 - optional accelerator
    except ImportError:
        c = zlib.compressobj(ZLIB_LEVEL, zlib.DEFLATED, -15)
        mode = zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH
    else:
        c = isal_zlib.compressobj(ISAL_LEVEL, isal_zlib.DEFLATED, -15)
        mode = isal_zlib.Z_FINISH if final else isal_zlib.Z_FULL_FLUSH
    out: bytes = c.compress(data) + c.flush(mode)
    return out
