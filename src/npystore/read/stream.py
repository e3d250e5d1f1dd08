"""A deflated member read forwards as a stream: what the ``npz://`` file objects read through.

:class:`StreamInflater` inflates one member's raw deflate stream from a resume point (the
member's start, or the checkpoint of its index at or before the wanted offset), fetching
the compressed bytes in growing pieces, and checks the CRC-32 on a pass from the start to
the end. Random access by checkpoints, and whole-member reads, are :mod:`npystore.read.inflate`.
"""

from __future__ import annotations

import bisect
from typing import Final

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.formats import deflate
from npystore.formats.deflate import Checkpoint, DeflateIndex
from npystore.read.index import CachedIndex, rebuild_index
from npystore.read.layout import DeflatedMember
from npystore.read.sequential import INPUT_SLICE, STREAM_BLOCK
from npystore.read.slot import IndexSlot

__all__ = ["FIRST_READAHEAD", "StreamInflater"]

#: The first compressed piece fetched after a (re)start; pieces double up to STREAM_BLOCK.
FIRST_READAHEAD: Final = 64 * 2**10
#: Most output one decompress call produces.
_OUTPUT_PIECE: Final = 4 * 2**20
_START: Final = Checkpoint(0, 0, b"")


class StreamInflater:
    """One member's raw deflate stream, inflated forwards from a resume point.

    Attributes
    ----------
    restarts : int
        How many times inflating (re)started: at the member's start or at a checkpoint.
    resumed_at : int
        The output offset where the current pass started (0, or a checkpoint's).
    """

    def __init__(self, reader: RangeReader, member: DeflatedMember, slot: IndexSlot) -> None:
        self._reader = reader
        self._member = member
        self._slot = slot
        self._source = f"{reader.url}:{member.name}"
        self.restarts = 0
        self._restart(_START)

    def _restart(self, checkpoint: Checkpoint) -> None:
        self._d = deflate.raw_decompressobj(checkpoint.window)
        self._out = checkpoint.out_offset  # output bytes produced so far
        self._next = checkpoint.bit_offset // 8  # next compressed byte to fetch
        self._shift = checkpoint.bit_offset % 8
        self._input = memoryview(b"")  # the compressed piece fetched last
        self._at = 0  # how much of it went to the decompressor
        self._pending: bytes | memoryview = b""  # what the decompressor has yet to take
        self._piece = FIRST_READAHEAD
        whole = checkpoint.out_offset == 0 and self._member.crc32 is not None
        self._crc: int | None = 0 if whole else None
        self.restarts += 1
        self.resumed_at = checkpoint.out_offset

    def _resume_point(self, start: int) -> Checkpoint:
        index: DeflateIndex | None = self._slot.get()
        if index is None:
            return _START
        i = bisect.bisect_right(index.out_offsets, start) - 1
        return index.checkpoints[max(0, i)]

    def read(self, start: int, stop: int) -> bytes:
        """Uncompressed bytes ``[start, stop)`` (clipped to the member's size).

        A pass resumed from a checkpoint of an index read from the index cache that fails is
        not blamed on the archive: the entry is removed, the index rebuilt in one checked
        pass (:func:`~npystore.read.index.rebuild_index`) and the range read again.
        """
        index = self._slot.get()
        try:
            return self._read(start, stop)
        except FormatError as exc:
            if not isinstance(index, CachedIndex) or self.resumed_at == 0:
                raise
            why = f"resuming from it failed: {exc}"
            rebuild_index(self._reader, self._member, self._slot, index, why)
        self._restart(_START)  # the next read resumes from the new index's checkpoint
        return self._read(start, stop)

    def _read(self, start: int, stop: int) -> bytes:
        stop = min(stop, self._member.uncompressed_size)
        if start >= stop:
            return b""
        checkpoint = self._resume_point(start)
        if start < self._out or checkpoint.out_offset > self._out:
            self._restart(checkpoint)
        out = bytearray(stop - start)
        while self._out < stop:
            chunk = self._inflate(min(_OUTPUT_PIECE, stop - self._out))
            lo, hi = max(self._out, start), min(self._out + len(chunk), stop)
            if hi > lo:
                out[lo - start : hi - start] = memoryview(chunk)[lo - self._out : hi - self._out]
            self._out += len(chunk)
        return bytes(out)

    def _inflate(self, limit: int) -> bytes:
        """The next output bytes (at most ``limit``, at least one)."""
        while True:  # with no input left, an empty input flushes output zlib held back
            if not self._pending:
                if self._at >= len(self._input) and self._next < self._member.compressed_size:
                    self._input, self._at = memoryview(self._fetch()), 0
                # small slices: the output of a call stays small (heap, cache) and a call
                # that stops at ``limit`` leaves little input for the decompressor to copy
                self._pending = self._input[self._at : self._at + INPUT_SLICE]
                self._at += len(self._pending)
            fed = len(self._pending)
            try:
                chunk: bytes = self._d.decompress(self._pending, limit)
            except deflate.INFLATE_ERRORS as exc:
                raise FormatError(
                    f"{self._source}: corrupt deflate data after output byte {self._out}: {exc}"
                ) from None
            self._pending = self._d.unconsumed_tail
            if chunk:
                self._check(chunk)
                return chunk
            more = (
                bool(self._pending)
                or self._at < len(self._input)
                or self._next < self._member.compressed_size
            )
            if self._d.eof or not more:
                raise FormatError(
                    f"{self._source}: the deflate stream ends after {self._out} bytes, "
                    f"the ZIP directory says {self._member.uncompressed_size}"
                )
            if len(self._pending) == fed:
                raise FormatError(
                    f"{self._source}: the deflate stream makes no progress after output byte "
                    f"{self._out}"
                )

    def _fetch(self) -> bytes:
        """The next piece of the compressed stream; the first after a resume within a byte
        starts with empty blocks that end where the resume point's block starts
        (:func:`npystore.formats.deflate.resume_head`)."""
        csize = self._member.compressed_size
        n = min(self._piece, csize - self._next)
        base = self._member.offset + self._next
        data = self._reader.read(base, base + n)
        self._next += n
        self._piece = min(STREAM_BLOCK, 2 * self._piece)
        if self._shift and data:
            data = deflate.resume_head(data[0], self._shift) + bytes(data[1:])
            self._shift = 0  # byte boundaries are the stream's from here on
        return data

    def _check(self, chunk: bytes) -> None:
        if self._crc is None:
            return
        self._crc = deflate.crc32(chunk, self._crc)
        if self._out + len(chunk) == self._member.uncompressed_size:
            expected = self._member.crc32
            if self._crc != expected:
                raise FormatError(
                    f"{self._source}: CRC-32 of the inflated member is {self._crc:08x}, the "
                    f"ZIP directory says {expected:08x}"
                )
