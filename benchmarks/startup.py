"""First-use costs: ``import npystore``, ``npystore.load`` and ``npystore info``/``cat`` of a
small local file.

Each run is a fresh interpreter (what a user's script or shell command pays), anchored
against the same interpreter doing the numpy-only equivalent, interleaved. Bytecode is
written and warm (one run first, ``PYTHONDONTWRITEBYTECODE`` cleared), as in an installed
package: otherwise every run compiles npystore's modules again.

- ``import``: the time ``import npystore`` adds to ``import numpy`` (target: < 0.3 s).
- ``load``: the time ``npystore.load('small.npy')`` adds to ``numpy.load('small.npy')``,
  each with its import (target: < 0.15 s; it imports no dask, xarray, pandas or fsspec).
- ``info``, ``cat``: ``npystore info small.npy`` and ``npystore cat small.npy`` end to end
  (target: < 0.5 s), against ``python -c "import numpy; numpy.load('small.npy')"``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import Row, Timing

#: The subprocesses' environment: bytecode written (and then read), as an installed package.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, env=_ENV)
    return time.perf_counter() - t0


def _small(workdir: Path) -> Path:
    """A small ``.npy`` file (8 KB), and bytecode for every module the runs import."""
    path = workdir / "small.npy"
    np.save(path, np.arange(1000.0).reshape(100, 10))
    for warm in (
        [sys.executable, "-c", f"import npystore; npystore.load({str(path)!r})"],
        [sys.executable, "-m", "npystore", "info", str(path)],
        [sys.executable, "-m", "npystore", "cat", str(path)],
    ):
        _run(warm)
    return path


def bench_import(workdir: Path, size: int, repeat: int) -> Row:
    del workdir, size
    numpy_only: list[float] = []
    extra: list[float] = []
    for _ in range(repeat):
        base = _run([sys.executable, "-c", "import numpy"])
        both = _run([sys.executable, "-c", "import numpy, npystore"])
        numpy_only.append(base)
        extra.append(both - base)
    return Row(
        "import npystore: seconds added to `import numpy` (fresh interpreter)",
        Timing("npystore", extra),
        Timing("import numpy", numpy_only),
        None,
        note="dask, fsspec, zarr, h5py and scipy load on first use",
        absolute_target=0.3,
    )


def bench_load(workdir: Path, size: int, repeat: int) -> Row:
    del size
    path = _small(workdir)
    numpy_only: list[float] = []
    extra: list[float] = []
    for _ in range(repeat):
        base = _run([sys.executable, "-c", f"import numpy; numpy.load({str(path)!r})"])
        ours = _run([sys.executable, "-c", f"import npystore; npystore.load({str(path)!r})"])
        numpy_only.append(base)
        extra.append(ours - base)
    return Row(
        "npystore.load(small.npy): seconds added to numpy.load's (fresh interpreter)",
        Timing("npystore.load", extra),
        Timing("python -c 'numpy.load(...)'", numpy_only),
        None,
        note="no dask, xarray, pandas or fsspec imported",
        absolute_target=0.15,
    )


def _cli(workdir: Path, repeat: int, command: str) -> Row:
    path = _small(workdir)
    ours: list[float] = []
    anchor: list[float] = []
    for _ in range(repeat):
        anchor.append(_run([sys.executable, "-c", f"import numpy; numpy.load({str(path)!r})"]))
        ours.append(_run([sys.executable, "-m", "npystore", command, str(path)]))
    return Row(
        f"`npystore {command} small.npy` end to end (fresh interpreter)",
        Timing(f"npystore {command}", ours),
        Timing("python -c 'numpy.load(...)'", anchor),
        None,
        absolute_target=0.5,
    )


def bench_info(workdir: Path, size: int, repeat: int) -> Row:
    del size
    return _cli(workdir, repeat, "info")


def bench_cat(workdir: Path, size: int, repeat: int) -> Row:
    del size
    return _cli(workdir, repeat, "cat")
