"""Issue 7: 16 threads reading the same arrays (one shared open object, and one open per
thread) get identical results - .npy, .npz (stored and deflated: a shared checkpoint index),
MATLAB v5 (compressed) and v7.3 (chunked, filtered)."""

from __future__ import annotations

import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.io as sio

import npystore

RNG = np.random.default_rng(31)
THREADS = 16


def hammer(task: Callable[[int], Any], want: Callable[[int], Any]) -> None:
    """Run ``task(i)`` for 64 values of ``i`` on 16 threads; each result equals ``want(i)``."""
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(task, range(64)))
    for i, got in enumerate(results):
        np.testing.assert_array_equal(got, want(i), err_msg=f"task {i}")


def rows(i: int) -> slice:
    start = (i * 37) % 900
    return slice(start, start + 50 + i)


def test_npy_shared_and_per_thread(tmp_path: Path) -> None:
    data = RNG.standard_normal((1000, 40))
    np.save(tmp_path / "a.npy", data)
    url = str(tmp_path / "a.npy")
    shared = npystore.open_npy(url, chunks=(64, 40))
    hammer(lambda i: shared[rows(i)].compute(scheduler="sync"), lambda i: data[rows(i)])
    hammer(lambda i: npystore.open_npy(url)[rows(i)].compute(), lambda i: data[rows(i)])
    hammer(lambda i: npystore.load(url)[rows(i)], lambda i: data[rows(i)])


def test_npz_deflated_index_shared_by_threads(tmp_path: Path) -> None:
    smooth = np.cumsum(RNG.standard_normal((20000, 30)), axis=0).round(1)
    np.savez_compressed(tmp_path / "z.npz", smooth=smooth, small=np.arange(10))
    z = npystore.open_npz(str(tmp_path / "z.npz"), chunks=(500, 30))

    def task(i: int) -> Any:  # every thread starts where no checkpoint exists yet
        start = (i * 2711) % 19000
        return z["smooth"][start : start + 400].compute(scheduler="sync")

    hammer(task, lambda i: smooth[(i * 2711) % 19000 : (i * 2711) % 19000 + 400])
    np.testing.assert_array_equal(z["smooth"].compute(), smooth)


def test_mat_v5_compressed_and_v73(tmp_path: Path) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    x = RNG.standard_normal((300, 200))
    sio.savemat(tmp_path / "a.mat", {"x": x, "s": {"y": np.arange(5.0)}}, do_compression=True)
    hdf5storage.savemat(str(tmp_path / "b.mat"), {"x": x}, format="7.3", matlab_compatible=True)
    for name in ("a.mat", "b.mat"):
        m = npystore.open_mat(str(tmp_path / name), chunks=(300, 10))

        def col(i: int, m: Any = m) -> Any:
            return m["x"][:, i % 200].compute(scheduler="sync")

        hammer(col, lambda i: x[:, i % 200])
        hammer(lambda i, n=name: npystore.open_mat(str(tmp_path / n)).load("x"), lambda i: x)


@pytest.mark.s3
def test_s3_npy_shared_filesystem(s3: Any) -> None:
    data = RNG.standard_normal((1000, 40))
    buf = io.BytesIO()
    np.save(buf, data)
    url = s3.put_bytes(buf.getvalue(), "threads.npy")
    shared = npystore.open_npy(url, chunks=(64, 40), storage_options=s3.storage_options)
    hammer(lambda i: shared[rows(i)].compute(scheduler="sync"), lambda i: data[rows(i)])
