"""Issue 14 item 10: one time budget per remote read, and errors that name the last problem.

A server that sends half a body and then one byte every 0.2 s never trips a socket read
timeout; the budget (``npystore_read_budget`` in storage_options, ``NPYSTORE_READ_BUDGET``)
ends the read with a FetchError naming the URL, the range, the budget and the problem. A
range's clock runs only while it holds a connection, so ranges that queue behind others
are not cut. Configuration errors are raised at once, never retried.
"""

from __future__ import annotations

import asyncio
import io
import pickle
import re
import time
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.memory import MemoryFileSystem

import npystore
from faultproxy import FaultProxy
from npystore.errors import FetchError
from npystore.fetch import READ_BUDGET, ObjectIdentity, RangeReader, open_reader, remote
from npystore.fetch.generic import CatFileRanges


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@pytest.fixture(params=["direct", "botocore"])
def path_kind(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "botocore":
        monkeypatch.setenv("NPYSTORE_S3_DIRECT", "0")
    return str(request.param)


def _through(s3: Any, proxy: FaultProxy, **extra: Any) -> dict[str, Any]:
    opts: dict[str, Any] = s3.server.storage_options(
        client_kwargs={"endpoint_url": proxy.url},
        config_kwargs={"retries": {"max_attempts": 1}, **extra.pop("config", {})},
    )
    return {**opts, **extra}


# -- unit ----------------------------------------------------------------------------------


def test_describe_never_gives_an_empty_problem() -> None:
    assert remote.describe(TimeoutError()) == "TimeoutError()"
    assert remote.describe(ConnectionResetError("peer reset")) == "ConnectionResetError: peer reset"
    assert remote.describe("got 3 bytes, expected 4") == "got 3 bytes, expected 4"
    assert remote.describe("") == "unknown problem"
    assert remote.describe(None)


def test_budget_from_option_environment_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(remote.BUDGET_ENV, raising=False)
    assert remote.budget_from() == READ_BUDGET == 300.0
    assert remote.budget_from(2) == 2.0
    assert remote.budget_from("inf") == float("inf")
    monkeypatch.setenv(remote.BUDGET_ENV, "7.5")
    assert remote.budget_from() == 7.5
    assert remote.budget_from(3) == 3.0  # the option wins
    for bad in (0, -1, "soon", float("nan")):
        with pytest.raises(ValueError, match=r"npystore_read_budget must be a positive number"):
            remote.budget_from(bad)
    monkeypatch.setenv(remote.BUDGET_ENV, "0")
    with pytest.raises(ValueError, match=r"NPYSTORE_READ_BUDGET must be a positive number"):
        remote.budget_from()


def test_the_option_reaches_the_reader_and_not_the_filesystem(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(remote.BUDGET_ENV, raising=False)
    np.save(tmp_path / "a.npy", np.arange(10))
    options = {"npystore_read_budget": 12, "auto_mkdir": False}
    reader = open_reader(str(tmp_path / "a.npy"), options)
    assert reader.budget == 12.0
    assert options == {"npystore_read_budget": 12, "auto_mkdir": False}  # not modified
    assert pickle.loads(pickle.dumps(reader)).budget == 12.0  # dask workers keep it
    memory = fsspec.filesystem("memory")
    memory.pipe("/budget/x.bin", b"0123456789")
    reader = open_reader("memory://budget/x.bin", {"npystore_read_budget": "5"})
    assert (reader.budget, reader.read(2, 5)) == (5.0, b"234")
    monkeypatch.setenv(remote.BUDGET_ENV, "9")
    assert open_reader(str(tmp_path / "a.npy")).budget == 9.0
    np.testing.assert_array_equal(
        npystore.open_npy(str(tmp_path / "a.npy"), storage_options={"npystore_read_budget": 1}),
        np.arange(10),
    )


def _run_ranges(get_one: Any, ranges: list[tuple[int, int]], budget: float = 30.0) -> Any:
    return asyncio.run(remote.read_ranges(ranges, get_one, url="mem://x", budget=budget))


def test_an_exception_without_text_is_named_by_its_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "RETRY_DELAY", 0.001)
    calls: list[int] = []

    async def silent(k: int, start: int, stop: int) -> bytes:
        calls.append(k)
        raise TimeoutError

    with pytest.raises(
        FetchError,
        match=r"^mem://x: reading bytes \[0, 4\) failed after 6 attempts: TimeoutError\(\)$",
    ):
        _run_ranges(silent, [(0, 4)])
    assert len(calls) == 6


def test_each_range_retries_on_its_own_and_fatal_errors_are_not_retried() -> None:
    tries: dict[int, int] = {}

    async def flaky(k: int, start: int, stop: int) -> bytes:
        tries[k] = tries.get(k, 0) + 1
        if k == 1 and tries[k] < 3:
            return b"x"  # short: retried
        return bytes(stop - start)

    assert _run_ranges(flaky, [(0, 4), (4, 10), (10, 11)]) == [bytes(4), bytes(6), bytes(1)]
    assert tries == {0: 1, 1: 3, 2: 1}

    async def misconfigured(k: int, start: int, stop: int) -> bytes:
        tries[k] = tries.get(k, 0) + 1
        raise TypeError("got an unexpected keyword argument 'anonn'")

    tries.clear()
    with pytest.raises(TypeError, match="anonn"):
        _run_ranges(misconfigured, [(0, 4)])
    assert tries == {0: 1}


# -- S3 through a misbehaving proxy ---------------------------------------------------------


@pytest.mark.s3
def test_trickling_range_reads_are_cut_by_the_budget(s3: Any, path_kind: str) -> None:
    data = np.random.default_rng(0).integers(0, 255, 200_000, dtype=np.uint8).tobytes()
    url = s3.put_bytes(data, "trickle.bin")
    opened = open_reader(url, s3.storage_options)
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("trickle",)) as proxy:
        opts = _through(s3, proxy, config={"read_timeout": 5})
        fs, path = fsspec.core.url_to_fs(url, **opts)
        reader = RangeReader(fs, path, opened.identity, budget=2.0)
        began = time.monotonic()
        with pytest.raises(
            FetchError,
            match=r"trickle\.bin: reading bytes \[100, 100100\) ran out of its time budget of "
            r"2 s after 1 attempt .*last problem: TimeoutError: attempt 1 had no complete "
            r"answer .*stalled or too slow",
        ):
            reader.read(100, 100_100)
        assert time.monotonic() - began < 4.5
        out = bytearray(150_000)
        with pytest.raises(FetchError, match=r"trickle\.bin: reading bytes \[\d+, \d+\) ran out"):
            reader.readinto_many([(50_000, memoryview(out))])
    assert proxy.counts["trickle"] >= 2


@pytest.mark.s3
def test_the_opening_get_is_cut_by_the_budget(s3: Any, path_kind: str) -> None:
    url = s3.put_bytes(_npy(np.arange(1000.0)), "slowopen.npy")
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("trickle",)) as proxy:
        opts = _through(s3, proxy, npystore_read_budget=1.5)
        began = time.monotonic()
        with pytest.raises(
            FetchError,
            match=r"slowopen\.npy: reading bytes \[0, 128\) at open ran out of its time budget "
            r"of 1\.5 s after 1 attempt.*TimeoutError",
        ):
            npystore.open_npy(url, storage_options=opts)
        assert time.monotonic() - began < 4.0


@pytest.mark.s3
def test_a_full_stall_names_the_timeout(s3: Any, path_kind: str) -> None:
    """Every attempt stalls until the client's read timeout: the message after the attempts
    names that timeout (it used to end in "after 6 attempts: " and nothing)."""
    data = _npy(np.arange(20_000.0))
    url = s3.put_bytes(data, "stall.npy")
    opened = open_reader(url, s3.storage_options)
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("stall",)) as proxy:
        opts = _through(s3, proxy, config={"read_timeout": 0.3})
        fs, path = fsspec.core.url_to_fs(url, **opts)
        reader = RangeReader(fs, path, opened.identity, budget=60.0)
        began = time.monotonic()
        with pytest.raises(FetchError) as info:
            reader.read(128, 60_128)
        assert time.monotonic() - began < 15
    message = str(info.value)
    assert "stall.npy: reading bytes [128, 60128) failed after 6 attempts: " in message
    problem = message.split("after 6 attempts: ", 1)[1]
    assert re.match(r"[A-Za-z]*(Timeout|Error)[A-Za-z]*: \S", problem), message  # type: text
    assert proxy.counts["stall"] == 6


@pytest.mark.s3
def test_ranges_queued_for_a_connection_are_not_charged(s3: Any, path_kind: str) -> None:
    """One connection, 8 ranges each answered after 0.3 s: 2.4 s in all, while each range
    takes 0.3 s of its 1.5 s budget. All arrive."""
    data = np.random.default_rng(1).integers(0, 255, 100_000, dtype=np.uint8).tobytes()
    url = s3.put_bytes(data, "queued.bin")
    opened = open_reader(url, s3.storage_options)
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("slow",), slow_seconds=0.3) as proxy:
        opts = _through(s3, proxy, config={"max_pool_connections": 1})
        fs, path = fsspec.core.url_to_fs(url, **opts)
        reader = RangeReader(fs, path, opened.identity, budget=1.5)
        ranges = [(i * 10_000, i * 10_000 + 5000) for i in range(8)]
        began = time.monotonic()
        assert reader.read_many(ranges) == [data[a:b] for a, b in ranges]
        assert time.monotonic() - began >= 8 * 0.3
    assert proxy.counts["slow"] >= 8


@pytest.mark.s3
@pytest.mark.parametrize(
    "bad",
    [
        {"client_kwargs": {"endpoint_urll": "http://127.0.0.1:1"}},
        {"config_kwargs": {"read_timout": 3}},
        {"anonn": True},
    ],
    ids=["client_kwargs", "config_kwargs", "filesystem"],
)
def test_configuration_errors_are_raised_at_once(s3: Any, bad: dict[str, Any]) -> None:
    """A misspelled option is a TypeError from the first request: raised as it is, not
    retried six times and wrapped in a FetchError."""
    import s3fs

    url = s3.put_bytes(_npy(np.arange(10.0)), "conf.npy")
    s3fs.S3FileSystem.clear_instance_cache()
    began = time.monotonic()
    with pytest.raises(TypeError, match=r"unexpected keyword argument"):
        npystore.open_npy(url, storage_options=s3.server.storage_options(**bad))
    assert time.monotonic() - began < 1.5  # six attempts with backoff took 1.7-2.5 s


# -- other filesystems -----------------------------------------------------------------------


class _SlowAsyncFS(AsyncFileSystem):  # type: ignore[misc]
    """An async filesystem like gcsfs or adlfs: ``_cat_file`` per range, fsspec's gather."""

    protocol = "slowasync"

    def __init__(self, data: bytes, delay: float = 0.0, **kwargs: Any) -> None:
        super().__init__(skip_instance_cache=True, **kwargs)
        self.data, self.delay, self.calls = data, delay, 0

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return {"name": path, "size": len(self.data), "type": "file"}

    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return self.data[start:end]


def test_other_async_filesystems_read_under_the_budget() -> None:
    data = bytes(range(256)) * 100
    fs = _SlowAsyncFS(data)
    identity = ObjectIdentity.from_info("slowasync://x", {"size": len(data)})
    reader = RangeReader(fs, "x", identity, budget=0.5)
    assert isinstance(reader.transport, CatFileRanges)
    assert reader.read_many([(0, 10), (300, 20_000)]) == [data[:10], data[300:20_000]]
    fs.delay = 30.0  # a read that never ends
    began = time.monotonic()
    with pytest.raises(
        FetchError, match=r"slowasync://x: reading bytes \[5, 50\) ran out of its time budget"
    ):
        reader.read(5, 50)
    assert time.monotonic() - began < 3


class _ShortFS(MemoryFileSystem):  # type: ignore[misc]
    """A synchronous filesystem whose cat_ranges answers slowly and short, or fails."""

    protocol = "shortmem"
    failure: BaseException | None = None

    def cat_ranges(self, paths: list[str], starts: list[int], ends: list[int], **kw: Any) -> Any:
        time.sleep(0.2)
        if self.failure is not None:
            return [self.failure for _ in paths]
        return [b"x" for _ in paths]


def test_synchronous_filesystems_check_the_budget_between_rounds() -> None:
    fs = _ShortFS(skip_instance_cache=True)
    identity = ObjectIdentity.from_info("shortmem://y", {"size": 100})
    reader = RangeReader(fs, "y", identity, budget=0.3)
    began = time.monotonic()
    with pytest.raises(
        FetchError,
        match=r"shortmem://y: reading bytes \[0, 4\) ran out of its time budget of 0\.3 s after "
        r"2 attempts .*last problem: got 1 bytes, expected 4",
    ):
        reader.read(0, 4)
    assert time.monotonic() - began < 2
    fs.failure = TypeError("cat_ranges() got an unexpected keyword argument 'x'")
    with pytest.raises(TypeError, match="unexpected keyword"):
        reader.read(0, 4)
