"""Memory bounds of inflating, measured in a fresh interpreter (issue 24 items 5 and 7).

Each case runs in a child process that imports npystore, notes its peak RSS (``VmHWM``),
reads, and reports how much the peak grew (and what is resident after the read). Budgets
are scaled down in the child (module constants) so that the data stays small; the
regressions they guard against held several times the budget.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

CHILD = r"""
import json, sys, threading
import dask, dask.array, numpy as np, npystore
from npystore.read import inflate, memo

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise SystemExit("no " + key)

mode, paths = sys.argv[1], sys.argv[2:]
inflate.SMALL_MEMBER = 0  # the members count as large: indexed or kept, never streamed
inflate.HEAD_FRACTION = 10**9
memo.KEEP_BUDGET = inflate.KEEP_MEMBER = 40 * 2**20
arrays = [npystore.open_npz(p, index_cache=False, chunks=(2**18,))["a"] for p in paths]
base, rss0 = status("VmHWM"), status("VmRSS")
result = {}
if mode == "threads":  # one full compute per thread, all starting together
    start = threading.Barrier(len(arrays))
    sums = [None] * len(arrays)
    def run(k):
        start.wait()
        with dask.config.set(scheduler="sync"):
            sums[k] = float(arrays[k].sum().compute())
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result["sums"] = sums
elif mode == "slice":  # one 10-element slice in the middle
    x = arrays[0]
    result["values"] = x[x.shape[0] // 2 : x.shape[0] // 2 + 10].compute().tolist()
result["peak_mib"] = status("VmHWM") - base
result["resident_mib"] = status("VmRSS") - rss0
result["kept_mib"] = sum(n for r, n in memo._held.values() if r() and r().inflated()) / 2**20
print(json.dumps(result))
"""


def _child(mode: str, *paths: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _archive(tmp_path: Path, n: int = 4 * 2**20) -> tuple[Path, np.ndarray[Any, Any]]:
    """A numpy-written member of 32 MiB (about 8x deflated)."""
    a = (np.arange(n) % 251).astype("<f8") + np.repeat(np.arange(n // 1024), 1024)
    path = tmp_path / "m0.npz"
    np.savez_compressed(path, a=a)
    return path, a


def test_the_keep_budget_holds_under_threads(tmp_path: Path) -> None:
    """Four threads each computing a 32 MiB member with no index, under a 40 MiB budget:
    the members being inflated were not counted, and all four were kept at once."""
    path, a = _archive(tmp_path)
    paths = [path]
    for k in range(1, 4):
        paths.append(tmp_path / f"m{k}.npz")
        shutil.copyfile(path, paths[-1])
    got = _child("threads", *paths)
    assert got["sums"] == [float(a.sum())] * 4
    assert got["peak_mib"] < 40 + 40, got  # the budget and some room for the rest


def test_a_small_slice_keeps_nothing(tmp_path: Path) -> None:
    """A 10-element slice of a member with no index left the whole member inflated."""
    path, a = _archive(tmp_path)
    got = _child("slice", path)
    mid = a.size // 2
    assert got["values"] == a[mid : mid + 10].tolist()
    assert got["kept_mib"] == 0, got
    assert got["resident_mib"] < 16, got
