"""The dask face: deterministic names, small graphs, pickling, slices, distributed."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import dask
import numpy as np
import pytest

import npystore


def _write(path: Path, arr: np.ndarray) -> str:
    np.save(path, arr)
    return str(path)


def test_names_are_deterministic_and_change_with_the_object(tmp_path: Path) -> None:
    url = _write(tmp_path / "a.npy", np.arange(1000.0))
    a1 = npystore.open_npy(url, chunks=100)
    a2 = npystore.open_npy(url, chunks=100)
    assert a1.name == a2.name
    assert npystore.open_npy(url, chunks=200).name != a1.name
    # rewrite with the same shape and dtype: a different object gives a different name
    time.sleep(0.01)
    _write(tmp_path / "a.npy", np.arange(1000.0) * 2)
    os.utime(url, ns=(time.time_ns(), time.time_ns() + 10**9))
    a3 = npystore.open_npy(url, chunks=100)
    assert a3.name != a1.name
    np.testing.assert_array_equal(a3.compute(), np.arange(1000.0) * 2)


def test_changed_file_after_open_is_refused(tmp_path: Path) -> None:
    url = _write(tmp_path / "c.npy", np.arange(1000.0))
    a = npystore.open_npy(url, chunks=100)
    _write(tmp_path / "c.npy", np.arange(2000.0))
    with pytest.raises(npystore.ConsistencyError, match=r"c\.npy.*changed"):
        a.compute()


def test_graph_pickles_small(tmp_path: Path) -> None:
    url = _write(tmp_path / "g.npy", np.zeros((10_000, 10)))
    a = npystore.open_npy(url, chunks=(10, 10))
    assert a.npartitions == 1000
    blob = pickle.dumps(dict(a.__dask_graph__()))
    assert len(blob) < 200_000
    b = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(b.compute(), np.zeros((10_000, 10)))


def test_slice_reads_only_what_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from npystore.fetch import RangeReader

    arr = np.arange(100_000, dtype="<i8").reshape(1000, 100)
    url = _write(tmp_path / "s.npy", arr)
    a = npystore.open_npy(url, chunks=(100, 100))
    seen: list[tuple[int, int]] = []
    original = RangeReader.readinto_many

    def spy(self: RangeReader, requests: list[tuple[int, memoryview]], **kw: bool) -> None:
        seen.extend((start, start + view.nbytes) for start, view in requests)
        original(self, requests, **kw)

    monkeypatch.setattr(RangeReader, "readinto_many", spy)
    with dask.config.set(scheduler="sync"):
        got = a[250:260].compute()
    np.testing.assert_array_equal(got, arr[250:260])
    assert sum(stop - start for start, stop in seen) == 10 * 800
    offset = npystore.read_header(url).data_offset
    assert seen == [(offset + 250 * 800, offset + 260 * 800)]


def test_open_sniffs_magic_not_extension(tmp_path: Path) -> None:
    url = _write(tmp_path / "data.bin", np.arange(6, dtype="<u2").reshape(2, 3))
    os.rename(url + ".npy", tmp_path / "renamed.mat")
    got = npystore.open(str(tmp_path / "renamed.mat"), chunks=1).compute()
    np.testing.assert_array_equal(got, np.arange(6, dtype="<u2").reshape(2, 3))
    zip_path = tmp_path / "z.npy"
    np.savez(zip_path, a=np.arange(3))
    archive = npystore.open(str(tmp_path / "z.npy.npz"))
    assert isinstance(archive, npystore.NpzFile)
    assert archive["a"].compute().tolist() == [0, 1, 2]


def test_memory_filesystem(tmp_path: Path) -> None:
    import fsspec

    arr = np.asfortranarray(np.arange(60, dtype=">c8").reshape(3, 4, 5))
    path = tmp_path / "m.npy"
    np.save(path, arr)
    fs = fsspec.filesystem("memory")
    fs.pipe("/npystore-test/m.npy", path.read_bytes())
    a = npystore.open_npy("memory://npystore-test/m.npy", chunks=(2, 2, 2))
    np.testing.assert_array_equal(a.compute(), arr)
    assert a.dtype == np.dtype(">c8")
    np.testing.assert_array_equal(npystore.load("memory://npystore-test/m.npy"), arr)


def test_dask_config_chunk_size_and_explicit_chunks(tmp_path: Path) -> None:
    url = _write(tmp_path / "k.npy", np.zeros((64, 64, 4), dtype="<f4"))
    assert npystore.open_npy(url, chunks=-1).chunks == ((64,), (64,), (4,))
    assert npystore.open_npy(url, chunks={0: 16}).chunks[0] == (16,) * 4
    assert npystore.open_npy(url, chunks=(32, 16, 4)).chunks == ((32, 32), (16,) * 4, (4,))


@pytest.mark.slow
def test_distributed_local_cluster_processes(tmp_path: Path, s3: object) -> None:
    distributed = pytest.importorskip("distributed")
    arr = np.arange(200_000, dtype=">f8").reshape(2000, 100)
    path = tmp_path / "d.npy"
    np.save(path, arr)
    url_s3 = s3.put_file(path, "d.npy")  # type: ignore[attr-defined]
    opts = s3.storage_options  # type: ignore[attr-defined]
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        local = npystore.open_npy(str(path), chunks=(100, 50))
        remote = npystore.open_npy(url_s3, chunks=(300, 100), storage_options=opts)
        total_local, total_remote = client.compute([local.sum(), remote.sum()], sync=True)
        assert total_local == arr.sum()
        assert total_remote == arr.sum()
        np.testing.assert_array_equal(client.compute(remote[1500:1600], sync=True), arr[1500:1600])
