"""The npystore demo: lazy, range-reading access to .npy files on an embedded local S3 server.

Run it with ``python -m npystore.tools.demo``. It starts moto's S3 server on 127.0.0.1, writes a
few realistic arrays with ``numpy.save`` (a daily temperature cube, a Fortran-ordered
big-endian image stack, a table of structured event records), uploads them, and then opens
them with npystore: header, lazy open, a slice and a full reduction, each checked against
``numpy.load`` of the same file and reported with the number of S3 requests and bytes moved,
in a table of at most 100 columns followed by what each row shows (:data:`LEGEND`).

Needs the ``demo`` extra (``pip install 'npystore[demo]'``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

import npystore

#: The widest line of the report.
WIDTH: Final = 100


@dataclass
class Step:
    """One measured action."""

    file: str
    action: str
    requests: int
    nbytes: int
    seconds: float
    check: str


def _samples(directory: Path, scale: float) -> dict[str, Path]:
    """Write the sample files; ``scale`` shrinks them for quick runs."""
    rng = np.random.default_rng(2024)
    days, lat, lon = max(8, int(365 * scale)), 90, 180
    t = np.arange(days, dtype=np.float32)[:, None, None]
    phi = np.linspace(-np.pi / 2, np.pi / 2, lat, dtype=np.float32)[None, :, None]
    lam = np.linspace(0, 2 * np.pi, lon, dtype=np.float32)[None, None, :]
    temperature = (
        15 + 20 * np.cos(phi) - 10 * np.cos(2 * np.pi * t / 365) * np.sin(phi) + np.sin(lam)
    ) + rng.normal(0, 1.5, (days, lat, lon)).astype(np.float32)

    frames = max(4, int(40 * scale))
    yy, xx = np.mgrid[0:512, 0:512]
    stack = np.empty((512, 512, frames), dtype=">u2", order="F")
    for k in range(frames):
        blob = np.exp(-((xx - 256 - 3 * k) ** 2 + (yy - 256) ** 2) / 4000.0)
        stack[:, :, k] = (1000 + 3000 * blob + rng.poisson(20, (512, 512))).astype(">u2")

    rows = max(1000, int(500_000 * scale))
    events = np.zeros(
        rows,
        dtype=[("time", "<M8[ms]"), ("sensor", "<u2"), ("value", "<f8"), ("ok", "?")],
    )
    start = np.datetime64("2024-01-01T00:00:00", "ms")
    events["time"] = start + np.sort(rng.integers(0, 366 * 86_400_000, rows)).astype("m8[ms]")
    events["sensor"] = rng.integers(0, 64, rows)
    events["value"] = rng.gamma(2.0, 3.0, rows)
    events["ok"] = rng.random(rows) > 0.01

    paths = {
        "temperature.npy": temperature,
        "image_stack.npy": stack,
        "events.npy": events,
    }
    out = {}
    for name, arr in paths.items():
        path = directory / name
        np.save(path, arr)
        out[name] = path
    archive = directory / "run.npz"
    np.savez_compressed(
        archive,
        temperature=temperature,
        sensor=events["sensor"],
        value=events["value"],
        frame0=np.ascontiguousarray(stack[:, :, 0]),
    )
    out["run.npz"] = archive
    return out


def _measure(counter: Any, fn: Callable[[], Any]) -> tuple[Any, int, int, float]:
    with counter.measure() as m:
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
    return value, m.requests, m.bytes, seconds


def run(scale: float = 1.0, out: Any = sys.stdout) -> bool:
    """Run the demo; return whether every result matched numpy.

    Chunks are set to about 4 MiB (dask's ``array.chunk-size``) so that the reductions run
    as many concurrent range reads.

    Parameters
    ----------
    scale : float
        Size of the sample files relative to the default (about 70 MB in all).
    out : file-like
        Where the report goes.
    """
    import dask  # noqa: PLC0415

    from npystore.testing import LocalS3  # noqa: PLC0415 - needs the demo extra

    steps: list[Step] = []
    ok = True
    with (
        dask.config.set({"array.chunk-size": "4MiB"}),
        tempfile.TemporaryDirectory(prefix="npystore-demo-") as tmp,
        LocalS3() as server,
    ):
        print(f"embedded S3 (moto) listening on {server.endpoint_url}", file=out)
        sandbox = server.sandbox("npystore-demo")
        for name, path in _samples(Path(tmp), scale).items():
            url = sandbox.put_file(path, name)
            print(f"uploaded {url} ({path.stat().st_size / 2**20:.1f} MiB)", file=out)
            if name.endswith(".npz"):
                ok &= _demo_npz(sandbox, name, path, url, steps)
            else:
                ok &= _demo_file(sandbox, name, path, url, steps)
        sandbox.close()
    _report(steps, out)
    print("all results equal numpy.load" if ok else "MISMATCH: see above", file=out)
    return ok


#: Per sample file: the slice to show and a reduction over the whole array.
_ACTIONS: dict[str, tuple[Any, str, Callable[[Any], Any]]] = {
    "temperature.npy": (
        (-1, slice(30, 60), slice(None)),
        "mean over all days",
        lambda a: a.mean(axis=0),
    ),
    "image_stack.npy": ((slice(None), slice(None), 2), "max projection", lambda a: a.max(axis=2)),
    "events.npy": (slice(1000, 1010), "mean value", lambda a: a["value"].mean()),
}


def _demo_file(sandbox: Any, name: str, path: Path, url: str, steps: list[Step]) -> bool:
    """Header, lazy open, a slice and a reduction of one file; returns whether all matched."""
    opts = sandbox.storage_options
    size = path.stat().st_size
    expected = np.load(path)
    key, reduce_label, reduce_fn = _ACTIONS[name]

    header, n, b, s = _measure(
        sandbox.counter, functools.partial(npystore.read_header, url, storage_options=opts)
    )
    dtype_text = str(header.dtype) if header.dtype.names is None else "structured"
    order = "F" if header.fortran_order else "C"
    steps.append(Step(name, "read_header", n, b, s, f"{dtype_text} {header.shape}, {order} order"))

    lazy, n, b, s = _measure(
        sandbox.counter, functools.partial(npystore.open_npy, url, storage_options=opts)
    )
    chunks = f"{lazy.npartitions} chunk{'s' if lazy.npartitions != 1 else ''}"
    steps.append(Step(name, "open_npy (lazy)", n, b, s, chunks))

    part, n, b, s = _measure(sandbox.counter, lazy[key].compute)
    same_part = bool(np.array_equal(part, expected[key]))
    verdict = "equals" if same_part else "DIFFERS FROM"
    steps.append(Step(name, f"slice {_key_text(key)}", n, b, s, f"{verdict} numpy.load"))

    reduced, n, b, s = _measure(sandbox.counter, reduce_fn(lazy).compute)
    same_reduced = bool(np.allclose(reduced, reduce_fn(expected)))
    verdict = "equals" if same_reduced else "DIFFERS FROM"
    steps.append(Step(name, reduce_label, n, b, s, f"{verdict} numpy; {b / size:.3f}x the file"))
    return same_part and same_reduced


def _demo_npz(sandbox: Any, name: str, path: Path, url: str, steps: list[Step]) -> bool:
    """Open a savez_compressed archive, list its members, index one and slice it; then slice
    it again as a new process would (nothing kept in memory, the index from the disk
    cache)."""
    from npystore.read import memo  # noqa: PLC0415 - to show a new process's cost

    opts = sandbox.storage_options
    size = path.stat().st_size
    expected = np.load(path)
    z, n, b, s = _measure(
        sandbox.counter, functools.partial(npystore.open_npz, url, storage_options=opts)
    )
    steps.append(Step(name, "open_npz", n, b, s, f"{len(z)} members: {', '.join(z.files)}"))
    headers, n, b, s = _measure(sandbox.counter, lambda: z.headers)
    steps.append(Step(name, "member headers", n, b, s, f"{len(headers)} headers, one batch"))
    _, n, b, s = _measure(sandbox.counter, functools.partial(z.build_index, "temperature"))
    steps.append(Step(name, "index 'temperature'", n, b, s, f"{b / size:.2f}x the archive"))
    key = (-1, slice(30, 60))
    want = expected["temperature"][key]
    part, n, b, s = _measure(sandbox.counter, z["temperature"][key].compute)
    same = bool(np.array_equal(part, want))
    verdict = "equals" if same else "DIFFERS FROM"
    steps.append(Step(name, f"slice {_key_text(key)}", n, b, s, f"{verdict} numpy.load"))
    memo.forget()  # what this process kept of the member: a new process has none of it

    def fresh() -> Any:
        again = npystore.open_npz(url, storage_options=opts)
        return again["temperature"][key].compute()

    part, n, b, s = _measure(sandbox.counter, fresh)
    same_fresh = bool(np.array_equal(part, want))
    verdict = "equals" if same_fresh else "DIFFERS FROM"
    steps.append(Step(name, f"reopen, slice {_key_text(key)}", n, b, s, f"{verdict} numpy.load"))
    return same and same_fresh


def _key_text(key: Any) -> str:
    parts = key if isinstance(key, tuple) else (key,)
    text = []
    for k in parts:
        if isinstance(k, slice):
            text.append(f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}")
        else:
            text.append(str(k))
    return "[" + ", ".join(text) + "]"


#: What each kind of row shows (printed under the table).
LEGEND: Final = (
    ("read_header", "the first bytes of the file, one request: dtype, shape, order"),
    (
        "open_npy (lazy)",
        "the header again and a dask graph, no data (the first call also imports dask)",
    ),
    ("slice [...]", "only the bytes of the selected elements"),
    ("mean, max ...", "a reduction over the whole array: the file once, chunks in parallel"),
    ("open_npz", "the archive's directory, read from its end in one request"),
    ("member headers", "the .npy header of every member, in one concurrent batch"),
    (
        "index 'temperature'",
        "one pass over the deflated member: checkpoints every few MiB, so a slice inflates "
        "from the nearest one (kept on disk for later sessions); the compressed bytes stay "
        "in this process's memory",
    ),
    (
        "slice (after index)",
        "served from those bytes in memory: no request",
    ),
    (
        "reopen, slice",
        "the same slice as a new process pays for it: the memory dropped "
        "(npystore.read.memo.forget()), the archive opened again, the index taken from the "
        "disk cache, and only the compressed bytes from the nearest checkpoint fetched",
    ),
)


def _report(steps: list[Step], out: Any) -> None:
    """The table, one group of rows per file, at most :data:`WIDTH` columns; then
    :data:`LEGEND`."""
    result_width = WIDTH - (2 + 30 + 9 + 14 + 9 + 2)
    print("", file=out)
    head = f"  {'step':<30}{'requests':>9}{'bytes moved':>14}{'seconds':>9}  result"
    current = None
    for step in steps:
        if step.file != current:
            current = step.file
            print(f"{step.file}", file=out)
            print(head, file=out)
        lines = textwrap.wrap(step.check, result_width) or [""]
        action = step.action if len(step.action) <= 29 else step.action[:28] + "~"
        print(
            f"  {action:<30}{step.requests:>9}{step.nbytes:>14,}{step.seconds:>9.3f}  {lines[0]}",
            file=out,
        )
        for more in lines[1:]:
            print(" " * (WIDTH - result_width) + more, file=out)
    print("", file=out)
    print("What each row shows:", file=out)
    for label, text in LEGEND:
        wrapped = textwrap.wrap(
            text, WIDTH, initial_indent=f"  {label}: ", subsequent_indent=" " * 4
        )
        print("\n".join(wrapped), file=out)
    print("", file=out)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of ``python -m npystore.tools.demo``."""
    parser = argparse.ArgumentParser(description="npystore demo on an embedded local S3")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="size of the sample files (1.0: about 70 MB)"
    )
    args = parser.parse_args(argv)
    return 0 if run(args.scale) else 1


if __name__ == "__main__":
    sys.exit(main())
