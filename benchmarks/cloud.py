"""Benchmarks under a cloud object store model: 30 ms to first byte, 40 MiB/s per connection.

The other remote rows (``remote.py``, ``mat73-s3``) add latency only: on loopback one
connection moves hundreds of MB/s, so reading with one stream costs almost nothing more
than reading with sixteen. A cloud store serves each TCP connection at tens of MiB/s (S3:
roughly 40-90 MiB/s), and a client that wants more opens more connections. Here the S3
server (``rclone serve s3`` on loopback) sits behind ``_proxy.py``, which delays each
request by 30 ms and paces each connection's responses to 40 MiB/s; clients are in steady
state (one s3fs filesystem per endpoint, created once and warmed up, as fsspec caches it;
npystore's own clients likewise). Each scenario times npystore and its anchors in one loop,
one run of each in turn (``rounds``), so drift hits all alike.

- ``cloud-npy``: a 128 MiB ``.npy`` read whole: ``npystore.load(url)`` vs s3fs ``open`` +
  ``numpy.load`` (what users do today), and vs the ceiling of the link: the whole object in
  16 concurrent ranges (8 MiB each) through s3fs ``cat_ranges``, no parsing.
- ``cloud-mat73``: a 4000 x 4000 double matrix saved by ``hdf5storage.savemat`` (its
  defaults: chunked, gzip 7, shuffle, Fletcher-32), ``open_mat(url).load("x")`` and
  ``open_mat(url)["x"].compute()`` vs ``h5py.File(s3fs file)``. Without hdf5storage the file
  is written as MATLAB writes it (``cloud-mat73-matlab`` always is: 512-byte userblock,
  MATLAB's header, gzip 3, chunks of at most 64 KiB; see ``mat.py``).
  ``cloud-mat73-ints``: hdf5storage's file of integers 0..99 (``mat.small_integers``, about
  18.5 MB for 128 MB: the decode, not the download, is most of the read).
- ``cloud-npz``: a 128 MiB float64 member deflated about 8.5x (``np.savez_compressed`` of
  rounded values, each repeated three times): ``open_npz(url, chunks=n // 16)["x"]
  .compute()`` and ``npystore.load(url)["x"]`` vs s3fs ``open`` + ``numpy.load``; the bytes
  the dask compute moved (counted by the proxy) against the compressed size. The same
  values written by ``npystore.savez_compressed`` (independent deflate blocks and a block
  index): the first compute ever (every block checked on its first read) against s3fs +
  ``numpy.load`` of that archive.
- ``cloud-sweep``: the ``.npy`` full read and the deflated member's dask compute (npystore
  vs s3fs + ``numpy.load``) at 10, 20, 40 and 100 MiB/s per connection (30 ms) and at 5, 30
  and 80 ms (40 MiB/s); plotted to ``docs/img/cloud-bandwidth.png`` and
  ``docs/img/cloud-latency.png``, numbers in ``docs/img/cloud-sweep.json``.

Run through ``benchmarks/run.py`` (``--only cloud`` runs them all; ``--quick`` uses small
sizes); the rows go to their own section of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import statistics
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import npystore
from _common import Row, Timing, _write_npy, generated_by, rounds

#: The model: seconds to first byte of each request, MiB/s of each connection.
DELAY = 0.030
BANDWIDTH = 40.0
#: The sweep: bandwidths at ``DELAY``, delays at ``BANDWIDTH``.
SWEEP_BANDWIDTHS = (10.0, 20.0, 40.0, 100.0)
SWEEP_DELAYS = (0.005, 0.030, 0.080)
#: Concurrent ranges of the ``cat_ranges`` ceiling, and dask chunks of the npz compute.
RANGES = 16
NPZ_CHUNKS = 16
BUCKET = "bench"
MEMBER = "x"
HERE = Path(__file__).resolve().parent
DOCS_IMG = HERE.parent / "docs" / "img"

#: RESULTS.md sections of this module's rows (see ``run.py``'s ``render``).
SECTION = "cloud"
SWEEP_SECTION = "cloud-sweep"
TITLE = f"Cloud model ({DELAY * 1000:.0f} ms, {BANDWIDTH:.0f} MiB/s per connection)"


@dataclass
class Cloud:
    """A running model: the timed filesystem (through the proxy) and the proxy."""

    fs: Any
    opts: dict[str, Any]
    proxy: Any  # _proxy.ShapingProxy

    def moved(self, fn: Callable[[], Any]) -> tuple[int, int]:
        """Run ``fn`` once; the (requests, response bytes) it cost, as the proxy saw them."""
        before = self.proxy.stats()
        fn()
        after = self.proxy.stats()
        return (
            after["requests"] - before["requests"],
            after["response_bytes"] - before["response_bytes"],
        )


@contextmanager
def cloud(workdir: Path, files: dict[str, Path]) -> Iterator[Cloud]:
    """rclone behind the shaping proxy (the model) with ``files`` (key -> local path)
    uploaded at full speed; yields the timed filesystem, its options and the proxy."""
    import fsspec

    from _s3 import put_missing, s3_cloud

    (workdir / "s3" / BUCKET).mkdir(parents=True, exist_ok=True)
    with s3_cloud(workdir / "s3", DELAY, BANDWIDTH) as (direct, opts, proxy):
        put_missing(direct, BUCKET, files)
        yield Cloud(fsspec.filesystem("s3", **opts), opts, proxy)


#: Other programs seen using CPU while this module's scenarios ran (see :func:`_load_avg`).
OTHERS: set[str] = set()


def _others() -> set[str]:
    """Programs not started by this process that use CPU now (``ps``: %CPU >= 10 over their
    lifetime), as ``name script`` (e.g. ``python benchmarks/x.py``, ``rclone serve``)."""
    import subprocess

    try:
        out = subprocess.run(
            ["ps", "-eo", "pid=,ppid=,pcpu=,args="], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    me = os.getpid()
    seen = set()
    for line in out.splitlines():
        pid, ppid, pcpu, *args = line.split()
        if me in (int(pid), int(ppid)) or float(pcpu) < 10 or not args or args[0] == "ps":
            continue
        if args[-1] == "<defunct>":  # exited, not yet reaped
            continue
        words = [Path(args[0]).name, *[a for a in args[1:] if not a.startswith("-")][:1]]
        seen.add(" ".join(words))
    return seen


def _load_avg() -> str:
    """The load average (1 min/5 min) now; notes the other programs using CPU."""
    OTHERS.update(_others())
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


# -- .npy full read ----------------------------------------------------------------------


def _npy_fns(c: Cloud, key: str, size: int, protocol: str = "s3") -> dict[str, Callable[[], Any]]:
    """The .npy full read of ``key`` (``size`` bytes) over ``c``: npystore.load, the
    anchor (the filesystem's file + numpy.load) and the link's ceiling (``cat_ranges`` of
    :data:`RANGES` ranges, bytes only)."""
    url = f"{protocol}://{BUCKET}/{key}"
    part = -(-size // RANGES)

    def ours() -> Any:
        return npystore.load(url, storage_options=c.opts)

    def anchor() -> Any:
        with c.fs.open(f"{BUCKET}/{key}", "rb") as f:
            return np.load(f)

    def ceiling() -> Any:
        starts = list(range(0, size, part))
        ends = [min(s + part, size) for s in starts]
        return c.fs.cat_ranges([f"{BUCKET}/{key}"] * len(starts), starts, ends)

    return {"npystore": ours, "anchor": anchor, "ceiling": ceiling}


def npy_full_read(
    c: Cloud, path: Path, repeat: int, scenario: str, protocol: str = "s3"
) -> tuple[dict[str, list[float]], int, int]:
    """The .npy full read of the local file ``path`` (uploaded as its name) over ``c``:
    npystore's and the anchor's values checked against the file (warming both up), the
    ceiling warmed up, then all three timed in turn (:func:`_npy_fns`). Returns the times
    by name and the (requests, response bytes) of one npystore read."""
    want = np.load(path)
    fns = _npy_fns(c, path.name, path.stat().st_size, protocol)
    for name in ("npystore", "anchor"):  # warm-up and check
        if not np.array_equal(fns[name](), want):
            raise SystemExit(f"{scenario}: {name} read different values")
    fns["ceiling"]()
    del want
    requests, moved = c.moved(fns["npystore"])
    return rounds(fns, repeat), requests, moved


def bench_cloud_npy(workdir: Path, size: int, repeat: int) -> list[Row]:
    path = workdir / f"cloud-{size >> 20}MiB.npy"
    _write_npy(path, size)
    load = _load_avg()
    with cloud(workdir, {path.name: path}) as c:
        t, requests, moved = npy_full_read(c, path, repeat, "cloud-npy")
    mib = size / 2**20
    ours = Timing("npystore.load", t["npystore"])
    return [
        Row(
            scenario=f"cloud .npy full read, {mib:.0f} MiB: npystore.load vs s3fs open + "
            "numpy.load",
            ours=ours,
            anchor=Timing("numpy.load(fs.open())", t["anchor"]),
            target=0.2,
            note="s3fs file defaults (50 MiB blocks, 'readahead': one connection at a time); "
            f"npystore: {requests} requests, {moved / 2**20:.0f} MiB moved; load average "
            f"{load} -> {_load_avg()}",
            section=SECTION,
        ),
        Row(
            scenario=f"cloud .npy full read, {mib:.0f} MiB: npystore.load vs the link's "
            f"ceiling ({RANGES} concurrent ranges through s3fs cat_ranges)",
            ours=ours,
            anchor=Timing("fs.cat_ranges", t["ceiling"]),
            target=1.1,
            note=f"cat_ranges: the whole object in {RANGES} concurrent ranges of "
            f"{size / RANGES / 2**20:.0f} MiB, bytes only (no header, no array); nominal "
            f"{RANGES} x {BANDWIDTH:.0f} MiB/s, but the server, the proxy and the client share "
            "2 cores",
            section=SECTION,
        ),
    ]


# -- MATLAB v7.3 -------------------------------------------------------------------------


def _side(size: int) -> int:
    """The matrix side for ``size`` bytes of doubles, rounded to hundreds (122 MiB: 4000)."""
    return max(100, round(math.sqrt(size / 8) / 100) * 100)


def _mat_file(
    workdir: Path, size: int, writer: str, values: str = "smooth"
) -> tuple[Path, np.ndarray[Any, Any], str]:
    """A v7.3 MAT-file of one double matrix ``x``; ``writer``: ``hdf5storage`` (falls back
    to ``matlab`` without it) or ``matlab`` (``mat.py``'s layout); ``values``: ``smooth``
    (``mat.matrix``) or ``ints`` (``mat.small_integers``). Returns the path, the value and
    a description of the layout."""
    from mat import matrix, small_integers, write_hdf5storage, write_matlab_v73

    n = _side(size)
    value = (small_integers if values == "ints" else matrix)(n * n * 8)
    if writer == "hdf5storage":
        try:
            import hdf5storage  # noqa: F401
        except ImportError:
            writer = "matlab"
    path = workdir / f"cloud-{writer}-{values}-{n}.mat"
    if not path.exists():
        if writer == "hdf5storage":
            write_hdf5storage(path, MEMBER, value)
        else:
            tmp = path.with_name(path.stem + ".partial.mat")
            write_matlab_v73(tmp, MEMBER, value)
            tmp.replace(path)
    import h5py

    with h5py.File(path, "r") as h:
        d = h[MEMBER]
        filters = [f"gzip {d.compression_opts}"] + ["shuffle"] * d.shuffle
        filters += ["Fletcher-32"] * d.fletcher32
        layout = (
            f"{writer}: {n} x {n} double{' (integers 0..99)' if values == 'ints' else ''}, "
            f"file {path.stat().st_size / 1e6:.1f} MB, chunks {d.chunks} "
            f"({math.prod(d.chunks) * 8 / 1024:.0f} KiB), {', '.join(filters)}"
        )
    return path, value, layout


def _bench_mat(
    workdir: Path, size: int, repeat: int, writer: str, values: str = "smooth"
) -> list[Row]:
    import h5py

    path, value, layout = _mat_file(workdir, size, writer, values)
    load = _load_avg()
    with cloud(workdir, {path.name: path}) as c:
        url = f"s3://{BUCKET}/{path.name}"

        def eager() -> Any:
            return npystore.open_mat(url, storage_options=c.opts).load(MEMBER)

        def dask_compute() -> Any:
            return npystore.open_mat(url, storage_options=c.opts)[MEMBER].compute()

        def anchor() -> Any:
            with c.fs.open(f"{BUCKET}/{path.name}", "rb") as f, h5py.File(f, "r") as h:
                return h[MEMBER][()].T

        fns = {"anchor": anchor, "load": eager, "compute": dask_compute}
        for name, fn in fns.items():  # warm-up and check
            if not np.array_equal(fn(), value):
                raise SystemExit(f"cloud-mat73: {name} read different values")
        requests, moved = c.moved(eager)
        t = rounds(fns, repeat)
    h5 = Timing("h5py.File(fs.open())", t["anchor"])
    kind = layout.split(":")[0] + (", integers" if values == "ints" else "")
    what = f"cloud MAT v7.3 ({kind}), {value.nbytes / 1e6:.0f} MB variable"
    note = (
        f"{layout}; s3fs file defaults (50 MiB blocks, 'readahead'); load: {requests} "
        f"requests, {moved / 1e6:.0f} MB moved; load average {load} -> {_load_avg()}"
    )
    return [
        Row(
            scenario=f"{what}: open_mat(url).load vs h5py over s3fs",
            ours=Timing('open_mat().load("x")', t["load"]),
            anchor=h5,
            target=0.35,
            note=note,
            section=SECTION,
        ),
        Row(
            scenario=f'{what}: open_mat(url)["x"].compute() vs h5py over s3fs',
            ours=Timing('open_mat()["x"].compute()', t["compute"]),
            anchor=h5,
            target=0.35,
            note="the same file, through dask (default chunks)",
            section=SECTION,
        ),
    ]


def bench_cloud_mat73(workdir: Path, size: int, repeat: int) -> list[Row]:
    return _bench_mat(workdir, size, repeat, "hdf5storage")


def bench_cloud_mat73_matlab(workdir: Path, size: int, repeat: int) -> list[Row]:
    return _bench_mat(workdir, size, repeat, "matlab")


def bench_cloud_mat73_ints(workdir: Path, size: int, repeat: int) -> list[Row]:
    return _bench_mat(workdir, size, repeat, "hdf5storage", "ints")


# -- deflated .npz member ----------------------------------------------------------------


def _npz_file(workdir: Path, size: int) -> tuple[Path, dict[str, Any]]:
    """``np.savez_compressed`` of one float64 member of ``size`` bytes: normal values
    rounded to 2 decimals, each repeated 3 times (deflates about 8.5x)."""
    n = size // 8
    path = workdir / f"cloud-deflated-{size >> 20}MiB.npz"
    meta_path = path.with_suffix(".json")
    if not (path.exists() and meta_path.exists()):
        rng = np.random.default_rng(11)
        value = np.repeat(np.round(rng.standard_normal(-(-n // 3)), 2), 3)[:n]
        tmp = path.with_name(path.name + ".partial.npz")
        np.savez_compressed(tmp, x=value)  # MEMBER
        tmp.replace(path)
        import zipfile

        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(MEMBER + ".npy")
        meta = {"n": n, "member_size": info.file_size, "compressed_size": info.compress_size}
        meta_path.write_text(json.dumps(meta) + "\n")
    out: dict[str, Any] = json.loads(meta_path.read_text())
    return path, out


def _blocks_file(workdir: Path, size: int, numpy_path: Path) -> Path:
    """The values of :func:`_npz_file`'s archive written by ``npystore.savez_compressed``."""
    path = workdir / f"cloud-blocks-{size >> 20}MiB.npz"
    if not path.exists():
        with np.load(numpy_path) as z:
            value = z[MEMBER]
        tmp = path.with_name(path.name + ".partial.npz")
        npystore.savez_compressed(str(tmp), **{MEMBER: value})
        tmp.replace(path)
    return path


def _npz_fns(c: Cloud, key: str, n: int, workdir: Path) -> dict[str, Callable[[], Any]]:
    """npystore's runs start as a new process would: the compressed bytes this process kept
    (``read.memo``) are forgotten first, so every run moves its bytes over the model."""
    from npystore.read import memo

    url = f"s3://{BUCKET}/{key}"
    chunks = -(-n // NPZ_CHUNKS)
    fresh = itertools.count()
    for old in workdir.glob("index-cache-cold-*"):  # earlier runs' (never reused)
        shutil.rmtree(old, ignore_errors=True)
    cold_root = Path(tempfile.mkdtemp(dir=workdir, prefix="index-cache-cold-"))

    def compute_cold() -> Any:  # the first open ever: no checkpoint index anywhere yet
        memo.forget()
        where = cold_root / str(next(fresh))
        z = npystore.open_npz(url, chunks=chunks, storage_options=c.opts, index_cache=str(where))
        return z[MEMBER].compute()  # (its index is built in the background after)

    def compute() -> Any:  # a later process: the index persisted by an earlier one
        memo.forget()
        where = workdir / "index-cache" / "warm"
        z = npystore.open_npz(url, chunks=chunks, storage_options=c.opts, index_cache=str(where))
        return z[MEMBER].compute()

    def eager() -> Any:
        memo.forget()
        with npystore.load(url, storage_options=c.opts) as z:
            return z[MEMBER]

    def anchor() -> Any:
        with c.fs.open(f"{BUCKET}/{key}", "rb") as f, np.load(f) as z:
            return z[MEMBER]

    return {"anchor": anchor, "compute": compute, "cold": compute_cold, "load": eager}


def _blocks_fns(c: Cloud, key: str, n: int, workdir: Path) -> dict[str, Callable[[], Any]]:
    """The first compute of a block-indexed archive (no block checked yet: a new index cache
    directory each run) and its anchor."""
    from npystore.read import memo

    url = f"s3://{BUCKET}/{key}"
    chunks = -(-n // NPZ_CHUNKS)
    fresh = itertools.count()
    cold_root = Path(tempfile.mkdtemp(dir=workdir, prefix="index-cache-cold-"))

    def blocks_cold() -> Any:
        memo.forget()
        where = cold_root / f"blocks-{next(fresh)}"
        z = npystore.open_npz(url, chunks=chunks, storage_options=c.opts, index_cache=str(where))
        return z[MEMBER].compute()

    def blocks_anchor() -> Any:
        with c.fs.open(f"{BUCKET}/{key}", "rb") as f, np.load(f) as z:
            return z[MEMBER]

    return {"blocks anchor": blocks_anchor, "blocks cold": blocks_cold}


def bench_cloud_npz(workdir: Path, size: int, repeat: int) -> list[Row]:
    path, meta = _npz_file(workdir, size)
    blocks = _blocks_file(workdir, size, path)
    with np.load(path) as z:
        want = z[MEMBER]
    load = _load_avg()
    with cloud(workdir, {path.name: path, blocks.name: blocks}) as c:
        fns = _npz_fns(c, path.name, meta["n"], workdir)
        fns |= _blocks_fns(c, blocks.name, meta["n"], workdir)
        first = c.moved(fns["cold"])  # a fresh process's first compute, no index anywhere
        first_blocks = c.moved(fns["blocks cold"])
        for name, fn in fns.items():  # warm-up (persists the index) and check
            if not np.array_equal(fn(), want):
                raise SystemExit(f"cloud-npz: {name} read different values")
        del want
        later = c.moved(fns["compute"])
        eager = c.moved(fns["load"])
        t = rounds(fns, repeat)
    packed = meta["compressed_size"]
    anchor = Timing('numpy.load(fs.open())["x"]', t["anchor"])
    with zipfile.ZipFile(blocks) as zf:
        packed_blocks = zf.getinfo(MEMBER + ".npy").compress_size
    what = (
        f"cloud deflated .npz member, {meta['member_size'] / 2**20:.0f} MiB "
        f"({packed / 2**20:.1f} MiB deflated, {meta['member_size'] / packed:.1f}x)"
    )

    def cost(m: tuple[int, int]) -> str:
        return f"{m[0]} requests, {m[1] / packed:.2f}x the compressed size"

    fresh = (
        "each run starts as a new process would (the compressed bytes kept by the process "
        "forgotten)"
    )
    return [
        Row(
            scenario=f'{what}: open_npz(url)["x"].compute() ({NPZ_CHUNKS} chunks), the first '
            "open ever (no checkpoint index), vs s3fs open + numpy.load",
            ours=Timing(f'open_npz()["x"].compute(), {NPZ_CHUNKS} chunks, no index', t["cold"]),
            anchor=anchor,
            target=0.5,
            note=f"{fresh}, with an empty index cache: the chunk tasks share one pass over the "
            "member (each chunk inflated into the buffer that becomes its result; chunks "
            "inflated ahead of their task kept until it takes them), which builds the "
            f"checkpoint index as it goes; moved: {cost(first)} (response "
            f"bytes counted by the proxy, headers included); load average {load} -> "
            f"{_load_avg()}",
            section=SECTION,
        ),
        Row(
            scenario=f'{what}: open_npz(url)["x"].compute() ({NPZ_CHUNKS} chunks), index '
            "persisted by an earlier process, vs s3fs open + numpy.load",
            ours=Timing(f'open_npz()["x"].compute(), {NPZ_CHUNKS} chunks', t["compute"]),
            anchor=anchor,
            target=0.5,
            note=f"{fresh}; the checkpoint index read from the index cache; moved: {cost(later)}",
            section=SECTION,
        ),
        Row(
            scenario=f'{what}: npystore.load(url)["x"] vs s3fs open + numpy.load',
            ours=Timing('npystore.load()["x"]', t["load"]),
            anchor=anchor,
            target=0.5,
            note=f"{fresh}; moved: {cost(eager)}",
            section=SECTION,
        ),
        Row(
            scenario=f"the same values written by npystore.savez_compressed "
            f"({packed_blocks / 2**20:.1f} MiB deflated, a block index): "
            f'open_npz(url)["x"].compute() ({NPZ_CHUNKS} chunks), the first open ever (no '
            "block checked yet), vs s3fs open + numpy.load of that archive",
            ours=Timing(
                f'open_npz()["x"].compute(), {NPZ_CHUNKS} chunks, blocks unchecked',
                t["blocks cold"],
            ),
            anchor=Timing('numpy.load(fs.open())["x"]', t["blocks anchor"]),
            target=None,
            note=f"{fresh}, with an empty index cache: each block is inflated and checked "
            "(it ends where the one stream numpy inflates has a block boundary) on its "
            "first read, those before a read's own blocks that no other read took on all "
            f"cores; moved: {first_blocks[0]} requests, "
            f"{first_blocks[1] / packed_blocks:.2f}x the compressed size",
            section=SECTION,
        ),
    ]


# -- sweep -------------------------------------------------------------------------------


def _setting(delay: float, bandwidth: float) -> str:
    return f"{bandwidth:.0f} MiB/s, {delay * 1000:.0f} ms"


def bench_cloud_sweep(workdir: Path, size: int, repeat: int) -> list[Row]:
    """The .npy full read and the deflated member's compute at each setting of the sweep;
    rows for the table, the numbers and the plots in ``docs/img``."""
    npy = workdir / f"cloud-{size >> 20}MiB.npy"
    _write_npy(npy, size)
    npz, meta = _npz_file(workdir, size)
    settings = sorted(
        {(DELAY, b) for b in SWEEP_BANDWIDTHS} | {(d, BANDWIDTH) for d in SWEEP_DELAYS}
    )
    reps = min(repeat, 3)
    points: list[dict[str, Any]] = []
    rows: list[Row] = []
    with cloud(workdir, {npy.name: npy, npz.name: npz}) as c:
        npy_fns = _npy_fns(c, npy.name, npy.stat().st_size)
        npz_fns = _npz_fns(c, npz.name, meta["n"], workdir)
        fns = {
            "npy npystore": npy_fns["npystore"],
            "npy anchor": npy_fns["anchor"],
            "npy ceiling": npy_fns["ceiling"],
            "npz npystore": npz_fns["compute"],
            "npz anchor": npz_fns["anchor"],
        }
        t0 = time.perf_counter()
        for fn in fns.values():  # warm-up (pools, connections)
            fn()
        print(f"[cloud-sweep] warm-up {time.perf_counter() - t0:.0f} s", flush=True)
        # repeats outermost: each round visits every setting, so drift (other work on the
        # machine) spreads over all settings instead of landing on a few
        times: dict[tuple[float, float], dict[str, list[float]]] = {s: {} for s in settings}
        loads: dict[tuple[float, float], list[str]] = {s: [] for s in settings}
        for rep in range(reps):
            for setting in settings:
                c.proxy.set(*setting)
                t0 = time.perf_counter()
                for name, got in rounds(fns, 1).items():
                    times[setting].setdefault(name, []).extend(got)
                loads[setting].append(_load_avg())
                took = time.perf_counter() - t0
                print(
                    f"[cloud-sweep] round {rep + 1}/{reps}, {_setting(*setting)}: {took:.0f} s",
                    flush=True,
                )
        for (delay, bandwidth), t in times.items():
            point: dict[str, Any] = {"delay": delay, "bandwidth": bandwidth}
            point["load_avg"] = loads[delay, bandwidth]
            point |= {name: statistics.median(v) for name, v in t.items()}
            points.append(point)
            here = _setting(delay, bandwidth)
            rows += [
                Row(
                    scenario=f"{here}: .npy {size / 2**20:.0f} MiB full read",
                    ours=Timing("npystore.load", t["npy npystore"]),
                    anchor=Timing("numpy.load(fs.open())", t["npy anchor"]),
                    target=None,
                    note=f"ceiling (cat_ranges, {RANGES} ranges) "
                    f"{Timing('', t['npy ceiling']).cell()}; load average "
                    f"{', '.join(loads[delay, bandwidth])}",
                    section=SWEEP_SECTION,
                ),
                Row(
                    scenario=f"{here}: deflated member {meta['member_size'] / 2**20:.0f} MiB "
                    f"({meta['member_size'] / meta['compressed_size']:.1f}x), compute",
                    ours=Timing(
                        f'open_npz()["x"].compute(), {NPZ_CHUNKS} chunks', t["npz npystore"]
                    ),
                    anchor=Timing('numpy.load(fs.open())["x"]', t["npz anchor"]),
                    target=None,
                    section=SWEEP_SECTION,
                ),
            ]
        c.proxy.set(DELAY, BANDWIDTH)
    sweep = {
        "npy_mib": size / 2**20,
        "npz_member_mib": meta["member_size"] / 2**20,
        "npz_compressed_mib": meta["compressed_size"] / 2**20,
        "repeat": reps,
        "points": points,
    }
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    (DOCS_IMG / "cloud-sweep.json").write_text(json.dumps(sweep, indent=1) + "\n")
    plot(sweep, DOCS_IMG)
    return rows


def plot(sweep: dict[str, Any], dest: Path) -> None:
    """``cloud-bandwidth.png`` and ``cloud-latency.png`` from the sweep's numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    lines = [
        ("npy npystore", "o-", "C0", f".npy {sweep['npy_mib']:.0f} MiB: npystore.load"),
        ("npy anchor", "s--", "C0", ".npy: s3fs open + numpy.load"),
        ("npy ceiling", ":", "C0", f".npy: cat_ranges ({RANGES} ranges, bytes only)"),
        ("npz npystore", "^-", "C1", f'.npz member {sweep["npz_member_mib"]:.0f} MiB: '
         f"open_npz()[k].compute()"),
        ("npz anchor", "v--", "C1", ".npz: s3fs open + numpy.load"),
    ]  # fmt: skip
    for axis, fixed, name, xlabel in (
        ("bandwidth", ("delay", DELAY), "cloud-bandwidth.png", "bandwidth per connection (MiB/s)"),
        ("delay", ("bandwidth", BANDWIDTH), "cloud-latency.png", "delay to first byte (ms)"),
    ):
        pts = sorted(
            (p for p in sweep["points"] if math.isclose(p[fixed[0]], fixed[1])),
            key=lambda p: p[axis],
        )
        xs = [p[axis] * (1000 if axis == "delay" else 1) for p in pts]
        fig, ax = plt.subplots(figsize=(7, 5))
        for key, style, color, label in lines:
            ax.plot(xs, [p[key] for p in pts], style, color=color, label=label)
        if axis == "bandwidth":
            ax.set_xscale("log")
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"seconds (median of {sweep['repeat']})")
        held = (
            f"{fixed[1] * 1000:.0f} ms to first byte"
            if fixed[0] == "delay"
            else f"{fixed[1]:.0f} MiB/s per connection"
        )
        ax.set_title(f"Cloud model, {held} (loopback S3 + shaping proxy, 2 cores)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
        fig.tight_layout()
        fig.savefig(dest / name, dpi=110)
        plt.close(fig)


# -- RESULTS.md --------------------------------------------------------------------------


def section_intro(section: str, quick: bool, machine: str, versions: str) -> list[str]:
    """The heading and the text above the table of a section of this module."""
    if section == SECTION:
        return [
            f"## {TITLE}",
            "",
            f"{generated_by(quick)}. The model is a loopback S3 server (`rclone serve "
            "s3`) behind a shaping proxy (`benchmarks/_proxy.py`, its own process) on one "
            f"machine: {machine} ({versions}); the GCS, Azure and distributed rows put "
            "fake-gcs-server, Azurite and SeaweedFS behind the same proxy "
            f"(`benchmarks/stores.py`). {DELAY * 1000:.0f} ms before each request is "
            "forwarded, "
            f"then each connection's response paced to {BANDWIDTH:.0f} MiB/s (a token bucket "
            "per connection, spliced in pieces of at most 256 KiB). Server, proxy and client "
            "share the 2 cores, so many concurrent connections reach the machine's loopback "
            "limit (measured unshaped: 16 concurrent 8 MiB ranges at 400-550 MiB/s with curl, "
            "180-390 MiB/s with s3fs) before 16 x 40 MiB/s. Clients in steady state: one s3fs "
            "filesystem per endpoint, warmed up before timing. npystore and its anchors are "
            "timed one run of each in turn; median (min..max) seconds. The load average "
            "(1 min/5 min) before and after each scenario is in its note. Other programs "
            "seen using CPU during these rows (`ps`, >= 10% CPU, not started by the bench): "
            + (", ".join(f"`{o}`" for o in sorted(OTHERS)) or "none")
            + ".",
            "",
        ]
    if section == SWEEP_SECTION:
        return [
            "### Sweep: per-connection bandwidth and latency",
            "",
            f"{generated_by(quick)}. The same model with one knob turned: bandwidth "
            f"per connection at {DELAY * 1000:.0f} ms, delay at {BANDWIDTH:.0f} MiB/s (the "
            "proxy's settings change between points; the filesystems and their connections "
            "stay). Numbers in `docs/img/cloud-sweep.json`.",
            "",
            "![time vs bandwidth per connection](../docs/img/cloud-bandwidth.png)",
            "![time vs latency](../docs/img/cloud-latency.png)",
            "",
        ]
    raise ValueError(f"unknown section {section!r}")


#: name -> (benchmark, size in MiB of the full run, size in MiB with --quick)
SCENARIOS: dict[str, tuple[Callable[[Path, int, int], Row | list[Row]], int, int]] = {
    "cloud-npy": (bench_cloud_npy, 128, 16),
    "cloud-mat73": (bench_cloud_mat73, 122, 4),
    "cloud-mat73-matlab": (bench_cloud_mat73_matlab, 122, 4),
    "cloud-mat73-ints": (bench_cloud_mat73_ints, 122, 4),
    "cloud-npz": (bench_cloud_npz, 128, 16),
    "cloud-sweep": (bench_cloud_sweep, 128, 4),
}
