"""Memory bounds of inflating, measured in a fresh interpreter (issue 24 items 5 and 7).

Each case runs in a child process that imports npystore, notes its peak RSS (``VmHWM``),
reads, and reports how much the peak grew (and what is resident after the read). The keep
budget is scaled down in the child (module constants) so that the data stays small; the
regressions these guard against held several times the bound.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from npystore.formats import zipdir

CHILD = r"""
import json, sys, threading
import dask, dask.array, numpy as np, npystore
from npystore.formats.zipdir import _blocks
from npystore.read import inflate, memo

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise SystemExit("no " + key)

mode, paths = sys.argv[1], sys.argv[2:]
if mode == "bomb":  # the archives are opened twice: as they are, and with the cap lifted
    arrays = [npystore.open_npz(paths[0], index_cache=False)["a"]]
    _blocks.block_size = lambda usize: 2**32  # as if the writer made blocks of any size
    arrays.append(npystore.open_npz(paths[0], index_cache=False)["a"])
else:
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
elif mode == "bomb":  # one element at the end, then one at the start, of each
    result["values"] = [int(v) for x in arrays for v in (x[-1].compute(), x[0].compute())]
result["peak_mib"] = status("VmHWM") - base
result["resident_mib"] = status("VmRSS") - rss0
result["kept_mib"] = memo.kept_bytes() / 2**20
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


@pytest.mark.slow
def test_the_keep_budget_holds_under_threads(tmp_path: Path) -> None:
    """Four threads each computing a 32 MiB member with no index, under a 40 MiB budget:
    the members being inflated were not counted, and all four were kept at once (peak
    +168 MiB before, +101 MiB now)."""
    path, a = _archive(tmp_path)
    paths = [path]
    for k in range(1, 4):
        paths.append(tmp_path / f"m{k}.npz")
        shutil.copyfile(path, paths[-1])
    got = _child("threads", *paths)
    assert got["sums"] == [float(a.sum())] * 4
    assert got["kept_mib"] <= 40, got
    assert got["peak_mib"] < 40 + 90, got  # the budget, 3 index passes, chunks, the memo


@pytest.mark.slow
def test_a_small_slice_keeps_nothing(tmp_path: Path) -> None:
    """A 10-element slice of a member with no index left the whole member inflated (32 MiB
    kept, 44 MiB resident after it returned)."""
    path, a = _archive(tmp_path)
    got = _child("slice", path)
    mid = a.size // 2
    assert got["values"] == a[mid : mid + 10].tolist()
    assert got["kept_mib"] == 0, got
    assert got["resident_mib"] < 16, got


def _bomb(path: Path, usize: int = 512 * 2**20) -> None:
    """A 0.5 MB archive whose member inflates to 512 MiB, with a block index of one block:
    a valid stream (zeros after the npy header), an index that passes every check but the
    writer's block size."""
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "|u1", "fortran_order": False, "shape": (usize - 128,)}
    )
    assert len(head.getvalue()) == 128
    c = isal_zlib.compressobj(1, isal_zlib.DEFLATED, -15)
    zero = bytes(2**20)
    parts = [c.compress(head.getvalue() + zero[128:])]
    parts += [c.compress(zero) for _ in range(usize // 2**20 - 1)]
    raw = b"".join([*parts, c.flush()])
    crc = zlib.crc32(head.getvalue())
    crc = zlib.crc32(zero[128:], crc)
    for _ in range(usize // 2**20 - 1):
        crc = zlib.crc32(zero, crc)
    extra = zipdir.blocks_extra(zipdir.BlockIndex((len(raw),), (usize,), (crc,)))
    name = b"a.npy"
    sizes = (crc, len(raw), usize, len(name))
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, *sizes, 0) + name
    central = (
        struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, *sizes,
                    len(extra), 0, 0, 0, 0, 0)
        + name
        + extra
    )  # fmt: skip
    at = len(local) + len(raw)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), at, 0)
    path.write_bytes(local + raw + central + end)


@pytest.mark.slow
def test_a_block_index_cannot_make_a_slice_allocate_its_blocks(tmp_path: Path) -> None:
    """Issue 24 item 5: a block index declaring one block of 512 MiB (1 GiB in the issue:
    1.15 GiB for one element) made a one-element slice allocate the whole block. The index
    is refused (npystore's writer makes 1 MiB blocks for such a member), and even with
    that limit lifted a block is inflated in 1 MiB steps: one element costs < 300 MiB."""
    path = tmp_path / "bomb.npz"
    _bomb(path)
    entry = pytest.importorskip("npystore").open_npz(str(path)).archive.entries["a.npy"]
    assert entry.blocks is None  # larger than the writer's blocks: refused at open
    got = _child("bomb", path)
    assert got["values"] == [0, 0, 0, 0]
    assert got["peak_mib"] < 300, got


def test_a_block_larger_than_the_writer_makes_is_refused() -> None:
    usize = 2 * 2**20
    assert zipdir.block_size(usize) == 2**20
    assert zipdir.block_size(40 * 2**30) == 11 * 2**20  # about 4,000 blocks
    ok = zipdir.blocks_extra(zipdir.BlockIndex((2000, 2000), (2**20, usize - 2**20), (0, 0)))
    big = zipdir.blocks_extra(
        zipdir.BlockIndex((2000, 2000), (2**20 + 1, usize - 2**20 - 1), (0, 0))
    )
    assert zipdir.parse_blocks(ok[4:], 4000, usize) is not None
    assert zipdir.parse_blocks(big[4:], 4000, usize) is None
