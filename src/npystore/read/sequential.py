"""A deflated member in one sequential pass, through the fetch layer.

- :class:`CompressedBlocks`: the member's compressed bytes in blocks of
  :data:`STREAM_BLOCK` (kept by :mod:`npystore.read.memo` for members it keeps, else
  fetched two at a time);
- :func:`stream`: inflate from the start (ISA-L when installed), writing a window of the
  output into a buffer, and for a pass to the end the CRC-32 and Adler-32 of everything;
- :func:`check_full_pass`: the size and checksums of a whole pass against what the member
  declares.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from typing import Final

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.formats import deflate
from npystore.read.layout import DeflatedMember
from npystore.read.memo import MEMO_MEMBER, compressed_range

__all__ = [
    "INPUT_SLICE",
    "STREAM_BLOCK",
    "TAIL",
    "CompressedBlocks",
    "check_full_pass",
    "stream",
]

#: Compressed bytes fetched per sequential read.
STREAM_BLOCK: Final = 8 * 2**20
#: A pass from the start that stops at most this many bytes before the member's end goes on
#: to the end, so that it checks the CRC-32 (bytes some writers leave after the array data).
TAIL: Final = 64 * 2**10


class CompressedBlocks:
    """A member's compressed bytes in blocks of :data:`STREAM_BLOCK`, fetched two at a time
    (the one asked for and the next, concurrently); older blocks are dropped."""

    def __init__(self, reader: RangeReader, member: DeflatedMember) -> None:
        self._reader = reader
        self._member = member
        self._blocks: dict[int, bytes | memoryview] = {}
        self._lock = threading.Lock()
        self.count = -(-member.compressed_size // STREAM_BLOCK)

    def get(self, k: int) -> bytes | memoryview:
        with self._lock:
            block = self._blocks.get(k)
            if block is not None:
                return block
            csize = self._member.compressed_size
            if csize <= MEMO_MEMBER:  # kept once per process; the next block comes along
                start, stop = k * STREAM_BLOCK, min(csize, (k + 1) * STREAM_BLOCK)
                block = compressed_range(
                    self._reader, self._member, start, stop, ahead=STREAM_BLOCK
                )
                self._blocks = {k: block}
                return block
            wanted = [j for j in (k, k + 1) if j < self.count and j not in self._blocks]
            ranges = [
                (
                    self._member.offset + j * STREAM_BLOCK,
                    self._member.offset + min(csize, (j + 1) * STREAM_BLOCK),
                )
                for j in wanted
            ]
            for j, data in zip(wanted, self._reader.read_many(ranges), strict=True):
                self._blocks[j] = data
            for old in [j for j in self._blocks if j < k - 1]:
                del self._blocks[old]
            return self._blocks[k]


def check_full_pass(
    source: str, member: DeflatedMember, total: int, crc: int, adler: int = 1
) -> None:
    """Raise :class:`FormatError` unless a pass over the whole member produced its declared
    size, CRC-32 and Adler-32 (each checked when the member declares it)."""
    if total != member.uncompressed_size:
        raise FormatError(
            f"{source}: inflated to {total} bytes, {member.sized_by} says "
            f"{member.uncompressed_size}"
        )
    if member.adler32 is not None and adler != member.adler32:
        raise FormatError(
            f"{source}: Adler-32 of the inflated data is {adler:08x}, the zlib trailer says "
            f"{member.adler32:08x}"
        )
    if member.crc32 is not None and crc != member.crc32:
        raise FormatError(
            f"{source}: CRC-32 of the inflated data is {crc:08x}, the ZIP directory says "
            f"{member.crc32:08x}"
        )


#: Most output produced by one decompress call (bounds memory on highly compressible data).
_OUTPUT_CAP: Final = 4 * 2**20
#: Compressed bytes given to one decompress call (here and in ``npz://`` files). Small slices
#: keep each call's output small (about 1 MiB for numpy data), so it comes from the heap and
#: is copied on while it is still in cache, and a call that stops at the output cap leaves
#: at most this much unconsumed input (which the decompressor copies).
INPUT_SLICE: Final = 256 * 2**10


def _compressed_pieces(
    reader: RangeReader, member: DeflatedMember, want: int | None
) -> Iterator[bytes | memoryview]:
    """The member's compressed bytes in order: blocks of :data:`STREAM_BLOCK` (next one
    prefetched) for a whole pass; for output up to ``want``, pieces that start near the
    compressed size ``want`` needs (estimated from the member's ratio) and double."""
    if want is None:
        blocks = CompressedBlocks(reader, member)
        for k in range(blocks.count):
            yield blocks.get(k)
        return
    csize = member.compressed_size
    ratio = csize / max(1, member.uncompressed_size)
    piece = min(STREAM_BLOCK, max(64 * 2**10, int(want * ratio * 1.25) + 16 * 2**10))
    pos = 0
    while pos < csize:
        stop = min(csize, pos + piece)
        yield compressed_range(reader, member, pos, stop)
        pos = stop
        piece = min(STREAM_BLOCK, 2 * piece)


def _sliced(pieces: Iterator[bytes | memoryview]) -> Iterator[memoryview]:
    """The pieces cut into :data:`INPUT_SLICE` views (no copies)."""
    for piece in pieces:
        view = memoryview(piece)
        for at in range(0, len(view), INPUT_SLICE):
            yield view[at : at + INPUT_SLICE]


def stream(
    reader: RangeReader,
    member: DeflatedMember,
    out: memoryview,
    skip: int,
    *,
    to_end: bool = False,
) -> tuple[int, int] | None:
    """Inflate from the start; write output bytes ``[skip, skip + len(out))`` into ``out``.

    With ``to_end`` (or when ``out`` reaches the member's end) the whole stream is inflated
    (output past ``out`` is discarded) and checked against the declared size, and the
    CRC-32 and Adler-32 of the whole output are returned; else ``None``. Each checksum is
    computed only when the member declares it (else 0 / 1).
    """
    source = f"{reader.url}:{member.name}"
    size = member.uncompressed_size
    want = skip + out.nbytes
    whole = to_end or want == size
    d = deflate.raw_decompressobj()
    produced = 0
    crc = 0
    adler = 1
    pieces = _compressed_pieces(reader, member, None if whole else want)
    for piece in _sliced(pieces):
        data: bytes | memoryview = piece
        while True:
            # one byte more than the declared size reveals a stream that inflates to more
            limit = min(_OUTPUT_CAP, (size if whole else want) - produced + 1)
            try:
                chunk = d.decompress(data, limit)
            except deflate.INFLATE_ERRORS as exc:
                raise FormatError(f"{source}: corrupt deflate data: {exc}") from None
            data = d.unconsumed_tail
            if produced + len(chunk) > size:
                raise FormatError(
                    f"{source}: inflates to more than the {size} bytes {member.sized_by} says "
                    "(corrupt or mismatched deflate data)"
                )
            lo, hi = max(produced, skip), min(produced + len(chunk), want)
            if hi > lo:
                out[lo - skip : hi - skip] = memoryview(chunk)[lo - produced : hi - produced]
            if whole and member.crc32 is not None:
                crc = deflate.crc32(chunk, crc)
            if whole and member.adler32 is not None:
                adler = zlib.adler32(chunk, adler)
            produced += len(chunk)
            if not whole and produced >= want:
                return None
            if not chunk or (not data and (len(chunk) < limit or d.eof)):
                break  # input used up; a call that stopped at the limit may hold output back
    need = size if whole else want
    if produced < need:
        raise FormatError(f"{source}: deflate stream ended after {produced} bytes, expected {need}")
    return crc, adler
