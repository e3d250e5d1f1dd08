"""npystore benchmarks: each row is npystore vs its anchor, measured side by side in one run.

Run with ``nox -s bench`` (or ``python benchmarks/run.py``); ``--quick`` uses small sizes
for a regression check: well under two minutes, plus under three for the cloud rows (on a
quiet machine). Results go to ``benchmarks/RESULTS.md``
(``--output`` to change) and to stdout.

Every timing is the median of ``--repeat`` runs (min and max reported too), taken in the
same process right after the anchor's, with the page cache warm for local files. Peak-RSS
rows run each side in a fresh subprocess (``_rss_probe.py``), alternating the same way.

``--only NAME[,NAME]`` reruns some scenarios: ``npy-load``, ``npy-dask`` (local ``.npy``),
``npz-load``, ``npz-slice``, ``npz-rss`` (a ``savez_compressed``-style deflated member),
``import``, ``load-small``, ``info``, ``cat`` (first use in a fresh interpreter:
``startup.py``), ``mat73-load``, ``mat73-s3`` (a MATLAB v7.3 variable, local and on
loopback S3 + 30 ms), ``mat73-h5py`` (hdf5storage's v7.3 files, local, vs h5py),
``mat-small-cell``, ``mat-small-struct``, ``mat-small-v73``,
``mat-many-vars``, ``mat-v73-shared`` (MAT-files of many small elements or variables),
``mat-corpus-v5``, ``mat-corpus-v73``, ``mat-first-v5``, ``mat-first-v73`` (small real
files: ``mat_small.py``), ``zarr-many-open``, ``zarr-many-list`` (the Zarr store over
50,000 tiny members: ``zarr_many.py``), ``cloud-npy``, ``cloud-mat73``,
``cloud-mat73-matlab``, ``cloud-mat73-ints``, ``cloud-npz``, ``cloud-sweep`` (the cloud
model, 30 ms and 40 MiB/s per connection: ``cloud.py``), ``cloud-gcs-npy``,
``cloud-azure-npy``, ``cloud-distributed`` (the same model on GCS, Azure and SeaweedFS:
``stores.py``; ``stores`` names these three, ``cloud`` all nine: they share one section,
which a run rewrites whole),
``write-npy-local``, ``write-npz-local``, ``write-s3-cloud``, ``write-s3-cloud10``,
``write-rss`` (the writers: ``write.py``; ``write`` names all five), ``many-open``,
``many-read``, ``many-sum`` (datasets of many files: ``many.py``; ``many`` names all three).

RESULTS.md has one section per group of rows (the main table, the cloud model, its sweep,
the writers),
each between ``<!-- section: NAME -->`` markers, then ``FINDINGS.md``. A run rewrites the
sections it has rows for and keeps the others as they were, so ``--only cloud`` leaves the
main table alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import npystore

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the helper modules next to this script

import cloud  # noqa: E402
import many  # noqa: E402
import mat_small  # noqa: E402
import remote  # noqa: E402
import startup  # noqa: E402
import stores  # noqa: E402
import write  # noqa: E402
import zarr_many  # noqa: E402
from _common import (  # noqa: E402
    LATENCY,
    Row,
    Timing,
    _interleaved,
    _time,
    _warm,
    _write_npy,
    transfer_alone,
)


def bench_local_full_read(workdir: Path, size: int, repeat: int) -> Row:
    path = workdir / f"full-{size >> 20}MiB.npy"
    _write_npy(path, size)
    _warm(path)
    expected = np.load(path)
    got = npystore.load(str(path))
    if not np.array_equal(expected, got):
        raise SystemExit("npystore.load disagrees with numpy.load")
    del expected, got
    ours, anchor = _interleaved(lambda: npystore.load(str(path)), lambda: np.load(path), repeat)
    gib = path.stat().st_size / 2**30
    return Row(
        scenario=f"local .npy full read, {gib:.2f} GiB: npystore.load vs numpy.load",
        ours=Timing("npystore.load", ours),
        anchor=Timing("numpy.load", anchor),
        target=1.0,
        note="target <= 1.0 (issue 2); <= 0.8 is the performance issue's target",
    )


def bench_local_dask_compute(workdir: Path, size: int, repeat: int) -> Row:
    path = workdir / f"full-{size >> 20}MiB.npy"
    _write_npy(path, size)
    _warm(path)
    ours, anchor = _interleaved(
        lambda: npystore.open_npy(str(path)).compute(), lambda: np.load(path), repeat
    )
    gib = path.stat().st_size / 2**30
    return Row(
        scenario=f"local .npy full read, {gib:.2f} GiB: open_npy(...).compute() vs numpy.load",
        ours=Timing("open_npy().compute()", ours),
        anchor=Timing("numpy.load", anchor),
        target=None,
        note="dask concatenates chunks: one extra copy compared to npystore.load",
    )


def bench_npy_dask_sum(workdir: Path, size: int, repeat: int) -> list[Row]:
    """Issue 6 target 2: a dask sum over a large local .npy, each side in a fresh process
    (time and peak RSS), vs what dask users do today: from_array over numpy's memmap."""
    path = workdir / f"full-{size >> 20}MiB.npy"
    _write_npy(path, size)
    values = np.load(path, mmap_mode="r")
    meta = {"sum": 0.0, "abs_sum": 0.0}
    step = 2**24 // values.shape[1]
    for i in range(0, values.shape[0], step):  # the reference sum, in bounded memory
        block = np.asarray(values[i : i + step])
        meta["sum"] += float(block.sum())
        meta["abs_sum"] += float(np.abs(block).sum())
    del values
    _warm(path)
    ours: list[dict[str, Any]] = []
    anchor: list[dict[str, Any]] = []
    for _ in range(repeat):
        anchor.append(_probe("npy-mmap-dask", path, meta))
        ours.append(_probe("npy-npystore", path, meta))
    gib = size / 2**30
    t_ours = Timing("open_npy().sum()", [r["seconds"] for r in ours])
    t_anchor = Timing("from_array(mmap).sum()", [r["seconds"] for r in anchor])
    return [
        Row(
            scenario=f"local .npy dask sum, {gib:.2f} GiB (warm page cache): "
            "open_npy(p).sum().compute() vs da.from_array(np.load(p, mmap_mode='r')).sum()",
            ours=t_ours,
            anchor=t_anchor,
            target=0.25,
            note="fresh process per run (times exclude imports); issue 6 target 2",
        ),
        Row(
            scenario=f"peak RSS of the same dask sums, {gib:.2f} GiB",
            ours=Timing("peak RSS MB", [r["peak_mb"] for r in ours], unit="MB"),
            anchor=Timing("peak RSS MB", [r["peak_mb"] for r in anchor], unit="MB"),
            target=None,
            absolute_target=600,
            note="VmHWM of each fresh process; the memmap's pages count as they are touched",
        ),
    ]


# -- .npz: one deflated member -----------------------------------------------------------

#: zlib level of the generated archives: numpy.savez_compressed's (zipfile's default, 6).
NPZ_LEVEL = 6
NPZ_MEMBER = "x"
#: Elements generated (and compressed) per block.
_GEN_BLOCK = 4 * 2**20


def _write_npz(path: Path, nbytes: int) -> dict[str, Any]:
    """A ``savez_compressed``-style archive with one float64 member of ``nbytes`` bytes.

    The data is a random walk of float32 normal steps, stored as float64 (deflates about
    2.5-2.8x). Written block by block through ``zipfile`` as numpy does (deflate level 6, ZIP64
    local headers), so it never needs the whole array in memory. A sidecar ``.json`` holds
    the parameters, the archive's size and the data's sum; a matching pair is reused.
    """
    meta_path = path.with_suffix(".json")
    n = nbytes // 8
    if path.exists() and meta_path.exists():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if (meta.get("n"), meta.get("level"), meta.get("file_size")) == (
            n,
            NPZ_LEVEL,
            path.stat().st_size,
        ):
            return meta
    print(
        f"writing {path} ({nbytes / 2**20:.0f} MiB member, zlib level {NPZ_LEVEL})...", flush=True
    )
    t0 = time.perf_counter()
    header = np.lib.format.header_data_from_array_1_0(np.empty(0, dtype="<f8"))
    header["shape"] = (n,)
    rng = np.random.default_rng(1)
    last = np.float32(0)
    sums: list[float] = []
    abs_sums: list[float] = []
    tmp = path.with_name(path.name + ".partial")
    with (
        zipfile.ZipFile(
            tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=NPZ_LEVEL, allowZip64=True
        ) as zf,
        zf.open(NPZ_MEMBER + ".npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(f, header)
        for i in range(0, n, _GEN_BLOCK):
            steps = rng.standard_normal(min(_GEN_BLOCK, n - i), dtype=np.float32)
            steps[0] += last
            walk = np.cumsum(steps, dtype=np.float32)
            last = walk[-1]
            block = walk.astype("<f8")
            sums.append(float(block.sum()))
            abs_sums.append(float(np.abs(block).sum()))
            f.write(block.data)
    tmp.replace(path)
    os.sync()  # no writeback of this file may overlap a later timing
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(NPZ_MEMBER + ".npy")
    meta = {
        "n": n,
        "level": NPZ_LEVEL,
        "file_size": path.stat().st_size,
        "member_size": info.file_size,
        "compressed_size": info.compress_size,
        "sum": math.fsum(sums),
        "abs_sum": math.fsum(abs_sums),
        "seconds_to_write": round(time.perf_counter() - t0, 1),
    }
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _npz_archive(workdir: Path, size: int) -> tuple[Path, dict[str, Any]]:
    path = workdir / f"deflated-{size >> 20}MiB.npz"
    return path, _write_npz(path, size)


def _numpy_member(path: Path, key: slice | None = None) -> np.ndarray[Any, Any]:
    with np.load(path) as z:
        arr = z[NPZ_MEMBER]
    return arr if key is None else arr[key]


def _describe(meta: dict[str, Any]) -> str:
    ratio = meta["member_size"] / meta["compressed_size"]
    return (
        f"member {meta['member_size'] / 2**20:.0f} MiB, deflated {ratio:.2f}x "
        f"(zlib level {meta['level']})"
    )


def bench_npz_full_read(workdir: Path, size: int, repeat: int) -> Row:
    path, meta = _npz_archive(workdir, size)
    _warm(path)
    expected = _numpy_member(path)
    got = npystore.open_npz(str(path)).load(NPZ_MEMBER)
    if not np.array_equal(expected, got):
        raise SystemExit("NpzFile.load disagrees with numpy.load")
    del expected, got
    ours, anchor = _interleaved(
        lambda: npystore.open_npz(str(path)).load(NPZ_MEMBER),
        lambda: _numpy_member(path),
        repeat,
    )
    mib = meta["member_size"] / 2**20
    return Row(
        scenario=f"deflated member full read, {mib:.0f} MiB: open_npz(p).load vs numpy.load",
        ours=Timing('open_npz(p).load("x")', ours),
        anchor=Timing('numpy.load(p)["x"]', anchor),
        target=0.7,
        note=f"{_describe(meta)}; a fresh NpzFile per run (no index reused)",
    )


def bench_npz_slice(workdir: Path, size: int, repeat: int) -> Row:
    path, meta = _npz_archive(workdir, size)
    _warm(path)
    n = meta["n"]
    stop = n - n // 1000
    start = stop - n // 500  # 0.2% of the elements, ending 0.1% before the member's end
    z = npystore.open_npz(str(path))
    t0 = time.perf_counter()
    z.build_index(NPZ_MEMBER)
    build = time.perf_counter() - t0
    slot = z.archive.index_slot(z.info(NPZ_MEMBER).entry.name)
    index = slot.get() if slot is not None else None
    points = f"{len(index.checkpoints)} checkpoints" if index is not None else "no index"
    key = slice(start, stop)
    if not np.array_equal(_numpy_member(path, key), z[NPZ_MEMBER][key].compute()):
        raise SystemExit("open_npz(...)[a:b].compute() disagrees with numpy.load(...)[a:b]")

    def ours_slice() -> np.ndarray[Any, Any]:  # dask array, slice and compute, each run
        return z[NPZ_MEMBER][key].compute()

    ours, anchor = _interleaved(ours_slice, lambda: _numpy_member(path, key), repeat)
    mib = meta["member_size"] / 2**20
    return Row(
        scenario=(
            f"deflated member 0.2% slice after indexing, {mib:.0f} MiB: "
            "open_npz(p)[a:b].compute() vs numpy.load(p)[a:b]"
        ),
        ours=Timing('z["x"][a:b].compute()', ours),
        anchor=Timing('numpy.load(p)["x"][a:b]', anchor),
        target=0.05,
        note=(
            f"{_describe(meta)}; [{start}:{stop}] of {n} elements "
            f"({(stop - start) * 8 / 2**20:.2f} MiB); index built once before timing: "
            f"{build:.3f} s, {points}"
        ),
    )


def _probe(mode: str, path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Run ``_rss_probe.py`` in a fresh interpreter and check the sum it reports
    (``meta``: ``sum`` and ``abs_sum`` of the values)."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "_rss_probe.py"), mode, str(path), NPZ_MEMBER],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"_rss_probe.py {mode} failed:\n{proc.stderr}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    # summation order differs (numpy: pairwise over the whole; dask: per chunk, then a tree)
    if not math.isclose(out["sum"], meta["sum"], rel_tol=0, abs_tol=1e-9 * meta["abs_sum"]):
        raise SystemExit(f"{mode}: sum {out['sum']!r}, expected {meta['sum']!r}")
    return out


def bench_npz_dask_sum_rss(workdir: Path, size: int, repeat: int) -> Row:
    path, meta = _npz_archive(workdir, size)
    _warm(path)
    ours: list[dict[str, Any]] = []
    anchor: list[dict[str, Any]] = []
    for _ in range(repeat):  # alternate, as _interleaved does
        anchor.append(_probe("numpy", path, meta))
        ours.append(_probe("npystore", path, meta))

    def med(runs: list[dict[str, Any]], field: str) -> float:
        return statistics.median(r[field] for r in runs)

    def times(runs: list[dict[str, Any]]) -> str:
        return Timing("", [r["seconds"] for r in runs]).cell()

    mib = meta["member_size"] / 2**20
    return Row(
        scenario=(
            f"peak RSS of a dask sum over a {mib:.0f} MiB deflated member: "
            'open_npz(p)["x"].sum().compute() vs numpy.load(p)["x"].sum()'
        ),
        ours=Timing("peak RSS MB", [r["peak_mb"] for r in ours], unit="MB"),
        anchor=Timing("peak RSS MB", [r["peak_mb"] for r in anchor], unit="MB"),
        target=None,
        absolute_target=400,
        note=(
            f"{_describe(meta)}; fresh process each, no index beforehand (the first chunk "
            f"task builds it); RSS after imports {med(ours, 'baseline_mb'):.0f} MB "
            f"(npystore+dask) / {med(anchor, 'baseline_mb'):.0f} MB (numpy); time "
            f"{times(ours)} s vs {times(anchor)} s; sums match"
        ),
    )


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {system}"


def _versions() -> str:
    import dask
    import fsspec

    return (
        f"Python {platform.python_version()}, numpy {np.__version__}, "
        f"npystore {npystore.__version__}, dask {dask.__version__}, fsspec {fsspec.__version__}"
    )


# -- MATLAB v7.3: one 200 MB variable ---------------------------------------------------


def bench_mat73_load(workdir: Path, size: int, repeat: int) -> Row:
    import mat73

    from mat import check, make_file

    path, value = make_file(workdir, size)
    _warm(path)
    check(npystore.open_mat(str(path)).load("x"), value)
    np.testing.assert_array_equal(mat73.loadmat(str(path))["x"], value)
    ours, anchor = _interleaved(
        lambda: npystore.open_mat(str(path)).load("x"),
        lambda: mat73.loadmat(str(path))["x"],
        repeat,
    )
    mb = value.nbytes / 1e6
    return Row(
        scenario=f"local MAT v7.3, one {mb:.0f} MB double variable (MATLAB layout): "
        "open_mat().load vs mat73.loadmat",
        ours=Timing("npystore", ours),
        anchor=Timing("mat73.loadmat", anchor),
        target=0.5,
        note=f"file {path.stat().st_size / 1e6:.0f} MB, deflate level 3, 64 KiB chunks; "
        "issue 5 target",
    )


def bench_mat73_h5py(workdir: Path, size: int, repeat: int) -> list[Row]:
    """hdf5storage's files (shuffle, gzip 7, Fletcher-32) read whole: ``open_mat().load``
    vs h5py, for small integers (a 4000 x 4000 matrix: about 18.5 MB) and smooth values."""
    import h5py

    from mat import matrix, small_integers, write_hdf5storage

    rows = []
    side = max(100, round(math.sqrt(size / 8) / 100) * 100)  # 122 MiB: 4000 x 4000
    for kind, make in (("integers 0..99", small_integers), ("smooth values", matrix)):
        value = make(side * side * 8)
        path = workdir / f"hdf5storage-{make.__name__}-{value.shape[0]}.mat"
        if not path.exists():
            write_hdf5storage(path, "x", value)
        _warm(path)

        def ours(path: Path = path) -> Any:
            return npystore.open_mat(str(path)).load("x")

        def anchor(path: Path = path) -> Any:
            with h5py.File(path, "r") as f:
                return f["x"][()]

        np.testing.assert_array_equal(ours(), value)
        np.testing.assert_array_equal(anchor().T, value)
        cpu = _cpu_seconds(ours, anchor, repeat)
        a, b = _interleaved(ours, anchor, repeat)
        mb = value.nbytes / 1e6
        rows.append(
            Row(
                scenario=f"local MAT v7.3 (hdf5storage, {kind}), one {mb:.0f} MB double "
                "variable: open_mat().load vs h5py",
                ours=Timing("npystore", a),
                anchor=Timing("h5py", b),
                target=0.5,
                note=f"file {path.stat().st_size / 1e6:.1f} MB, shuffle, gzip 7, Fletcher-32, "
                f"{value.shape[0]} x {value.shape[1]}; CPU seconds (median, all threads): "
                f"npystore {cpu[0]:.3f}, h5py {cpu[1]:.3f}; {_cpus()} CPUs, load average "
                f"{os.getloadavg()[0]:.1f}; issue 28 target",
            )
        )
    return rows


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cpu_seconds(
    ours: Callable[[], Any], anchor: Callable[[], Any], repeat: int
) -> tuple[float, float]:
    """Median process CPU time (every thread) of each, alternating."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, out in zip((ours, anchor), times, strict=True):
            start = time.process_time()
            fn()
            out.append(time.process_time() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def bench_mat73_s3(workdir: Path, size: int, repeat: int) -> Row:
    import fsspec
    import h5py

    from _s3 import s3_with_latency
    from mat import check, make_file

    path, value = make_file(workdir, size)
    with s3_with_latency(workdir / "s3", LATENCY) as (direct, opts):
        (workdir / "s3" / "bench").mkdir(parents=True, exist_ok=True)
        fsspec.filesystem("s3", **direct).put_file(str(path), "bench/x.mat")
        fs = fsspec.filesystem("s3", **opts)
        url = "s3://bench/x.mat"

        def ours() -> Any:
            return npystore.open_mat(url, storage_options=opts).load("x")

        def anchor() -> Any:
            with fs.open("bench/x.mat", "rb") as f, h5py.File(f, "r") as h:
                return h["x"][()].T

        check(ours(), value)
        check(anchor(), value)
        a, b = _interleaved(ours, anchor, repeat)
        parts = _mat73_s3_parts(url, opts, path, repeat)
    mb = value.nbytes / 1e6
    meta, download, decode = (statistics.median(p) for p in parts)
    return Row(
        scenario=f"S3 (rclone, +30 ms/request) MAT v7.3, one {mb:.0f} MB variable: "
        "open_mat().load vs h5py over s3fs",
        ours=Timing("npystore", a),
        anchor=Timing("h5py(s3fs file)", b),
        target=0.3,
        note="s3fs default read-ahead (50 MiB blocks); issue 5 target. Parts, same run: "
        f"open + chunk index {meta:.3f} s; download of the file alone (8 MiB ranges, "
        f"concurrent) {download:.3f} s; decode alone (local load, page cache) {decode:.3f} s; "
        f"floor with perfect overlap {meta + max(download, decode):.3f} s "
        f"(ratio {(meta + max(download, decode)) / statistics.median(b):.2f}), "
        f"without {meta + download + decode:.3f} s; server and client share 2 cores",
    )


def _mat73_s3_parts(
    url: str, opts: dict[str, Any], local: Path, repeat: int
) -> tuple[list[float], list[float], list[float]]:
    """The parts of the S3 load measured alone: metadata (open + the variable's chunk
    index), the download of the whole file, and the decode (a local load)."""
    meta = _time(lambda: npystore.open_mat(url, storage_options=opts).node("x"), repeat)
    download = transfer_alone(url, opts, repeat)
    decode = _time(lambda: npystore.open_mat(str(local)).load("x"), repeat)
    return meta, download, decode


def _table(rows: list[Row]) -> list[str]:
    lines = [
        "| scenario | npystore | anchor | ratio | target | verdict | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.scenario} | {r.ours.label}: {r.ours.cell()} | {r.anchor.label}: "
            f"{r.anchor.cell()} | {r.ratio:.2f} | {r.target_cell()} | {r.verdict} | {r.note} |"
        )
    return lines


def _main_section(rows: list[Row], quick: bool) -> list[str]:
    return [
        "# Benchmark results",
        "",
        "Generated by `nox -s bench` (`benchmarks/run.py`"
        + (" --quick" if quick else "")
        + f") on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"- Machine: {_machine()}",
        f"- Versions: {_versions()}",
        "- Times in seconds: median (min..max); ratio = npystore / anchor, lower is better.",
        *(
            [
                "- Cells in MB are peak RSS (MiB, VmHWM) of a fresh process "
                "(`benchmarks/_rss_probe.py`); their target is absolute."
            ]
            if any(r.absolute_target is not None for r in rows)
            else []
        ),
        "",
        *_table(rows),
    ]


#: The sections of RESULTS.md, in order: name -> lines above the table (rows, quick).
SECTIONS: dict[str, Callable[[list[Row], bool], list[str]]] = {
    "main": _main_section,
    cloud.SECTION: lambda rows, quick: [
        *cloud.section_intro(cloud.SECTION, quick, _machine(), _versions()),
        *_table(rows),
    ],
    cloud.SWEEP_SECTION: lambda rows, quick: [
        *cloud.section_intro(cloud.SWEEP_SECTION, quick, _machine(), _versions()),
        *_table(rows),
    ],
    write.SECTION: lambda rows, quick: [
        *write.section_intro(quick, _machine(), _versions()),
        *_table(rows),
    ],
    many.SECTION: lambda rows, quick: [
        *many.section_intro(quick, _machine(), _versions()),
        *_table(rows),
    ],
}
_MARKED = re.compile(r"<!-- section: (\S+) -->\n(.*?)\n<!-- end section: \1 -->", re.S)
_FINDINGS = "## Findings (profiling notes"


def _previous_sections(text: str) -> dict[str, str]:
    """The sections of an earlier RESULTS.md, by name; a file from before the markers is
    one main section (what precedes the findings)."""
    found = {m.group(1): m.group(2) for m in _MARKED.finditer(text)}
    if not found and text.startswith("# Benchmark results"):
        found["main"] = text.split(_FINDINGS, 1)[0].rstrip()
    return found


def render(rows: list[Row], quick: bool, previous: str = "") -> str:
    """RESULTS.md: the sections with rows in ``rows`` new, the others from ``previous``."""
    old = _previous_sections(previous)
    parts = []
    for name, lines in SECTIONS.items():
        mine = [r for r in rows if r.section == name]
        text = "\n".join(lines(mine, quick)) if mine else old.get(name)
        if text is not None:
            parts.append(f"<!-- section: {name} -->\n{text}\n<!-- end section: {name} -->")
    findings = HERE / "FINDINGS.md"
    if findings.exists():  # profiling notes kept by hand, below every generated table
        parts.append(findings.read_text().rstrip())
    return "\n\n".join(parts) + "\n"


#: name -> (benchmark, size in MiB of the full run, size in MiB with --quick)
SCENARIOS: dict[str, tuple[Callable[[Path, int, int], Row | list[Row]], int, int]] = {
    "npy-load": (bench_local_full_read, 1024, 128),
    "npy-dask": (bench_local_dask_compute, 1024, 128),
    "npy-dask-sum": (bench_npy_dask_sum, 4096, 256),
    "npz-load": (bench_npz_full_read, 512, 64),
    "npz-slice": (bench_npz_slice, 512, 64),
    "npz-rss": (bench_npz_dask_sum_rss, 1024, 128),
    "mat73-load": (bench_mat73_load, 200, 32),
    "mat73-s3": (bench_mat73_s3, 200, 32),
    "mat73-h5py": (bench_mat73_h5py, 122, 8),
    "s3-npy-full": (remote.bench_s3_npy_full, 128, 16),
    "s3-npy-slices": (remote.bench_s3_npy_slices, 1024, 64),
    "s3-npz-open": (remote.bench_s3_npz_open, 0, 0),
    "import": (startup.bench_import, 0, 0),
    "load-small": (startup.bench_load, 0, 0),
    "info": (startup.bench_info, 0, 0),
    "cat": (startup.bench_cat, 0, 0),
    **mat_small.SCENARIOS,
    **cloud.SCENARIOS,
    **stores.SCENARIOS,
    **write.SCENARIOS,
    **zarr_many.SCENARIOS,
    **many.SCENARIOS,
}
#: Names for groups of scenarios in ``--only``.
GROUPS = {
    "cloud": [*cloud.SCENARIOS, *stores.SCENARIOS],  # one section of RESULTS.md
    "stores": list(stores.SCENARIOS),
    "write": list(write.SCENARIOS),
    "many": list(many.SCENARIOS),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per timing (>= 3)")
    parser.add_argument("--workdir", type=Path, default=None, help="where data files go")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument(
        "--only",
        default=None,
        metavar="NAME[,NAME]",
        help=f"run only these scenarios (of {', '.join(SCENARIOS)}; 'cloud': all cloud-*)",
    )
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    if repeat < 3:
        parser.error("--repeat must be >= 3 (rows report the median)")
    names = list(SCENARIOS)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        names = [m for n in names for m in GROUPS.get(n, [n])]
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown or not names:
            parser.error(f"--only: unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    with tempfile.TemporaryDirectory(prefix="npystore-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for name in names:
            bench, full_mib, quick_mib = SCENARIOS[name]
            t0 = time.perf_counter()
            made = bench(workdir, (quick_mib if args.quick else full_mib) * 2**20, repeat)
            for row in made if isinstance(made, list) else [made]:
                print(f"[{name}] {row.scenario}: ratio {row.ratio:.2f} ({row.verdict})", flush=True)
                rows.append(row)
            print(f"[{name}] done in {time.perf_counter() - t0:.0f} s", flush=True)
            # what a scenario wrote (its files, a server's store) is written back before the
            # next one times anything: the 4 GiB of the distributed read, flushed during
            # the local save that followed, made it 4.5x numpy's (1.07 on a clean disk)
            os.sync()
    previous = args.output.read_text() if args.output.exists() else ""
    text = render(rows, args.quick, previous)
    args.output.write_text(text)
    print(text)
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
