"""Seeds and drivers of the HDF5 part of tests/test_hostile.py.

Each seed is a small HDF5 file written by h5py (MATLAB-like v7.3 with user block, h5py's
defaults, ``libver="latest"``), with the object header addresses and geometry of its
datasets and groups taken from the pristine file, and the offsets of the structures worth
mutating (superblock, object headers, B-tree nodes, symbol nodes, local heaps, fixed array
blocks) found by scanning for their signatures. The drivers run npystore's own parsers over
mutated bytes exactly as :mod:`npystore.files.mat.h5meta` does over a file, and check what comes
out.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from npystore.files.mat.hdf5 import MAX_CHUNK_GRID
from npystore.formats import h5chunks, h5groups, h5index
from npystore.formats.h5chunks import Geometry

#: Signatures of the structures a mutation aims at, and how many bytes after each.
SIGNATURES = {b"TREE": 64, b"SNOD": 64, b"HEAP": 40, b"OHDR": 48, b"OCHK": 24,
              b"FAHD": 32, b"FADB": 32}  # fmt: skip
MAT_HEADER = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."


@dataclass
class Target:
    """A dataset or group of a seed: its header address and, for a dataset, its geometry."""

    name: str
    address: int
    shape: tuple[int, ...] | None = None
    maxshape: tuple[int | None, ...] | None = None
    itemsize: int = 0
    filtered: bool = False


@dataclass
class H5Seed:
    data: bytes
    base: int
    datasets: list[Target] = field(default_factory=list)
    groups: list[Target] = field(default_factory=list)
    hot: list[int] = field(default_factory=list)


def _address(obj: Any) -> int:
    low, high = h5py.h5g.get_objinfo(obj.id).objno
    return int(low) + (int(high) << 64)


def seed_from(data: bytes, base: int) -> H5Seed:
    """The seed of a pristine file's bytes (opened by h5py: it is trusted)."""
    seed = H5Seed(data, base)
    with h5py.File(io.BytesIO(data), "r") as f:
        objects = [("/", f)]
        f.visititems(lambda name, obj: objects.append((name, obj)))
        for name, obj in objects:
            if isinstance(obj, h5py.Dataset):
                if obj.chunks is None:
                    continue
                seed.datasets.append(Target(
                    name, _address(obj), tuple(obj.shape), tuple(obj.maxshape),
                    obj.id.get_type().get_size(), obj.id.get_create_plist().get_nfilters() > 0,
                ))  # fmt: skip
            else:
                seed.groups.append(Target(name, _address(obj)))
    hot = list(range(base + 8, base + 64))
    for signature, span in SIGNATURES.items():
        pos = data.find(signature)
        while pos >= 0:
            hot.extend(range(pos + 4, pos + span))
            pos = data.find(signature, pos + 1)
    for t in seed.datasets + seed.groups:
        hot.extend(range(base + t.address, base + t.address + 200))
    seed.hot = sorted({h for h in hot if h < len(data)})
    return seed


def _write(make: Any, *, libver: Any = "earliest", userblock: int = 0, **kw: Any) -> bytes:
    bio = io.BytesIO()
    with h5py.File(bio, "w", libver=libver, userblock_size=userblock, **kw) as f:
        make(f)
    data = bytearray(bio.getvalue())
    if userblock:
        data[:128] = MAT_HEADER.ljust(116) + b" " * 8 + b"\x00\x02IM"
    return bytes(data)


def _mat(f: h5py.File) -> None:
    """x: 100 deflated chunks (a two-level B-tree), s: chunked chars, c: a cell of two."""
    x = f.create_dataset("x", data=np.arange(2000.0).reshape(200, 10), chunks=(2, 10),
                         compression="gzip")  # fmt: skip
    x.attrs["MATLAB_class"] = np.bytes_("double")
    s = f.create_dataset("s", data=np.frombuffer("hello".encode("utf-16-le"), "<u2")
                         .reshape(-1, 1), chunks=(2, 1))  # fmt: skip
    s.attrs["MATLAB_class"] = np.bytes_("char")
    refs = f.create_group("#refs#")
    a = refs.create_dataset("a", data=np.ones((3, 1)), chunks=(1, 1))
    a.attrs["MATLAB_class"] = np.bytes_("double")
    c = f.create_dataset("c", data=np.array([[a.ref], [s.ref]]), dtype=h5py.ref_dtype)
    c.attrs["MATLAB_class"] = np.bytes_("cell")
    st = f.create_group("st")
    st.attrs["MATLAB_class"] = np.bytes_("struct")
    for i in range(12):
        v = st.create_dataset(f"f{i:02d}", data=np.full((1, 1), float(i)))
        v.attrs["MATLAB_class"] = np.bytes_("double")


def _wide(f: h5py.File) -> None:
    """20 variables: a root group of three symbol nodes; attributes in continuations."""
    for i in range(20):
        d = f.create_dataset(f"v{i:02d}", data=np.full((4, 3), float(i)), chunks=(2, 3))
        d.attrs["MATLAB_class"] = np.bytes_("double")
    d = f["v00"]
    for i in range(25):
        d.attrs[f"note_{i:02d}"] = np.arange(10.0)


def _three_d(f: h5py.File) -> None:
    f.create_dataset("x", data=np.arange(10 * 12 * 14, dtype="<i4").reshape(10, 12, 14),
                     chunks=(2, 3, 4), compression="gzip", shuffle=True)  # fmt: skip


def _fixed(f: h5py.File) -> None:
    """A paged fixed array (1,050 entries), a single chunk, an unfiltered fixed array."""
    d = f.create_dataset("fa", shape=(20, 2100), dtype="i1", chunks=(2, 20), compression="gzip")
    d[:12] = 3
    f.create_dataset("one", data=np.arange(30.0).reshape(5, 6), chunks=(5, 6), compression="gzip")
    f.create_dataset("plain", data=np.arange(48.0).reshape(6, 8), chunks=(2, 3))


def _many_links(f: h5py.File) -> None:
    """300 links: a root group B-tree of two levels over some 40 symbol nodes."""
    for i in range(300):
        f.create_dataset(f"v{i:03d}", data=np.float64(i))
    f.create_dataset("x", data=np.arange(40.0), chunks=(4,))


@cache
def h5_seeds() -> list[H5Seed]:
    """Version-0 and -2/3 superblocks, version-1 and -2 object headers with continuations,
    v1 B-trees of two levels, paged fixed arrays, single chunks, symbol tables (one of two
    levels)."""
    return [
        seed_from(_write(_mat, userblock=512), 512),
        seed_from(_write(_wide, userblock=512), 512),
        seed_from(_write(_three_d, track_order=True), 0),
        seed_from(_write(_three_d, libver=("v108", "v108")), 0),
        seed_from(_write(_fixed, libver="latest"), 0),
        seed_from(_write(_many_links), 0),
    ]


def _reader(buf: bytes, base: int) -> Any:
    def read(a: int, b: int) -> bytes:
        assert 0 <= a <= b, (a, b)
        return buf[base + a : base + b]

    return read


def _superblock(buf: bytes, base: int) -> h5index.Superblock:
    sb = h5index.parse_superblock(buf[base : base + h5index.SUPERBLOCK_SIZE])
    assert sb.sizeof_addr in (2, 4, 8)
    assert sb.sizeof_len in (2, 4, 8)
    assert min(sb.chunk_k, sb.group_leaf_k, sb.group_internal_k) > 0
    if sb.extension is not None:
        messages = h5index.object_header_messages(_reader(buf, base), 0, sb.extension,
                                                  sb.sizeof_addr)  # fmt: skip
        sb = h5index.btree_k_values(messages, sb)
    return sb


def walk_dataset(buf: bytes, base: int, target: Target) -> int:
    """What :meth:`npystore.files.mat.h5meta.H5Meta.chunk_table` does, over bytes: superblock,
    object
    header (continuations followed), layout message, the chunk index walk. Checks the chunk
    table; returns its number of chunks."""
    assert target.shape is not None
    assert target.maxshape is not None
    sb = _superblock(buf, base)
    end = len(buf) - base
    messages = h5index.object_header_messages(_reader(buf, base), 0, target.address,
                                              sb.sizeof_addr)  # fmt: skip
    layout = h5index.chunk_layout(messages, sb)
    if layout is None:
        return 0
    geo = Geometry("memory://hostile:x", target.shape, target.maxshape, target.itemsize,
                   target.filtered, end, MAX_CHUNK_GRID)  # fmt: skip
    batches = []

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        batches.append(len(ranges))
        for a, b in ranges:
            assert 0 <= a <= b <= end, (a, b, end)
        return [buf[base + a : base + b] for a, b in ranges]

    table = h5chunks.run(h5chunks.chunk_walk(layout, sb, geo), fetch)
    assert len(batches) <= h5chunks.MAX_BTREE_LEVEL + 2
    grid = tuple(-(-n // c) for n, c in zip(target.shape, layout.chunk, strict=True))
    n = len(table)
    assert n <= math.prod(grid)
    assert table.grid.shape == (n, len(grid))
    if n:
        assert (table.grid >= 0).all()
        assert (table.grid < np.array(grid)).all()
        assert len({tuple(g) for g in table.grid.tolist()}) == n
        assert (table.sizes > 0).all()
        assert (table.addresses >= 0).all()
        assert int((table.addresses + table.sizes).max()) <= end
    return n


def walk_group(buf: bytes, base: int, target: Target) -> int:
    """What :meth:`npystore.files.mat.h5meta.H5Meta.group_links` does, over bytes; returns the
    number
    of links found (each name a str, each header inside the file)."""
    sb = _superblock(buf, base)
    end = len(buf) - base
    messages = h5index.object_header_messages(_reader(buf, base), 0, target.address,
                                              sb.sizeof_addr)  # fmt: skip
    stab = h5index.symbol_table(messages, sb.sizeof_addr)
    if stab is None:
        return 0
    walk = h5groups.SymbolTableWalk(stab[0], stab[1], sb, end, "memory://hostile:/")
    rounds = 0
    while ranges := walk.wanted():
        rounds += 1
        assert rounds <= h5chunks.MAX_BTREE_LEVEL + 3
        walk.feed([buf[base + a : base + b] for a, b in ranges])
    links = walk.result()
    for name, header in links:
        assert isinstance(name, str)
        assert 0 <= header < end
    return len(links)


# ---------------------------------------------------------------- end to end, in a subprocess

#: What the subprocess runs: each file through open_mat (list, every variable, values);
#: prints one JSON line per file before it starts it (the last line names a crash's file).
E2E_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import dask
    import numpy as np
    import npystore
    from npystore.errors import FormatError, UnsupportedError
    from npystore.files.mat.tree import MatlabObject

    def arrays(v, out):
        if hasattr(v, "compute"):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                arrays(x, out)
        elif isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.dtype == object):
            for x in np.asarray(v, dtype=object).reshape(-1):
                arrays(x, out)
        return out

    def read_all(path):
        m = npystore.open_mat(path)
        found = []
        for name in list(m):
            arrays(m[name], found)
        dask.compute(*found)  # one graph: values of every variable

    read_all(sys.argv[1])  # warm up (imports, dask) on a pristine file
    for path in sys.argv[2:]:
        print(json.dumps({"start": path}), flush=True)
        t = time.process_time()  # CPU seconds: other processes on the machine do not count
        outcome = "ok"
        try:
            read_all(path)
        except (FormatError, UnsupportedError) as exc:
            outcome = type(exc).__name__
            assert str(exc)
        except Exception as exc:
            outcome = f"BAD {type(exc).__module__}.{type(exc).__name__}: {exc}"
        print(json.dumps({"done": path, "outcome": outcome,
                          "seconds": time.process_time() - t}), flush=True)
    """
)


def run_e2e(pristine: Path, paths: list[Path], timeout: float = 120) -> list[dict[str, Any]]:
    """Run :data:`E2E_SCRIPT` over ``paths`` in a fresh interpreter (warmed up on
    ``pristine``); returns one record per file. A crash (a signal) fails with the file being
    read named."""
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", E2E_SCRIPT, str(pristine), *map(str, paths)],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    lines = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    started = [x["start"] for x in lines if "start" in x]
    assert run.returncode == 0, (
        f"the process died (status {run.returncode}) reading {started[-1] if started else None}:"
        f" {run.stderr[-3000:]}"
    )
    done = [x for x in lines if "done" in x]
    assert len(done) == len(paths), run.stderr[-3000:]
    assert time.perf_counter() - start < timeout
    return done
