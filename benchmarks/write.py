"""Writer benchmarks (issue 19): each row npystore vs its anchor, timed in turn in one run.

- ``write-npy-local``: ``npystore.save`` of a numpy array (float64) to a local file vs
  ``numpy.save``, the default (atomic rename, no fsync) and ``durable=True`` (file and
  directory fsynced, in the note). Target: <= 1.2x numpy's time.
- ``write-npz-local``: ``npystore.savez_compressed`` of compressible float64 data (rounded
  random walk) to a local file vs ``numpy.savez_compressed``, at the default
  ``compresslevel`` (6); the compressed sizes too. Target: <= 0.6x numpy's time at a similar
  ratio.
- ``write-s3-cloud``: a lazily generated dask array (``da.random``, 32 MiB chunks) to S3
  through the cloud model (``cloud.py``'s proxy, 30 ms per request, 40 MiB/s per
  connection each way) in front of SeaweedFS (a store that takes multipart parts in any
  order; rclone takes them in order only) with ``npystore.save`` vs ``numpy.save`` of the
  computed array into memory + a single-stream upload (one ``PutObject``, the anchor), and
  vs the upload alone (s3fs ``pipe`` of the bytes already in memory in npystore's part
  size, 8 parts at once). Targets: <= 0.3x the anchor, <= 1.1x the upload.
- ``write-s3-cloud10``: the same at 10 MiB/s per connection. At 40 MiB/s the machine, not
  the model, may bound uploads (server, proxy and client share 2 cores); at 10 MiB/s many
  connections stay within what the machine carries.
- ``write-rss``: peak RSS (``VmHWM``) of ``npystore.save`` of the same kind of lazily
  generated array to a local file, in a fresh process, against its chunk size. Target:
  < 3 chunks + 64 MiB.

Run through ``benchmarks/run.py`` (``--only write`` runs all five); the rows go to their own
section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import npystore
from _common import Row, Timing, rounds
from cloud import _load_avg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CHUNK = 32 * 2**20


def _compressible(nbytes: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.round(np.cumsum(rng.standard_normal(nbytes // 8)), 1)


SECTION = "write"


def bench_npy_local(workdir: Path, size: int, repeat: int) -> list[Row]:
    a = np.random.default_rng(0).standard_normal(size // 8)
    ours_p, theirs_p, durable_p = (workdir / f"write-{n}.npy" for n in ("ours", "np", "durable"))
    t = rounds(
        {
            "npystore": lambda: npystore.save(str(ours_p), a),
            "numpy": lambda: np.save(theirs_p, a),
            "durable": lambda: npystore.save(str(durable_p), a, durable=True),
        },
        repeat,
    )
    if ours_p.read_bytes() != theirs_p.read_bytes():
        raise SystemExit("write-npy-local: npystore.save wrote other bytes than numpy.save")
    for p in (ours_p, theirs_p, durable_p):
        p.unlink()
    durable = statistics.median(t["durable"])
    return [
        Row(
            scenario=f"local save, {size >> 20} MiB float64 numpy array: npystore vs numpy",
            ours=Timing("npystore.save", t["npystore"]),
            anchor=Timing("numpy.save", t["numpy"]),
            target=1.2,
            note=f"atomic rename, no fsync (numpy's durability); durable=True (file and "
            f"directory fsynced): {durable:.3f} s",
            section=SECTION,
        )
    ]


def bench_npz_local(workdir: Path, size: int, repeat: int) -> list[Row]:
    a = _compressible(size)
    ours_p, theirs_p = workdir / "write-ours.npz", workdir / "write-numpy.npz"
    t = rounds(
        {
            "npystore": lambda: npystore.savez_compressed(str(ours_p), x=a),
            "numpy": lambda: np.savez_compressed(theirs_p, x=a),
        },
        repeat,
    )
    ratio = ours_p.stat().st_size / theirs_p.stat().st_size
    ours_p.unlink()
    theirs_p.unlink()
    return [
        Row(
            scenario=f"local savez_compressed, {size >> 20} MiB float64 (rounded random walk): "
            "npystore vs numpy",
            ours=Timing("npystore.savez_compressed", t["npystore"]),
            anchor=Timing("numpy.savez_compressed", t["numpy"]),
            target=0.6,
            note=f"compressed size {ratio:.3f}x numpy's (npystore: independent 1 MiB deflate "
            "blocks on every core, compresslevel 6: zlib-ng or zlib level 6; numpy: zlib "
            "level 6, one thread)",
            section=SECTION,
        )
    ]


def _lazy(size: int) -> Any:
    import dask.array as da

    n = size // 8
    rows = CHUNK // 8 // 1024
    return da.random.default_rng(1).standard_normal((n // 1024, 1024), chunks=(rows, 1024))


def _s3_rows(workdir: Path, size: int, repeat: int, bandwidth: float) -> list[Row]:
    import fsspec

    from _s3 import seaweed_cloud
    from cloud import DELAY
    from npystore.write.npy import PART_SIZE

    x = _lazy(size)
    with seaweed_cloud(DELAY, bandwidth) as (direct, opts, _):
        fsspec.filesystem("s3", **direct).mkdir("bench")
        fs = fsspec.filesystem("s3", **opts)
        fs.ls("bench")  # warm the connection pool
        payload = io.BytesIO()
        np.save(payload, x.compute())
        data = payload.getvalue()
        del payload
        whole = 2 * len(data) + 1  # s3fs pipes anything under 2 chunks as one PutObject

        def anchor() -> None:
            f = io.BytesIO()
            np.save(f, x.compute())
            fs.pipe("s3://bench/anchor.npy", f.getvalue(), chunksize=whole)

        t = rounds(
            {
                "npystore": lambda: npystore.save("s3://bench/ours.npy", x, storage_options=opts),
                "anchor": anchor,
                "upload": lambda: fs.pipe(
                    "s3://bench/upload.npy", data, chunksize=PART_SIZE, max_concurrency=8
                ),
            },
            repeat,
        )
        if fs.cat("s3://bench/ours.npy") != data:
            raise SystemExit("write-s3-cloud: npystore.save wrote other bytes than numpy.save")
    what = (
        f"cloud model ({DELAY * 1000:.0f} ms, {bandwidth:.0f} MiB/s per connection), "
        f"{size >> 20} MiB lazily generated dask array ({CHUNK >> 20} MiB chunks) to S3 "
        "(SeaweedFS)"
    )
    ours = Timing("npystore.save", t["npystore"])
    return [
        Row(
            scenario=f"{what}: npystore.save vs numpy.save into memory + a single-stream upload",
            ours=ours,
            anchor=Timing("numpy.save + one PutObject", t["anchor"]),
            target=0.3,
            note="npystore: a multipart upload, parts written by the dask tasks as blocks are "
            "computed, in ascending order, 8 at a time; bytes equal numpy.save's (checked); "
            f"the anchor's upload is one request; load average {_load_avg()}",
            section=SECTION,
        ),
        Row(
            scenario=f"{what}: npystore.save vs the upload alone (the same parts, 8 concurrently)",
            ours=ours,
            anchor=Timing("fs.pipe(bytes, 16 MiB parts, 8 at once)", t["upload"]),
            target=1.1,
            note=f"s3fs pipe of the bytes already in memory, {PART_SIZE >> 20} MiB parts, 8 in "
            "flight",
            section=SECTION,
        ),
    ]


def bench_s3_cloud(workdir: Path, size: int, repeat: int) -> list[Row]:
    from cloud import BANDWIDTH

    return _s3_rows(workdir, size, repeat, BANDWIDTH)


def bench_s3_cloud10(workdir: Path, size: int, repeat: int) -> list[Row]:
    return _s3_rows(workdir, size, repeat, 10.0)


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


def bench_rss(workdir: Path, size: int, repeat: int) -> list[Row]:
    peaks = []
    for _ in range(max(1, min(repeat, 2))):
        code = _PROBE.format(here=str(HERE), size=size, path=str(workdir / "write-rss.npy"))
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        peaks.append((r["peak_mb"] - r["baseline_mb"], r["baseline_mb"]))
    (workdir / "write-rss.npy").unlink(missing_ok=True)
    limit = 3 * CHUNK / 2**20 + 64
    grew = Timing("peak RSS growth MB", [p for p, _ in peaks], unit="MB")
    return [
        Row(
            scenario=f"peak RSS of npystore.save of a {size >> 20} MiB lazily generated dask array "
            f"({CHUNK >> 20} MiB chunks) to a local file",
            ours=grew,
            anchor=Timing("array size MB", [size / 2**20], unit="MB"),
            target=None,
            absolute_target=limit,
            note=f"growth of VmHWM over the fresh process after imports "
            f"({statistics.median(b for _, b in peaks):.0f} MiB); target < 3 chunks + 64 MiB",
            section=SECTION,
        )
    ]


def section_intro(quick: bool, machine: str, versions: str) -> list[str]:
    """The heading and the text above the table of this module's section."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    run = "`benchmarks/run.py" + (" --quick" if quick else "") + "`"
    return [
        "## Writers",
        "",
        f"Generated by {run} on {stamp} on {machine} ({versions}). The cloud rows use the "
        "model of the cloud section (`benchmarks/_proxy.py`, which paces request bodies as "
        "well as responses) in front of SeaweedFS, which takes multipart parts in any order. "
        "Server, proxy and client share the 2 cores: at 40 MiB/s per connection the uploads "
        "may be bound by the machine, so the 10 MiB/s rows show what many connections buy "
        "against one stream.",
        "",
    ]


#: name -> (benchmark, size in MiB of the full run, size in MiB with --quick)
SCENARIOS: dict[str, tuple[Any, int, int]] = {
    "write-npy-local": (bench_npy_local, 128, 32),
    "write-npz-local": (bench_npz_local, 512, 32),
    "write-s3-cloud": (bench_s3_cloud, 512, 32),
    "write-s3-cloud10": (bench_s3_cloud10, 256, 32),
    "write-rss": (bench_rss, 512, 64),
}
