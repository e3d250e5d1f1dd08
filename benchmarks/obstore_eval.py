"""obstore against npystore's S3 range path: CPU per GET, throughput, and pinning (issue 17).

Three clients read the same 256 MiB object from ``rclone serve s3`` on loopback:

- ``npystore``: ``open_reader(url, storage_options)`` then ``read_many`` (small ranges) or
  ``readinto_many`` into one buffer (8 MiB ranges): presigned URL over a bare aiohttp
  session, every answer pinned and checked against the identity at open;
- ``obstore``: an ``obstore.store.S3Store`` built from the *same* storage options
  (:func:`store_from_options`), three ways: ``get_ranges`` (its bulk call, coalescing off;
  its own fixed concurrency of 10), ``get_range_async`` with our concurrency (unpinned: it
  returns bytes only), and ``get_async`` with ``range`` plus ``if_match`` (or ``version``)
  and the answer's ``meta`` (ETag, size, version) checked as npystore checks its answers:
  what an obstore transport would have to do;
- ``s3fs``: ``fs.cat_ranges`` (botocore per request), the reference.

Measured, interleaved (the order rotates every repeat), median of ``--repeat`` runs:

- CPU seconds per GET (``time.process_time`` of this process, all its threads, divided by
  the number of GETs) for 64 KiB ranges (``--small-gets`` of them, 32 in flight) and for
  8 MiB ranges (the object read twice: 64 GETs, 16 in flight);
- throughput (MiB/s) of those 8 MiB reads, on loopback and through the 30 ms latency
  proxy (``_proxy.py``), and through a bandwidth-limited proxy when ``_proxy.py`` has one.

rclone answers ranged GETs with ``200`` and a ``Content-Range`` header, which obstore
refuses ("Received non-partial response when range requested"); every client therefore
talks to rclone through ``_partial.py``, a spliced relay that turns those answers into
``206`` and changes nothing else.

Then :func:`pin_probe` checks what obstore can do for safety: ``If-Match`` and ``version``
on ranged gets (against moto, which honours both), and the ETag, size and version of every
answer (against rclone, which ignores ``If-Match``: only the answer's ETag shows the
object was replaced).

Usage: ``python benchmarks/obstore_eval.py [--repeat 5] [--workdir DIR] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from _common import LATENCY

BUCKET = "bench"
KEY = "obj.bin"
SIZE = 256 * 2**20
SMALL = 64 * 2**10
LARGE = 8 * 2**20
SMALL_INFLIGHT = 32
LARGE_INFLIGHT = 16
#: Bytes per second per connection of the bandwidth-limited model (when the proxy has one).
BANDWIDTH = 40 * 2**20


# -- obstore from fsspec storage options ----------------------------------------------------


def store_from_options(bucket: str, options: dict[str, Any], *, pool: int) -> Any:
    """An ``obstore.store.S3Store`` for ``bucket`` from s3fs ``storage_options``.

    Maps what s3fs users set (``key``/``secret``/``token``, ``anon``,
    ``client_kwargs.endpoint_url``/``region_name``); what it cannot map raises
    ``ValueError`` (an obstore transport would fall back to the current path there).
    """
    from obstore.store import S3Store

    opts = dict(options)
    client_kwargs = dict(opts.pop("client_kwargs", None) or {})
    opts.pop("config_kwargs", None)  # botocore's (pool, checksums): obstore has its own
    config: dict[str, Any] = {}
    endpoint = client_kwargs.pop("endpoint_url", None)
    if endpoint:
        config["endpoint"] = endpoint
        config["virtual_hosted_style_request"] = False
    config["region"] = client_kwargs.pop("region_name", None) or "us-east-1"
    if opts.pop("anon", False):
        config["skip_signature"] = True
    for s3fs_name, obstore_name in (
        ("key", "access_key_id"),
        ("secret", "secret_access_key"),
        ("token", "token"),
    ):
        value = opts.pop(s3fs_name, None)
        if value:
            config[obstore_name] = value
    if opts or client_kwargs:
        raise ValueError(
            f"options obstore is not given here: {sorted(opts) + sorted(client_kwargs)}"
        )
    client_options = {
        "allow_http": str(endpoint or "").startswith("http://"),
        "pool_max_idle_per_host": str(pool),
    }
    return S3Store(bucket, config=config, client_options=client_options)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Identity:
    """What an answer must match: ETag, version id (or None) and size at open."""

    etag: str
    version: str | None
    size: int


class ChangedError(Exception):
    """An answer that did not come from the identity opened."""


async def open_identity(store: Any, key: str) -> Identity:
    """The object's identity from a ranged get of its first bytes (as npystore opens)."""
    import obstore

    got = await obstore.get_async(store, key, options={"range": (0, 128)})
    meta = got.meta
    await got.bytes_async()
    if not meta["e_tag"]:
        raise ChangedError("no ETag at open")
    return Identity(meta["e_tag"], meta["version"], meta["size"])


async def pinned_get(store: Any, key: str, ident: Identity, start: int, stop: int) -> Any:
    """One ranged get pinned to ``ident`` and checked like npystore's answers; the body."""
    import obstore

    options: dict[str, Any] = {"range": (start, stop)}
    if ident.version:
        options["version"] = ident.version
    else:
        options["if_match"] = ident.etag
    got = await obstore.get_async(store, key, options=options)  # type: ignore[arg-type]
    meta = got.meta
    if (meta["e_tag"] or "").strip('"') != ident.etag.strip('"'):
        raise ChangedError(f"answer ETag {meta['e_tag']}, opened {ident.etag}")
    if ident.version and meta["version"] and meta["version"] != ident.version:
        raise ChangedError(f"answer version {meta['version']}, opened {ident.version}")
    if meta["size"] != ident.size:
        raise ChangedError(f"object is {meta['size']} bytes, {ident.size} at open")
    if tuple(got.range) != (start, stop):
        raise ChangedError(f"answer range {got.range}, asked {(start, stop)}")
    return await got.bytes_async()


async def bounded(n: int, jobs: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run ``jobs`` with at most ``n`` in flight; their results in order."""
    sem = asyncio.Semaphore(n)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with sem:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs))


# -- the measured clients -------------------------------------------------------------------


@dataclass
class Sample:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


Run = Callable[[], Any]


def clients(
    endpoint: str,
    ranges: list[tuple[int, int]],
    inflight: int,
    loop: asyncio.AbstractEventLoop,
    into: memoryview | None,
) -> dict[str, Run]:
    """The timed callables for one endpoint: each reads ``ranges`` (into ``into`` when
    given, at each range's offset) with ``inflight`` requests at a time."""
    import fsspec
    import obstore

    from _s3 import storage_options
    from npystore.fetch import open_reader

    opts = storage_options(endpoint)
    opts["config_kwargs"] = {**opts["config_kwargs"], "max_pool_connections": inflight}
    url = f"s3://{BUCKET}/{KEY}"
    reader = open_reader(url, opts)
    fs = fsspec.filesystem("s3", **opts)
    store = store_from_options(BUCKET, opts, pool=inflight)
    ident = loop.run_until_complete(open_identity(store, KEY))
    starts = [s for s, _ in ranges]
    ends = [e for _, e in ranges]

    def place(parts: Sequence[Any]) -> None:
        if into is not None:
            for (s, e), part in zip(ranges, parts, strict=True):
                into[s:e] = part

    def npystore_reader() -> Any:
        if into is None:
            return reader.read_many(ranges)
        reader.readinto_many([(s, into[s:e]) for s, e in ranges])
        return None

    def s3fs_cat_ranges() -> Any:
        got = fs.cat_ranges([f"{BUCKET}/{KEY}"] * len(ranges), starts, ends, batch_size=inflight)
        place(got)
        return got

    def obstore_get_ranges() -> Any:
        got = obstore.get_ranges(store, KEY, starts=starts, ends=ends, coalesce=0)
        place(got)
        return got

    def obstore_get_range_async() -> Any:
        jobs = [
            (lambda s=s, e=e: obstore.get_range_async(store, KEY, start=s, end=e))
            for s, e in ranges
        ]
        got = loop.run_until_complete(bounded(inflight, jobs))
        place(got)
        return got

    def obstore_pinned() -> Any:
        jobs = [(lambda s=s, e=e: pinned_get(store, KEY, ident, s, e)) for s, e in ranges]
        got = loop.run_until_complete(bounded(inflight, jobs))
        place(got)
        return got

    runs: dict[str, Run] = {
        "npystore (presigned aiohttp, pinned)": npystore_reader,
        "obstore get_async (pinned, checked)": obstore_pinned,
        "obstore get_range_async (unpinned)": obstore_get_range_async,
        "obstore get_ranges (unpinned, 10 in flight)": obstore_get_ranges,
        "s3fs cat_ranges (botocore)": s3fs_cat_ranges,
    }
    runs["_reader"] = lambda: reader  # for the direct-path check, not timed
    return runs


def verify(
    runs: dict[str, Run], ranges: list[tuple[int, int]], data: np.ndarray, into: memoryview | None
) -> None:
    """Every client reads the right bytes (checked once, before timing)."""
    for name, run in runs.items():
        if name.startswith("_"):
            continue
        if into is not None:
            into[:] = b"\0" * len(into)
        got = run()
        if into is not None:
            if bytes(into) != data.tobytes():
                raise SystemExit(f"{name}: wrong bytes")
            continue
        for (s, e), part in zip(ranges, got, strict=True):
            if bytes(part) != data[s:e].tobytes():
                raise SystemExit(f"{name}: wrong bytes for [{s}, {e})")
    reader = runs["_reader"]()
    if getattr(reader.transport, "_direct_off", False):
        raise SystemExit("npystore fell back to botocore: the direct path was not measured")


def measure(runs: dict[str, Run], repeat: int) -> dict[str, Sample]:
    """Each client ``repeat`` times, interleaved (the order rotates every round)."""
    names = [n for n in runs if not n.startswith("_")]
    out = {n: Sample() for n in names}
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            result = runs[name]()
            t1, c1 = time.perf_counter(), time.process_time()
            del result
            out[name].wall.append(t1 - t0)
            out[name].cpu.append(c1 - c0)
    return out


# -- the scenarios --------------------------------------------------------------------------


def small_ranges(n: int, seed: int = 17) -> list[tuple[int, int]]:
    """``n`` distinct 64 KiB ranges at random 128 KiB slots past the first 2 MiB."""
    slots = SIZE // (2 * SMALL)
    rng = np.random.default_rng(seed)
    picks = sorted(rng.choice(np.arange(16, slots), n, replace=False).tolist())
    return [(p * 2 * SMALL, p * 2 * SMALL + SMALL) for p in picks]


def large_ranges() -> list[tuple[int, int]]:
    """The whole object as 8 MiB ranges, twice (64 GETs)."""
    once = [(o, o + LARGE) for o in range(0, SIZE, LARGE)]
    return once + once


@contextlib.contextmanager
def bandwidth_proxy(endpoint: str, delay: float, mib: float) -> Iterator[str]:
    """``_proxy.py --delay D --bandwidth MIB`` (MiB/s per connection) in front of
    ``endpoint``, through its command line; yields its URL."""

    proxy = Path(__file__).with_name("_proxy.py")
    proc = subprocess.Popen(
        [sys.executable, str(proxy), "--target", endpoint.removeprefix("http://"),
         "--delay", str(delay), "--bandwidth", str(mib)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline().strip() if proc.stdout is not None else ""
        if not line.isdigit():
            raise RuntimeError(f"bandwidth proxy did not start (printed {line!r})")
        yield f"http://127.0.0.1:{line}"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def models(endpoint: str) -> Iterator[list[tuple[str, str]]]:
    """``(name, endpoint)`` for loopback, +30 ms, and +30 ms at 40 MiB/s per connection
    when ``_proxy.py`` has a ``--bandwidth`` option."""
    from _proxy import latency_proxy

    with contextlib.ExitStack() as stack:
        out = [("loopback", endpoint)]
        slow = stack.enter_context(latency_proxy(endpoint, LATENCY))
        out.append((f"+{LATENCY * 1000:.0f} ms/request", slow))
        if "--bandwidth" in Path(__file__).with_name("_proxy.py").read_text():
            mib = BANDWIDTH / 2**20
            narrow = stack.enter_context(bandwidth_proxy(endpoint, LATENCY, mib))
            out.append((f"+{LATENCY * 1000:.0f} ms, {mib:.0f} MiB/s per connection", narrow))
        else:
            print("_proxy.py has no --bandwidth: the bandwidth model is skipped", flush=True)
        yield out


# -- what obstore can do for safety ----------------------------------------------------------


def _outcome(loop: asyncio.AbstractEventLoop, coro: Awaitable[Any]) -> str:
    """``"data"`` or the exception's class name."""
    try:
        loop.run_until_complete(coro)
    except Exception as exc:  # the outcome is what is being probed
        return type(exc).__name__
    return "data"


def pin_probe(loop: asyncio.AbstractEventLoop, rclone_endpoint: str, root: Path) -> dict[str, Any]:
    """What obstore's gets can pin and report (moto honours pins, rclone ignores If-Match)."""
    import obstore

    from _s3 import storage_options
    from npystore.testing.s3 import LocalS3

    out: dict[str, Any] = {}
    params = {
        name: sorted(inspect.signature(getattr(obstore, name)).parameters)
        for name in ("get_range_async", "get_ranges_async", "get_async")
    }
    out["get_range(s) take options (If-Match, version)"] = all(
        "options" in params[n] for n in ("get_range_async", "get_ranges_async")
    )
    out["get_range(s) return metadata"] = False  # they return Bytes / list[Bytes]
    one, two = os.urandom(2**20), os.urandom(2**20)
    with LocalS3() as server:
        opts = server.storage_options()
        client = server.client()
        plain = server.create_bucket()
        store = store_from_options(plain, opts, pool=4)
        server.put(f"s3://{plain}/a.bin", one)
        ident = loop.run_until_complete(open_identity(store, "a.bin"))
        server.put(f"s3://{plain}/a.bin", two)
        out["moto: If-Match with the old ETag after a replacement"] = _outcome(
            loop, pinned_get(store, "a.bin", ident, 1000, 2000)
        )
        versioned = server.create_bucket()
        client.put_bucket_versioning(
            Bucket=versioned, VersioningConfiguration={"Status": "Enabled"}
        )
        vstore = store_from_options(versioned, opts, pool=4)
        server.put(f"s3://{versioned}/v.bin", one)
        vident = loop.run_until_complete(open_identity(vstore, "v.bin"))
        server.put(f"s3://{versioned}/v.bin", two)
        got = loop.run_until_complete(pinned_get(vstore, "v.bin", vident, 1000, 2000))
        out["moto: version id at open"] = vident.version
        out["moto: version-pinned get after a replacement reads the version opened"] = (
            bytes(got) == one[1000:2000]
        )
    # rclone ignores If-Match: only the answer's ETag tells
    path = root / BUCKET / "pin.bin"
    path.write_bytes(one)
    store = store_from_options(BUCKET, storage_options(rclone_endpoint), pool=4)
    ident = loop.run_until_complete(open_identity(store, "pin.bin"))
    path.write_bytes(two)
    out["rclone: pinned get after a same-size replacement"] = _outcome(
        loop, pinned_get(store, "pin.bin", ident, 1000, 2000)
    )

    async def unpinned() -> Any:  # obstore's futures need a running loop when made
        return await obstore.get_range_async(store, "pin.bin", start=1000, end=2000)

    stale = loop.run_until_complete(unpinned())
    out["rclone: unpinned get_range after the replacement returns the new bytes silently"] = (
        bytes(stale) == two[1000:2000]
    )
    path.unlink()
    return out


# -- report ---------------------------------------------------------------------------------


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def report(results: list[dict[str, Any]], pins: dict[str, Any]) -> str:
    """Markdown tables of the results (one row per client and model)."""
    lines = [
        "| model | ranges | client | CPU ms / GET (median, min..max) | wall s | MiB/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for res in results:
        for name, sample in res["samples"].items():
            per = [c / res["gets"] * 1000 for c in sample.cpu]
            mib = res["bytes"] / 2**20
            lines.append(
                f"| {res['model']} | {res['label']} | {name} | {_med(per):.3f} "
                f"({min(per):.3f}..{max(per):.3f}) | {_med(sample.wall):.3f} | "
                f"{mib / _med(sample.wall):.0f} |"
            )
    lines += ["", "| pin probe | result |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in pins.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--small-gets", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write raw samples here")
    args = parser.parse_args()

    from _partial import partial_relay
    from _s3 import rclone_s3

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="obstore-eval-"))
    root = workdir / "s3"
    (root / BUCKET).mkdir(parents=True, exist_ok=True)
    obj = root / BUCKET / KEY
    data = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8)
    if not obj.exists() or obj.read_bytes() != data.tobytes():
        obj.write_bytes(data.tobytes())
    buf = np.zeros(SIZE, dtype=np.uint8)
    into = memoryview(buf.data).cast("B")
    loop = asyncio.new_event_loop()
    results: list[dict[str, Any]] = []
    scenarios = [
        ("64 KiB", small_ranges(args.small_gets), SMALL_INFLIGHT, None),
        ("8 MiB", large_ranges(), LARGE_INFLIGHT, into),
    ]
    with rclone_s3(root) as server, partial_relay(server) as endpoint:
        pins = pin_probe(loop, endpoint, root)
        print(json.dumps(pins, indent=1), flush=True)
        with models(endpoint) as eps:
            for model, ep in eps:
                for label, ranges, inflight, target in scenarios:
                    runs = clients(ep, ranges, inflight, loop, target)
                    verify(runs, ranges, data, target)
                    samples = measure(runs, args.repeat)
                    res = {
                        "model": model,
                        "label": f"{len(ranges)} x {label}, {inflight} in flight",
                        "gets": len(ranges),
                        "bytes": sum(e - s for s, e in ranges),
                        "samples": samples,
                    }
                    results.append(res)
                    print(report([res], {}).split("\n\n")[0], flush=True)
    loop.close()
    print()
    print(report(results, pins))
    if args.json:
        raw = [{**r, "samples": {n: vars(s) for n, s in r["samples"].items()}} for r in results]
        args.json.write_text(json.dumps({"results": raw, "pins": pins}, indent=1))


if __name__ == "__main__":
    main()
