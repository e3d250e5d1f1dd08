"""Writers on S3 (moto): multipart uploads equal to numpy's bytes, parts within S3's limits,
failures that leave no object and no pending multipart upload, and a dask.distributed
LocalCluster whose workers upload their own parts."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import dask.array as da
import numpy as np
import pytest

import npystore
from npystore.fetch import open_reader
from npystore.fetch import sink as sink_module
from npystore.write import WriteError
from npystore.write import npy as write_npy


def _npy(a: Any) -> bytes:
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def _pending(s3: Any) -> list[Any]:
    answer = s3.server.client().list_multipart_uploads(Bucket=s3.bucket)
    return list(answer.get("Uploads", []))


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of S3's minimum (5 MiB), so a small array makes several."""
    monkeypatch.setattr(write_npy, "PART_SIZE", sink_module.S3_MIN_PART)


def test_save_numpy_and_dask_to_s3(s3: Any, small_parts: None) -> None:
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((1100, 1300)))  # ~11 MB: 3 parts
    url = s3.url("a.npy")
    with s3.counter.measure() as m:
        npystore.save(url, a, storage_options=s3.storage_options)
    assert s3.fs.cat(url) == _npy(a)
    assert m.by_operation["UploadPart"] == 3
    assert m.by_operation["CompleteMultipartUpload"] == 1
    x = da.from_array(rng.integers(0, 2**31, (700, 1000)).astype(">i8"), chunks=(130, 300))
    npystore.save(s3.url("x.npy"), x, storage_options=s3.storage_options)
    assert s3.fs.cat(s3.url("x.npy")) == _npy(np.asarray(x))
    for tiny in (
        np.float32(2.5),
        np.zeros((0, 3), "<U2"),
        np.zeros(3, [("a", "<i2"), ("b", ">f8")]),
    ):
        npystore.save(s3.url("t.npy"), tiny, storage_options=s3.storage_options)
        assert s3.fs.cat(s3.url("t.npy")) == _npy(tiny)
    assert _pending(s3) == []


def test_parts_upload_concurrently_with_the_default_scheduler(
    s3: Any, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dask's default scheduler for arrays (none configured) would run one part upload per
    core; the save gives the part tasks the sink's concurrency instead."""
    import dask

    real = sink_module.S3Sink.write
    seen: list[int] = []

    def held(self: Any, number: int, offset: int, data: Any) -> Any:
        import time

        seen.append(number)
        time.sleep(0.2)  # every part in flight at once, if the scheduler lets them
        return real(self, number, offset, data)

    monkeypatch.setattr(sink_module.S3Sink, "write", held)
    x = da.zeros((6 * sink_module.S3_MIN_PART // 8,), chunks=sink_module.S3_MIN_PART // 8)
    assert dask.config.get("scheduler", None) is None
    with s3.counter.measure() as m:
        npystore.save(s3.url("c.npy"), x, storage_options=s3.storage_options)
    assert sorted(seen) == list(range(1, 8))  # the header makes a seventh part
    assert m.max_in_flight > 2, m


def test_part_size_keeps_within_s3_limits() -> None:
    class Fake(sink_module.Sink):
        min_part, max_parts, url = sink_module.S3_MIN_PART, sink_module.S3_MAX_PARTS, "x"

        def write(self, number: int, offset: int, data: Any) -> sink_module.Receipt:
            raise AssertionError

        def commit(self, receipts: Any, size: int) -> None:
            raise AssertionError

        def abort(self) -> None:
            raise AssertionError

    for total in (1, 2**30, 200 * 2**30, 5 * 2**40):
        size = write_npy.part_size(total, Fake())
        assert size >= sink_module.S3_MIN_PART
        assert -(-total // size) <= sink_module.S3_MAX_PARTS


def _failing(x: da.Array, bad: int) -> da.Array:
    def f(block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info[0]["chunk-location"][0] == bad:
            raise RuntimeError(f"block {bad} refuses")
        return block

    return x.map_blocks(f, dtype=x.dtype)


def test_failing_block_leaves_nothing_on_s3(s3: Any, small_parts: None) -> None:
    x = _failing(da.ones((3000, 1000), chunks=(300, 1000)), 7)
    url = s3.url("fail.npy")
    with pytest.raises(WriteError, match=r"block \(7, 0\)") as info:
        npystore.save(url, x, storage_options=s3.storage_options)
    assert "block 7 refuses" in str(info.value.__cause__)
    assert not s3.fs.exists(url)
    assert _pending(s3) == []
    with pytest.raises(WriteError, match="refuses"):
        npystore.savez_compressed(url, a=x, storage_options=s3.storage_options)
    assert not s3.fs.exists(url)
    assert _pending(s3) == []


def test_failing_part_upload_aborts(
    s3: Any, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sink_module.S3Sink.write

    def flaky(self: Any, number: int, offset: int, data: Any) -> Any:
        if number == 2:
            raise npystore.FetchError(f"{self.url}: part {number} lost")
        return real(self, number, offset, data)

    monkeypatch.setattr(sink_module.S3Sink, "write", flaky)
    url = s3.url("lost.npz")
    a = np.random.default_rng(1).standard_normal((2000, 1000))
    for write in (npystore.save, npystore.savez):
        # the error names the part (through the task that uploaded it, or directly)
        with pytest.raises((npystore.FetchError, WriteError), match="part 2 lost"):
            write(url, a, storage_options=s3.storage_options)
        assert not s3.fs.exists(url)
        assert _pending(s3) == []


distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.mark.slow
def test_local_cluster_workers_upload_their_parts(s3: Any, client: Any, small_parts: None) -> None:
    x = da.random.default_rng(5).standard_normal((1500, 1000), chunks=(250, 1000))
    want = _npy(x.compute())
    url = s3.url("dist.npy")
    with s3.counter.measure() as m:
        npystore.save(url, x, storage_options=s3.storage_options)
    assert s3.fs.cat(url) == want
    # the parts went up from the worker processes, not through this process's client
    assert m.by_operation["UploadPart"] == 0
    assert m.by_operation["CompleteMultipartUpload"] == 1
    assert _pending(s3) == []


def test_a_stalled_server_fails_the_write_instead_of_hanging(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that accepts connections and never answers, botocore's read timeout far
    away: the write's own deadline ends it with an error naming the step."""
    import socket
    import threading
    import time

    monkeypatch.setattr(sink_module, "S3_STALL", 1.0)
    held: list[socket.socket] = []
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def hold() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # read nothing, answer nothing
            except TimeoutError:
                continue

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    opts = s3.server.storage_options(
        client_kwargs={"endpoint_url": f"http://127.0.0.1:{server.getsockname()[1]}"},
        config_kwargs={"retries": {"max_attempts": 1}, "read_timeout": 600},
    )
    try:
        began = time.monotonic()
        with pytest.raises(npystore.FetchError, match=r"starting the upload failed: no answer"):
            npystore.save(s3.url("stalled.npy"), np.arange(1000.0), storage_options=opts)
        assert time.monotonic() - began < 30
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_a_url_naming_a_folder_is_refused(s3: Any) -> None:
    a = np.arange(10)
    for write in (npystore.save, npystore.savez, npystore.savez_compressed):
        with pytest.raises(npystore.FetchError, match="names a folder"):
            write(s3.url("dir/"), a, storage_options=s3.storage_options)
    assert not s3.fs.exists(s3.url("dir"))
    assert s3.fs.ls(s3.url(""), detail=False) == []
    assert _pending(s3) == []


def test_an_unreachable_endpoint_is_a_fetch_error_after_npystores_attempts(s3: Any) -> None:
    """botocore's own retries are off for the upload's requests (as for reads): npystore's
    attempts with its backoff, then a FetchError naming the URL and the step (before: a raw
    botocore EndpointConnectionError after botocore's retries, 8-10 s)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import fsspec

    from npystore.testing import RequestCounter

    opts = s3.server.storage_options(client_kwargs={"endpoint_url": f"http://127.0.0.1:{port}"})
    counter = RequestCounter.attach(fsspec.filesystem("s3", **opts))  # the instance npystore gets
    url = "s3://nowhere/x.npy"
    with pytest.raises(npystore.FetchError):  # a read first: its operation is marked too
        npystore.load(url, storage_options=opts)
    with counter.measure() as m, pytest.raises(npystore.FetchError) as info:
        npystore.savez_compressed(url, a=np.arange(10), storage_options=opts)
    text = str(info.value)
    assert text.startswith(f"{url}: starting the upload failed after 6 attempts"), text
    assert "EndpointConnectionError" in text
    # npystore's 6 attempts, each sent once (botocore's own retries would multiply them)
    assert m.by_operation["CreateMultipartUpload"] == 6, m.by_operation


@pytest.mark.parametrize("key", ["d/../x.npy", "d/./y.npy"])
def test_keys_with_dot_segments_are_written_and_read_back_as_given(s3: Any, key: str) -> None:
    decoy = np.zeros(200_000)  # what a normalised URL would find instead
    for other in ("x.npy", "d/y.npy"):
        s3.put_bytes(_npy(decoy), other)
    a = np.arange(200_000.0)
    url = s3.url(key)
    npystore.save(url, a, storage_options=s3.storage_options)
    assert s3.server.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read() == _npy(a)
    x = npystore.open_npy(url, storage_options=s3.storage_options)
    np.testing.assert_array_equal(x[-1000:].compute(), a[-1000:])
    reader = open_reader(url, s3.storage_options)  # the direct path (presigned GETs) too
    assert reader.read_many([(1_500_000, 1_500_100)]) == [_npy(a)[1_500_000:1_500_100]]
    assert reader.transport._signed is not None
    assert not reader.transport._direct_off
    np.testing.assert_array_equal(npystore.load(url, storage_options=s3.storage_options), a)
    npystore.savez_compressed(url + "z", a=a, storage_options=s3.storage_options)
    z = npystore.open_npz(url + "z", storage_options=s3.storage_options)
    np.testing.assert_array_equal(z["a"][-10:].compute(), a[-10:])


def test_parts_go_in_order_to_a_server_that_takes_them_in_order(
    rclone_strict: Any, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rclone's ``serve s3`` holds a part that arrives ahead of its turn until the ones
    before it arrived (here it holds none: any part ahead waits). Parts uploaded in dask's
    order stalled: every thread on a part that waited for one no thread would start, until
    the write's deadline failed it. Ascending order with a lookahead of the sink's
    concurrency never waits on a part that is not in flight."""
    monkeypatch.setattr(sink_module.S3Sink, "concurrency", 2)  # 2 threads: 5 parts suffice
    monkeypatch.setattr(sink_module, "S3_STALL", 10.0)  # a stall fails in ~10 s, not 140
    monkeypatch.setattr(sink_module, "S3_SLOWEST", 8 * 2**20)
    with rclone_strict.sandbox() as bucket:
        n = 5 * sink_module.S3_MIN_PART // 8
        x = da.arange(n, chunks=-(-n // 3), dtype="<f8")
        npystore.save(bucket.url("x.npy"), x, storage_options=bucket.storage_options)
        assert bucket.fs.cat_file(bucket.url("x.npy")) == _npy(np.asarray(x))
