"""npystore benchmarks: each row is npystore vs its anchor, measured side by side in one run.

Run with ``nox -s bench`` (or ``python benchmarks/run.py``); ``--quick`` uses small sizes
for a regression check in well under two minutes. Results go to ``benchmarks/RESULTS.md``
(``--output`` to change) and to stdout.

Every timing is the median of ``--repeat`` runs (min and max reported too), taken in the
same process right after the anchor's, with the page cache warm for local files.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import npystore

HERE = Path(__file__).resolve().parent


@dataclass
class Timing:
    label: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def cell(self) -> str:
        return f"{self.median:.3f} ({min(self.seconds):.3f}..{max(self.seconds):.3f})"


@dataclass
class Row:
    scenario: str
    ours: Timing
    anchor: Timing
    target: float | None
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.ours.median / self.anchor.median

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "-"
        return "PASS" if self.ratio <= self.target else "FAIL"


def _time(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - t0)
        del result
    return out


def _interleaved(
    ours: Callable[[], Any], anchor: Callable[[], Any], repeat: int
) -> tuple[list[float], list[float]]:
    """Alternate the two so drift (thermal, cache, neighbours) hits both alike."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        b += _time(anchor, 1)
        a += _time(ours, 1)
    return a, b


def _write_npy(path: Path, nbytes: int) -> None:
    if path.exists() and path.stat().st_size >= nbytes:
        return
    n = nbytes // 8
    rows = 1024
    arr = np.lib.format.open_memmap(path, mode="w+", dtype="<f8", shape=(n // rows, rows))
    step = max(1, (64 * 2**20) // (rows * 8))
    rng = np.random.default_rng(0)
    for i in range(0, arr.shape[0], step):
        arr[i : i + step] = rng.standard_normal((min(step, arr.shape[0] - i), rows))
    arr.flush()
    del arr


def _warm(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(64 * 2**20):
            pass


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


def render(rows: list[Row], quick: bool) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Generated by `nox -s bench` (`benchmarks/run.py`"
        + (" --quick" if quick else "")
        + f") on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"- Machine: {_machine()}",
        f"- Versions: {_versions()}",
        "- Times in seconds: median (min..max); ratio = npystore / anchor, lower is better.",
        "",
        "| scenario | npystore | anchor | ratio | target | verdict | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = f"<= {r.target}" if r.target is not None else "-"
        lines.append(
            f"| {r.scenario} | {r.ours.label}: {r.ours.cell()} | {r.anchor.label}: "
            f"{r.anchor.cell()} | {r.ratio:.2f} | {target} | {r.verdict} | {r.note} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, < 2 minutes")
    parser.add_argument("--repeat", type=int, default=None, help="runs per timing (>= 3)")
    parser.add_argument("--workdir", type=Path, default=None, help="where data files go")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    size = (128 if args.quick else 1024) * 2**20
    with tempfile.TemporaryDirectory(prefix="npystore-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for bench in (bench_local_full_read, bench_local_dask_compute):
            row = bench(workdir, size, repeat)
            print(f"{row.scenario}: ratio {row.ratio:.2f} ({row.verdict})", flush=True)
            rows.append(row)
    text = render(rows, args.quick)
    args.output.write_text(text)
    print(text)
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
