"""Compressed bytes of deflated members, fetched once per process.

Reading a deflated member touches its compressed bytes several times: a dask compute of
``k`` chunks inflates small members from their start once per chunk, a larger member is
read once to build its checkpoint index and again, range by range, for the chunks, and
the ranges of neighbouring chunks overlap (each starts at the checkpoint before its first
byte). Over a network each of those passes would move the compressed bytes again
(measured before this module: 7.7x the compressed size for a 5.6 MB member in 12 chunks,
2.5x for a 40 MB member, 1.5x for 16 chunks read through a persisted index).

So the compressed bytes of a member of at most :data:`MEMO_MEMBER` bytes are kept in this
process, in grains of :data:`GRAIN` bytes: :func:`compressed_range` serves a range from
the grains already kept, and fetches the missing ones (runs of them, in requests of at most
:data:`PART` bytes, all in flight together, each with its own future: a read waits only for
the parts of its range, so a pass that inflates from the start begins as soon as the
first part arrived); a grain another read is fetching is waited for, not fetched twice.
Slicing the middle of a member fetches only the grains of its range; :func:`prefetch`
starts fetching a range in the background.

**Read-ahead for scans.** A dask compute of a member runs as many chunk tasks at a time as
the scheduler has threads (two on a two-core machine), and each task's range is one round
trip: on a store with 30 ms to first byte the compute would be a chain of round trips, in
whatever order the scheduler picks. A range read that continues an earlier one on one side
(a grain next to it was kept or asked for by another read) marks the member as being
scanned; from then on each such read (``read_ahead``) keeps a window of
:data:`AHEAD_RANGES` times its length (at least :data:`AHEAD_MIN` bytes) fetched or in
flight on both sides of the run of grains around it, in the background, so the next chunk
tasks find their bytes here whichever way the scheduler goes. A read of one range alone
never reads ahead; a scan that stops leaves at most the two windows fetched and unused.

Members are kept per object identity (:attr:`~npystore.fetch.RangeReader.token`) and
member (offset, compressed size, CRC-32): a changed object is a different key, since a local
file's identity holds its device, inode, size, ``mtime_ns`` and ``ctime_ns``, a remote
object's its ETag or version, and an identity without a strong version marker (an http
server without ETags) a token of its open, so that every new open of such an object reads
its bytes anew (see :mod:`npystore.fetch.identity`). The registry is least recently used,
bounded by :data:`MEMO_BUDGET` bytes; nothing here is pickled (a dask worker keeps its
own). A failed fetch marks its grains missing again: the read that needs them fetches them
again and raises the error itself (a failed read-ahead costs nothing else).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Future, wait
from typing import Any, Final

import numpy as np

from npystore.fetch import RangeReader
from npystore.read.layout import DeflatedMember
from npystore.read.slot import IndexSlot

__all__ = [
    "AHEAD_MIN",
    "AHEAD_RANGES",
    "GRAIN",
    "KEEP_BUDGET",
    "MEMO_BUDGET",
    "MEMO_MEMBER",
    "PART",
    "compressed_range",
    "forget",
    "held",
    "kept_bytes",
    "prefetch",
    "release",
    "reserve",
]

#: Members with at most this many compressed bytes have their compressed bytes kept.
MEMO_MEMBER: Final = 64 * 2**20
#: Most compressed bytes kept in one process (least recently used members dropped first).
MEMO_BUDGET: Final = 256 * 2**20
#: Unit of what is kept: a range is rounded out to grains (at most this much more moved at
#: each end of a slice).
GRAIN: Final = 64 * 2**10
#: Largest request when fetching grains (a long run goes out as several, concurrently).
PART: Final = 1 * 2**20
#: Read-ahead of a scan: this many times the range's length ...
AHEAD_RANGES: Final = 4
#: ... and at least this many bytes.
AHEAD_MIN: Final = 4 * 2**20

#: A grain's state: not fetched (absent), being fetched (its future), or kept (``_KEPT``).
_KEPT: Final = True


class _Kept:
    """The compressed bytes of one member, grain by grain."""

    def __init__(self, size: int) -> None:
        # np.zeros: the pages are only touched when written (a member rarely fills at once)
        self.buf: np.ndarray[Any, np.dtype[np.uint8]] = np.zeros(size, np.uint8)
        self.size = size
        self.grains: dict[int, Future[None] | bool] = {}
        # reentrant: a fetch that is done at once (a local read) settles from within fetch()
        self.lock = threading.RLock()
        #: Set when a read continued another one: chunk tasks are scanning the member.
        self.scanning = False

    def run(self, lo: int, hi: int) -> tuple[int, int]:
        """The grains kept or being fetched around ``[lo, hi)`` (all touched), as far as
        they go on without a gap."""
        while lo > 0 and self.touched(lo - 1):
            lo -= 1
        while self.touched(hi):
            hi += 1
        return lo, hi

    def touched(self, g: int) -> bool:
        """Whether grain ``g`` is kept or being fetched."""
        return g in self.grains

    def fetch(self, reader: RangeReader, offset: int, lo: int, hi: int) -> list[Future[None]]:
        """Start fetching the missing grains of ``[lo, hi)`` (grain numbers); return the
        futures the grains of that span wait on (new and already in flight). Call with
        :attr:`lock` held."""
        waits: dict[int, Future[None]] = {}
        run: list[int] = []
        runs: list[list[int]] = []
        for g in range(lo, hi):
            state = self.grains.get(g)
            if isinstance(state, Future) and state.done() and state.exception() is not None:
                state = None  # a failed fetch (its callback may not have run yet): again
            if state is None:
                run.append(g)
                continue
            if run:
                runs.append(run)
                run = []
            if isinstance(state, Future):
                waits[id(state)] = state
        if run:
            runs.append(run)
        if runs:
            view = memoryview(self.buf.data).cast("B")
            per = max(1, PART // GRAIN)
            for r in runs:
                # one read per part, each with its own future: a reader waits only for the
                # parts of its range while the rest are still arriving
                for first in range(r[0], r[-1] + 1, per):
                    grains = list(range(first, min(r[-1] + 1, first + per)))
                    a, b = grains[0] * GRAIN, min(self.size, (grains[-1] + 1) * GRAIN)
                    future = reader.start_readinto([(offset + a, view[a:b])])
                    for g in grains:
                        self.grains[g] = future
                    future.add_done_callback(functools.partial(self._settle, grains=grains))
                    waits[id(future)] = future
        return list(waits.values())

    def _settle(self, future: Future[None], *, grains: list[int]) -> None:
        with self.lock:
            failed = future.cancelled() or future.exception() is not None
            for g in grains:
                if self.grains.get(g) is future:
                    if failed:
                        del self.grains[g]  # fetched again by the read that needs it
                    else:
                        self.grains[g] = _KEPT


_registry: OrderedDict[tuple[Any, ...], _Kept] = OrderedDict()
_registry_lock = threading.Lock()


def _kept(reader: RangeReader, member: DeflatedMember) -> _Kept:
    key = (reader.token, member.offset, member.compressed_size, member.crc32)
    with _registry_lock:
        found = _registry.get(key)
        if found is not None:
            _registry.move_to_end(key)
            return found
        made = _Kept(member.compressed_size)
        _registry[key] = made
        total = sum(k.buf.nbytes for k in _registry.values())
        while total > MEMO_BUDGET and len(_registry) > 1:
            _, dropped = _registry.popitem(last=False)
            total -= dropped.buf.nbytes
        return made


def compressed_range(
    reader: RangeReader,
    member: DeflatedMember,
    start: int,
    stop: int,
    *,
    ahead: int = 0,
    read_ahead: bool = False,
) -> bytes | memoryview:
    """Compressed bytes ``[start, stop)`` of ``member`` (offsets within its data).

    Parameters
    ----------
    reader : RangeReader
        Reader of the object holding the member.
    member : DeflatedMember
        The member.
    start, stop : int
        The range, ``0 <= start <= stop <= member.compressed_size``.
    ahead : int
        Start fetching this many bytes past ``stop`` too (a sequential pass prefetches what
        it reads next); only ``[start, stop)`` is waited for.
    read_ahead : bool
        Random access by chunk tasks: when the range continues an earlier read on one side,
        fetch the next window in that direction in the background (see the module doc).

    Returns
    -------
    bytes or memoryview
        The bytes; a read-only view of the kept bytes when the member is kept.

    Raises
    ------
    FetchError
        The range could not be read (also when a read-ahead of another read failed on it).
    """
    csize = member.compressed_size
    if not 0 <= start <= stop <= csize:
        raise ValueError(f"range [{start}, {stop}) outside {csize} compressed bytes")
    if csize > MEMO_MEMBER:
        return reader.read(member.offset + start, member.offset + stop)
    if start == stop:
        return b""
    kept = _kept(reader, member)
    lo, hi = start // GRAIN, -(-min(csize, stop + ahead) // GRAIN)
    need = -(-stop // GRAIN)
    last = -(-csize // GRAIN)
    with kept.lock:
        below = kept.touched(lo) or (lo > 0 and kept.touched(lo - 1))
        above = kept.touched(hi - 1) or (hi < last and kept.touched(hi))
        kept.fetch(reader, member.offset, lo, hi)
        waits = kept.fetch(reader, member.offset, lo, need)  # (not ``ahead``'s grains)
        if read_ahead and below != above:  # continues a read on one side: a scan
            kept.scanning = True
        if read_ahead and kept.scanning:  # keep a window fetched on both sides of the run
            window = -(-max(AHEAD_MIN, AHEAD_RANGES * (stop - start)) // GRAIN)
            run_lo, run_hi = kept.run(lo, hi)
            kept.fetch(reader, member.offset, max(0, run_lo - window), run_lo)
            kept.fetch(reader, member.offset, run_hi, min(last, run_hi + window))
    wait(waits)
    with kept.lock:  # grains whose fetch failed (ours, or another read's read-ahead)
        again = kept.fetch(reader, member.offset, lo, need)
    for future in again:
        future.result()  # raises the fetch's error
    view = memoryview(kept.buf.data)[start:stop]
    return view.toreadonly()


def prefetch(reader: RangeReader, member: DeflatedMember, start: int, stop: int) -> None:
    """Start fetching compressed bytes ``[start, stop)`` of a member whose compressed bytes
    are kept (at most :data:`MEMO_MEMBER`; else nothing), in the background: a later
    :func:`compressed_range` waits only for what is still in flight. A failed fetch is
    tried again by the read that needs the bytes."""
    csize = member.compressed_size
    start, stop = max(0, start), min(csize, stop)
    if csize > MEMO_MEMBER or start >= stop:
        return
    kept = _kept(reader, member)
    with kept.lock:
        kept.fetch(reader, member.offset, start // GRAIN, -(-stop // GRAIN))


#: Most inflated bytes held for chunk reads in one process: the whole member for each first
#: pass (:class:`~npystore.read.firstpass.FirstPass`) that still holds bytes or may keep
#: more, reserved before it starts (:func:`reserve`).
KEEP_BUDGET: Final = 256 * 2**20

_held: OrderedDict[int, tuple[weakref.ref[IndexSlot], int]] = OrderedDict()
#: Members being inflated whole to be kept: ``id(slot)`` -> bytes reserved.
_reserved: dict[int, int] = {}


def reserve(slot: IndexSlot, nbytes: int) -> bool:
    """Reserve ``nbytes`` of :data:`KEEP_BUDGET` for ``slot``'s member, about to be inflated
    whole and kept; False when there is no room (the caller takes a bounded path).

    What counts against the budget: the members kept (the least recently kept are dropped
    to make room) and the reservations of members still being inflated (never dropped),
    so the budget holds whatever the number of threads. :func:`held` turns the reservation
    into a kept member, :func:`release` gives it back.
    """
    if nbytes > KEEP_BUDGET:
        return False
    with _registry_lock:
        live = [(k, ref, n) for k, (ref, n) in _held.items() if _holds(ref)]
        _held.clear()
        _held.update((k, (ref, n)) for k, ref, n in live)
        total = sum(n for _, _, n in live) + sum(_reserved.values())
        while _held and total + nbytes > KEEP_BUDGET:
            _, (ref, n) = _held.popitem(last=False)
            kept = ref()
            if kept is not None:
                kept.drop()
            total -= n
        if total + nbytes > KEEP_BUDGET:
            return False
        _reserved[id(slot)] = _reserved.get(id(slot), 0) + nbytes
    return True


def release(slot: IndexSlot) -> None:
    """Give back ``slot``'s reservation (its inflate failed or was not kept)."""
    with _registry_lock:
        _reserved.pop(id(slot), None)


def held(slot: IndexSlot, nbytes: int) -> None:
    """Count ``slot``'s kept inflated bytes against :data:`KEEP_BUDGET` (in place of its
    reservation)."""
    with _registry_lock:
        _reserved.pop(id(slot), None)
        _held[id(slot)] = (weakref.ref(slot), nbytes)


def kept_bytes() -> int:
    """Inflated bytes kept and reserved now (what :data:`KEEP_BUDGET` bounds)."""
    with _registry_lock:
        kept = sum(n for ref, n in _held.values() if _holds(ref))
        return kept + sum(_reserved.values())


def _holds(ref: weakref.ref[IndexSlot]) -> bool:
    slot = ref()
    return slot is not None and slot.holds()


def forget() -> None:
    """Drop every kept member, compressed and inflated (tests; memory pressure)."""
    with _registry_lock:
        _registry.clear()
        for ref, _ in _held.values():
            slot = ref()
            if slot is not None:
                slot.drop()
        _held.clear()
