"""First-use costs: ``import npystore`` and ``npystore info`` of a small local file.

Each run is a fresh interpreter (what a user's script or shell command pays), anchored
against the same interpreter doing the numpy-only equivalent, interleaved.

- ``import``: the time ``import npystore`` adds to ``import numpy`` (target: < 0.3 s).
- ``info``: ``npystore info small.npy`` end to end (target: < 0.5 s), against
  ``python -c "import numpy; numpy.load('small.npy')"``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import Row, Timing


def _run(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - t0


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


def bench_info(workdir: Path, size: int, repeat: int) -> Row:
    del size
    path = workdir / "small.npy"
    np.save(path, np.arange(1000.0).reshape(100, 10))
    ours: list[float] = []
    anchor: list[float] = []
    for _ in range(repeat):
        anchor.append(_run([sys.executable, "-c", f"import numpy; numpy.load({str(path)!r})"]))
        ours.append(_run([sys.executable, "-m", "npystore", "info", str(path)]))
    return Row(
        "`npystore info small.npy` end to end (fresh interpreter)",
        Timing("npystore info", ours),
        Timing("python -c 'numpy.load(...)'", anchor),
        None,
        absolute_target=0.5,
    )
