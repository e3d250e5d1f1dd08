"""Request and byte counts over S3 (moto): the acceptance bounds of the .npy foundation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest

import npystore


def _upload(s3: Any, tmp_path: Path, name: str, arr: np.ndarray) -> tuple[str, int]:
    path = tmp_path / name
    np.save(path, arr)
    return s3.put_file(path, name), path.stat().st_size


def test_read_header_two_gets_at_most_64k(s3: Any, tmp_path: Path) -> None:
    url, _ = _upload(s3, tmp_path, "big.npy", np.zeros((2000, 1000), dtype="<f4"))
    with s3.counter.measure() as m:
        header = npystore.read_header(url, storage_options=s3.storage_options)
    assert header.shape == (2000, 1000)
    assert m.gets <= 2
    assert m.bytes <= 64 * 1024
    assert m.bytes == header.data_offset  # the header, not one byte of data
    assert m.heads <= 1
    assert m.requests == m.gets + m.heads


def test_read_header_of_a_large_header_reads_exactly_the_rest(s3: Any, tmp_path: Path) -> None:
    dtype = np.dtype([(f"f{i:04d}", "<i2") for i in range(300)])  # ~ 5 KiB header
    url, _ = _upload(s3, tmp_path, "wide.npy", np.zeros(10_000, dtype=dtype))
    with s3.counter.measure() as m:
        header = npystore.read_header(url, storage_options=s3.storage_options)
    assert m.gets == 2
    assert m.ranges[0][0] == 0
    # the second GET starts where the first stopped and ends exactly at the data offset
    assert m.ranges[1] == (m.ranges[0][1] + 1, header.data_offset - 1)
    assert m.bytes == header.data_offset


def test_open_npy_moves_no_data_and_slices_move_only_their_chunks(s3: Any, tmp_path: Path) -> None:
    arr = np.arange(4_000_000, dtype="<f8").reshape(4000, 1000)
    url, size = _upload(s3, tmp_path, "a.npy", arr)
    opts = s3.storage_options
    with s3.counter.measure() as m:
        a = npystore.open_npy(url, chunks=(250, 1000), storage_options=opts)
    offset = npystore.read_header(url, storage_options=opts).data_offset
    assert m.gets == 1
    assert m.heads <= 1
    # the one GET is exactly the header: no byte of the data was asked for or moved
    assert m.bytes == offset
    assert all(end is not None and end < offset for _, end in m.ranges)

    chunk_bytes = 250 * 1000 * 8
    with s3.counter.measure() as m:
        got = a[1000:1500].compute()
    np.testing.assert_array_equal(got, arr[1000:1500])
    assert m.bytes <= 2 * chunk_bytes  # two chunks touched, no more
    assert all(
        offset + 1000 * 8000 <= start and end is not None and end < offset + 1500 * 8000
        for start, end in m.ranges
    )
    with s3.counter.measure() as m:
        got = a[1234, 10:20].compute()
    np.testing.assert_array_equal(got, arr[1234, 10:20])
    assert m.bytes <= chunk_bytes
    assert m.gets == 1

    with s3.counter.measure() as m:
        total = a.sum().compute()
    assert total == arr.sum()
    assert m.bytes <= 1.01 * size


@pytest.mark.parametrize("order", ["C", "F"])
def test_full_compute_moves_at_most_the_file(s3: Any, tmp_path: Path, order: str) -> None:
    arr = np.arange(600_000, dtype=">i4").reshape(600, 1000)
    if order == "F":
        arr = np.asfortranarray(arr)
    url, size = _upload(s3, tmp_path, f"full-{order}.npy", arr)
    opts = s3.storage_options
    with dask.config.set({"array.chunk-size": "256KiB"}):
        a = npystore.open_npy(url, storage_options=opts)
    assert a.npartitions > 5
    with s3.counter.measure() as m:
        got = a.compute()
    np.testing.assert_array_equal(got, arr)
    assert got.dtype == np.dtype(">i4")
    assert m.bytes <= 1.01 * size
    assert m.gets == a.npartitions
    with s3.counter.measure() as m:
        eager = npystore.load(url, storage_options=opts)
    np.testing.assert_array_equal(eager, arr)
    assert m.bytes <= 1.01 * size


def test_non_contiguous_chunks_merge_small_gaps(s3: Any, tmp_path: Path) -> None:
    arr = np.arange(200 * 300, dtype="<i8").reshape(200, 300)
    url, size = _upload(s3, tmp_path, "cols.npy", arr)
    a = npystore.open_npy(url, chunks=(200, 100), storage_options=s3.storage_options)
    with s3.counter.measure() as m:
        got = a.compute()
    np.testing.assert_array_equal(got, arr)
    # each column chunk is 200 rows of 800 bytes with 1600-byte gaps: one merged GET each
    assert m.gets == 3
    assert m.bytes <= 3 * size


def test_chained_simplecache_url(s3: Any, tmp_path: Path) -> None:
    arr = np.arange(1000, dtype="<u2")
    url, _ = _upload(s3, tmp_path, "c.npy", arr)
    cache = tmp_path / "cache"
    chained = f"simplecache::{url}"
    opts = {"s3": s3.storage_options, "simplecache": {"cache_storage": str(cache)}}
    got = npystore.open_npy(chained, chunks=100, storage_options=opts).compute()
    np.testing.assert_array_equal(got, arr)
    assert any(cache.iterdir())
    with s3.counter.measure() as m:
        again = npystore.load(chained, storage_options=opts)
    np.testing.assert_array_equal(again, arr)
    assert m.gets == 0  # served from the local cache


def test_missing_object(s3: Any) -> None:
    with pytest.raises(FileNotFoundError):
        npystore.open_npy(s3.url("nope.npy"), storage_options=s3.storage_options)
