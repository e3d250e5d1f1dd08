"""Copy an ``.npy``, ``.npz`` or ``.mat`` file into a real Zarr v3 store: :func:`convert`.

The hierarchy is the one :func:`npystore.open_store` serves (an ``.npz`` member is an array
named by its key; a MATLAB variable is an array, a group for structs and cells, ``data``/``ir``/
``jc`` arrays for sparse matrices, uint16 code units plus a ``matlab_text`` attribute for char),
except that an ``.npy`` file becomes an array *inside* the root group, named after the file.
Arrays whose dtype has no Zarr data type are skipped with a message.

Chunks are read as lazy dask arrays whose blocks are exactly the Zarr chunks, and written in
parallel on dask's threaded scheduler, one task per chunk. Progress is recorded in the store
itself, in :data:`MANIFEST_KEY`: the source's identity (URL, size, ETag/mtime), the options,
and the chunks written so far, rewritten atomically at most every ``checkpoint_interval``
seconds and when the run ends or is interrupted. A later run with the same source and options
skips every chunk the manifest records or the store holds (chunk objects are written
atomically, by zarr's local store and by object stores); a different source or options is
refused unless ``overwrite=True``.

>>> import numpy as np, zarr
>>> from npystore.tools.convert import convert
>>> np.save("/tmp/doc_convert.npy", np.arange(20.0).reshape(4, 5))
>>> r = convert("/tmp/doc_convert.npy", "/tmp/doc_convert.zarr", chunks=(2,), overwrite=True)
>>> r.arrays, r.chunks_total, r.chunks_written
(('doc_convert',), 2, 2)
>>> zarr.open_group("/tmp/doc_convert.zarr", mode="r")["doc_convert"][3]
array([15., 16., 17., 18., 19.])
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import signal
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import dask
import numpy as np
from dask.base import compute
from dask.delayed import delayed
from dask.utils import parse_bytes

from npystore.errors import FormatError, NpystoreError, UnsupportedError, missing_dependency

try:
    import zarr
    from zarr.abc.store import Store
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync
except ImportError as exc:
    raise missing_dependency("zarr", "zarr", "converting to Zarr (npystore convert)", exc) from exc

import npystore
from npystore.faces.dask import normalize_layout_chunks, to_dask
from npystore.faces.stores import store_nodes
from npystore.faces.zarr.dtypes import zarr_dtype_for
from npystore.faces.zarr.store import ArrayNode, GroupNode, node_name
from npystore.fetch import open_reader
from npystore.fetch.remote import BUDGET_OPTION
from npystore.files.zip import DEFAULT_MAX_MEMBERS
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.access import LayoutArray
from npystore.read.crccheck import CrcLedger
from npystore.read.layout import RawExtent
from npystore.tools.progress import Progress, format_size

__all__ = ["MANIFEST_KEY", "ConvertError", "ConvertResult", "convert", "format_size"]

#: The progress manifest, a key at the root of the output store.
MANIFEST_KEY: Final = ".npystore-convert.json"
#: Largest default Zarr chunk (the source's dask chunks are capped to it).
DEFAULT_CHUNK_LIMIT: Final = 64 * 2**20
#: Compressors by name, with their default level.
COMPRESSORS: Final = {"zstd": 3, "blosc": 5, "gzip": 5, "none": None}
#: Test hook: after this many chunk writes, signal this process (``N`` or ``N:KILL``) the way
#: a Ctrl-C (SIGINT) or a kill (SIGKILL) would.
STOP_AFTER_ENV: Final = "NPYSTORE_CONVERT_STOP_AFTER"
_MANIFEST_VERSION: Final = 1
#: What zarr's LocalStore leaves behind when a process dies while it writes a chunk (it
#: writes ``<key>.<uuid hex>.partial`` and renames it into place).
_STALE_PARTIAL: Final = re.compile(r"[^/]+\.[0-9a-f]{32}\.partial")

ChunkSpec = str | Sequence[int]


class ConvertError(NpystoreError):
    """The output cannot be written as asked (it holds something else, or options are bad)."""


@dataclass(frozen=True)
class ConvertResult:
    """What :func:`convert` did.

    Attributes
    ----------
    out : str
        The output store.
    format : str
        ``"npy"``, ``"npz"`` or ``"mat"``.
    arrays : tuple of str
        Paths of the arrays in the output group.
    skipped : dict
        Path or member -> why it was not converted.
    chunks_total, chunks_done_before, chunks_written : int
        Chunks of all arrays; those a previous run had written; those written now.
    nbytes : int
        Bytes of array data (uncompressed).
    """

    out: str
    format: str
    arrays: tuple[str, ...]
    skipped: dict[str, str]
    chunks_total: int
    chunks_done_before: int
    chunks_written: int
    nbytes: int


@dataclass(frozen=True)
class _ArrayPlan:
    path: str
    array: LayoutArray
    chunks: tuple[int, ...]
    attributes: Mapping[str, Any]
    dimension_names: tuple[str, ...]
    zdtype: Any

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(
            -(-n // c) for n, c in zip(self.array.shape, self.chunks, strict=True)
        )  # fmt: skip

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid)

    def describe(self) -> dict[str, Any]:
        dtype = self.array.dtype
        return {
            "shape": list(self.array.shape),
            "dtype": str(dtype.descr) if dtype.names else dtype.str,
            "chunks": list(self.chunks),
        }


@dataclass
class _Plan:
    url: str
    format: str
    identity: dict[str, Any]
    root_attributes: dict[str, Any]
    groups: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    arrays: list[_ArrayPlan] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------ planning


def _npy_name(url: str) -> str:
    if "://" in url:
        url = url.split("?", 1)[0].split("#", 1)[0]
    base = url.rstrip("/").rsplit("/", 1)[-1].rsplit("::", 1)[-1]
    if base.lower().endswith(".npy"):
        base = base[:-4]
    return node_name(base) if base else "data"


def _auto_chunks(array: LayoutArray, limit: int) -> tuple[int, ...]:
    """The dask "auto" chunks of ``array`` with ``array.chunk-size`` at most ``limit``."""
    if array.layout.ndim == 0:
        return ()
    configured = parse_bytes(dask.config.get("array.chunk-size"))
    with dask.config.set({"array.chunk-size": min(configured, limit)}):
        grid = normalize_layout_chunks(array, "auto")
    return tuple(max(1, axis[0]) if axis else 1 for axis in grid)


def _chunks_for(
    array: LayoutArray, spec: ChunkSpec | None, path: str, *, strict: bool
) -> tuple[int, ...]:
    """Zarr chunks from a spec: None (default), a size ("16MiB") or leading-axis lengths.

    Lengths beyond the array's dimensions are an error when ``strict`` (a spec for this
    array), else ignored (the spec for every array).
    """
    if spec is None:
        return _auto_chunks(array, DEFAULT_CHUNK_LIMIT)
    if isinstance(spec, str):
        try:
            limit = parse_bytes(spec)
        except ValueError as exc:
            raise ConvertError(
                f"chunks {spec!r} for {path!r}: expected a size such as '16MiB'"
            ) from exc
        return _auto_chunks(array, max(1, int(limit)))
    shape = array.shape
    lengths = [int(c) for c in spec]
    if len(lengths) > len(shape) and strict:
        raise ConvertError(
            f"chunks {tuple(lengths)} for {path!r}: {len(lengths)} lengths, but the array has "
            f"shape {shape} ({len(shape)} dims)"
        )
    out = []
    for axis, n in enumerate(shape):
        c = lengths[axis] if axis < len(lengths) else -1
        if c == -1:
            c = n
        elif c < 1:
            raise ConvertError(
                f"chunks {tuple(lengths)} for {path!r}: axis {axis} length {c}, expected >= 1 "
                "or -1 (the whole axis)"
            )
        out.append(max(1, min(c, n)))
    return tuple(out)


def _plan(
    url: str,
    storage_options: Mapping[str, Any] | None,
    *,
    name: str | None,
    chunks: ChunkSpec | None,
    array_chunks: Mapping[str, ChunkSpec],
) -> _Plan:
    reader = open_reader(url, storage_options)
    nodes = store_nodes(
        reader, max_header_size=DEFAULT_MAX_HEADER_SIZE, max_members=DEFAULT_MAX_MEMBERS
    )
    root = nodes.get("")
    identity = {
        "url": reader.identity.url,
        "size": reader.identity.size,
        "fields": dict(reader.identity.fields),
    }
    if isinstance(root, ArrayNode):  # an .npy file: an array inside the root group
        about = dict(root.attributes)
        nodes = {"": GroupNode(about), name or _npy_name(reader.url): root}
    elif name is not None:
        raise ConvertError(f"{reader.url}: --name applies to .npy sources only")
    root_node = nodes[""]
    attrs = json.loads(json.dumps(dict(root_node.attributes)))
    plan = _Plan(reader.url, attrs.get("npystore", {}).get("format", "?"), identity, attrs)
    plan.skipped.update(attrs.get("npystore", {}).get("skipped", {}))
    unknown = set(array_chunks) - {p for p, n in nodes.items() if isinstance(n, ArrayNode)}
    if unknown:
        known = sorted(p for p, n in nodes.items() if isinstance(n, ArrayNode))
        raise ConvertError(
            f"{reader.url}: chunks given for {sorted(unknown)}, the arrays are {known}"
        )
    for path, node in nodes.items():
        if path == "":
            continue
        if isinstance(node, GroupNode):
            plan.groups[path] = dict(node.attributes)
            continue
        try:
            zdtype = zarr_dtype_for(node.array.dtype)
        except UnsupportedError as exc:
            plan.skipped[path] = f"no Zarr data type: {exc}"
            continue
        strict = path in array_chunks
        spec = array_chunks[path] if strict else chunks
        plan.arrays.append(
            _ArrayPlan(
                path,
                node.array,
                _chunks_for(node.array, spec, path, strict=strict),
                dict(node.attributes),
                node.dims(),
                zdtype,
            )
        )
    if plan.skipped:
        plan.root_attributes.setdefault("npystore", {})["skipped"] = dict(plan.skipped)
    return plan


# ------------------------------------------------------------------------------ the store


def _open_store(out: str, storage_options: Mapping[str, Any] | None) -> Store:
    if "://" not in out or out.startswith("file://"):
        return zarr.storage.LocalStore(out.removeprefix("file://"))
    # npystore's own read option is not the output filesystem's (the command line may pass
    # the input's options for the output too)
    options = {k: v for k, v in (storage_options or {}).items() if k != BUDGET_OPTION}
    return zarr.storage.FsspecStore.from_url(out, storage_options=options)


async def _collect(items: AsyncIterator[str]) -> list[str]:
    return [item async for item in items]


def _keys(store: Store) -> set[str]:
    return set(sync(_collect(store.list_prefix(""))))


def _get_json(store: Store, key: str, out: str) -> dict[str, Any] | None:
    buf = sync(store.get(key, prototype=default_buffer_prototype()))
    if buf is None:
        return None
    try:
        doc = json.loads(buf.to_bytes())
    except ValueError as exc:
        raise ConvertError(f"{out}: {key} is not valid JSON ({exc}); pass overwrite") from exc
    if not isinstance(doc, dict):
        raise ConvertError(f"{out}: {key} holds {type(doc).__name__}, expected an object")
    return doc


def _put_json(store: Store, key: str, doc: Mapping[str, Any]) -> None:
    data = json.dumps(doc, separators=(",", ":")).encode()
    sync(store.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def _ranges(indices: set[int]) -> list[list[int]]:
    """Sorted indices as ``[start, stop)`` runs."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return runs


def _from_ranges(runs: Any, total: int, where: str) -> set[int]:
    out: set[int] = set()
    if not isinstance(runs, list):
        raise ConvertError(f"{where}: done chunks are {type(runs).__name__}, expected a list")
    for run in runs:
        if not (isinstance(run, list) and len(run) == 2 and 0 <= run[0] <= run[1] <= total):
            raise ConvertError(f"{where}: done-chunk run {run!r} is not within 0..{total}")
        out.update(range(run[0], run[1]))
    return out


def _stored_chunks(keys: set[str], plans: list[_ArrayPlan]) -> dict[str, set[int]]:
    """Linear indices of the chunks present in the store, per array."""
    by_path = {p.path: p for p in plans}
    found: dict[str, set[int]] = {p.path: set() for p in plans}
    for key in keys:
        parts = key.split("/")
        for i, part in enumerate(parts):
            if part != "c":
                continue
            plan = by_path.get("/".join(parts[:i]))
            index = parts[i + 1 :]
            if plan is None or len(index) != len(plan.grid) or not all(x.isdigit() for x in index):
                continue
            idx = tuple(int(x) for x in index)
            if all(j < n for j, n in zip(idx, plan.grid, strict=True)):
                found[plan.path].add(int(np.ravel_multi_index(idx, plan.grid)) if idx else 0)
    return found


class _Manifest:
    """The progress record in the store, rewritten atomically (one object/file per write).

    Besides the chunks written it keeps the CRC-32 bookkeeping of stored ``.npz`` members
    (:meth:`~npystore.read.crccheck.CrcLedger.export`: the byte ranges read so far and their
    CRC-32s), so a member read partly by one run and partly by a resumed one is still
    checked, and the error of a run that found the source corrupt (``failed``), so a
    resumed run does not write the rest of a corrupt member.
    """

    def __init__(
        self,
        store: Store,
        doc: dict[str, Any],
        interval: float,
        ledgers: Mapping[str, CrcLedger] | None = None,
    ) -> None:
        self.store = store
        self.doc = doc
        self.interval = interval
        self.done: dict[str, set[int]] = {}
        self.ledgers = dict(ledgers or {})
        self._lock = threading.Lock()
        self._last = time.monotonic()

    def mark(self, path: str, index: int) -> None:
        with self._lock:
            self.done[path].add(index)
            if time.monotonic() - self._last >= self.interval:
                self._write()

    def flush(self, *, complete: bool = False, failed: str | None = None) -> None:
        with self._lock:
            self.doc["complete"] = complete
            if failed is not None:
                self.doc["failed"] = failed
            self._write()

    def _write(self) -> None:
        self.doc["done"] = {path: _ranges(done) for path, done in self.done.items()}
        crc = {path: ledger.export() for path, ledger in self.ledgers.items()}
        self.doc["crc"] = {path: state for path, state in crc.items() if state is not None}
        _put_json(self.store, MANIFEST_KEY, self.doc)
        self._last = time.monotonic()


def _ledgers(plans: list[_ArrayPlan]) -> dict[str, CrcLedger]:
    """The CRC-32 ledgers of the arrays read from stored ``.npz`` members."""
    out: dict[str, CrcLedger] = {}
    for a in plans:
        storage = a.array.layout.storage
        if isinstance(storage, RawExtent) and storage.crc is not None:
            out[a.path] = storage.crc
    return out


def _compressors(compressor: str, level: int | None) -> tuple[list[Any] | None, int | None]:
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


def _check_resume(found: dict[str, Any], expected: dict[str, Any], out: str) -> None:
    if found.get("version") != _MANIFEST_VERSION:
        raise ConvertError(
            f"{out}: {MANIFEST_KEY} has version {found.get('version')!r}, expected "
            f"{_MANIFEST_VERSION}; pass overwrite to start again"
        )
    diffs = [k for k in ("source", "options", "arrays") if found.get(k) != expected[k]]
    if not diffs:
        return
    detail = []
    if "source" in diffs:
        detail.append(f"the source was {found.get('source')}, now {expected['source']}")
    if "options" in diffs:
        detail.append(f"options were {found.get('options')}, now {expected['options']}")
    if "arrays" in diffs:
        old, new = found.get("arrays") or {}, expected["arrays"]
        changed = sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))
        detail.append(f"arrays differ: {changed[:5]}{' ...' if len(changed) > 5 else ''}")
    state = "a finished" if found.get("complete") else "an unfinished"
    raise ConvertError(
        f"{out} holds {state} conversion that differs from this one of "
        f"{expected['source']['url']} (" + "; ".join(detail) + "); pass overwrite "
        "(--overwrite) to replace it"
    )


# ------------------------------------------------------------------------------ writing


class _Writer:
    """Writes chunks (called in dask's worker threads) and records them."""

    def __init__(self, manifest: _Manifest, progress: Progress | None = None) -> None:
        self.manifest = manifest
        self.progress = progress
        self.stop = threading.Event()
        self.written = 0
        self._lock = threading.Lock()
        raw = os.environ.get(STOP_AFTER_ENV, "")
        count, _, how = raw.partition(":")
        self._stop_after = int(count) if count.strip() else None
        self._signal = signal.SIGKILL if how.strip().upper() == "KILL" else signal.SIGINT

    def write(self, target: Any, plan: _ArrayPlan, index: tuple[int, ...], block: Any) -> None:
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


def _chunk_bytes(a: _ArrayPlan, linear: int) -> int:
    """Bytes of chunk ``linear`` of ``a`` (edge chunks are smaller)."""
    index = np.unravel_index(linear, a.grid) if a.grid else ()
    count = math.prod(
        min(c, n - int(i) * c) for i, c, n in zip(index, a.chunks, a.array.shape, strict=True)
    )
    return count * a.array.dtype.itemsize


def _ensure_nodes(
    store: Store,
    plan: _Plan,
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


def _tasks(
    plan: _Plan, arrays: dict[str, Any], done: dict[str, set[int]], writer: _Writer
) -> Iterator[Any]:
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


def convert(
    url: str,
    out: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    out_storage_options: Mapping[str, Any] | None = None,
    name: str | None = None,
    chunks: ChunkSpec | None = None,
    array_chunks: Mapping[str, ChunkSpec] | None = None,
    compressor: str = "zstd",
    level: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    workers: int | None = None,
    checkpoint_interval: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> ConvertResult:
    """Write a file's arrays into a Zarr v3 group at ``out``, in parallel and resumably.

    Parameters
    ----------
    url : str
        The source: an ``.npy``, ``.npz`` or MATLAB file, local path or fsspec URL.
    out : str
        The output group: a local directory or an fsspec URL (``s3://bucket/x.zarr``).
    storage_options, out_storage_options : mapping, optional
        fsspec options for the source and for the output.
    name : str, optional
        Name of the array made from an ``.npy`` file (default: the file name without
        ``.npy``).
    chunks : str or sequence of int, optional
        Zarr chunks of every array: a size (``"16MiB"``: dask's "auto" chunks of at most that
        size), or lengths of the leading axes (``(1000,)``: 1000 along axis 0, the other axes
        whole; ``-1`` means a whole axis). Default: the source's dask chunks, at most
        :data:`DEFAULT_CHUNK_LIMIT` bytes.
    array_chunks : mapping, optional
        Per-array chunks (output path -> spec as for ``chunks``).
    compressor : {"zstd", "blosc", "gzip", "none"}
        The Zarr compressor; ``level`` its level (default zstd 3, blosc 5, gzip 5).
    overwrite : bool
        Replace whatever ``out`` holds. Without it, ``out`` must be empty, or hold an
        unfinished conversion of the same source with the same options (which is resumed),
        or a finished one (nothing is written).
    progress : bool
        Show progress on stderr: a bar with rate and time left on a terminal, a line every
        10 s elsewhere (:class:`npystore.tools.progress.Progress`).
    workers : int, optional
        Threads writing chunks (default: the number of CPUs, at least 4).
    checkpoint_interval : float
        Most seconds between two updates of the progress manifest (0: after every chunk).
    log : callable, optional
        Receives one-line messages (the plan, skipped arrays).

    Returns
    -------
    ConvertResult

    Raises
    ------
    ConvertError
        ``out`` holds something else, or bad options.
    KeyboardInterrupt
        Interrupted; the chunks written so far are recorded, a rerun resumes.
    """
    say = log or (lambda message: None)
    codecs, effective_level = _compressors(compressor, level)
    plan = _plan(url, storage_options, name=name, chunks=chunks, array_chunks=array_chunks or {})
    for path, why in plan.skipped.items():
        say(f"warning: {plan.url}: skipping {path!r}: {why}")
    expected = {
        "version": _MANIFEST_VERSION,
        "npystore": npystore.__version__,
        "source": plan.identity,
        "format": plan.format,
        "options": {"compressor": compressor, "level": effective_level},
        "arrays": {a.path: a.describe() for a in plan.arrays},
    }
    store = _open_store(out, out_storage_options)
    if overwrite and not sync(store.is_empty("")):
        sync(store.clear())
    found = _get_json(store, MANIFEST_KEY, out)
    keys: set[str] = set()
    if found is None:
        if not sync(store.is_empty("")):
            raise ConvertError(
                f"{out} is not empty and holds no {MANIFEST_KEY} (not an npystore "
                "conversion); pass overwrite (--overwrite) to replace its content"
            )
        found = {**expected, "done": {}, "complete": False}
        _put_json(store, MANIFEST_KEY, found)
    else:
        _check_resume(found, expected, out)
        if found.get("failed"):
            raise FormatError(
                f"{found['failed']} (found by an earlier run of this conversion, recorded in "
                f"{out}/{MANIFEST_KEY}; the source is unchanged; pass overwrite "
                "(--overwrite) to read it again)"
            )
        keys = _keys(store)
        stale = {k for k in keys if _STALE_PARTIAL.fullmatch(k.rsplit("/", 1)[-1])}
        for key in stale:  # half-written chunks of a killed run: never read, now removed
            sync(store.delete(key))
        keys -= stale
    ledgers = _ledgers(plan.arrays)
    saved_crc = found.get("crc") or {}
    for path, ledger in ledgers.items():
        if path in saved_crc:
            ledger.restore(saved_crc[path], where=f"{out}/{MANIFEST_KEY} ({path})")
    manifest = _Manifest(store, found, checkpoint_interval, ledgers)
    recorded = found.get("done") or {}
    stored = _stored_chunks(keys, plan.arrays)
    for a in plan.arrays:
        where = f"{out}/{MANIFEST_KEY} ({a.path})"
        manifest.done[a.path] = _from_ranges(recorded.get(a.path, []), a.nchunks, where)
        manifest.done[a.path] |= stored[a.path]
    total = sum(a.nchunks for a in plan.arrays)
    before = sum(len(d) for d in manifest.done.values())
    nbytes = sum(a.array.layout.size * a.array.dtype.itemsize for a in plan.arrays)
    paths = tuple(a.path for a in plan.arrays)

    def result(written: int) -> ConvertResult:
        return ConvertResult(out, plan.format, paths, dict(plan.skipped), total, before, written,
                             nbytes)  # fmt: skip

    if found.get("complete"):
        say(f"{out}: already complete ({total} chunks from {plan.url}); nothing to do")
        return result(0)
    arrays = _ensure_nodes(store, plan, codecs, keys, say)
    say(
        f"{plan.url} -> {out}: {len(plan.arrays)} arrays, {format_size(nbytes)} in {total} chunks"
        + (f" ({before} done already, resuming)" if before else "")
    )
    todo_bytes = sum(
        _chunk_bytes(a, i)
        for a in plan.arrays
        for i in range(a.nchunks)
        if i not in manifest.done[a.path]
    )
    bar = (
        Progress(total - before, todo_bytes, f"convert {plan.url}")
        if progress and total > before
        else None
    )
    writer = _Writer(manifest, bar)
    tasks = list(_tasks(plan, arrays, manifest.done, writer))
    try:
        with bar or contextlib.nullcontext():
            compute(  # type: ignore[no-untyped-call]
                *tasks, scheduler="threads", num_workers=workers or max(4, os.cpu_count() or 1)
            )
    except FormatError as exc:  # the source is corrupt: a resumed run must fail too
        writer.stop.set()
        manifest.flush(failed=str(exc))
        raise
    except BaseException:
        writer.stop.set()
        manifest.flush()
        raise
    manifest.flush(complete=True)
    with warnings.catch_warnings():  # "consolidated metadata is not in the v3 spec (yet)",
        # the manifest "is not a component of a Zarr hierarchy", and data types without a
        # v3 spec (reported when the array was made): all known
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        warnings.simplefilter("ignore", zarr.errors.UnstableSpecificationWarning)
        zarr.consolidate_metadata(store)
    return result(writer.written)
