"""A server that cannot answer many requests at once (issue 26 item 14): npystore lowers the
requests it has in flight until the server keeps up (AIMD per connection pool,
:class:`npystore.fetch.remote.Limiter`), and when it still fails, the error names the option
that asks for fewer at once.

The server model (``FaultProxy`` with ``"crowd"``) serves its requests one at a time, as
moto does when it copies a large object for every range: with many requests in flight each
waits for all the others, past the client's read timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import fsspec
import numpy as np
import pytest

from faultproxy import FaultProxy
from npystore.errors import FetchError
from npystore.fetch import RangeReader, open_reader, remote

# -- the limiter ---------------------------------------------------------------------------


def test_limiter_halves_once_per_round_and_grows_back() -> None:
    async def run() -> None:
        lim = remote.Limiter(8, "fewer: {n}")
        tickets = [await lim.acquire() for _ in range(8)]
        assert lim.in_flight == 8
        waiting = asyncio.ensure_future(lim.acquire())
        await asyncio.sleep(0)
        assert not waiting.done()  # the ninth waits for a permit
        for t in tickets:  # all eight fail together: one cut, not eight
            lim.record(t, failed=True)
        assert lim.limit == 4
        assert lim.hint() == (
            "; the server could not answer 8 requests at once (npystore fell back to 4 in "
            "flight); fewer: 4"
        )
        for _ in tickets:
            lim.release()
        ninth = await waiting
        assert lim.in_flight == 1
        lim.record(ninth, failed=True)  # started after the cut: cuts again
        assert lim.limit == 2
        lim.release()
        for _ in range(40):  # answers in time: about one more per round
            t = await lim.acquire()
            lim.record(t, failed=False, first_byte=0.01)
            lim.release()
        assert 6 < lim.limit <= 8
        before = lim.limit
        late = await lim.acquire()
        lim.record(late, failed=False, first_byte=5.0)  # 500 times the fastest: the server queues
        lim.release()
        assert lim.limit == before * remote.CUT_ON_LATE

    asyncio.run(run())


def test_a_cancelled_waiter_passes_its_permit_on() -> None:
    async def run() -> None:
        lim = remote.Limiter(1)
        first = await lim.acquire()
        second = asyncio.ensure_future(lim.acquire())
        third = asyncio.ensure_future(lim.acquire())
        await asyncio.sleep(0)
        second.cancel()
        lim.release()
        await asyncio.sleep(0)
        assert await third == first + 1
        assert lim.in_flight == 1

    asyncio.run(run())


def test_each_server_has_its_limit_and_the_pool_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    class Pool:  # a session or client (weakly referable)
        pass

    async def run() -> None:
        pool = Pool()
        slow, other = remote.slots(pool, 4, server="slow:1"), remote.slots(pool, 4, server="b:2")
        assert slow is not None
        assert other is not None
        assert slow is not other
        assert remote.slots(pool, 4, server="slow:1") is slow
        tickets = [await slow.acquire() for _ in range(3)]
        slow.record(tickets[0], failed=True)
        assert (slow.limit, other.limit) == (2, 4)  # the other server keeps its limit
        await other.acquire()  # the pool's 4th connection
        waiting = asyncio.ensure_future(other.acquire())
        await asyncio.sleep(0)
        assert not waiting.done()  # the pool is full, whatever the server
        slow.release()
        await waiting
        for _ in range(2):
            slow.release()
        other.release()
        other.release()
        monkeypatch.setattr(remote, "FORGET_AFTER", 0.0)
        await asyncio.sleep(0.01)
        await slow.acquire()  # a pause after the cut: the limit starts again from the top
        assert slow.limit == 4
        slow.release()

    asyncio.run(run())


# -- a server that serves one request at a time --------------------------------------------


def _reader(
    s3: Any, proxy: FaultProxy, url: str, opened: RangeReader, budget: float = 20.0, **config: Any
) -> RangeReader:
    opts = s3.server.storage_options(
        client_kwargs={"endpoint_url": proxy.url},
        config_kwargs={"retries": {"max_attempts": 1}, **config},
    )
    fs, path = fsspec.core.url_to_fs(url, **opts)
    return RangeReader(fs, path, opened.identity, budget=budget)


@pytest.mark.s3
def test_a_crowded_server_gets_fewer_requests_and_answers_them_all(s3: Any) -> None:
    # 12 at once: the last waits 0.48 s, four times the read timeout (npystore before the
    # limiter sent every retry at the same concurrency, and all of them timed out)
    n, crowd, timeout = 12, 0.04, 0.12
    data = np.random.default_rng(0).integers(0, 255, n * 4096, dtype=np.uint8).tobytes()
    url = s3.put_bytes(data, "crowded.bin")
    opened = open_reader(url, s3.storage_options)
    ranges = [(i * 4096, (i + 1) * 4096) for i in range(n)]
    with FaultProxy(
        s3.server.endpoint_url, rate=1.0, faults=("crowd",), crowd_seconds=crowd
    ) as proxy:
        reader = _reader(s3, proxy, url, opened, max_pool_connections=n, read_timeout=timeout)
        assert reader.read_many(ranges) == [data[a:b] for a, b in ranges]
    assert proxy.counts["crowd"] > n  # some timed out and were asked again, fewer at once


@pytest.mark.s3
def test_a_server_too_slow_even_for_one_request_names_the_option(s3: Any) -> None:
    data = bytes(range(256)) * 8
    url = s3.put_bytes(data, "tooslow.bin")
    opened = open_reader(url, s3.storage_options)
    crowd = {"rate": 1.0, "faults": ("crowd",), "crowd_seconds": 0.3}
    with FaultProxy(s3.server.endpoint_url, **crowd) as proxy:
        reader = _reader(
            s3, proxy, url, opened, budget=0.6, max_pool_connections=2, read_timeout=0.15
        )
        with pytest.raises(FetchError) as info:
            reader.read_many([(0, 1024), (1024, 2048)])
    message = str(info.value)
    assert "tooslow.bin: reading bytes [" in message
    assert "could not answer 2 requests at once (npystore fell back to 1 in flight)" in message
    assert "storage_options={'config_kwargs': {'max_pool_connections': 1}}" in message
