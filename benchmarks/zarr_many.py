"""The Zarr store over an archive of many tiny members (issue 24 item 8).

An ``.npz`` of 50,000 tiny members (5,000 with ``--quick``), as ``numpy.savez`` writes it:

- ``zarr-many-open``: a fresh interpreter runs ``open_store``, ``zarr.open_group`` and reads
  one member, vs one that runs ``numpy.load(p).files`` (numpy's listing); and the peak-RSS
  growth of the same (target: under 150 MB at 50,000 members; it was 680 MiB to list)
- ``zarr-many-list``: ``list(group.array_keys())`` through zarr, vs zarr listing a
  ``MemoryStore`` that holds the same ``zarr.json`` documents (zarr's own cost, with a store
  that costs nothing); CPU time of this process, target ratio <= 2 (the store reads the
  headers, builds the nodes and writes the documents zarr then parses)
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from _common import Row, Timing


def make_archive(workdir: Path, count: int) -> Path:
    path = workdir / f"many_{count}.npz"
    if not path.exists():
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for i in range(count):
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.arange(i % 5, dtype="<i4") + i)
                z.writestr(f"a{i}.npy", buf.getvalue())
    return path


_OURS = """
import json, sys, time
import numpy, zarr, npystore
import npystore.faces.stores, npystore.faces.zarr.store
def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
base, t0 = peak(), time.perf_counter()
group = zarr.open_group(npystore.open_store(sys.argv[1]), mode="r")
group["a7"][...]
print(json.dumps({"seconds": time.perf_counter() - t0, "mib": peak() - base}))
"""
_NUMPY = """
import json, sys, time
import numpy
def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
base, t0 = peak(), time.perf_counter()
with numpy.load(sys.argv[1]) as z:
    z.files
print(json.dumps({"seconds": time.perf_counter() - t0, "mib": peak() - base}))
"""


def _child(code: str, path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def bench_open(workdir: Path, size: int, repeat: int) -> list[Row]:
    count = size >> 20  # run.py passes its size column in "MiB": here the member count
    path = make_archive(workdir, count)
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for _ in range(repeat):
        theirs.append(_child(_NUMPY, path))
        ours.append(_child(_OURS, path))
    return [
        Row(
            scenario=f".npz of {count} tiny members: open_store + zarr.open_group + one "
            "member (fresh interpreter) vs numpy.load(p).files",
            ours=Timing("npystore + zarr", [o["seconds"] for o in ours]),
            anchor=Timing("numpy listing", [t["seconds"] for t in theirs]),
            target=None,
            note="issue 24 item 8: open_store was 7.3 s at 50,000 members; the root's "
            "attributes read every member's header",
        ),
        Row(
            scenario=f"peak RSS growth of the same, {count} members",
            ours=Timing("peak RSS MB", [o["mib"] for o in ours], unit="MB"),
            anchor=Timing("peak RSS MB", [t["mib"] for t in theirs], unit="MB"),
            target=None,
            absolute_target=150.0,
            note="was 680 MiB listing through zarr (consolidated metadata of every member)",
        ),
    ]


def bench_list(workdir: Path, size: int, repeat: int) -> list[Row]:
    import zarr
    from zarr.storage import MemoryStore

    import npystore

    count = size >> 20
    path = make_archive(workdir, count)
    store = npystore.open_store(str(path))
    names = list(zarr.open_group(store, mode="r").array_keys())
    docs = {"zarr.json": store._metadata_bytes("")}
    docs.update({f"{n}/zarr.json": store._metadata_bytes(n) for n in names})
    proto = zarr.core.buffer.default_buffer_prototype()
    memory = {k: proto.buffer.from_bytes(v) for k, v in docs.items()}

    def ours() -> int:
        fresh = npystore.open_store(str(path))
        return len(list(zarr.open_group(fresh, mode="r").array_keys()))

    def theirs() -> int:
        group = zarr.open_group(MemoryStore(dict(memory), read_only=True), mode="r")
        return len(list(group.array_keys()))

    a: list[float] = []
    b: list[float] = []
    for _ in range(repeat):
        for fn, out in ((theirs, b), (ours, a)):
            t0 = time.process_time()
            if fn() != count:
                raise SystemExit("zarr-many-list: a listing lost members")
            out.append(time.process_time() - t0)
    return [
        Row(
            scenario=f".npz of {count} tiny members: list(group.array_keys()) through zarr "
            "vs zarr over a MemoryStore of the same documents (CPU seconds)",
            ours=Timing("npystore store", a),
            anchor=Timing("zarr MemoryStore", b),
            target=2.0,
            note="issue 24 item 8: was 24 s and 680 MiB at 50,000 members; a fresh store "
            "each run (headers read, documents made)",
        )
    ]


#: name -> (benchmark, member count of the full run, with --quick): run.py's SCENARIOS
SCENARIOS = {
    "zarr-many-open": (bench_open, 50_000, 5_000),
    "zarr-many-list": (bench_list, 50_000, 5_000),
}
