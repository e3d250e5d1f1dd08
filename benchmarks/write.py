"""Writer benchmarks (issue 19): each row npystore vs its anchor, measured in turn in one run.

- ``write-npz-local``: ``npystore.savez_compressed`` of compressible float64 data (rounded
  random walk) to a local file vs ``numpy.savez_compressed``; the compressed sizes too.
  Target: <= 0.6x numpy's time at a similar ratio.
- ``write-s3-cloud``: a lazily generated dask array (``da.random``, 32 MiB chunks) to S3
  through the cloud model (``cloud.py``: rclone behind ``_proxy.py``, 30 ms per request,
  40 MiB/s per connection each way) with ``npystore.save`` vs ``numpy.save`` of the
  computed array into memory + s3fs ``pipe`` (anchor), and vs the upload alone (s3fs
  ``pipe`` of bytes already in memory). Targets: <= 0.3x the anchor, <= 1.2x the upload.
- ``write-rss``: peak RSS (``VmHWM``) of ``npystore.save`` of the same kind of lazily
  generated array to a local file, in a fresh process, against its chunk size. Target:
  < 3 chunks + 64 MiB.

Usage: ``python benchmarks/write.py [--size MiB] [--repeat N] [--only a,b]``; prints one
line per row.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import npystore

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CHUNK = 32 * 2**20


def _timed(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t)
    return out


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _compressible(nbytes: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.round(np.cumsum(rng.standard_normal(nbytes // 8)), 1)


def bench_npz_local(size: int, repeat: int) -> str:
    a = _compressible(size)
    with tempfile.TemporaryDirectory() as d:
        ours_p, theirs_p = Path(d) / "ours.npz", Path(d) / "numpy.npz"
        t = _timed(
            {
                "npystore": lambda: npystore.savez_compressed(str(ours_p), x=a),
                "numpy": lambda: np.savez_compressed(theirs_p, x=a),
            },
            repeat,
        )
        ratio = ours_p.stat().st_size / theirs_p.stat().st_size
    o, n = _med(t["npystore"]), _med(t["numpy"])
    return (
        f"write-npz-local {size >> 20} MiB: npystore {o:.2f} s, numpy {n:.2f} s, "
        f"ratio {o / n:.2f}x (target <= 0.6); compressed size {ratio:.3f}x numpy's"
    )


def _lazy(size: int) -> Any:
    import dask.array as da

    n = size // 8
    rows = CHUNK // 8 // 1024
    return da.random.default_rng(1).standard_normal((n // 1024, 1024), chunks=(rows, 1024))


def bench_s3_cloud(size: int, repeat: int) -> str:
    import fsspec

    from _s3 import s3_cloud
    from cloud import BANDWIDTH, DELAY

    x = _lazy(size)
    with (
        tempfile.TemporaryDirectory() as d,
        s3_cloud(Path(d) / "s3", DELAY, BANDWIDTH) as (
            direct,
            opts,
            _proxy,
        ),
    ):
        fsspec.filesystem("s3", **direct).mkdir("bench")
        fs = fsspec.filesystem("s3", **opts)
        fs.ls("bench")  # warm the connection pool
        payload = io.BytesIO()
        np.save(payload, x.compute())
        data = payload.getvalue()

        def anchor() -> None:
            f = io.BytesIO()
            np.save(f, x.compute())
            fs.pipe("s3://bench/anchor.npy", f.getvalue())

        t = _timed(
            {
                "npystore": lambda: npystore.save("s3://bench/ours.npy", x, storage_options=opts),
                "anchor": anchor,
                "upload": lambda: fs.pipe("s3://bench/upload.npy", data),
            },
            repeat,
        )
        same = fs.cat("s3://bench/ours.npy") == data
    o, a, u = _med(t["npystore"]), _med(t["anchor"]), _med(t["upload"])
    return (
        f"write-s3-cloud {size >> 20} MiB: npystore.save {o:.2f} s, numpy.save + pipe {a:.2f} s "
        f"({o / a:.2f}x, target <= 0.3), upload alone {u:.2f} s ({o / u:.2f}x, target <= 1.2); "
        f"bytes equal: {same}"
    )


_PROBE = """
import json, sys, numpy as np
sys.path.insert(0, {here!r})
import npystore, dask.array as da
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
base = hwm()
from write import _lazy
x = _lazy({size})
npystore.save({path!r}, x)
print(json.dumps({{"baseline_mb": base, "peak_mb": hwm()}}))
"""


def bench_rss(size: int) -> str:
    with tempfile.TemporaryDirectory() as d:
        code = _PROBE.format(here=str(HERE), size=size, path=str(Path(d) / "x.npy"))
        cmd = [sys.executable, "-c", code]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    grew = r["peak_mb"] - r["baseline_mb"]
    limit = 3 * CHUNK / 2**20 + 64
    return (
        f"write-rss {size >> 20} MiB lazily generated, {CHUNK >> 20} MiB chunks: peak RSS grew "
        f"{grew:.0f} MiB over {r['baseline_mb']:.0f} MiB after imports (target < {limit:.0f})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=512, help="MiB (default 512)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default="write-npz-local,write-s3-cloud,write-rss")
    args = p.parse_args()
    size = args.size * 2**20
    only = set(args.only.split(","))
    if "write-npz-local" in only:
        print(bench_npz_local(size, args.repeat), flush=True)
    if "write-s3-cloud" in only:
        print(bench_s3_cloud(size, args.repeat), flush=True)
    if "write-rss" in only:
        print(bench_rss(size), flush=True)


if __name__ == "__main__":
    main()
