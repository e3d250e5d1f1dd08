"""Peak RSS of one whole-member reduction, in a fresh process (helper of ``run.py``).

Usage: ``python benchmarks/_rss_probe.py MODE PATH MEMBER``

- ``npystore``: ``npystore.open_npz(ARCHIVE)[MEMBER].sum().compute()`` (no index built
  beforehand: the first chunk task builds it).
- ``numpy``: ``numpy.load(ARCHIVE)[MEMBER].sum()``.
- ``npy-npystore``: ``npystore.open_npy(PATH).sum().compute()`` (MEMBER ignored).
- ``npy-mmap-dask``: ``dask.array.from_array(numpy.load(PATH, mmap_mode="r")).sum().compute()``.

Prints one JSON object: ``baseline_mb`` (peak RSS after the imports), ``peak_mb`` (peak RSS
after the reduction), ``seconds`` (the reduction alone) and ``sum``, RSS in MiB.

Peak RSS is ``VmHWM`` from ``/proc/self/status``, not ``getrusage(RUSAGE_SELF).ru_maxrss``:
Linux carries ``ru_maxrss`` across ``execve`` from the pre-exec address space, and
``subprocess`` forks (or vforks) the benchmark process, so a fresh probe starts with
``ru_maxrss`` equal to the *parent's* peak (hundreds of MB after the other scenarios).
``VmHWM`` belongs to the new address space. Both are reported (``ru_maxrss_mb`` too);
``ru_maxrss`` is used only where ``/proc`` is missing.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def _ru_maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return _ru_maxrss_mb()


def main(argv: list[str]) -> int:
    mode, path, member = argv
    import numpy as np

    if mode == "npystore":
        import dask.array

        import npystore

        baseline = _peak_mb()
        t0 = time.perf_counter()
        total = npystore.open_npz(path)[member].sum().compute()
    elif mode == "numpy":
        baseline = _peak_mb()
        t0 = time.perf_counter()
        with np.load(path) as z:
            total = z[member].sum()
    elif mode == "npy-npystore":
        import dask.array  # noqa: F401

        import npystore

        baseline = _peak_mb()
        t0 = time.perf_counter()
        total = npystore.open_npy(path).sum().compute()
    elif mode == "npy-mmap-dask":
        import dask.array as da

        baseline = _peak_mb()
        t0 = time.perf_counter()
        total = da.from_array(np.load(path, mmap_mode="r")).sum().compute()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - t0
    out = {
        "mode": mode,
        "baseline_mb": baseline,
        "peak_mb": _peak_mb(),
        "ru_maxrss_mb": _ru_maxrss_mb(),
        "seconds": seconds,
        "sum": float(total),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
