"""What every benchmark module shares: timings, result rows, file helpers."""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Seconds the loopback proxy adds to every S3 request (a cloud store's round trip).
LATENCY = 0.030


@dataclass
class Timing:
    label: str
    seconds: list[float]
    #: What the values are: ``"s"`` (seconds, the default) or e.g. ``"MB"`` (peak RSS).
    unit: str = "s"

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def cell(self) -> str:
        if self.unit == "s":
            return f"{self.median:.3f} ({min(self.seconds):.3f}..{max(self.seconds):.3f})"
        lo, hi = min(self.seconds), max(self.seconds)
        return f"{self.median:.0f} ({lo:.0f}..{hi:.0f}) {self.unit}"


@dataclass
class Row:
    scenario: str
    ours: Timing
    anchor: Timing
    target: float | None
    note: str = ""
    #: A target on npystore's own median, in ``ours.unit`` (used instead of ``target``).
    absolute_target: float | None = None
    #: The section of RESULTS.md the row belongs to (``run.py``'s ``render``).
    section: str = "main"

    @property
    def ratio(self) -> float:
        return self.ours.median / self.anchor.median

    @property
    def verdict(self) -> str:
        if self.absolute_target is not None:
            return "PASS" if self.ours.median <= self.absolute_target else "FAIL"
        if self.target is None:
            return "-"
        return "PASS" if self.ratio <= self.target else "FAIL"

    def target_cell(self) -> str:
        if self.absolute_target is not None:
            return f"<= {self.absolute_target:g} {self.ours.unit} (absolute)"
        return f"<= {self.target}" if self.target is not None else "-"


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


def rounds(fns: Mapping[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Time each of ``fns`` ``repeat`` times, one run of each in turn (as
    :func:`_interleaved` does for two)."""
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            out[name] += _time(fn, 1)
    return out


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
    os.sync()  # no writeback of this file may overlap a later timing


def _warm(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(64 * 2**20):
            pass


def transfer_alone(url: str, opts: dict[str, Any], repeat: int) -> list[float]:
    """Seconds to move the whole object through npystore's reader (concurrent 8 MiB
    ranges into one buffer, no parsing): what any full read over this link and these
    cores costs."""
    from npystore.fetch import open_reader

    reader = open_reader(url, opts)
    buf = np.empty(reader.size, dtype=np.uint8)
    view = memoryview(buf.data)
    part = 8 * 2**20
    requests = [(o, view[o : o + part]) for o in range(0, reader.size, part)]
    return _time(lambda: reader.readinto_many(requests), repeat)
