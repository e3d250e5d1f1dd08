"""Random access into raw deflate streams: checkpoint indexes and inflating from them.

A deflated ZIP member (``numpy.savez_compressed``) is one raw deflate stream (RFC 1951): no
byte range maps to an element. A *checkpoint* records a point where a deflate block starts:

==============  =====================================================================
``bit_offset``  position of the block's first bit in the compressed stream (LSB first)
``out_offset``  number of uncompressed bytes produced before that point
``window``      the (up to) 32 KiB of output preceding it: the back-references' dictionary
==============  =====================================================================

Resuming at a checkpoint: take the compressed bytes from ``bit_offset // 8``, put in place of
the ``bit_offset % 8`` bits before the block a run of empty deflate blocks exactly that many
bits long modulo 8 (:func:`resume_head`), and inflate them as a raw stream with
``zdict=window``. The block keeps its position within its byte, so every later stored block
(an incompressible region, the ``00 00 FF FF`` of a flush) stays byte-aligned as the stream
has it; shifting the bytes instead would misalign them. With checkpoints every few MiB of
output, any range of the member costs one range read and a short inflate.

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
else zlib-ng, else the standard library's zlib. The blocks the writers deflate are
:mod:`npystore.formats.deflate_write`'s.
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

from npystore.errors import FormatError

__all__ = [
    "GZIP_HEADER",
    "INFLATE_ERRORS",
    "MAX_INFLATE_RATIO",
    "WINDOW_SIZE",
    "Checkpoint",
    "DeflateIndex",
    "crc32",
    "gzip_trailer",
    "inflate_chunk",
    "inflate_from",
    "inflate_from_into",
    "inflater_name",
    "max_inflated_size",
    "parse_gzidx",
    "raw_decompressobj",
    "resume_head",
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


#: Empty deflate blocks (no output, not final), as little-endian bit strings: a fixed-Huffman
#: block (3 header bits, the 7-bit end-of-block code) ...
_EMPTY_FIXED: Final = (0b10, 10)
#: ... and a dynamic-Huffman one of an odd length: header ``0, 10``; HLIT 0, HDIST 0,
#: HCLEN 14; code-length code 18:1, 1:2, 0:3, 17:3 bits; lengths: literal 0 one bit, 255
#: zeros (18, 18, 17), end-of-block one bit, the one distance code unused; end-of-block.
#: zlib, zlib-ng and ISA-L inflate both (tested).
_EMPTY_DYNAMIC: Final = (0x168F9DFCA0000000000CB1C004, 101)
#: For a block starting at bit ``s`` of its byte: how many of each make ``s`` bits mod 8.
_PADDING: Final = {1: (1, 2), 2: (0, 1), 3: (1, 3), 4: (0, 2), 5: (1, 0), 6: (0, 3), 7: (1, 1)}


def _padding_bits(shift: int) -> tuple[int, int]:
    """A run of empty blocks ``(bits, length)`` whose length is ``shift`` modulo 8."""
    dynamic, fixed = _PADDING[shift]
    value, length = _EMPTY_DYNAMIC if dynamic else (0, 0)
    for _ in range(fixed):
        value |= _EMPTY_FIXED[0] << length
        length += _EMPTY_FIXED[1]
    return value, length


_HEADS: Final = {s: _padding_bits(s) for s in range(1, 8)}


def resume_head(first: int, shift: int) -> bytes:
    """Bytes that replace the first byte of a resume at bit ``shift`` (1..7) of that byte.

    ``first`` is the byte holding the block's first bit. The result is a run of empty
    deflate blocks (no output) ending exactly at bit ``shift`` of its last byte, which is
    ``first`` with its low ``shift`` bits (the previous block's tail) replaced: inflating
    it followed by the compressed bytes after ``first`` resumes at the block with every
    byte boundary of the stream where it was.
    """
    if not 1 <= shift <= 7:
        raise ValueError(f"shift must be 1..7, got {shift}")
    value, length = _HEADS[shift]
    mask = (1 << shift) - 1
    whole = (length - shift) // 8
    last = (first & ~mask & 0xFF) | (value >> (8 * whole))
    return value.to_bytes(whole + 1, "little")[:whole] + bytes([last])


def _resume_pieces(compressed: bytes | memoryview, bit_offset: int) -> tuple[bytes, memoryview]:
    """``(head, rest)`` to inflate, in order, for a resume at ``bit_offset`` whose byte is
    ``compressed[0]`` (see :func:`resume_head`)."""
    view = memoryview(compressed).cast("B")
    shift = bit_offset % 8
    if shift == 0 or not len(view):
        return b"", view
    return resume_head(view[0], shift), view[1:]


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
    head, data = _resume_pieces(compressed, checkpoint.bit_offset)
    try:
        produced = _inflate_into(raw_decompressobj(checkpoint.window), head, data, skip, out)
    except INFLATE_ERRORS as exc:
        if _INFLATER is zlib:
            raise FormatError(
                f"{source}: corrupt deflate data after output byte {checkpoint.out_offset}: {exc}"
            ) from None
        # ISA-L refuses some valid blocks when resuming mid-stream (seen with indexed_gzip
        # checkpoints that zlib resumes from): the standard library's zlib decides
        try:
            produced = _inflate_into(_zlib_decompressobj(checkpoint.window), head, data, skip, out)
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


def _inflate_into(d: Any, head: bytes, data: memoryview, skip: int, out: memoryview) -> int:
    """Inflate ``head`` (empty blocks: no output) then ``data`` with ``d``, writing output
    bytes ``[skip, skip + len(out))`` into ``out``; return the number of bytes produced (less
    than wanted if the stream ended)."""
    want = skip + out.nbytes
    produced = 0
    fed = 0
    if head:
        d.decompress(head)  # empty blocks: no output
    tail: bytes | memoryview = b""
    capped = False  # the last call stopped at its limit: it may hold output back
    while produced < want:
        if not tail and not capped:
            if fed >= len(data) or d.eof:
                break
            tail = data[fed : fed + _IN_PIECE]
            fed += len(tail)
        limit = min(_OUT_PIECE, want - produced)
        chunk = d.decompress(tail, limit)
        capped = len(chunk) == limit and not d.eof
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


def inflate_chunk(data: bytes | memoryview, size: int, *, source: str = "<chunk>") -> bytes:
    """A raw deflate stream that starts with an empty dictionary, inflated into at most
    ``size`` bytes: one chunk of a reference to an independent deflate block.

    The stream must produce exactly ``size`` bytes, or fewer only if it ends there (its last
    block has BFINAL set: the member's last block, which holds the array's last, shorter
    chunk). Every input byte must be consumed. Output is never allowed past ``size``: a
    block cannot inflate into more memory than its chunk.

    Parameters
    ----------
    data : bytes
        The compressed block (whole deflate blocks, byte-aligned at both ends).
    size : int
        Bytes one chunk holds.
    source : str
        Name for error messages.

    Returns
    -------
    bytes
        ``size`` bytes, or fewer at the end of the stream.

    Raises
    ------
    FormatError
        Corrupt data, output past ``size``, a stream cut short, or bytes after its end.
    """
    d = raw_decompressobj()
    pieces: list[bytes] = []
    produced = 0
    tail: bytes | memoryview = data
    try:
        while produced <= size and not d.eof:
            piece: bytes = d.decompress(tail, size + 1 - produced)
            tail = d.unconsumed_tail
            if not piece:
                break  # input used up, no output held back
            pieces.append(piece)
            produced += len(piece)
    except INFLATE_ERRORS as exc:
        raise FormatError(f"{source}: corrupt deflate data: {exc}") from None
    out = b"".join(pieces)
    if len(out) > size:
        raise FormatError(
            f"{source}: the deflate block inflates past {size} bytes, the size of one chunk"
        )
    if d.unconsumed_tail or d.unused_data:
        raise FormatError(
            f"{source}: the deflate block ends before its last "
            f"{len(d.unconsumed_tail) + len(d.unused_data)} bytes (expected one block per chunk)"
        )
    if len(out) < size and not d.eof:
        raise FormatError(
            f"{source}: the deflate block inflates to {len(out)} bytes, not {size}, and does "
            f"not end the stream (cut short?)"
        )
    return out
