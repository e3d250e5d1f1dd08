"""A first compute's one pass over a deflated member with no index, shared by its chunk reads.

A dask compute of a member with no checkpoint index anywhere (a ``numpy.savez_compressed``
archive opened for the first time) reads each chunk in a task of its own, in the order the
scheduler picks (dask's threaded scheduler starts about in the middle and goes backwards).
A deflate stream can only be inflated from its start, so the chunk reads share one
:class:`FirstPass`:

- a read whose bytes the stream has not reached yet *drives* it (one read at a time): the
  output before its range is cut into pieces the size of the reads seen, each written into
  a buffer of its own and kept for the read that asks for it; its own range is written
  straight into its own buffer. Nothing is copied: a kept piece becomes the result of the
  read that takes it, whole (:meth:`FirstPass.read`; a read covering part of a piece, or
  several pieces, gets a copy);
- reads whose range is being inflated wait for it and take it when it is done; a read that
  finds its range kept takes it at once;
- the compressed bytes are fetched in parts all in flight together
  (:func:`npystore.read.memo.compressed_range`), and inflating starts when the first part
  arrived, not when the last did;
- the pass places a checkpoint at a deflate block boundary every
  :data:`~npystore.read.index.INDEX_SPACING` output bytes (zlib's ``Z_BLOCK``,
  :class:`~npystore.formats.zblock.Inflater`), and once the stream ended with the declared
  size and CRC-32 (the read whose range ends within
  :data:`~npystore.read.sequential.TAIL` bytes of the member's end goes on to its end),
  installs the member's checkpoint index in its slot and the index cache: no second pass
  builds it.

A read the pass cannot serve (its range was inflated and not kept: the stream passed it,
or the keep budget dropped the pass, :func:`npystore.read.memo.reserve`) returns ``None``;
the caller reads through the index instead. The kept pieces count against the keep budget
(the whole member is reserved when the pass is made) and go when every byte but
:data:`UNREAD_SLACK` was read.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any, Final

import numpy as np

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.formats import deflate, zblock
from npystore.formats.deflate import WINDOW_SIZE, Checkpoint, DeflateIndex
from npystore.read.index import INDEX_SPACING, cache_index
from npystore.read.layout import DeflatedMember
from npystore.read.memo import PART, compressed_range
from npystore.read.sequential import TAIL, check_full_pass
from npystore.read.slot import IndexSlot

__all__ = ["UNREAD_SLACK", "FirstPass"]

#: Kept bytes that may stay unread when a finished pass lets its pieces go (the npy header:
#: chunk reads start at the array data).
UNREAD_SLACK: Final = 64 * 2**10

_RUNNING, _FINISHED, _STOPPED = "running", "finished", "stopped"


class FirstPass:
    """One sequential inflate of a member, shared by the chunk reads of a compute.

    Parameters
    ----------
    reader : RangeReader
        Reader of the archive.
    member : DeflatedMember
        The member (at most :data:`~npystore.read.memo.MEMO_MEMBER` compressed bytes).
    slot : IndexSlot
        The member's slot: the index goes there when the pass ends.
    """

    def __init__(self, reader: RangeReader, member: DeflatedMember, slot: IndexSlot) -> None:
        self._reader = reader
        self._member = member
        self._slot = slot
        self._source = f"{reader.url}:{member.name}"
        self._cond = threading.Condition()
        # -- shared, under ``_cond``
        self._state = _RUNNING
        self._error: FormatError | None = None
        self._driving = False
        #: Output produced so far (the stream's position).
        self._pos = 0
        #: Output start -> [buffer, bytes of it not read yet]: pieces inflated ahead.
        self._pieces: dict[int, list[Any]] = {}
        self._unread = 0
        self._unit = 0
        # -- the driver's (one at a time)
        self._inflater: zblock.Inflater | None = None
        self._fed = 0
        self._ended = False
        self._crc = 0
        self._adler = 1
        self._checkpoints = [Checkpoint(0, 0, b"")]
        self._next_checkpoint = INDEX_SPACING
        self._tail = b""  # the last WINDOW_SIZE output bytes before the current buffer

    # -- reads -------------------------------------------------------------------------

    def read(self, start: int, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
        """Output ``[start, start + nbytes)`` as a new array of bytes, or ``None`` when the
        pass cannot give it (the caller reads through the index).

        Raises
        ------
        FormatError
            The stream is corrupt (here, or in the read that drove it), or its size or
            CRC-32 is not the member's.
        FetchError
            The compressed bytes could not be read (this read drove the stream).
        """
        stop = start + nbytes
        with self._cond:
            self._unit = max(self._unit, nbytes)
            while True:
                if self._error is not None:
                    raise FormatError(str(self._error))
                got = self._take(start, stop)
                if got is not None:
                    return got
                if self._state != _RUNNING or self._pos > start:
                    return None  # inflated and not kept (or the pass stopped)
                if not self._driving:
                    self._driving = True
                    break
                self._cond.wait()
            pos = self._pos
        try:
            return self._drive(pos, start, stop)
        except FormatError as exc:
            with self._cond:
                self._error = exc
            self._stop()
            raise
        except BaseException:
            self._stop()  # (where the stream stands is not known any more)
            raise
        finally:
            with self._cond:
                self._driving = False
                if self._state == _STOPPED:
                    self._close()
                self._cond.notify_all()

    def _take(self, start: int, stop: int) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
        """The kept bytes of ``[start, stop)``: the piece itself when it is exactly that
        range, else a copy from the pieces covering it; None when they do not cover it.
        Call with ``_cond`` held."""
        piece = self._pieces.get(start)
        if piece is not None and piece[0].nbytes == stop - start:
            del self._pieces[start]
            self._read_kept(piece[1])
            buf: np.ndarray[Any, np.dtype[np.uint8]] = piece[0]
            return buf
        parts: list[tuple[int, list[Any]]] = []
        at = start
        for begin in sorted(self._pieces):  # (a few dozen pieces at most)
            piece = self._pieces[begin]
            end = begin + piece[0].nbytes
            if end <= at:
                continue
            if begin > at:
                return None
            parts.append((begin, piece))
            at = end
            if at >= stop:
                break
        if at < stop or not parts:
            return None
        out = _new_buffer(stop - start)
        for begin, piece in parts:
            lo, hi = max(start, begin), min(stop, begin + piece[0].nbytes)
            out[lo - start : hi - start] = piece[0][lo - begin : hi - begin]
            read = min(piece[1], hi - lo)  # (a range read twice counts once)
            piece[1] -= read
            if piece[1] <= 0:
                del self._pieces[begin]
            self._read_kept(read)
        return out

    def _read_kept(self, nbytes: int) -> None:
        """Count kept bytes read; a finished pass lets its pieces go once all but
        :data:`UNREAD_SLACK` were read."""
        self._unread -= nbytes
        if self._state == _FINISHED and self._unread <= UNREAD_SLACK:
            self._pieces.clear()
            self._unread = 0

    def drop(self) -> None:
        """Let the kept pieces go and serve no more reads (the keep budget)."""
        self._stop()

    def holds(self) -> bool:
        """Whether the pass still holds memory for reads to come (pieces, or the stream)."""
        with self._cond:
            return self._state == _RUNNING or bool(self._pieces)

    def _stop(self) -> None:
        with self._cond:
            self._state = _STOPPED
            self._pieces.clear()
            self._unread = 0
            self._cond.notify_all()
            if not self._driving:
                self._close()

    def _close(self) -> None:
        if self._inflater is not None:
            self._inflater.close()
            self._inflater = None

    # -- the driver --------------------------------------------------------------------

    def _drive(self, pos: int, start: int, stop: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """Inflate from ``pos`` through ``[start, stop)``: the pieces before it kept, the
        range into a new buffer (returned), on to the end when ``stop`` is near it."""
        size = self._member.uncompressed_size
        if self._inflater is None:
            self._inflater = zblock.Inflater()
        for a, b in self._cuts(pos, start):
            buf = _new_buffer(b - a)
            self._fill(memoryview(buf.data))
            with self._cond:
                if self._state == _RUNNING:
                    self._pieces[a] = [buf, buf.nbytes]
                    self._unread += buf.nbytes
                self._pos = self._pos_now()
                self._cond.notify_all()
        own = _new_buffer(stop - start)
        self._fill(memoryview(own.data))
        with self._cond:
            self._pos = self._pos_now()
        if size - stop <= TAIL:
            self._finish()
        return own

    def _cuts(self, pos: int, start: int) -> list[tuple[int, int]]:
        """Output ``[pos, start)`` as pieces ending at ``start - k * unit`` (so that they
        match chunk reads of the size seen), in stream order."""
        unit = max(1, self._unit)
        cuts = []
        b = start
        while b > pos:
            a = max(pos, b - unit)
            cuts.append((a, b))
            b = a
        return cuts[::-1]

    def _pos_now(self) -> int:
        return 0 if self._inflater is None else self._inflater.total_out

    def _feed(self, inflater: zblock.Inflater) -> bool:
        """Give ``inflater`` the next part of the compressed bytes once it arrived (the
        first call starts fetching all of them); False when there are no more."""
        csize = self._member.compressed_size
        if self._fed >= csize:
            return False
        stop = min(csize, self._fed + PART)
        ahead = csize - stop if self._fed == 0 else 0
        data = compressed_range(self._reader, self._member, self._fed, stop, ahead=ahead)
        inflater.feed(data)
        self._fed = stop
        return True

    def _step(self, dst: memoryview, *, block: bool = False) -> int:
        """One inflate call into ``dst`` (given the next compressed part first when the
        input ran out); the bytes written, summed.

        Raises
        ------
        FormatError
            Corrupt deflate data, or a stream that needs more bytes than the member has.
        """
        inflater = self._inflater
        if inflater is None:
            raise RuntimeError("the pass has no inflater (stopped)")
        more = inflater.avail_in > 0 or self._feed(inflater)
        ret, n = inflater.inflate(dst, block=block)  # (zlib may finish from bits it holds)
        if n:
            self._sum(dst[:n])
        if ret == _Z_STREAM_END:
            self._ended = True
        elif ret == _Z_BUF_ERROR and n == 0:
            if inflater.avail_in:
                raise FormatError(f"{self._source}: corrupt deflate data (no progress)")
            if not more:
                raise FormatError(
                    f"{self._source}: the deflate stream is cut short after "
                    f"{inflater.total_out} bytes of output: it does not end within the "
                    f"member's {self._member.compressed_size} compressed bytes"
                )
        elif ret not in (_Z_OK, _Z_BUF_ERROR):
            raise FormatError(f"{self._source}: corrupt deflate data: {inflater.message}")
        return n

    def _fill(self, dst: memoryview) -> None:
        """Inflate exactly ``len(dst)`` output bytes into ``dst`` (checksums, checkpoints)."""
        filled = 0
        while filled < dst.nbytes:
            at = self._pos_now()
            if self._ended:
                raise FormatError(
                    f"{self._source}: deflate stream ended after {at} bytes, expected "
                    f"{self._member.uncompressed_size}"
                )
            # calls of at most _CALL bytes: the checksums read what was just written
            room = min(dst.nbytes - filled, _CALL)
            block = at >= self._next_checkpoint
            if not block:
                room = min(room, self._next_checkpoint - at)
            filled += self._step(dst[filled : filled + room], block=block)
            if block and self._inflater is not None:
                bit = self._inflater.boundary()
                if bit is not None:
                    window = self._tail + bytes(dst[max(0, filled - WINDOW_SIZE) : filled])
                    out_at = self._pos_now()
                    self._checkpoints.append(Checkpoint(bit, out_at, window[-WINDOW_SIZE:]))
                    self._next_checkpoint = out_at + INDEX_SPACING
        self._tail = (self._tail + bytes(dst[-WINDOW_SIZE:]))[-WINDOW_SIZE:]

    def _sum(self, chunk: memoryview) -> None:
        if self._member.crc32 is not None:
            self._crc = deflate.crc32(chunk, self._crc)
        if self._member.adler32 is not None:
            self._adler = zlib.adler32(chunk, self._adler)

    def _finish(self) -> None:
        """Inflate to the stream's end (output past the last read discarded), check the
        size and checksums, install the index."""
        member = self._member
        size = member.uncompressed_size
        scratch = memoryview(bytearray(max(1, min(zblock.STEP, size - self._pos_now() + 1))))
        while not self._ended:
            self._step(scratch)
            if self._pos_now() > size:
                raise FormatError(
                    f"{self._source}: inflates to more than the {size} bytes "
                    f"{member.sized_by} says (corrupt or mismatched deflate data)"
                )
        check_full_pass(self._source, member, self._pos_now(), self._crc, self._adler)
        index = DeflateIndex(member.compressed_size, size, tuple(self._checkpoints))
        self._slot.set(index)
        cache_index(self._reader, member, self._slot.cache_dir, index)
        with self._cond:
            if self._state == _RUNNING:
                self._state = _FINISHED
            self._close()
            self._read_kept(0)


_Z_OK: Final = 0
_Z_STREAM_END: Final = 1
_Z_BUF_ERROR: Final = -5
#: Most output of one inflate call (its checksums then read it from the cache).
_CALL: Final = 256 * 2**10


def _new_buffer(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A new, writable buffer (not zero-filled: every byte is written)."""
    return np.empty(nbytes, np.uint8)
