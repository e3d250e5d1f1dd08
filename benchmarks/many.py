"""Datasets of many files (issue 27): each row npystore vs its anchor, timed in turn in one run.

The cloud rows use the model of ``cloud.py`` (rclone serving a directory as S3 behind
``_proxy.py``: 30 ms per request, 40 MiB/s per connection); the shards are written straight
into the served directory, so setting up costs no upload.

- ``many-open``: 1,000 ``.npy`` shards (64 rows of 32 float32, 8 KiB each) opened by glob:
  ``npystore.open_npy("s3://bench/emb/*.npy")`` vs s3fs ``glob`` + ``open`` + numpy's
  header readers in a loop (what users write today; timed once per round, it takes
  minutes); targets: <= 0.05x the loop and <= 1.0 s. Reopening from a manifest on S3
  (``npystore.to_manifest`` written once; ``open_npy("s3://.../emb.json")``): <= 0.2 s.
- ``many-read``: 256 shards of 1 MiB read whole: ``npystore.load(glob)`` vs the link's
  ceiling (the same bytes by one concurrent s3fs ``cat_ranges``, listing included) <= 1.2x,
  and vs s3fs ``open`` + ``numpy.load`` in a loop <= 0.2x; embedding-reader's full read
  (``EmbeddingReader(folder)(batch_size=...)`` over every batch) beside it when installed
  (``pip install embedding-reader``).
- ``many-sum``: ``open_npy(folder).sum().compute()`` over a local ``to_npy_stack`` folder
  (4 GiB, 32 shards written by ``dask.array.to_npy_stack``) vs
  ``da.from_npy_stack(folder).sum().compute()``, page cache warm: <= 0.5x.

Run through ``benchmarks/run.py`` (``--only many`` runs all three); the rows go to their own
section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import npystore
from _common import Row, Timing, _time, rounds

SECTION = "many"
#: Rows of 32 float32 per shard in ``many-open`` (8 KiB of data).
OPEN_ROWS = 64
#: Bytes per shard in ``many-read``.
READ_SHARD = 2**20


def _shard_files(folder: Path, count: int, rows: int, cols: int) -> list[np.ndarray]:
    """``count`` shards ``emb_0.npy`` ... written with numpy.save; their arrays."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        x = rng.standard_normal((rows, cols), dtype=np.float32)
        np.save(folder / f"emb_{i}.npy", x)
        out.append(x)
    return out


def _numpy_headers(fs: Any, pattern: str) -> list[tuple[Any, ...]]:
    """The anchor of ``many-open``: glob, then each file's header through s3fs."""
    out = []
    for path in sorted(fs.glob(pattern)):
        with fs.open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                out.append(np.lib.format.read_array_header_1_0(f))
            else:
                out.append(np.lib.format.read_array_header_2_0(f))
    return out


def bench_open(workdir: Path, size: int, repeat: int) -> list[Row]:
    import fsspec

    from _s3 import s3_cloud
    from cloud import BANDWIDTH, DELAY

    count = max(8, size // 2**20)  # --quick: a few dozen shards
    root = workdir / "many-open"
    _shard_files(root / "bench" / "emb", count, OPEN_ROWS, 32)
    with s3_cloud(root, DELAY, BANDWIDTH) as (_, opts, _proxy):
        fs = fsspec.filesystem("s3", **opts)
        fs.ls("bench")  # warm the connection pool
        pattern = "s3://bench/emb/*.npy"
        manifest = "s3://bench/emb.json"
        npystore.to_manifest(pattern, manifest, storage_options=opts)
        a = npystore.open_npy(pattern, storage_options=opts)
        b = npystore.open_npy(manifest, storage_options=opts)
        if a.shape != (count * OPEN_ROWS, 32) or b.shape != a.shape:
            raise SystemExit(f"many-open: shapes {a.shape} and {b.shape}")

        def ours() -> Any:
            fs.invalidate_cache()  # no listing from an earlier run
            return npystore.open_npy(pattern, storage_options=opts)

        t = rounds(
            {
                "glob": ours,
                "manifest": lambda: npystore.open_npy(manifest, storage_options=opts),
            },
            repeat,
        )

        def anchor() -> Any:
            fs.invalidate_cache()
            return _numpy_headers(fs, pattern)

        loop = _time(anchor, 1 if count > 200 else max(1, repeat // 2))
    what = f"cloud model, {count} .npy shards of {OPEN_ROWS}x32 float32"
    glob = Timing("npystore.open_npy(glob)", t["glob"])
    return [
        Row(
            scenario=f"{what}: open by glob, npystore vs s3fs glob + numpy headers in a loop",
            ours=glob,
            anchor=Timing("s3fs open + read_array_header", loop),
            target=0.05,
            note="npystore: one listing, then every opening GET (the header comes with the "
            "object's identity) in flight together, 64 at a time",
            section=SECTION,
        ),
        Row(
            scenario=f"{what}: open by glob (absolute)",
            ours=glob,
            anchor=Timing("target", [1.0]),
            target=None,
            absolute_target=1.0,
            section=SECTION,
        ),
        Row(
            scenario=f"{what}: open from an npystore manifest on S3 (absolute)",
            ours=Timing("npystore.open_npy(manifest)", t["manifest"]),
            anchor=Timing("target", [0.2]),
            target=None,
            absolute_target=0.2,
            note="one GET of the JSON; no request per shard (each shard's identity is "
            "checked on its first read)",
            section=SECTION,
        ),
    ]


def _embedding_reader(folder_url: str, opts: dict[str, Any], batch: int) -> int | None:
    """embedding-reader's full read of the folder (rows read), or None if not installed."""
    try:
        from embedding_reader import EmbeddingReader
    except ImportError:
        return None
    import fsspec

    fsspec.config.conf["s3"] = dict(opts)  # it opens the URL with no storage options
    try:
        reader = EmbeddingReader(folder_url, file_format="npy")
        rows = 0
        for data, _ in reader(batch_size=batch, show_progress=False):
            rows += len(data)
        return rows
    finally:
        fsspec.config.conf.pop("s3", None)


def bench_read(workdir: Path, size: int, repeat: int) -> list[Row]:
    import fsspec

    from _s3 import s3_cloud
    from cloud import BANDWIDTH, DELAY

    count = max(8, size // READ_SHARD)
    cols = 256
    rows = READ_SHARD // (4 * cols)
    root = workdir / "many-read"
    xs = _shard_files(root / "bench" / "emb", count, rows, cols)
    want = np.concatenate(xs)
    del xs
    with s3_cloud(root, DELAY, BANDWIDTH) as (_, opts, _proxy):
        fs = fsspec.filesystem("s3", **opts)
        fs.ls("bench")
        pattern = "s3://bench/emb/*.npy"
        if not np.array_equal(npystore.load(pattern, storage_options=opts), want):
            raise SystemExit("many-read: npystore.load disagrees with the shards")

        def ceiling() -> Any:
            fs.invalidate_cache()
            found = fs.glob(pattern, detail=True)
            paths = sorted(found)
            sizes = [found[p]["size"] for p in paths]
            return fs.cat_ranges(paths, [0] * len(paths), sizes, batch_size=len(paths))

        def ours() -> Any:
            fs.invalidate_cache()
            return npystore.load(pattern, storage_options=opts)

        t = rounds({"npystore": ours, "ceiling": ceiling}, repeat)

        def loop() -> Any:
            fs.invalidate_cache()
            out = []
            for path in sorted(fs.glob(pattern)):
                with fs.open(path, "rb") as f:
                    out.append(np.load(io.BytesIO(f.read())))
            return np.concatenate(out)

        numpy_loop = _time(loop, 1 if count > 64 else max(1, repeat // 2))
        er: list[float] = []
        er_rows = None
        for _ in range(max(1, repeat // 2)):
            t0 = time.perf_counter()
            er_rows = _embedding_reader("s3://bench/emb", opts, batch=count * rows // 4)
            if er_rows is None:
                break
            er.append(time.perf_counter() - t0)
    what = f"cloud model, {count} .npy shards of {READ_SHARD >> 20} MiB, read whole"
    ours_t = Timing("npystore.load(glob)", t["npystore"])
    out = [
        Row(
            scenario=f"{what}: npystore vs the link's ceiling (one concurrent cat_ranges)",
            ours=ours_t,
            anchor=Timing("s3fs glob + cat_ranges", t["ceiling"]),
            target=1.2,
            note="npystore: one listing, then one GET per file (the whole file in the opening "
            "answer), all in flight; values checked against the shards",
            section=SECTION,
        ),
        Row(
            scenario=f"{what}: npystore vs s3fs open + numpy.load in a loop",
            ours=ours_t,
            anchor=Timing("s3fs + numpy.load loop", numpy_loop),
            target=0.2,
            section=SECTION,
        ),
    ]
    if er_rows is not None:
        out.append(
            Row(
                scenario=f"{what}: npystore vs embedding-reader (numpy batches of 1/4)",
                ours=ours_t,
                anchor=Timing("EmbeddingReader(folder)(...)", er),
                target=None,
                note=f"embedding-reader read {er_rows} rows; beside npystore, no target",
                section=SECTION,
            )
        )
    return out


def bench_sum(workdir: Path, size: int, repeat: int) -> list[Row]:
    import dask.array as da

    folder = workdir / f"many-sum-{size >> 20}"
    shards = 32
    cols = 1024
    n = size // 8 // cols
    if not (folder / "info").exists():
        x = da.random.default_rng(0).standard_normal((n, cols), chunks=(-(-n // shards), cols))
        da.to_npy_stack(folder, x, axis=0)
        os.sync()
    for f in folder.iterdir():  # page cache warm, as for the other local rows
        with open(f, "rb") as fh:
            while fh.read(64 * 2**20):
                pass
    ours_v = npystore.open_npy(str(folder)).sum().compute()
    theirs_v = da.from_npy_stack(folder).sum().compute()
    if not np.isclose(ours_v, theirs_v, rtol=1e-9, atol=1e-6):
        raise SystemExit(f"many-sum: {ours_v} != {theirs_v}")
    t = rounds(
        {
            "npystore": lambda: npystore.open_npy(str(folder)).sum().compute(),
            "dask": lambda: da.from_npy_stack(folder).sum().compute(),
        },
        repeat,
    )
    return [
        Row(
            scenario=f"dask sum over a local to_npy_stack folder, {size >> 20} MiB in {shards} "
            "shards: npystore.open_npy vs da.from_npy_stack",
            ours=Timing("open_npy(folder).sum()", t["npystore"]),
            anchor=Timing("from_npy_stack(folder).sum()", t["dask"]),
            target=0.5,
            note="npystore: preadv into each chunk (chunks of dask's chunk-size within each "
            "file); dask: each file memory-mapped whole, one chunk per file",
            section=SECTION,
        )
    ]


def section_intro(quick: bool, machine: str, versions: str) -> list[str]:
    """The heading and the text above the table of this module's section."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    run = "`benchmarks/run.py --only many" + (" --quick" if quick else "") + "`"
    return [
        "## Datasets of many files",
        "",
        f"Generated by {run} on {stamp} on {machine} ({versions}), load average "
        f"{os.getloadavg()[0]:.1f} at the end of the run. The cloud rows use the "
        "model of the cloud section (rclone behind `benchmarks/_proxy.py`, 30 ms per request, "
        "40 MiB/s per connection); the loops of s3fs + numpy are timed once per run at full "
        "size (they take minutes).",
        "",
    ]


#: name -> (benchmark, size in MiB of the full run, size in MiB with --quick); for
#: many-open the size is the number of shards (in "MiB": 1000 shards = 1000 MiB).
SCENARIOS: dict[str, tuple[Any, int, int]] = {
    "many-open": (bench_open, 1000, 40),
    "many-read": (bench_read, 256, 32),
    "many-sum": (bench_sum, 4096, 256),
}
