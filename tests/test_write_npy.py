"""npystore.save: byte-identical to numpy.save over the dtype matrix (numpy and dask sources),
object arrays refused, and atomic locally (a failing block leaves the previous file and no
temporary file)."""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest

import npystore
from npystore.formats.npy_write import header_bytes
from npystore.write import WriteError

from npy_cases import DTYPES, SHAPES


def _numpy_bytes(a: Any) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        np.save(f, a)
    return f.getvalue()


def _filled(shape: tuple[int, ...], dtype: np.dtype[Any], order: str) -> np.ndarray:
    a = np.zeros(shape, dtype, order=order)
    if a.size:  # every byte set, padding included (a view of the same memory)
        raw = np.ascontiguousarray(a) if not (a.flags.c_contiguous or a.flags.f_contiguous) else a
        mem = raw.T if raw.flags.f_contiguous and not raw.flags.c_contiguous else raw
        mem.reshape(-1).view(np.uint8)[:] = (np.arange(a.nbytes) * 7 + 3).astype(np.uint8)
    return a


@pytest.mark.parametrize("name", list(DTYPES))
def test_numpy_sources_equal_numpy_save(tmp_path: Path, name: str) -> None:
    dtype = DTYPES[name]
    for shape in SHAPES:
        for order in ("C", "F"):
            a = _filled(shape, dtype, order)
            out = tmp_path / "out.npy"
            npystore.save(str(out), a)
            assert out.read_bytes() == _numpy_bytes(a), (name, shape, order)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy"]


@pytest.mark.parametrize("name", ["<f8", ">i4", "struct_nested", "<M8[ns]", ">U3", "bool"])
def test_dask_sources_equal_numpy_save_of_asarray(tmp_path: Path, name: str) -> None:
    dtype = DTYPES[name]
    base = _filled((37, 11, 5), dtype, "C")
    for chunks in [(5, 11, 5), (10, 4, 2), (37, 11, 5), (1, 3, 5)]:
        x = da.from_array(base, chunks=chunks)
        npystore.save(str(tmp_path / "x.npy"), x)
        assert (tmp_path / "x.npy").read_bytes() == _numpy_bytes(np.asarray(x)), chunks
    # 0-d, empty, Fortran-ordered numpy base (dask writes C order)
    for arr in (
        da.from_array(np.array(3.5)),
        da.zeros((4, 0, 3)),
        da.from_array(np.asfortranarray(base)),
    ):
        npystore.save(str(tmp_path / "y.npy"), arr)
        assert (tmp_path / "y.npy").read_bytes() == _numpy_bytes(np.asarray(arr))


def test_non_contiguous_and_array_likes(tmp_path: Path) -> None:
    a = np.arange(200.0).reshape(10, 20)[::2, ::3]
    npystore.save(str(tmp_path / "a.npy"), a)
    assert (tmp_path / "a.npy").read_bytes() == _numpy_bytes(a)
    npystore.save(str(tmp_path / "b.npy"), [[1, 2], [3, 4]])
    assert (tmp_path / "b.npy").read_bytes() == _numpy_bytes(np.asarray([[1, 2], [3, 4]]))


def test_header_versions_follow_numpy() -> None:
    big = np.dtype([(f"field_{i}", "<i4") for i in range(4000)])  # header over 64 KiB: 2.0
    utf8 = np.dtype([("\u2603", "<i4")])  # non-latin-1 name: 3.0
    for dt, version in ((big, 2), (utf8, 3), (np.dtype("<f8"), 1)):
        a = np.zeros(3, dt)
        want = _numpy_bytes(a)
        got = header_bytes(a.dtype, a.shape, False)
        assert want.startswith(got)
        assert got[6] == version
        assert len(got) % 64 == 0


def test_object_arrays_refused_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "o.npy"
    for bad in (np.array([1, "a"], dtype=object), np.zeros(2, [("a", "O")])):
        with pytest.raises(TypeError, match="Python objects") as info:
            npystore.save(str(out), bad)
        assert isinstance(info.value, npystore.NpystoreError)
        with pytest.raises(ValueError, match="Python objects"):
            npystore.save(str(out), da.from_array(bad, chunks=1))
    assert list(tmp_path.iterdir()) == []


def _failing(x: da.Array, bad: int) -> da.Array:
    def f(block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info[0]["chunk-location"][0] == bad:
            raise RuntimeError(f"block {bad} cannot be computed")
        return block

    return x.map_blocks(f, dtype=x.dtype)


def test_failure_keeps_previous_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "keep.npy"
    out.write_bytes(b"previous content")
    x = _failing(da.arange(10_000, chunks=1000), 6)
    with pytest.raises(WriteError, match=r"block \(6,\)") as info:
        npystore.save(str(out), x)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "block 6 cannot be computed" in str(info.value)
    assert out.read_bytes() == b"previous content"
    assert sorted(os.listdir(tmp_path)) == ["keep.npy"]
    # and when it works, the new content replaces it
    npystore.save(str(out), da.arange(10_000, chunks=1000))
    assert out.read_bytes() == _numpy_bytes(np.arange(10_000))
    assert sorted(os.listdir(tmp_path)) == ["keep.npy"]


def test_a_numpy_array_is_written_to_a_local_file_without_a_dask_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As numpy.save writes it, from the calling thread: a dask compute of views of an
    array already in memory cost a 128 MiB save 30% more than numpy's (benchmarks)."""
    from npystore.write import npy as write_npy

    def no_graph(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a dask graph was computed")

    monkeypatch.setattr(write_npy, "compute_named", no_graph)
    for a in (np.arange(100_000, dtype=">i4").reshape(100, 1000), np.zeros((0, 3)), np.float64(2)):
        out = tmp_path / "n.npy"
        npystore.save(str(out), a)
        assert out.read_bytes() == _numpy_bytes(np.asarray(a))
    f = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    npystore.save(str(out), f)
    assert out.read_bytes() == _numpy_bytes(f)
    with pytest.raises(AssertionError, match="dask graph"):  # a dask array still takes dask
        npystore.save(str(out), da.arange(10, chunks=5))


def test_other_fsspec_filesystems_spool_and_move() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    a = np.arange(5000, dtype=">f4").reshape(50, 100)
    npystore.save("memory://w/a.npy", da.from_array(a, chunks=(7, 100)))
    assert fs.cat("memory://w/a.npy") == _numpy_bytes(a)
    assert fs.ls("memory://w", detail=False) == ["/w/a.npy"]
    with pytest.raises(WriteError):
        npystore.save("memory://w/b.npy", _failing(da.arange(100, chunks=10), 3))
    assert fs.ls("memory://w", detail=False) == ["/w/a.npy"]
    npystore.load("memory://w/a.npy")
