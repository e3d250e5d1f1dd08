"""read_chunked over hand-built chunk grids: selection geometry, range merging, batches,
direct reads, fill values and malformed grids (HDF5 files are in test_hdf5.py)."""

from __future__ import annotations

import math
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npystore.errors import FormatError
from npystore.fetch import RangeReader, open_reader
from npystore.read import chunked
from npystore.read.access import read_selection
from npystore.read.layout import ArrayLayout, ChunkedExtent, Filter

RNG = np.random.default_rng(7)
DEFLATE = Filter(1, "deflate", (6,), True)


class CountingReader(RangeReader):
    def __init__(self, base: RangeReader) -> None:
        super().__init__(base.fs, base.path, base.identity)
        self.many: list[list[tuple[int, int]]] = []
        self.into: list[list[tuple[int, int]]] = []

    def read_many(self, ranges: Any) -> list[bytes]:
        self.many.append(list(ranges))
        return super().read_many(ranges)

    def readinto_many(self, requests: Any, *, parallel: bool = False) -> None:
        self.into.append([(s, s + v.nbytes) for s, v in requests])
        super().readinto_many(requests, parallel=parallel)

    def start_readinto(self, requests: Any, *, parallel: bool = False) -> Future[None]:
        self.into.append([(s, s + v.nbytes) for s, v in requests])
        return super().start_readinto(requests, parallel=parallel)


def build(
    path: Path,
    data: np.ndarray,
    chunk: tuple[int, ...],
    order: Literal["C", "F"],
    *,
    gap: int = 0,
    shuffle_order: bool = False,
    deflate_every: int = 0,
    unwritten: tuple[tuple[int, ...], ...] = (),
    fill: bytes = b"",
) -> ArrayLayout:
    """Write ``data`` chunked (edge chunks padded) into ``path``; return its layout."""
    grid = tuple(-(-n // c) for n, c in zip(data.shape, chunk, strict=True))
    offsets = np.full(grid, -1, np.int64)
    sizes = np.zeros(grid, np.int64)
    masks = np.zeros(grid, np.uint32)
    indexes = list(np.ndindex(*grid))
    if shuffle_order:
        indexes = [indexes[i] for i in RNG.permutation(len(indexes))]
    out = bytearray(b"HEADER--")
    for k, index in enumerate(indexes):
        if index in unwritten:
            continue
        padded = np.zeros(chunk, data.dtype)
        region = tuple(
            slice(i * c, min((i + 1) * c, n))
            for i, c, n in zip(index, chunk, data.shape, strict=True)
        )
        padded[tuple(slice(0, s.stop - s.start) for s in region)] = data[region]
        raw = padded.tobytes(order=order)
        if deflate_every and k % deflate_every == 0:
            raw = zlib.compress(raw)
        else:
            masks[index] = 1  # the (optional) deflate was skipped
        out += bytes(gap)
        offsets[index] = len(out)
        sizes[index] = len(raw)
        out += raw
    path.write_bytes(bytes(out) + b"TRAILER")
    filters = (DEFLATE,) if deflate_every else ()
    if not deflate_every:
        masks[:] = 0
    storage = ChunkedExtent(chunk, offsets, sizes, masks, filters, fill)
    return ArrayLayout(data.dtype, data.shape, order, storage)


def sel_index(selection: tuple[tuple[int, int, int], ...]) -> tuple[slice, ...]:
    return tuple(slice(s, s + c * k, k) for s, c, k in selection)


@st.composite
def hyperslabs(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for n in shape:
        start = draw(st.integers(0, n - 1))
        step = draw(st.integers(1, n))
        count = draw(st.integers(0, (n - 1 - start) // step + 1))
        out.append((start, count, step))
    return tuple(out)


@pytest.mark.parametrize("order", ["C", "F"])
def test_random_hyperslabs(tmp_path: Path, order: Literal["C", "F"]) -> None:
    data = RNG.integers(0, 60000, (13, 11, 6)).astype("<u2")
    layout = build(
        tmp_path / "c.bin",
        data,
        (4, 3, 4),
        order,
        gap=5,
        shuffle_order=True,
        deflate_every=3,
        unwritten=((1, 1, 0),),
        fill=np.array([7], "<u2").tobytes(),
    )
    want = data.copy()
    want[4:8, 3:6, 0:4] = 7
    reader = open_reader(str(tmp_path / "c.bin"))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(hyperslabs(data.shape))
    def check(selection: tuple[tuple[int, int, int], ...]) -> None:
        got = read_selection(reader, layout, selection)
        np.testing.assert_array_equal(got, want[sel_index(selection)])
        assert got.flags.f_contiguous if order == "F" else got.flags.c_contiguous

    check()


def test_back_to_back_chunks_are_one_range(tmp_path: Path) -> None:
    data = RNG.standard_normal((40, 30))
    layout = build(tmp_path / "c.bin", data, (10, 10), "C", deflate_every=1)
    reader = CountingReader(open_reader(str(tmp_path / "c.bin")))
    got = read_selection(reader, layout, ((0, 40, 1), (0, 30, 1)))
    np.testing.assert_array_equal(got, data)
    storage = layout.storage
    assert isinstance(storage, ChunkedExtent)
    first, last = int(storage.offsets.min()), int((storage.offsets + storage.sizes).max())
    assert reader.into == [[(first, last)]]


def test_gaps_and_spans_split_ranges_in_one_batch(tmp_path: Path) -> None:
    data = RNG.standard_normal((40, 30))
    layout = build(tmp_path / "c.bin", data, (10, 10), "C", gap=100)
    reader = CountingReader(open_reader(str(tmp_path / "c.bin")))
    reader.max_gap = 99
    np.testing.assert_array_equal(read_selection(reader, layout, ((0, 40, 1), (0, 30, 1))), data)
    assert len(reader.into) == 1
    assert len(reader.into[0]) == 12
    reader.into.clear()
    reader.max_gap = 100
    reader.max_span = 3 * 800 + 2 * 100  # three chunks and their gaps per range
    np.testing.assert_array_equal(read_selection(reader, layout, ((0, 40, 1), (0, 30, 1))), data)
    assert len(reader.into) == 1
    assert len(reader.into[0]) == 4


def test_only_the_chunks_a_selection_touches_are_read(tmp_path: Path) -> None:
    data = RNG.standard_normal((40, 30))
    layout = build(tmp_path / "c.bin", data, (10, 10), "C", gap=10_000)
    reader = CountingReader(open_reader(str(tmp_path / "c.bin")))
    reader.max_gap = 0
    got = read_selection(reader, layout, ((5, 3, 11), (2, 2, 25)))  # rows 5,16,27; cols 2,27
    np.testing.assert_array_equal(got, data[5:38:11, 2:52:25])
    assert sum(len(r) for r in reader.into) == 6
    assert all(b - a == 800 for r in reader.into for a, b in r)


def test_batches_bound_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = RNG.standard_normal((40, 30))
    layout = build(tmp_path / "c.bin", data, (10, 10), "F", deflate_every=2)
    monkeypatch.setattr(chunked, "_BATCH_BYTES", 1000)
    monkeypatch.setattr(chunked, "_PLAN_CHUNKS", 5)
    reader = CountingReader(open_reader(str(tmp_path / "c.bin")))
    reader.max_span = 1000
    got = read_selection(reader, layout, ((0, 40, 1), (0, 30, 1)))
    np.testing.assert_array_equal(got, data)
    assert len(reader.into) >= 4
    assert all(sum(b - a for a, b in r) <= 1600 for r in reader.into)


def test_output_that_is_one_whole_unfiltered_chunk_is_read_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned: list[int] = []
    plan = chunked._Reading.plan_and_read

    def counting_plan(self: Any, flat: Any) -> None:
        planned.append(len(flat))
        plan(self, flat)

    monkeypatch.setattr(chunked._Reading, "plan_and_read", counting_plan)
    data = RNG.standard_normal((40, 30))
    layout = build(tmp_path / "c.bin", data, (10, 30), "C")
    storage = layout.storage
    assert isinstance(storage, ChunkedExtent)
    reader = CountingReader(open_reader(str(tmp_path / "c.bin")))
    got = read_selection(reader, layout, ((10, 10, 1), (0, 30, 1)))
    np.testing.assert_array_equal(got, data[10:20])
    start = int(storage.offsets[1, 0])
    assert reader.into == [[(start, start + 2400)]]
    assert planned == []  # straight into the output, no staging buffer
    # an edge chunk is padded: it is not the selection, so it is staged and copied
    layout = build(tmp_path / "d.bin", data, (16, 30), "C")
    reader = CountingReader(open_reader(str(tmp_path / "d.bin")))
    got = read_selection(reader, layout, ((32, 8, 1), (0, 30, 1)))
    np.testing.assert_array_equal(got, data[32:])
    assert planned == [1]
    assert len(reader.into) == 1


def test_zero_dim_and_empty(tmp_path: Path) -> None:
    data = np.array(3.25)
    layout = build(tmp_path / "c.bin", data, (), "C", deflate_every=1)
    reader = open_reader(str(tmp_path / "c.bin"))
    assert read_selection(reader, layout, ()).item() == 3.25
    empty = read_selection(
        reader, build(tmp_path / "e.bin", np.zeros((4, 4)), (2, 2), "C"), ((0, 0, 1), (1, 2, 1))
    )
    assert empty.shape == (0, 2)


def test_many_filtered_chunks_decode_in_the_pool(tmp_path: Path) -> None:
    data = RNG.integers(0, 100, (200, 200)).astype("<i8")
    layout = build(tmp_path / "c.bin", data, (20, 20), "C", deflate_every=1, shuffle_order=True)
    reader = open_reader(str(tmp_path / "c.bin"))
    got = read_selection(reader, layout, ((3, 190, 1), (1, 66, 3)), parallel=True)
    np.testing.assert_array_equal(got, data[3:193, 1:199:3])


def replace_storage(layout: ArrayLayout, **changes: Any) -> ArrayLayout:
    s = layout.storage
    assert isinstance(s, ChunkedExtent)
    fields = {
        "chunk_shape": s.chunk_shape,
        "offsets": s.offsets,
        "sizes": s.sizes,
        "filter_masks": s.filter_masks,
        "filters": s.filters,
        "fill": s.fill,
    }
    fields.update(changes)
    return ArrayLayout(layout.dtype, layout.shape, layout.order, ChunkedExtent(**fields))


def test_malformed_grids_are_format_errors(tmp_path: Path) -> None:
    data = RNG.standard_normal((40, 30))
    path = tmp_path / "c.bin"
    layout = build(path, data, (10, 10), "C")
    reader = open_reader(str(path))
    whole = ((0, 40, 1), (0, 30, 1))
    s = layout.storage
    assert isinstance(s, ChunkedExtent)
    with pytest.raises(FormatError, match=r"c\.bin: chunk offsets of shape \(4, 2\)"):
        read_selection(reader, replace_storage(layout, offsets=s.offsets[:, :2]), whole)
    with pytest.raises(FormatError, match=r"chunk shape \(10,\) does not fit"):
        read_selection(reader, replace_storage(layout, chunk_shape=(10,)), whole)
    with pytest.raises(FormatError, match="fill value of 3 bytes"):
        read_selection(reader, replace_storage(layout, fill=b"abc"), whole)
    past = s.offsets.copy()
    past[2, 1] = reader.size - 10
    with pytest.raises(FormatError, match=r"chunk \(2, 1\) at bytes .* outside the object"):
        read_selection(reader, replace_storage(layout, offsets=past), whole)
    short = s.sizes.copy()
    short[1, 2] -= 8
    with pytest.raises(FormatError, match=r"chunk \(1, 2\): an unfiltered chunk of 792 bytes"):
        read_selection(reader, replace_storage(layout, sizes=short), whole)
    assert math.prod(s.grid) == 12


def test_queued_decoding_groups_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The calling thread decodes its group first; groups still queued in the pool when it
    is done must still run (cancelling them on success would leave chunks unwritten)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    data = RNG.standard_normal((64, 64))
    layout = build(tmp_path / "c.bin", data, (8, 8), "C", deflate_every=1)
    busy = ThreadPoolExecutor(max_workers=1)
    busy.submit(time.sleep, 0.2)  # the pool's only worker is busy: groups queue behind
    monkeypatch.setattr(chunked, "_cpus", lambda: 4)
    monkeypatch.setattr(chunked, "_pool", lambda name: busy)
    try:
        got = read_selection(open_reader(str(tmp_path / "c.bin")), layout, ((0, 64, 1), (0, 64, 1)))
    finally:
        busy.shutdown()
    np.testing.assert_array_equal(got, data)


def test_batches_are_read_ahead_while_earlier_ones_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = RNG.standard_normal((64, 64))
    layout = build(tmp_path / "c.bin", data, (8, 8), "F", deflate_every=1)
    monkeypatch.setattr(chunked, "_BATCH_BYTES", 2000)
    reader = CountingReader(open_reader(str(tmp_path / "c.bin")))
    got = read_selection(reader, layout, ((0, 64, 1), (0, 64, 1)))
    np.testing.assert_array_equal(got, data)
    assert len(reader.into) > 4  # several batches, each ranges cut to the batch size
    assert all(b - a <= 2000 for r in reader.into for a, b in r)


class SlowRemoteReader(CountingReader):
    """A local file read as if remote: each batch waits a round trip; concurrency counted."""

    def __init__(self, base: RangeReader, pool: ThreadPoolExecutor) -> None:
        super().__init__(base)
        self.local = False
        self.max_gap = 0
        self.pool = pool
        self.busy = 0
        self.most = 0
        self.lock = threading.Lock()

    def start_readinto(self, requests: Any, *, parallel: bool = False) -> Future[None]:
        self.into.append([(s, s + v.nbytes) for s, v in requests])
        return self.pool.submit(self._slow, requests)

    def _slow(self, requests: Any) -> None:
        with self.lock:
            self.busy += 1
            self.most = max(self.most, self.busy)
        time.sleep(0.05)
        try:
            RangeReader.readinto_many(self, requests)
        finally:
            with self.lock:
                self.busy -= 1


def test_remote_reads_are_equal_ranges_in_flight_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remotely a read is cut into ranges of about ``total / _REMOTE_RANGES`` bytes (within
    the range bounds), each its own batch, as many in flight as the held bytes allow; not a
    ramp of growing ranges."""
    data = RNG.standard_normal((80, 80))  # 64 chunks of 800 bytes, back to back
    layout = build(tmp_path / "c.bin", data, (10, 10), "F")
    monkeypatch.setattr(chunked, "_REMOTE_RANGES", 4)
    monkeypatch.setattr(chunked, "_REMOTE_RANGE_MIN", 1000)
    monkeypatch.setattr(chunked, "_REMOTE_RANGE_MAX", 4000)
    pool = ThreadPoolExecutor(16)
    reader = SlowRemoteReader(open_reader(str(tmp_path / "c.bin")), pool)
    np.testing.assert_array_equal(read_selection(reader, layout, ((0, 80, 1), (0, 80, 1))), data)
    sizes = sorted((b - a for r in reader.into for a, b in r), reverse=True)
    assert all(len(r) == 1 for r in reader.into)  # one range per batch
    assert sizes == [4000] * 12 + [3200]  # 51,200 bytes / 4 > 4000: the largest range
    assert reader.most == 5  # 5 ranges' bytes held, the one decoding included
    # scattered chunks (12,800 bytes: 3,200 per range or batch): a range per run of
    # neighbours (two chunks), two ranges per batch, all four batches at once
    reader = SlowRemoteReader(open_reader(str(tmp_path / "c.bin")), pool)
    got = read_selection(reader, layout, ((0, 80, 1), (0, 20, 1)))
    np.testing.assert_array_equal(got, data[:, :20])
    assert [[b - a for a, b in r] for r in reader.into] == [[1600, 1600]] * 4
    assert reader.most == 4
    pool.shutdown()
