"""A distributed LocalCluster (2 worker processes) computes the same values as numpy,
scipy, h5py and dask's threaded scheduler, over .npz (stored and deflated members, local
and S3) and .mat (v5 compressed, inflated whole or read through the checkpoint index, and
v7.3 with chunked deflate) files. Graphs, and the NpzFile mapping, travel to the workers
by pickle.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import h5py
import numpy as np
import pytest
import scipy.io as sio

import npystore
from npystore.files.mat import v5 as mat_v5

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """One cluster for the module: process workers, so every graph is pickled."""
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@dataclass(frozen=True)
class Files:
    arrays: dict[str, np.ndarray]
    stored: Path
    deflated: Path
    v5: Path
    v73: Path


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "f8": rng.standard_normal((1500, 200)),
        "i4_fortran_be": np.asfortranarray(rng.integers(-(2**30), 2**30, (300, 400))).astype(">i4"),
        "c8": (rng.standard_normal(40_000) + 1j * rng.standard_normal(40_000)).astype("<c8"),
        "u1": rng.integers(0, 255, (64, 64, 8), dtype=np.uint8),
    }


def _stamp(path: Path) -> None:
    text = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
    with path.open("r+b") as f:
        f.write(text.ljust(116) + b" " * 8 + b"\x00\x02IM")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("distributed")
    arrays = _arrays()
    stored, deflated = root / "stored.npz", root / "deflated.npz"
    np.savez(stored, **arrays)
    np.savez_compressed(deflated, **arrays)
    v5 = root / "v5.mat"
    sio.savemat(
        v5,
        {"x": arrays["f8"], "n": arrays["i4_fortran_be"].astype("<i4"), "z": arrays["c8"]},
        do_compression=True,
    )
    v73 = root / "v73.mat"
    with h5py.File(v73, "w", userblock_size=512) as f:
        x = f.create_dataset("x", data=arrays["f8"].T, chunks=(50, 64), compression="gzip")
        x.attrs["MATLAB_class"] = np.bytes_("double")
        n = f.create_dataset(
            "n", data=arrays["u1"].T, chunks=(4, 16, 16), compression="gzip", shuffle=True
        )
        n.attrs["MATLAB_class"] = np.bytes_("uint8")
    _stamp(v73)
    return Files(arrays, stored, deflated, v5, v73)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _part(a: Any) -> Any:
    """Elements 1 to n/2 along the longest axis."""
    axis = int(np.argmax(a.shape))
    index = [slice(None)] * a.ndim
    index[axis] = slice(1, a.shape[axis] // 2 + 1)
    return a[tuple(index)]


def _check(client: Any, arrays: dict[str, Any], oracle: dict[str, np.ndarray]) -> None:
    """Whole arrays, a slice and a reduction of each: cluster == threads == oracle."""
    keys = sorted(arrays)
    n = len(keys)
    work = [arrays[k] for k in keys]
    work += [_part(a) for a in work[:n]] + [a.sum() for a in work[:n]]
    on_cluster = client.compute(work, sync=True)
    threaded = dask.compute(*work, scheduler="threads")
    for got, same in zip(on_cluster, threaded, strict=True):
        _same(np.asarray(got), np.asarray(same))  # bit for bit, reductions included
    for i, k in enumerate(keys):
        want = oracle[k]
        _same(on_cluster[i], want)
        _same(on_cluster[n + i], _part(want))
        np.testing.assert_allclose(on_cluster[2 * n + i], want.sum(), rtol=1e-5)


@pytest.mark.parametrize("kind", ["stored", "deflated"])
def test_npz_local(client: Any, files: Files, kind: str) -> None:
    path = files.stored if kind == "stored" else files.deflated
    shapes = {k: h.shape for k, h in npystore.open_npz(str(path)).headers.items()}
    chunked = {
        k: npystore.open_npz(str(path), chunks={0: -(-shape[0] // 7)})[k]
        for k, shape in shapes.items()
    }
    assert all(a.npartitions == 7 for a in chunked.values())
    with np.load(path) as oracle:
        _check(client, chunked, {k: oracle[k] for k in oracle.files})


def test_npz_and_mat_on_s3(client: Any, files: Files, s3: Any) -> None:
    for path in (files.stored, files.deflated):
        url = s3.put_file(path, path.name)
        opts = s3.storage_options  # the workers receive them with the graph
        assert pickle.loads(pickle.dumps(opts)) == opts
        with dask.config.set({"array.chunk-size": "256KiB"}):  # "auto": 1 to 10 chunks each
            z = npystore.open_npz(url, storage_options=s3.storage_options)
            arrays = dict(z)
        assert sum(a.npartitions for a in arrays.values()) > len(arrays)
        with np.load(path) as oracle:
            _check(client, arrays, {k: oracle[k] for k in oracle.files})
    v5 = npystore.open_mat(s3.put_file(files.v5, "v5.mat"), storage_options=s3.storage_options)
    _check(client, {"x": v5["x"]}, {"x": sio.loadmat(files.v5)["x"]})
    url = s3.put_file(files.v73, "v73.mat")
    v73 = npystore.open_mat(url, chunks=(500, 100), storage_options=s3.storage_options)
    with h5py.File(files.v73) as f:
        _check(client, {"x": v73["x"]}, {"x": f["x"][()].T})


def test_npz_file_travels_to_workers(client: Any, files: Files) -> None:
    """The NpzFile mapping itself pickles (its lock is recreated): a task can open members."""
    z = npystore.open_npz(str(files.deflated))
    headers = z.headers  # resolved on the client: they travel with the mapping
    clone = pickle.loads(pickle.dumps(z))
    assert clone.files == z.files
    assert clone.headers == headers

    def member_sum(npz: npystore.NpzFile, key: str) -> Any:
        return npz[key].sum().compute(scheduler="sync")

    futures = [client.submit(member_sum, z, k, pure=False) for k in z.files]
    got = client.gather(futures)
    for k, total in zip(z.files, got, strict=True):
        np.testing.assert_allclose(total, files.arrays[k].sum(), rtol=1e-5)


@pytest.mark.parametrize("whole", [True, False], ids=["inflated-whole", "indexed"])
def test_mat_v5_compressed(
    client: Any, files: Files, whole: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph holds the zlib stream's coordinates, never the values: whether the client
    inflated the variable once (up to INFLATE_WHOLE) or not, each worker inflates what it
    needs."""
    if not whole:
        monkeypatch.setattr(mat_v5, "INFLATE_WHOLE", 64 * 2**10)
    m = npystore.open_mat(str(files.v5), chunks=(250, -1))
    arrays = {k: m[k] for k in ("x", "n", "z")}
    oracle = sio.loadmat(files.v5)
    _check(client, arrays, {k: oracle[k] for k in arrays})
    size = len(pickle.dumps(arrays["x"]))
    assert size < 16 * 2**10 < files.arrays["f8"].nbytes  # coordinates, not the bytes


def test_mat_v73_chunked_deflate(client: Any, files: Files) -> None:
    m = npystore.open_mat(str(files.v73))
    arrays = {"x": m["x"], "n": m["n"]}
    with h5py.File(files.v73) as f:
        oracle = {k: f[k][()].T for k in arrays}
    _check(client, arrays, oracle)
    fine = npystore.open_mat(str(files.v73), chunks=(64, 50))["x"]
    assert fine.npartitions == 4 * 24
    _check(client, {"x": fine}, {"x": oracle["x"]})


def test_npy_read_and_written_by_workers_on_seaweedfs(client: Any, seaweed: Any) -> None:
    """Two worker processes read a .npy from SeaweedFS (each its own filesystem and
    connections, the reader rebuilt from its pickle) and write one back (each uploading
    its own parts): both equal to numpy."""
    import io

    a = np.random.default_rng(5).standard_normal((3000, 200))
    buf = io.BytesIO()
    np.save(buf, a)
    url = seaweed.put_bytes(buf.getvalue(), "a.npy")
    opts = seaweed.storage_options
    lazy = npystore.open_npy(url, chunks=(300, 200), storage_options=opts)
    got = client.compute(lazy, sync=True)
    _same(got, a)
    where = client.run(lambda: __import__("os").getpid())
    assert len(set(where.values())) == 2  # two processes
    with dask.config.set(scheduler=client.get):
        npystore.save(seaweed.url("b.npy"), lazy * 2, storage_options=opts)
    _same(npystore.load(seaweed.url("b.npy"), storage_options=opts), a * 2)
