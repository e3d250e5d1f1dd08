"""Hyperslabs of chunked, filtered storage (HDF5 chunked datasets) read through a reader.

:func:`read_chunked` finds the chunks a selection touches and reads their stored bytes with
as few range requests as the file allows: chunks whose bytes are neighbours share a range, and
every range of a batch goes in one read (:meth:`~npystore.fetch.RangeReader.readinto_many`,
or :meth:`~npystore.fetch.RangeReader.start_readinto` when there are several batches) into
uninitialised buffers: no zero-fill, and no copy for local files. It then undoes each
chunk's filters (:func:`npystore.formats.h5filters.decode_chunk`) and copies the selected part
of each chunk into one preallocated output array; a batch's chunks are split into one
contiguous group per CPU, the calling thread decoding the first (inflating releases the GIL).

Batches are fetched while earlier ones decode, each decoded as soon as its bytes are in
(:class:`_Pace` says how a read is cut and how much of it is held at once):

- locally, batches of 16 MiB, the next one read while one decodes;
- remotely, where every request waits ~30 ms for its first byte and one connection carries
  ~40-100 MiB/s, the read is cut into ranges of 1 to 4 MiB (at least 16 of them when it is
  large enough), each its own batch and request, all in flight at once up to 17 ranges' worth
  of bytes (started together, they go out together on the event loop): the download fills
  many connections, and decoding starts when the first range is in.

Chunks never written read as the fill value.

Shuffle and Fletcher-32 are undone with numcodecs' compiled kernels (:class:`_Numcodecs`,
measured 1.5-5x faster than numpy's per chunk, with no threads of their own) once a read
decodes at least :data:`FAST_FILTERS_MIN` bytes through them, or numcodecs is imported
already; smaller reads use :mod:`npystore.formats.h5filters`' own (importing numcodecs
costs more than it saves there), as does an install without numcodecs.

Memory stays bounded: chunks are planned in groups of at most ``_PLAN_CHUNKS`` and at most
:attr:`_Pace.held_bytes` stored bytes (fetched or in flight, not yet decoded) are held at once.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from npystore.errors import FormatError, missing_dependency
from npystore.fetch import RangeReader
from npystore.formats.h5filters import (
    FLETCHER32,
    SHUFFLE,
    FilterKernels,
    decode_chunk,
    unsupported_filters,
)
from npystore.read.layout import ArrayLayout, ChunkedExtent, Hyperslab

__all__ = ["FAST_FILTERS_MIN", "read_chunked"]

#: Chunks planned (sorted by offset, merged into ranges) together.
_PLAN_CHUNKS: Final = 65536
#: Stored bytes fetched by one local batch (a single larger range goes alone); merged ranges
#: are cut to fit it, so that decoding one batch overlaps reading the next.
_BATCH_BYTES: Final = 16 * 2**20
#: Remote ranges a large read is cut into at least (each one batch), all in flight at once.
_REMOTE_RANGES: Final = 16
#: Smallest and largest remote range (a smaller read is fewer ranges; a larger one, more).
_REMOTE_RANGE_MIN: Final = 1 * 2**20
_REMOTE_RANGE_MAX: Final = 4 * 2**20
#: Chunks per decoding thread below which a batch is decoded in the calling thread.
_POOL_MIN_CHUNKS: Final = 4
#: Decoded bytes of shuffled or Fletcher-32 chunks from which one read imports numcodecs
#: for its kernels (the import costs some 30 ms; they save 0.5-8 ms per MiB).
FAST_FILTERS_MIN: Final = 16 * 2**20

#: A chunk to decode: its stored bytes, filter mask and per-axis hit positions.
_Task = tuple[memoryview, int, tuple[int, ...]]
#: A range to read: ``[start, stop)`` and the chunks (plan positions) it holds.
_Range = tuple[int, int, list[int]]

_pool_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}
_pools_pid: int | None = None


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _pool(name: str) -> ThreadPoolExecutor:
    """A process-wide pool (``"decode"``), recreated after a fork."""
    global _pools_pid  # noqa: PLW0603
    with _pool_lock:
        if _pools_pid != os.getpid():
            _pools.clear()
            _pools_pid = os.getpid()
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(
                max_workers=min(16, _cpus()), thread_name_prefix=f"npystore-{name}"
            )
        return pool


@dataclass(frozen=True, slots=True)
class _AxisHits:
    """The chunks one axis of a selection touches, and what each contributes.

    ``chunk[j]`` is a chunk index along the axis; the selection's elements
    ``out_lo[j]:out_hi[j]`` fall in it, starting at ``local[j]`` within the chunk, every
    ``step`` elements.
    """

    chunk: np.ndarray[Any, np.dtype[np.int64]]
    out_lo: np.ndarray[Any, np.dtype[np.int64]]
    out_hi: np.ndarray[Any, np.dtype[np.int64]]
    local: np.ndarray[Any, np.dtype[np.int64]]
    step: int


@dataclass(frozen=True, slots=True)
class _Pace:
    """How one planned group of chunks is fetched.

    Merged ranges span at most ``span`` bytes and batches hold at most ``batch`` bytes (one
    larger range goes alone); at most ``held_batches`` batches and ``held_bytes`` bytes are
    fetched or in flight and not yet decoded (the one decoding included; one batch always
    goes, whatever its size).
    """

    span: int
    batch: int
    held_batches: int
    held_bytes: float

    @classmethod
    def of(cls, reader: RangeReader, nbytes: int) -> _Pace:
        """The pace of reading ``nbytes`` stored bytes through ``reader``."""
        if reader.local:  # one batch read while the one before it decodes
            return cls(_BATCH_BYTES, _BATCH_BYTES, 2, float("inf"))
        # many concurrent ranges of a few MiB: each waits one round trip, and a cloud
        # store's connection carries ~40-100 MiB/s, so one large range would be slow
        span = min(_REMOTE_RANGE_MAX, max(_REMOTE_RANGE_MIN, -(-nbytes // _REMOTE_RANGES)))
        return cls(span, span, _REMOTE_RANGES + 1, (_REMOTE_RANGES + 1) * span)


def _axis_hits(start: int, count: int, step: int, cs: int) -> _AxisHits:
    if step >= cs:  # every selected element is in a chunk of its own
        k = np.arange(count, dtype=np.int64)
        idx = start + k * step
        return _AxisHits(idx // cs, k, k + 1, idx % cs, step)
    first = start // cs
    last = (start + (count - 1) * step) // cs
    c = np.arange(first, last + 1, dtype=np.int64)
    # first selected k at or after the chunk's start, and the first k past its end
    lo = np.clip(-((start - c * cs) // step), 0, count)
    hi = np.clip(-((start - (c + 1) * cs) // step), 0, count)
    keep = lo < hi
    c, lo, hi = c[keep], lo[keep], hi[keep]
    return _AxisHits(c, lo, hi, start + lo * step - c * cs, step)


def _check_storage(layout: ArrayLayout, storage: ChunkedExtent, source: str) -> None:
    cs = storage.chunk_shape
    if len(cs) != layout.ndim or any(c <= 0 for c in cs):
        raise FormatError(
            f"{source}: chunk shape {cs} does not fit an array of shape {layout.shape}"
        )
    grid = tuple(-(-n // c) for n, c in zip(layout.shape, cs, strict=True))
    for name in ("offsets", "sizes", "filter_masks"):
        got = getattr(storage, name).shape
        if tuple(got) != grid:
            raise FormatError(
                f"{source}: chunk {name} of shape {tuple(got)}, expected the grid {grid} "
                f"of shape {layout.shape} in chunks of {cs}"
            )
    if storage.fill and len(storage.fill) != layout.dtype.itemsize:
        raise FormatError(
            f"{source}: fill value of {len(storage.fill)} bytes, expected one "
            f"{layout.dtype} element ({layout.dtype.itemsize} bytes)"
        )


def read_chunked(
    reader: RangeReader,
    layout: ArrayLayout,
    storage: ChunkedExtent,
    selection: Hyperslab,
    *,
    parallel: bool = False,
) -> np.ndarray[Any, Any]:
    """Read one hyperslab of a chunked layout into a new, writable array.

    Parameters
    ----------
    reader : RangeReader
        Reader of the object holding the chunks.
    layout : ArrayLayout
        The array: stored dtype, shape, memory order.
    storage : ChunkedExtent
        Its chunk grid (``layout.storage``).
    selection : Hyperslab
        Per dimension ``(start, count, step)``, bounds-checked, ``step >= 1``.
    parallel : bool
        Split large local reads across threads (eager reads; dask tasks leave it off).

    Returns
    -------
    numpy.ndarray
        Shape ``count`` per dimension, the layout's dtype and memory order.

    Raises
    ------
    FormatError
        The grid does not fit the shape, a chunk lies outside the object, or a chunk does
        not decode (see :func:`~npystore.formats.h5filters.decode_chunk`).
    UnsupportedError
        A chunk was written with a filter npystore does not decode.
    """
    source = reader.url
    if len(selection) != layout.ndim:
        raise ValueError(f"selection has {len(selection)} dims, layout {layout.ndim}")
    _check_storage(layout, storage, source)
    dtype = layout.dtype
    shape = tuple(count for _, count, _ in selection)
    buf = np.empty(math.prod(shape) * dtype.itemsize, dtype=np.uint8)
    out: np.ndarray[Any, Any] = np.ndarray(shape, dtype=dtype, buffer=buf, order=layout.order)
    if out.size == 0:
        return out
    hits = [
        _axis_hits(start, count, step, cs)
        for (start, count, step), cs in zip(selection, storage.chunk_shape, strict=True)
    ]
    if _read_whole_chunk(reader, layout, storage, selection, hits, buf, parallel):
        return out
    reading = _Reading(reader, layout, storage, hits, out, source, parallel)
    total = math.prod(len(h.chunk) for h in hits)
    for lo in range(0, total, _PLAN_CHUNKS):
        reading.plan_and_read(np.arange(lo, min(total, lo + _PLAN_CHUNKS), dtype=np.int64))
    return out


def _read_whole_chunk(
    reader: RangeReader,
    layout: ArrayLayout,
    storage: ChunkedExtent,
    selection: Hyperslab,
    hits: list[_AxisHits],
    buf: np.ndarray[Any, np.dtype[np.uint8]],
    parallel: bool,
) -> bool:
    """Read straight into the output when it is exactly one whole, unfiltered chunk."""
    if any(len(h.chunk) != 1 for h in hits):
        return False
    if any(
        count != cs or (count > 1 and step != 1) or h.local[0] != 0
        for (_, count, step), cs, h in zip(selection, storage.chunk_shape, hits, strict=True)
    ):
        return False
    index = tuple(int(h.chunk[0]) for h in hits)
    offset = int(storage.offsets[index])
    mask = int(storage.filter_masks[index])
    filtered = any(not (mask >> i) & 1 for i in range(len(storage.filters)))
    if offset < 0 or filtered or int(storage.sizes[index]) != buf.nbytes:
        return False
    if offset + buf.nbytes > reader.size:
        raise FormatError(
            f"{reader.url}: chunk {index} at bytes [{offset}, {offset + buf.nbytes}) lies "
            f"outside the object of {reader.size} bytes"
        )
    reader.readinto_many([(offset, memoryview(buf.data))], parallel=parallel)
    return True


class _Reading:
    """The state of one :func:`read_chunked` call."""

    def __init__(
        self,
        reader: RangeReader,
        layout: ArrayLayout,
        storage: ChunkedExtent,
        hits: list[_AxisHits],
        out: np.ndarray[Any, Any],
        source: str,
        parallel: bool,
    ) -> None:
        self.reader = reader
        self.layout = layout
        self.storage = storage
        self.hits = hits
        self.out = out
        self.source = source
        self.parallel = parallel
        self.chunk_nbytes = math.prod(storage.chunk_shape) * layout.dtype.itemsize
        #: the filters npystore does not undo itself (decoded by libhdf5, :mod:`h5decode`)
        self.foreign = unsupported_filters(storage.filters)
        chunks = math.prod(len(h.chunk) for h in hits)
        self.kernels = _kernels(storage, chunks * self.chunk_nbytes)
        dtype = layout.dtype
        self.fill: np.ndarray[Any, Any] = (
            np.frombuffer(storage.fill, dtype=dtype).reshape(())
            if storage.fill
            else np.zeros((), dtype=dtype)
        )

    def _slices(self, pos: Sequence[int]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """Output and chunk-local slices of the chunk at per-axis hit positions ``pos``."""
        out_sl = []
        local_sl = []
        for h, j in zip(self.hits, pos, strict=True):
            lo, hi, start = int(h.out_lo[j]), int(h.out_hi[j]), int(h.local[j])
            out_sl.append(slice(lo, hi))
            local_sl.append(slice(start, start + (hi - lo - 1) * h.step + 1, h.step))
        return tuple(out_sl), tuple(local_sl)

    def _grid_index(self, pos: Sequence[int]) -> tuple[int, ...]:
        """The chunk's index in the grid, from its per-axis hit positions."""
        return tuple(int(h.chunk[j]) for h, j in zip(self.hits, pos, strict=True))

    def plan_and_read(self, flat: np.ndarray[Any, np.dtype[np.int64]]) -> None:
        """Fill the output for the chunks at flat hit positions ``flat`` (selection order)."""
        lens = tuple(len(h.chunk) for h in self.hits)
        pos = np.unravel_index(flat, lens) if lens else ()
        grid_index = tuple(h.chunk[p] for h, p in zip(self.hits, pos, strict=True))
        offsets = self.storage.offsets[grid_index].astype(np.int64).reshape(-1)
        sizes = self.storage.sizes[grid_index].astype(np.int64).reshape(-1)
        masks = self.storage.filter_masks[grid_index].astype(np.int64).reshape(-1)
        rows: list[tuple[int, ...]] = (
            [tuple(r) for r in np.stack(pos, axis=1).tolist()] if lens else [()]
        )
        for i in np.flatnonzero(offsets < 0).tolist():
            out_sl, _ = self._slices(rows[i])
            self.out[out_sl] = self.fill
        written = np.flatnonzero(offsets >= 0)
        if written.size == 0:
            return
        bad = written[
            (sizes[written] <= 0) | (offsets[written] + sizes[written] > self.reader.size)
        ]
        if bad.size:
            i = int(bad[0])
            raise FormatError(
                f"{self.source}: chunk {self._grid_index(rows[i])} at bytes [{offsets[i]}, "
                f"{offsets[i] + sizes[i]}) is empty or lies outside the object of "
                f"{self.reader.size} bytes"
            )
        order = written[np.argsort(offsets[written], kind="stable")]
        pace = _Pace.of(self.reader, int(sizes[written].sum()))
        batches = list(_batches(_merge(order, offsets, sizes, self.reader, pace.span), pace.batch))
        fetched = self._fetched(batches, pace)
        try:
            for batch, datas in fetched:
                tasks: list[_Task] = []
                for (start, _, members), data in zip(batch, datas, strict=True):
                    view = memoryview(data.data)
                    for i in members:
                        a = int(offsets[i]) - start
                        tasks.append((view[a : a + int(sizes[i])], int(masks[i]), rows[i]))
                self._decode_all(tasks)
        finally:
            fetched.close()

    def _buffers(
        self, batch: list[_Range]
    ) -> tuple[list[np.ndarray[Any, np.dtype[np.uint8]]], list[tuple[int, memoryview]]]:
        """Uninitialised buffers for a batch's ranges, and the requests that fill them."""
        datas = [np.empty(stop - start, dtype=np.uint8) for start, stop, _ in batch]
        return datas, [(r[0], memoryview(d.data)) for r, d in zip(batch, datas, strict=True)]

    def _fetched(
        self, batches: list[list[_Range]], pace: _Pace
    ) -> Generator[tuple[list[_Range], list[np.ndarray[Any, np.dtype[np.uint8]]]], None, None]:
        """Each batch with its bytes, in the order they arrive; later batches are fetched
        while earlier ones decode (between two ``next`` calls), as many at once as ``pace``
        holds (:meth:`~npystore.fetch.RangeReader.start_readinto`: remotely the ranges of
        all the batches started together go out together)."""
        if len(batches) == 1:
            datas, requests = self._buffers(batches[0])
            self.reader.readinto_many(requests, parallel=self.parallel)
            yield batches[0], datas
            return
        sizes = [sum(stop - start for start, stop, _ in batch) for batch in batches]
        running: dict[Future[None], tuple[int, list[np.ndarray[Any, np.dtype[np.uint8]]]]] = {}
        nxt = 0  # the next batch to start
        held = 0  # bytes of the batches started and not yet decoded
        try:
            while nxt < len(batches) or running:
                while nxt < len(batches) and len(running) < pace.held_batches:
                    if running and held + sizes[nxt] > pace.held_bytes:
                        break
                    datas, requests = self._buffers(batches[nxt])
                    future = self.reader.start_readinto(requests, parallel=self.parallel)
                    running[future] = (nxt, datas)
                    held += sizes[nxt]
                    nxt += 1
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                future = min(done, key=lambda f: running[f][0])  # the earliest batch that is in
                k, datas = running.pop(future)
                future.result()
                yield batches[k], datas
                held -= sizes[k]
        finally:
            for future in running:
                future.cancel()
            wait(running)  # no read may outlive the call (its buffers, its errors)

    def _decode_all(self, tasks: list[_Task]) -> None:
        """Decode and place every chunk: in contiguous groups, one per CPU, the calling
        thread taking the first (inflating releases the GIL)."""
        n = min(_cpus(), len(tasks) // _POOL_MIN_CHUNKS)
        if n <= 1 or not any(self._active(t[1]) for t in tasks):
            self._decode_many(tasks)
            return
        size = -(-len(tasks) // n)
        groups = [tasks[i : i + size] for i in range(0, len(tasks), size)]
        pool = _pool("decode")
        futures: list[Future[None]] = [pool.submit(self._decode_many, g) for g in groups[1:]]
        try:
            self._decode_many(groups[0])
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            wait(futures)  # no decode may outlive the call (it writes into the output)
        for future in futures:
            future.result()

    def _decode_many(self, tasks: list[_Task]) -> None:
        for t in tasks:
            self._decode_one(*t)

    def _decode_foreign(self, data: memoryview, mask: int, where: str) -> np.ndarray[Any, Any]:
        """A chunk whose pipeline holds a filter npystore does not undo: libhdf5 decodes it."""
        try:
            from npystore.read.h5decode import decode_with_libhdf5  # noqa: PLC0415 - needs h5py
        except ImportError as exc:
            raise missing_dependency(
                "h5py", "mat", f"{where}: decoding HDF5 filters {self.foreign}", exc
            ) from exc
        fortran = self.layout.order == "F"
        shape = self.storage.chunk_shape
        decoded = decode_with_libhdf5(
            data,
            self.storage.filters,
            mask,
            dtype=self.layout.dtype,
            chunk_shape=tuple(reversed(shape)) if fortran else shape,
            source=where,
        )
        return decoded.T if fortran else decoded

    def _active(self, mask: int) -> bool:
        return any(not (mask >> i) & 1 for i in range(len(self.storage.filters)))

    def _decode_one(self, data: memoryview, mask: int, pos: tuple[int, ...]) -> None:
        nbytes = self.chunk_nbytes
        where = f"{self.source}: chunk {self._grid_index(pos)}"
        decoded: bytes | memoryview
        chunk: np.ndarray[Any, Any]
        if self._active(mask) and self.foreign:
            chunk = self._decode_foreign(data, mask, where)
            out_sl, local_sl = self._slices(pos)
            self.out[out_sl] = chunk[local_sl]
            return
        if self._active(mask):
            decoded = decode_chunk(
                data,
                self.storage.filters,
                mask,
                itemsize=self.layout.dtype.itemsize,
                nbytes=nbytes,
                source=where,
                kernels=self.kernels,
            )
        elif data.nbytes != nbytes:
            raise FormatError(
                f"{where}: an unfiltered chunk of {data.nbytes} bytes, expected {nbytes}"
            )
        else:
            decoded = data
        chunk = np.ndarray(
            self.storage.chunk_shape,
            dtype=self.layout.dtype,
            buffer=decoded,
            order=self.layout.order,
        )
        out_sl, local_sl = self._slices(pos)
        self.out[out_sl] = chunk[local_sl]


class _Numcodecs:
    """numcodecs' compiled Fletcher-32 and unshuffle, as
    :class:`~npystore.formats.h5filters.FilterKernels` (the same results as numpy's)."""

    def __init__(self, fletcher32: Any, shuffle: Any) -> None:
        self._fletcher32 = fletcher32()
        self._shuffle = shuffle

    def fletcher32_body(self, data: bytes | bytearray | memoryview) -> memoryview | None:
        try:  # HDF5's algorithm (H5_checksum_fletcher32), checksum little-endian at the end
            return memoryview(self._fletcher32.decode(data))
        except RuntimeError:  # a mismatch: the caller's check says which (or the old form)
            return None

    def unshuffle(self, data: bytes | bytearray | memoryview, element_size: int) -> memoryview:
        raw = np.frombuffer(data, np.uint8)
        whole = raw.size // element_size * element_size
        out = np.empty(raw.size, np.uint8)
        self._shuffle(element_size).decode(raw[:whole], out=out[:whole])
        out[whole:] = raw[whole:]  # trailing bytes of no whole element: as they are
        return memoryview(out.data)


def _kernels(storage: ChunkedExtent, decoded: int) -> FilterKernels | None:
    """numcodecs' kernels for a read decoding ``decoded`` bytes of ``storage``'s chunks, or
    None: no shuffle or Fletcher-32 in its pipeline, a read too small to repay importing
    numcodecs (unless it is imported already), or numcodecs not installed."""
    if not any(int(f.id) in (SHUFFLE, FLETCHER32) for f in storage.filters):
        return None
    if decoded < FAST_FILTERS_MIN and "numcodecs" not in sys.modules:
        return None
    try:
        from numcodecs import Fletcher32, Shuffle  # noqa: PLC0415 - costly import
    except ImportError:
        return None
    return _Numcodecs(Fletcher32, Shuffle)


def _merge(
    order: np.ndarray[Any, np.dtype[np.int64]],
    offsets: np.ndarray[Any, np.dtype[np.int64]],
    sizes: np.ndarray[Any, np.dtype[np.int64]],
    reader: RangeReader,
    span: int,
) -> Iterator[_Range]:
    """Ranges covering the chunks ``order`` (sorted by offset): neighbours separated by at
    most ``reader.max_gap`` bytes share a range while it spans at most ``span`` bytes (and
    ``reader.max_span``)."""
    max_gap = reader.max_gap
    max_span = min(reader.max_span, span)
    start = stop = -1
    members: list[int] = []
    for i in order.tolist():
        a = int(offsets[i])
        b = a + int(sizes[i])
        if members and a - stop <= max_gap and max(stop, b) - start <= max_span:
            stop = max(stop, b)
            members.append(i)
            continue
        if members:
            yield start, stop, members
        start, stop, members = a, b, [i]
    if members:
        yield start, stop, members


def _batches(ranges: Iterator[_Range], limit: int) -> Iterator[list[_Range]]:
    """Groups of ranges, each of at most about ``limit`` bytes (one larger range goes
    alone)."""
    batch: list[_Range] = []
    total = 0
    for r in ranges:
        size = r[1] - r[0]
        if batch and total + size > limit:
            yield batch
            batch, total = [], 0
        batch.append(r)
        total += size
    if batch:
        yield batch
