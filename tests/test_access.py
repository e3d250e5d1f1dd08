"""Read plans and selections: any basic index equals numpy's, whatever the gap/span policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npystore
from npystore.api import open_layout_array, read_prefix
from npystore.fetch import open_reader
from npystore.read.access import LayoutArray, normalize_key
from npystore.read.layout import (
    ArrayLayout,
    RawExtent,
    contiguous_chunks,
    full_selection,
    plan_reads,
)


def _open(path: Path, max_gap: int, max_span: int) -> LayoutArray:
    reader = open_reader(str(path))
    reader.max_gap = max_gap
    reader.max_span = max_span
    return open_layout_array(reader, read_prefix(reader), False, 2**20)


@st.composite
def _index(draw: Any, shape: tuple[int, ...]) -> tuple[Any, ...]:
    key: list[Any] = []
    for n in shape:
        kind = draw(st.sampled_from(["slice", "slice", "int", "full", "list", "mask"]))
        if kind == "int" and n > 0:
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "list" and n > 0:
            key.append(draw(st.lists(st.integers(-n, n - 1), max_size=4)))
        elif kind == "mask":
            key.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
        elif kind == "full":
            key.append(slice(None))
        else:
            start = draw(st.none() | st.integers(-n - 2, n + 2))
            stop = draw(st.none() | st.integers(-n - 2, n + 2))
            step = draw(st.none() | st.integers(-4, 4).filter(lambda s: s != 0))
            key.append(slice(start, stop, step))
    if draw(st.booleans()) and key:
        key.insert(draw(st.integers(0, len(key))), None)
    if draw(st.booleans()) and len(key) > 1:
        cut = draw(st.integers(0, len(key) - 1))
        key = [*key[:cut], Ellipsis]
    return tuple(key)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_basic_indexing_equals_numpy(tmp_path: Path, data: Any) -> None:
    shape = tuple(data.draw(st.lists(st.integers(0, 7), min_size=0, max_size=4)))
    order = data.draw(st.sampled_from("CF"))
    dtype = data.draw(st.sampled_from(["<i2", ">f8", "u1", "S3", "<c8"]))
    expected = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(dtype)
    if order == "F":
        expected = np.asfortranarray(expected)
    path = tmp_path / "a.npy"
    np.save(path, expected)
    max_gap = data.draw(st.sampled_from([0, 1, 8, 64, 2**20]))
    max_span = data.draw(st.sampled_from([1, 16, 100, 2**20]))
    array = _open(path, max_gap, max_span)
    key = data.draw(_index(shape))
    try:
        want = expected[key]
    except IndexError:
        with pytest.raises(IndexError):
            array[key]
        return
    got = array[key]
    assert isinstance(got, np.ndarray)
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype
    else:  # numpy gives a native scalar; npystore keeps a 0-d array in the stored byte order
        assert got.dtype == expected.dtype
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(got, want)


def test_plan_contiguous_chunk_is_one_piece() -> None:
    layout = ArrayLayout(np.dtype("<f8"), (100, 20, 3), "C", RawExtent(128, 100 * 20 * 3 * 8))
    plan = plan_reads(layout, ((10, 5, 1), (0, 20, 1), (0, 3, 1)), max_gap=0, max_span=1)
    pieces = list(plan.iter_pieces())
    assert len(pieces) == 1
    assert pieces[0].contiguous
    assert (pieces[0].start, pieces[0].stop) == (128 + 10 * 480, 128 + 15 * 480)


def test_plan_fortran_column_block_is_one_piece() -> None:
    layout = ArrayLayout(np.dtype(">i4"), (50, 40), "F", RawExtent(64, 50 * 40 * 4))
    plan = plan_reads(layout, ((0, 50, 1), (7, 3, 1)), max_gap=0, max_span=1)
    (piece,) = plan.iter_pieces()
    assert piece.contiguous
    assert (piece.start, piece.stop) == (64 + 7 * 200, 64 + 10 * 200)


def test_plan_sparse_columns_respect_gap() -> None:
    layout = ArrayLayout(np.dtype("<f8"), (1000, 1000), "C", RawExtent(0, 8 * 10**6))
    sel = ((0, 1000, 1), (5, 2, 1))
    # rows are 8000 bytes apart: with a small gap threshold each row is its own range
    sparse = plan_reads(layout, sel, max_gap=1024, max_span=2**30)
    assert sparse.pieces == 1000
    assert all(p.stop - p.start == 16 for p in sparse.iter_pieces())
    # with a large one, the rows merge into blocks bounded by max_span
    dense = plan_reads(layout, sel, max_gap=2**20, max_span=80_000)
    pieces = list(dense.iter_pieces())
    assert len(pieces) == 100
    assert all(p.stop - p.start <= 80_000 for p in pieces)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(
    ("shape", "itemsize", "target"),
    [
        ((1000, 30), 8, 24_000),
        ((10, 10, 10), 4, 400),
        ((7, 5, 3), 8, 8),
        ((4, 3), 16, 1),
        ((5,), 1, 2),
    ],
)
def test_contiguous_chunks_are_contiguous(
    shape: tuple[int, ...], itemsize: int, target: int, order: Any
) -> None:
    chunks = contiguous_chunks(shape, itemsize, order, target)
    assert tuple(sum(c) for c in chunks) == shape
    layout = ArrayLayout(np.dtype(f"V{itemsize}"), shape, order, RawExtent(0, 0))
    grid = [np.cumsum((0, *c)) for c in chunks]
    for index in np.ndindex(*(len(c) for c in chunks)):
        sel = tuple((int(g[i]), int(g[i + 1] - g[i]), 1) for g, i in zip(grid, index, strict=True))
        nbytes = int(np.prod([c for _, c, _ in sel])) * itemsize
        assert nbytes <= max(target, itemsize)
        plan = plan_reads(layout, sel, max_gap=0, max_span=1)
        (piece,) = plan.iter_pieces()
        assert piece.contiguous


def test_contiguous_chunks_split_slowest_axis_only() -> None:
    assert contiguous_chunks((100, 10), 8, "C", 800) == ((10,) * 10, (10,))
    assert contiguous_chunks((10, 100), 8, "F", 800) == ((10,), (10,) * 10)


def test_auto_chunks_follow_dask_chunk_size(tmp_path: Path) -> None:
    import dask

    path = tmp_path / "a.npy"
    np.save(path, np.zeros((1000, 100)))
    with dask.config.set({"array.chunk-size": "80kB"}):
        a = npystore.open_npy(str(path))
    assert a.chunks == ((100,) * 10, (100,))
    f = tmp_path / "f.npy"
    np.save(f, np.asfortranarray(np.zeros((100, 1000))))
    with dask.config.set({"array.chunk-size": "80kB"}):
        b = npystore.open_npy(str(f))
    assert b.chunks == ((100,), (100,) * 10)


def test_normalize_key_errors() -> None:
    with pytest.raises(TypeError, match="only integers"):
        normalize_key(("a",), (5,))
    with pytest.raises(IndexError, match="integer or boolean"):
        normalize_key((np.array([1.5]),), (5,))
    with pytest.raises(IndexError, match="boolean index"):
        normalize_key((np.array([True]),), (5,))
    with pytest.raises(IndexError, match="out of bounds"):
        normalize_key(([0, 7],), (5,))
    assert normalize_key(([3, -1, 2],), (5,))[0] == ((2, 3, 1),)
    with pytest.raises(IndexError):
        normalize_key((5,), (5,))
    with pytest.raises(IndexError):
        normalize_key((0, 0), (5,))


def test_full_selection() -> None:
    assert full_selection((2, 3)) == ((0, 2, 1), (0, 3, 1))
