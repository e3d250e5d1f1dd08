"""Issue 15: open binary file objects, as numpy.load takes them.

``load``, ``read_header``, ``open_npy`` (and ``open``) accept ``open(path, "rb")``,
``io.BytesIO`` and fsspec files; the oracle is numpy.load on the same object (values, dtype,
memory order, the file's position afterwards).
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.implementations.local import LocalFileOpener

import npystore
from npystore.errors import ConsistencyError, UnsupportedError

ARRAYS = {
    "f8": np.arange(1000.0).reshape(20, 50),
    "fortran_be": np.asfortranarray(np.arange(600, dtype=">i4").reshape(20, 30)),
    "structured": np.array(
        [(i, f"s{i}", (i, -i)) for i in range(40)],
        dtype=[("a", "<u2"), ("b", "U3"), ("c", ">f4", (2,))],
    ),
    "scalar": np.array(3.5, dtype="<f2"),
    "empty": np.zeros((0, 4)),
}


def _saved(*arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    for arr in arrays:
        np.save(buf, arr)
    return buf.getvalue()


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.flags.f_contiguous == want.flags.f_contiguous
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_load_from_bytesio_like_numpy(name: str) -> None:
    data = _saved(ARRAYS[name], np.arange(3))  # another array after it
    mine, theirs = io.BytesIO(data), io.BytesIO(data)
    _same(npystore.load(mine), np.load(theirs))
    assert mine.tell() == theirs.tell()  # just after the first array
    _same(npystore.load(mine), np.load(theirs))  # the next one, from there
    assert mine.tell() == theirs.tell() == len(data)


def test_real_file_object(tmp_path: Path) -> None:
    arr = ARRAYS["fortran_be"]
    path = tmp_path / "a.npy"
    path.write_bytes(_saved(arr, ARRAYS["f8"]))
    with open(path, "rb") as f, open(path, "rb") as g:
        _same(npystore.load(f), np.load(g))
        assert f.tell() == g.tell()
        _same(npystore.load(f), np.load(g))
        f.seek(0)
        g.seek(0)
        header = npystore.read_header(f)
        version = np.lib.format.read_magic(g)
        assert version == (1, 0)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(g)
        assert (header.shape, header.fortran_order, header.dtype) == (shape, fortran, dtype)
        assert f.tell() == g.tell() == header.data_offset  # where numpy leaves it
        f.seek(0)
        a = npystore.open_npy(f, chunks=(5, 7))
        assert a.npartitions == 20
        np.testing.assert_array_equal(a[3:17, ::4].compute(), arr[3:17, ::4])
        assert int(a.sum().compute()) == int(arr.sum())
        f.seek(header.data_offset + arr.nbytes)  # the second array, at its offset
        second = npystore.open_npy(f, chunks=7)
        np.testing.assert_array_equal(second.compute(), ARRAYS["f8"])
        f.seek(header.data_offset + arr.nbytes)
        np.testing.assert_array_equal(npystore.open(f).compute(), ARRAYS["f8"])
        with pytest.raises(UnsupportedError, match=r"a\.npy at byte 2528>: a reader over"):
            pickle.dumps(second)  # named with the position it starts at


def test_fsspec_file_objects(tmp_path: Path) -> None:
    arr = ARRAYS["structured"]
    path = tmp_path / "s.npy"
    path.write_bytes(_saved(arr))
    with fsspec.open(str(path), "rb") as f:
        assert isinstance(f, LocalFileOpener)
        _same(npystore.load(f), arr)
        f.seek(0)
        np.testing.assert_array_equal(npystore.open_npy(f, chunks=9).compute(), arr)
    memory = fsspec.filesystem("memory")
    memory.pipe("/fileobj/s.npy", _saved(arr))
    with memory.open("/fileobj/s.npy", "rb") as f:  # no descriptor: seek + read under a lock
        _same(npystore.load(f), arr)
        f.seek(0)
        np.testing.assert_array_equal(npystore.open_npy(f, chunks=3)[5:30].compute(), arr[5:30])
    memory.rm("/fileobj/s.npy")


def test_npz_from_file_objects(tmp_path: Path) -> None:
    path = tmp_path / "z.npz"
    np.savez_compressed(path, x=ARRAYS["f8"], y=ARRAYS["structured"])
    with open(path, "rb") as f, np.load(path) as want, npystore.load(f) as got:
        assert got.files == want.files
        for key in want.files:
            _same(got[key], want[key])
    with npystore.load(io.BytesIO(path.read_bytes())) as got:
        _same(got["y"], ARRAYS["structured"])
    npz = npystore.open(io.BytesIO(path.read_bytes()))
    np.testing.assert_array_equal(npz["x"][7].compute(), ARRAYS["f8"][7])


def test_many_threads_over_one_bytesio() -> None:
    """Seek-and-read under a lock: dask's threads share one position."""
    arr = np.arange(200_000, dtype=np.int64).reshape(400, 500)
    a = npystore.open_npy(io.BytesIO(_saved(arr)), chunks=(7, 500))
    assert a.npartitions == 58
    np.testing.assert_array_equal(a.compute(scheduler="threads", num_workers=8), arr)
    np.testing.assert_array_equal(a[::3, 1::7].compute(scheduler="threads"), arr[::3, 1::7])


def test_two_bytesio_of_the_same_size_are_two_arrays() -> None:
    a = npystore.open_npy(io.BytesIO(_saved(np.zeros(100))))
    b = npystore.open_npy(io.BytesIO(_saved(np.ones(100))))
    assert a.name != b.name
    assert float((a + b).sum().compute()) == 100.0


def test_pickling_graphs_over_file_objects(tmp_path: Path) -> None:
    arr = ARRAYS["f8"]
    a = npystore.open_npy(io.BytesIO(_saved(arr)), chunks=5)
    copy = pickle.loads(pickle.dumps(a))  # a BytesIO travels by value
    np.testing.assert_array_equal(copy.compute(), arr)
    path = tmp_path / "p.npy"
    path.write_bytes(_saved(arr))
    with open(path, "rb") as f:
        b = npystore.open_npy(f, chunks=5)
        with pytest.raises(
            UnsupportedError,
            match=r"<BufferedReader .*p\.npy>: a reader over an open file object cannot be "
            r"pickled .*open the file by its path or URL instead",
        ):
            pickle.dumps(b)


def test_a_file_changed_under_an_open_array(tmp_path: Path) -> None:
    path = tmp_path / "c.npy"
    path.write_bytes(_saved(np.arange(100.0)))
    with open(path, "rb") as f:
        a = npystore.open_npy(f)
        with open(path, "r+b") as w:  # same inode, other size
            w.write(_saved(np.arange(120.0)))
        with pytest.raises(ConsistencyError, match=r"c\.npy>: the file changed since it was"):
            a.compute()
    buf = io.BytesIO(_saved(np.arange(100.0)))
    b = npystore.open_npy(buf)
    buf.write(b"more")
    buf.seek(0, os.SEEK_END)
    buf.write(b"more")
    with pytest.raises(ConsistencyError, match=r"<BytesIO>: the file changed .*size 928 -> 932"):
        b.compute()


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (open, TypeError, r"open in text mode; open it in binary mode"),
        (lambda p: 42, TypeError, r"expected a path, a URL or a binary file object"),
        (lambda p: [b"\x93NUMPY"], TypeError, r"expected URLs \(str or path\), got bytes"),
    ],
)
def test_what_is_not_a_binary_file_object(
    tmp_path: Path, make: Any, error: type[Exception], match: str
) -> None:
    path = tmp_path / "t.npy"
    path.write_bytes(_saved(np.arange(3)))
    obj = make(path)
    try:
        with pytest.raises(error, match=match):
            npystore.load(obj)
    finally:
        if hasattr(obj, "close"):
            obj.close()


def test_unseekable_closed_and_options() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, _saved(np.arange(3)))
    os.close(write_end)
    with (
        open(read_end, "rb") as pipe,
        pytest.raises(UnsupportedError, match=r"cannot seek.*io\.BytesIO\(f\.read\(\)\)"),
    ):
        npystore.load(pipe)
    with pytest.raises(TypeError, match="storage_options apply to URLs"):
        npystore.load(io.BytesIO(_saved(np.arange(3))), storage_options={"anon": True})
    buf = io.BytesIO(_saved(np.arange(3)))
    a = npystore.open_npy(buf)
    buf.close()
    with pytest.raises(ValueError, match="closed"):
        a.compute()
    with pytest.raises(UnsupportedError, match="mmap_mode maps local files only"):
        npystore.load(io.BytesIO(_saved(np.arange(3))), mmap_mode="r")


def test_kerchunk_references_need_a_url() -> None:
    with pytest.raises(UnsupportedError, match=r"<BytesIO>: kerchunk references point into"):
        npystore.to_kerchunk(io.BytesIO(_saved(np.arange(3))))
