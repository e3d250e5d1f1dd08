"""Writing a conversion: the Zarr nodes, the codecs, and one dask task per chunk.

:func:`ensure_nodes` creates the groups and arrays the store lacks; :func:`tasks` yields a
delayed write for every chunk not done yet, reading exactly that chunk of the source; the
:class:`Writer` runs in dask's worker threads, writes the chunk and marks it in the manifest.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np
import zarr
from dask.delayed import delayed
from zarr.abc.store import Store

from npystore.faces.dask import to_dask
from npystore.tools.convert.manifest import Manifest
from npystore.tools.convert.plan import ArrayPlan, ConvertError, Plan
from npystore.tools.progress import Progress

__all__ = ["COMPRESSORS", "STOP_AFTER_ENV", "Writer", "chunk_bytes", "codecs_for",
           "ensure_nodes", "tasks"]  # fmt: skip

#: Compressors by name, with their default level.
COMPRESSORS: Final = {"zstd": 3, "blosc": 5, "gzip": 5, "none": None}
#: Test hook: after this many chunk writes, signal this process (``N`` or ``N:KILL``) the way
#: a Ctrl-C (SIGINT) or a kill (SIGKILL) would.
STOP_AFTER_ENV: Final = "NPYSTORE_CONVERT_STOP_AFTER"


def codecs_for(compressor: str, level: int | None) -> tuple[list[Any] | None, int | None]:
    """The Zarr codecs for a compressor name and level, and the level in effect."""
    from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec  # noqa: PLC0415

    if compressor not in COMPRESSORS:
        raise ConvertError(f"compressor {compressor!r}: expected one of {sorted(COMPRESSORS)}")
    if compressor == "none":
        if level is not None:
            raise ConvertError(f"compression level {level} given with compressor 'none'")
        return None, None
    lo, hi = (1, 22) if compressor == "zstd" else (0, 9)
    value = COMPRESSORS[compressor] if level is None else level
    if value is None or not lo <= value <= hi:
        raise ConvertError(f"{compressor} level {level}: expected {lo}..{hi}")
    if compressor == "zstd":
        return [ZstdCodec(level=value)], value
    if compressor == "gzip":
        return [GzipCodec(level=value)], value
    return [BloscCodec(cname="zstd", clevel=value)], value


class Writer:
    """Writes chunks (called in dask's worker threads) and records them."""

    def __init__(self, manifest: Manifest, progress: Progress | None = None) -> None:
        self.manifest = manifest
        self.progress = progress
        self.stop = threading.Event()
        self.written = 0
        self._lock = threading.Lock()
        raw = os.environ.get(STOP_AFTER_ENV, "")
        count, _, how = raw.partition(":")
        self._stop_after = int(count) if count.strip() else None
        self._signal = signal.SIGKILL if how.strip().upper() == "KILL" else signal.SIGINT

    def write(self, target: Any, plan: ArrayPlan, index: tuple[int, ...], block: Any) -> None:
        """Write ``block`` as chunk ``index`` of ``target`` and record it (once stopped: raise)."""
        if self.stop.is_set():
            raise KeyboardInterrupt("conversion interrupted")
        region = tuple(
            slice(i * c, min((i + 1) * c, n))
            for i, c, n in zip(index, plan.chunks, plan.array.shape, strict=True)
        )
        target[region] = block
        linear = int(np.ravel_multi_index(index, plan.grid)) if index else 0
        self.manifest.mark(plan.path, linear)
        with self._lock:
            self.written += 1
            hit = self._stop_after is not None and self.written == self._stop_after
        if self.progress is not None:
            self.progress.update(int(getattr(block, "nbytes", 0)))
        if hit:
            os.kill(os.getpid(), self._signal)


def chunk_bytes(a: ArrayPlan, linear: int) -> int:
    """Bytes of chunk ``linear`` of ``a`` (edge chunks are smaller)."""
    index = np.unravel_index(linear, a.grid) if a.grid else ()
    count = math.prod(
        min(c, n - int(i) * c) for i, c, n in zip(index, a.chunks, a.array.shape, strict=True)
    )
    return count * a.array.dtype.itemsize


def ensure_nodes(
    store: Store,
    plan: Plan,
    compressors: list[Any] | None,
    keys: set[str],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Create the root, groups and arrays that are not in the store yet; return the arrays."""
    if "zarr.json" in keys:
        root = zarr.open_group(store=store, mode="r+")
    else:
        root = zarr.create_group(store=store, attributes=plan.root_attributes)
    for path in sorted(plan.groups, key=lambda p: p.count("/")):
        if f"{path}/zarr.json" not in keys:
            root.create_group(path, attributes=plan.groups[path])
    arrays: dict[str, Any] = {}
    for a in plan.arrays:
        if f"{a.path}/zarr.json" in keys:
            arrays[a.path] = zarr.open_array(store=store, path=a.path, mode="r+")
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            arrays[a.path] = root.create_array(
                a.path,
                shape=a.array.shape,
                dtype=a.zdtype,
                chunks=a.chunks,
                compressors=compressors,
                attributes=dict(a.attributes),
                dimension_names=a.dimension_names,
            )
        for warning in {str(w.message).split(". ")[0] for w in caught}:
            say(f"warning: {a.path} ({a.array.dtype}): zarr: {warning}")
    return arrays


def tasks(
    plan: Plan, arrays: dict[str, Any], done: dict[str, set[int]], writer: Writer
) -> Iterator[Any]:
    """One delayed write per chunk not ``done``, each reading exactly its chunk of the source."""
    for a in plan.arrays:
        todo = [i for i in range(a.nchunks) if i not in done[a.path]]
        if not todo:
            continue
        prefix = "convert-" + a.path.replace("/", "-")[:40]
        blocks = to_dask(a.array, a.chunks, prefix=prefix).to_delayed(  # type: ignore[no-untyped-call]
            optimize_graph=True
        )
        write = functools.partial(writer.write, arrays[a.path], a)
        for linear in todo:
            index = tuple(int(i) for i in np.unravel_index(linear, a.grid)) if a.grid else ()
            yield delayed(write, pure=False)(index, blocks[index])
