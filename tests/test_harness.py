"""The embedded-S3 harness: LocalS3, RequestCounter and the ``s3`` fixtures."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import fsspec
import pytest

from npystore.testing import (
    LocalS3,
    RequestCounter,
    S3Sandbox,
    parse_range_header,
    s3_url,
    split_s3_url,
)

DATA = bytes(range(256)) * 8  # 2048 bytes

_seen_buckets: list[str] = []


# ----------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"bytes=10-109", (10, 109)),
        ("bytes=0-0", (0, 0)),
        ("bytes=5-", (5, None)),
        ("bytes=-5", (-5, None)),
        (" Bytes = 7 - 9 ", (7, 9)),
        (None, None),
        ("bytes=0-1,5-6", None),
        ("items=0-1", None),
        ("bytes=x-1", None),
        ("bytes=-", None),
    ],
)
def test_parse_range_header(value: str | bytes | None, expected: Any) -> None:
    assert parse_range_header(value) == expected


def test_urls() -> None:
    assert s3_url("b", "k/x.npy") == "s3://b/k/x.npy"
    assert s3_url("b", "/k") == "s3://b/k"
    assert s3_url("b") == "s3://b"
    assert split_s3_url("s3://b/k/x.npy") == ("b", "k/x.npy")
    assert split_s3_url("b/k") == ("b", "k")
    assert split_s3_url("s3://b") == ("b", "")
    with pytest.raises(ValueError, match="not an s3"):
        split_s3_url("gs://b/k")


def test_import_is_cheap() -> None:
    code = (
        "import sys, npystore.testing\n"
        "heavy = [m for m in ('moto', 'boto3', 's3fs', 'aiobotocore') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_not_running_server() -> None:
    server = LocalS3()
    assert not server.running
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.endpoint_url
    server.stop()  # idempotent, harmless before start


# ------------------------------------------------------------------- the server


def test_server(s3_server: LocalS3) -> None:
    assert s3_server.running
    assert s3_server.endpoint_url.startswith("http://127.0.0.1:")
    assert s3_server.start() is s3_server  # no-op when running
    options = s3_server.storage_options(anon=False, client_kwargs={"verify": False})
    assert options["key"] == options["secret"] == "testing"
    assert options["anon"] is False
    assert options["client_kwargs"] == {
        "endpoint_url": s3_server.endpoint_url,
        "region_name": "us-east-1",
        "verify": False,
    }
    assert s3_server.storage_options() == s3_server.storage_options()


def test_second_server_starts_and_stops_quickly() -> None:
    import time

    started = time.perf_counter()
    with LocalS3() as server:
        assert time.perf_counter() - started < 2.0
        bucket = server.create_bucket()
        url = server.put(s3_url(bucket, "k"), b"abc")
        assert server.client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"abc"
        assert url == f"s3://{bucket}/k"
        server.delete_bucket(bucket)
        started = time.perf_counter()
    assert not server.running
    assert time.perf_counter() - started < 2.0  # generous: guards against hangs, not speed


def test_bucket_isolation_first(s3: S3Sandbox) -> None:
    _seen_buckets.append(s3.bucket)
    s3.put_bytes(b"x", "only-here")
    assert s3.fs.ls(s3.bucket) == [f"{s3.bucket}/only-here"]


def test_bucket_isolation_second(s3: S3Sandbox, s3_server: LocalS3) -> None:
    _seen_buckets.append(s3.bucket)
    assert len(set(_seen_buckets)) == len(_seen_buckets)
    assert s3.fs.ls(s3.bucket) == []
    # the previous test's bucket was deleted at its teardown
    listed = {b["Name"] for b in s3_server.client().list_buckets()["Buckets"]}
    assert s3.bucket in listed
    assert not listed.intersection(_seen_buckets[:-1])


def test_roundtrip(s3: S3Sandbox, tmp_path: Path) -> None:
    url = s3.put_bytes(DATA, "dir/data.bin")
    assert url == s3.url("dir/data.bin") == f"s3://{s3.bucket}/dir/data.bin"
    assert s3.fs.cat_file(url) == DATA

    local = tmp_path / "file.bin"
    local.write_bytes(DATA[::-1])
    assert s3.put_file(local, "up/loaded.bin") == s3.url("up/loaded.bin")
    assert s3.put_file(local) == s3.url("file.bin")
    assert s3.fs.cat_file(s3.url("up/loaded.bin")) == DATA[::-1]
    # uploads invalidate the listing cache
    assert sorted(s3.fs.ls(s3.bucket)) == [f"{s3.bucket}/{k}" for k in ("dir", "file.bin", "up")]
    s3.put_bytes(b"", "z")
    assert f"{s3.bucket}/z" in s3.fs.ls(s3.bucket)


# ------------------------------------------------------------------ the counter


def test_ranged_get_counts_one_get(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    with s3.counter.measure() as m:
        assert s3.fs.cat_file(url, start=10, end=110) == DATA[10:110]
    assert m.requests == 1
    assert m.gets == 1
    assert m.heads == 0
    assert m.bytes == 100
    assert m.errors == 0
    assert m.ranges == [(10, 109)]
    assert m.by_operation == {"GetObject": 1}
    assert m.records[0].method == "GET"
    assert m.records[0].range_header == "bytes=10-109"
    assert m.records[0].url.endswith(f"/{s3.bucket}/data.bin")


def test_bytes_are_what_the_server_sent(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    with s3.counter.measure() as m:
        tail = s3.fs.cat_file(url, start=2000, end=5000)  # past the end: 48 bytes come back
        whole = s3.fs.cat_file(url)
    assert tail == DATA[2000:]
    assert whole == DATA
    assert m.gets == 2
    assert m.bytes == 48 + len(DATA)
    assert m.ranges[0] == (2000, 4999)
    assert m.ranges[1] == (0, None)  # a GET without Range


def test_info_counts_one_head(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    with s3.counter.measure() as m:
        assert s3.fs.info(url)["size"] == len(DATA)
    assert m.requests == 1
    assert m.heads == 1
    assert m.gets == 0
    assert m.bytes == 0
    assert m.ranges == []


def test_cat_ranges_counts_each_get(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    starts = [0, 100, 500, 1000, 2000]
    ends = [10, 150, 600, 1001, 2048]
    with s3.counter.measure() as m:
        out = s3.fs.cat_ranges([url] * 5, starts, ends)
    assert out == [DATA[a:b] for a, b in zip(starts, ends, strict=True)]
    assert m.gets == 5
    assert m.requests == 5
    assert m.bytes == sum(b - a for a, b in zip(starts, ends, strict=True))
    # sent concurrently: compare as a multiset
    assert sorted(m.ranges) == sorted((a, b - 1) for a, b in zip(starts, ends, strict=True))


def test_errors_are_counted(s3: S3Sandbox) -> None:
    with s3.counter.measure() as m, pytest.raises(FileNotFoundError):
        s3.fs.cat_file(s3.url("missing"))
    assert m.requests >= 1
    assert m.errors >= 1
    assert m.bytes == 0


def test_url_to_fs_gives_the_counted_instance(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    fs, path = fsspec.core.url_to_fs(url, **s3.storage_options)
    assert fs is s3.fs
    assert path == f"{s3.bucket}/data.bin"
    with s3.counter.measure() as m, fsspec.open(url, "rb", **s3.storage_options) as f:
        f.seek(1000)
        assert f.read(24) == DATA[1000:1024]
    assert m.gets >= 1
    assert m.ranges  # ranged, not whole-object reads


def test_overlapping_windows(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    counter = s3.counter
    with counter.measure() as outer:
        s3.fs.cat_file(url, start=0, end=10)
        with counter.measure() as inner:
            s3.fs.cat_file(url, start=10, end=30)
        s3.fs.info(url)
    assert (outer.requests, outer.gets, outer.heads, outer.bytes) == (3, 2, 1, 30)
    assert outer.ranges == [(0, 9), (10, 29)]
    assert (inner.requests, inner.gets, inner.heads, inner.bytes) == (1, 1, 0, 20)
    assert inner.ranges == [(10, 29)]
    # nothing is counted after a window closed
    s3.fs.cat_file(url, start=0, end=1)
    assert outer.requests == 3
    assert inner.requests == 1
    assert counter.total.requests >= 4


def test_windows_opened_on_other_threads(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    barrier = threading.Barrier(2)
    results: list[int] = []

    def window() -> None:
        with s3.counter.measure() as m:
            barrier.wait(timeout=10)
            s3.fs.cat_file(url, start=0, end=5)
            barrier.wait(timeout=10)
        results.append(m.gets)

    threads = [threading.Thread(target=window) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert results == [2, 2]  # each window saw both threads' GET


def test_several_counters_do_not_interfere(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    with RequestCounter.attach(s3.fs) as other:
        was_attached = other.attached
        with s3.counter.measure() as a, other.measure() as b:
            s3.fs.cat_file(url, start=0, end=10)
        assert a.gets == b.gets == 1
        assert a.bytes == b.bytes == 10
    assert was_attached
    assert not other.attached
    with pytest.raises(RuntimeError, match="detached"), other.measure():
        pass
    # the fixture's counter still works after the other one detached
    with s3.counter.measure() as c:
        s3.fs.cat_file(url, start=0, end=10)
    assert (c.requests, c.gets, c.bytes) == (1, 1, 10)
    assert b.requests == 1


def test_retries_are_counted_per_attempt(s3: S3Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first attempt's connection drops: botocore retries, and both attempts count."""
    from botocore.exceptions import ConnectionClosedError

    url = s3.put_bytes(DATA, "data.bin")
    client = s3.fs.s3
    http_session = client._endpoint.http_session
    real_send = http_session.send
    failures = [1]

    async def flaky_send(request: Any) -> Any:
        # fails after every before-send handler ran, like a real dropped connection
        if failures:
            failures.pop()
            raise ConnectionClosedError(endpoint_url=request.url)
        return await real_send(request)

    def retry_now(caught_exception: Any = None, **kwargs: Any) -> int | None:
        # an immediate retry instead of botocore's random back-off sleep
        return 0 if isinstance(caught_exception, ConnectionClosedError) else None

    monkeypatch.setattr(http_session, "send", flaky_send)
    events = client.meta.events
    events.register_first("needs-retry.s3.GetObject", retry_now, unique_id="test-retry-now")
    try:
        with s3.counter.measure() as m:
            assert s3.fs.cat_file(url, start=0, end=10) == DATA[:10]
    finally:
        events.unregister("needs-retry.s3.GetObject", unique_id="test-retry-now")
    assert not failures
    assert m.requests == 2
    assert m.gets == 2
    assert m.errors == 1
    assert m.bytes == 10
    assert m.ranges == [(0, 9), (0, 9)]


def test_counter_follows_a_refreshed_client(s3: S3Sandbox) -> None:
    url = s3.put_bytes(DATA, "data.bin")
    old_client = s3.fs.s3
    s3.fs.connect(refresh=True)
    assert s3.fs.s3 is not old_client
    with s3.counter.measure() as m:
        s3.fs.cat_file(url, start=0, end=10)
    assert m.gets == 1
