"""Datasets of many files as one lazy array: ``.npy`` shards (a list, a glob, a
``to_npy_stack`` folder, a manifest), or one member of many ``.npz`` archives, one variable of
many MAT-files.

The files are named by :func:`npystore.fetch.many.expand` (natural order for globs and
folders) and opened together by :func:`npystore.fetch.many.open_all` (every opening request
in flight at once); their headers become :class:`~npystore.read.access.LayoutArray` shards,
checked against the first (same dtype; same shape but along ``axis``, or the same shape when
stacked), and a :class:`~npystore.read.shards.ShardedArray` joins them.

The dask array (:func:`sharded_dask`) has chunks that never span two files: each shard is
chunked on its own (``"auto"``: contiguous chunks of about dask's ``array.chunk-size``, a
large shard split along its slowest axis; an int or a dict: per shard; explicit sizes: cut
again at every shard boundary). It is one ``from_array`` layer over the
:class:`~npystore.read.shards.ShardedArray`, stored once in the graph: a task is a getter and
its slices (about 80 bytes pickled), a file is its reader (URL, identity) and layout, once.

Manifests (:func:`to_manifest`, :func:`open_manifest`) keep what the opening learned (URLs,
header offsets, shapes, identities) so a later open makes no request per shard; readers made
from one are pinned to the recorded identities, so a shard replaced since is a
:class:`~npystore.errors.ConsistencyError` on its first read. :func:`dataset_kerchunk` writes
kerchunk references of the whole dataset where a regular chunk grid exists.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.faces.dask import DEFAULT_MAX_CHUNKS, ChunksSpec
from npystore.fetch import ObjectIdentity, RangeReader
from npystore.fetch.many import OnOpen, expand, open_all
from npystore.fetch.opening import filesystem
from npystore.fetch.remote import BUDGET_OPTION, budget_from
from npystore.files.npy import open_layout_array, read_prefix
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.formats.stackinfo import parse_stack_info
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, RawExtent, Unpickle, contiguous_chunks
from npystore.read.shards import ShardedArray

if TYPE_CHECKING:
    import dask.array as da

__all__ = [
    "MANIFEST_FORMAT",
    "dataset_kerchunk",
    "is_manifest_url",
    "join_shards",
    "open_manifest",
    "sharded_dask",
    "sharded_npy",
    "to_manifest",
]

#: The ``format`` value of npystore's own manifests (see :func:`to_manifest`).
MANIFEST_FORMAT: Final = "npystore-manifest"
MANIFEST_VERSION: Final = 1
#: Bytes read with each shard's identity on S3: the header of any ``.npy`` file npystore
#: writes or numpy writes for a plain dtype (128), and room for long structured headers.
SHARD_HEAD: Final = 4096
#: Largest edge (last, shorter) shard inlined, zero-padded, into kerchunk references (Zarr
#: wants every chunk full-sized).
EDGE_INLINE_MAX: Final = 4 * 2**20


# -- opening -------------------------------------------------------------------------------


def _map(fn: Callable[[Any], Any], items: Sequence[Any], threads: bool) -> list[Any]:
    """``fn`` over ``items``: in a thread pool when the work may wait on the network."""
    if not threads or len(items) < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(32, len(items))) as pool:
        return list(pool.map(fn, items))


def _axis(axis: int, ndim: int, stack: bool, where: str) -> int:
    top = ndim + 1 if stack else ndim
    if not -top <= axis < top:
        raise ValueError(f"{where}: axis {axis} is out of bounds for {top} dimensions")
    return axis % top


def join_shards(
    shards: Sequence[LayoutArray], *, axis: int, stack: bool, where: str
) -> ShardedArray:
    """The shards checked against the first one and joined.

    Raises
    ------
    FormatError
        A shard whose dtype differs from the first's, or whose shape does not fit (the
        message names the first such file, and the first file).
    ValueError
        ``axis`` out of bounds; 0-d shards to concatenate.
    """
    first = shards[0]
    if not stack and first.ndim == 0:
        raise ValueError(
            f"{first.source}: 0-d arrays cannot be concatenated; pass stack=True to stack "
            f"them along a new axis"
        )
    axis = _axis(axis, first.ndim, stack, where)
    dtype = first.dtype
    for shard in shards[1:]:
        if shard.dtype != dtype:
            raise FormatError(
                f"{shard.source}: dtype {shard.dtype.str if not shard.dtype.names else shard.dtype}"
                f" differs from {dtype.str if not dtype.names else dtype} of {first.source}, the "
                f"first file; every file of a dataset must have the same dtype"
            )
        ok = (
            shard.shape == first.shape
            if stack
            else len(shard.shape) == len(first.shape)
            and all(a == b for i, (a, b) in enumerate(zip(shard.shape, first.shape, strict=True))
                    if i != axis)
        )  # fmt: skip
        if not ok:
            rule = "the same shape" if stack else f"the same shape except along axis {axis}"
            raise FormatError(
                f"{shard.source}: shape {shard.shape} does not fit shape {first.shape} of "
                f"{first.source}, the first file; every file must have {rule}"
            )
    # one dtype object for all: a pickle of the array holds it once
    same = [
        s
        if s.layout.dtype is dtype
        else LayoutArray(s.reader, dataclasses.replace(s.layout, dtype=dtype), source=s.source)
        for s in shards
    ]
    return ShardedArray(same, axis, stack)


def sharded_npy(
    urls: Any,
    *,
    axis: int | None = None,
    stack: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    allow_pickle: bool = False,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    unpickle: Unpickle = Unpickle(),  # noqa: B008 - frozen
    head: int = SHARD_HEAD,
    whole: int = 0,
    data_from_head: bool = False,
    on_open: OnOpen | None = None,
    on_count: Callable[[int], OnOpen | None] | None = None,
) -> ShardedArray:
    """The ``.npy`` files ``urls`` names (a list, a glob, a folder) as one
    :class:`~npystore.read.shards.ShardedArray` (see the module doc).

    ``axis=None`` is 0, or the axis a ``to_npy_stack`` folder's ``info`` names. ``head``:
    bytes read with each S3 object's identity, ``whole``: objects the listing found at most
    this large are read whole instead (``data_from_head``: an eager read right after may
    take data from them). ``on_count(n)``, told how many files there are before they are
    opened, may return the ``on_open`` callback (a progress bar for long lists).
    """
    expanded = expand(urls, storage_options, suffixes=(".npy",))
    where = expanded.pattern or f"{len(expanded.objects)} files"
    if expanded.stack_info is not None:
        info = parse_stack_info(expanded.stack_info, f"{where}: info")
        if info.axis is not None and not stack:
            if axis is not None and axis != info.axis:
                raise ValueError(
                    f"{where}: a dask to_npy_stack folder written along axis {info.axis} (its "
                    f"info file says so), not axis {axis}; leave axis out"
                )
            axis = info.axis
    if on_count is not None:
        on_open = on_count(len(expanded.objects)) or on_open
    readers = open_all(expanded.objects, storage_options, head=head, whole=whole, on_open=on_open)
    remote = not readers[0].local

    def header(reader: RangeReader) -> LayoutArray:
        reader.data_from_head = data_from_head
        return open_layout_array(
            reader, read_prefix(reader), allow_pickle, max_header_size, unpickle
        )

    shards = _map(header, readers, remote)
    joined = join_shards(shards, axis=axis or 0, stack=stack, where=where)
    if expanded.stack_info is not None and not stack:
        info = parse_stack_info(expanded.stack_info, f"{where}: info")
        lengths = tuple(s.shape[joined.axis] for s in joined.shards)
        if info.chunks is not None and info.chunks[joined.axis] != lengths:
            raise FormatError(
                f"{where}: the info file says the blocks along axis {joined.axis} are "
                f"{info.chunks[joined.axis]}, the .npy files hold {lengths}; the folder is "
                f"not what to_npy_stack wrote (a file was replaced or removed)"
            )
    return joined


# -- the dask array ------------------------------------------------------------------------


def _explicit(chunks: ChunksSpec) -> bool:
    """Whether ``chunks`` gives explicit block sizes (a tuple of tuples) for some axis."""
    items: Any = chunks.values() if isinstance(chunks, dict) else chunks
    return isinstance(items, tuple | list | type({}.values())) and any(
        isinstance(c, tuple | list) for c in items
    )


def shard_chunks(array: ShardedArray, chunks: ChunksSpec) -> tuple[tuple[int, ...], ...]:
    """Chunks of the whole array that never span two shards (see the module doc)."""
    from dask.array.core import normalize_chunks  # noqa: PLC0415 - keeps import light

    axis = array.axis
    dtype = array.dtype
    if _explicit(chunks):
        whole = normalize_chunks(chunks, array.shape, dtype=dtype)  # type: ignore[no-untyped-call]
        cuts = sorted({*array.starts, *np.cumsum((0, *whole[axis])).tolist()})
        along = tuple(b - a for a, b in itertools.pairwise(cuts) if b > a)
        return (*whole[:axis], along, *whole[axis + 1 :])
    if isinstance(chunks, str) and chunks == "auto":
        import dask  # noqa: PLC0415
        from dask.utils import parse_bytes  # noqa: PLC0415

        target = parse_bytes(dask.config.get("array.chunk-size"))
    seen: dict[tuple[Any, ...], tuple[tuple[int, ...], ...]] = {}
    along_parts: list[int] = []
    rest: tuple[tuple[int, ...], ...] | None = None
    for shard in array.shards:
        layout = shard.layout
        key = (layout.shape, layout.order)
        got = seen.get(key)
        if got is None:
            if dtype.hasobject:  # a pickle: read whole
                got = tuple((n,) for n in layout.shape)
            elif isinstance(chunks, str) and chunks == "auto":
                got = contiguous_chunks(layout.shape, dtype.itemsize, layout.order, target)
            else:
                slab = (
                    (*layout.shape[:axis], 1, *layout.shape[axis:]) if array.stack else layout.shape
                )
                got = normalize_chunks(chunks, slab, dtype=dtype)  # type: ignore[no-untyped-call]
                if array.stack:
                    got = (*got[:axis], *got[axis + 1 :])
            seen[key] = got
        if array.stack:
            along_parts.append(1)
        else:
            along_parts.extend(got[axis])
        if rest is None:
            rest = got if array.stack else (*got[:axis], *got[axis + 1 :])
    assert rest is not None
    along = tuple(along_parts)
    return (*rest[:axis], along, *rest[axis:])


def sharded_dask(
    array: ShardedArray,
    chunks: ChunksSpec = "auto",
    *,
    prefix: str = "npy",
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    name: str | bool | None = None,
) -> da.Array:
    """A lazy dask array over ``array``, its chunks never spanning two files, named from
    the shards' identities (the same files give the same name, a rewritten one another).

    Raises
    ------
    UnsupportedError
        More than ``max_chunks`` chunks.
    """
    if max_chunks < 1:
        raise ValueError(f"max_chunks must be at least 1, got {max_chunks}")
    normalized = shard_chunks(array, chunks)
    count = math.prod(len(c) for c in normalized)
    if count > max_chunks:
        raise UnsupportedError(
            f"{array.source}: chunks={chunks!r:.60} would split shape {array.shape} into "
            f"{count:_} chunks (one dask task each), more than max_chunks={max_chunks:_}; "
            f"pass larger chunks or a larger max_chunks"
        )
    import uuid  # noqa: PLC0415

    import dask.array as da  # noqa: PLC0415 - keeps `import npystore` light

    if name is None:
        digest = hashlib.sha256()
        digest.update(repr(("npystore-many-v1", array.axis, array.stack, array.dtype.str,
                            repr(array.dtype.descr), normalized)).encode())  # fmt: skip
        for shard in array.shards:
            layout = shard.layout
            digest.update(repr((shard.reader.token, layout.shape, layout.order,
                                repr(layout.storage), layout.unpickle)).encode())  # fmt: skip
        name = f"{prefix}-{digest.hexdigest()[:32]}"
    elif name is False:
        name = f"{prefix}-{uuid.uuid4().hex}"
    elif not isinstance(name, str):
        raise TypeError(f"name must be a string, False or None, not {name!r}")
    meta = np.empty((0,) * array.ndim, dtype=array.dtype)
    result: da.Array = da.from_array(  # type: ignore[no-untyped-call]
        array, chunks=normalized, name=name, lock=False, asarray=False, fancy=True, meta=meta
    )
    return result


# -- manifests -----------------------------------------------------------------------------


def is_manifest_url(url: object) -> bool:
    """Whether ``url`` names a manifest by its form: a string ending in ``.json``."""
    return isinstance(url, str) and url.lower().endswith(".json")


def _raw(array: ShardedArray, what: str) -> list[RawExtent]:
    extents = []
    for shard in array.shards:
        storage = shard.layout.storage
        if not isinstance(storage, RawExtent) or storage.crc is not None:
            raise UnsupportedError(
                f"{shard.source}: {what} records .npy files whose data is one byte range; "
                f"this one is {type(storage).__name__}"
            )
        if shard.reader.source is not None:
            raise UnsupportedError(f"{shard.source}: {what} names files by URL")
        extents.append(storage)
    return extents


def manifest_dict(array: ShardedArray) -> dict[str, Any]:
    """npystore's own manifest of a dataset of ``.npy`` files (see :func:`to_manifest`)."""
    extents = _raw(array, "a manifest")
    dtype = array.dtype
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "axis": array.axis,
        "stack": array.stack,
        "dtype": dtype.descr if dtype.names else dtype.str,
        "shape": list(array.shape),
        "shards": [
            {
                "url": shard.reader.fs.unstrip_protocol(shard.reader.path),
                "offset": extent.offset,
                "shape": list(shard.shape),
                "order": shard.layout.order,
                "size": shard.reader.identity.size,
                "identity": dict(shard.reader.identity.fields),
            }
            for shard, extent in zip(array.shards, extents, strict=True)
        ],
    }


def to_manifest(
    urls: Any,
    out: str | None = None,
    *,
    axis: int | None = None,
    stack: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    out_options: Mapping[str, Any] | None = None,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
) -> dict[str, Any]:
    """Write npystore's own manifest of a dataset of ``.npy`` files: for every shard its
    URL, header offset, shape, order, size and identity (ETag, version, mtime, ...), so that
    :func:`npystore.open_npy` of the manifest makes no request per shard. Works for any
    shards, regular or not (kerchunk references need a regular grid).

    Parameters
    ----------
    urls : str or list of str
        A list, a glob or a folder, as :func:`npystore.open_npy` takes them.
    out : str, optional
        Where to write the JSON (a path or URL ending in ``.json``); None: only returned.
    axis, stack
        As :func:`npystore.open_npy`.
    storage_options : mapping, optional
        Options of the shards' filesystem.
    out_options : mapping, optional
        Options of ``out``'s filesystem (default: ``storage_options``).
    max_header_size : int
        Largest header accepted.

    Returns
    -------
    dict
        The manifest (``{"format": "npystore-manifest", "version": 1, "shards": [...]}``).

    Examples
    --------
    >>> import numpy as np, npystore, os
    >>> os.makedirs("/tmp/doc_man", exist_ok=True)
    >>> for i, n in enumerate([3, 5, 2]):
    ...     np.save(f"/tmp/doc_man/part_{i}.npy", np.full((n, 2), i, dtype="<f4"))
    >>> m = npystore.to_manifest("/tmp/doc_man/*.npy", "/tmp/doc_man.json")
    >>> [s["shape"] for s in m["shards"]]
    [[3, 2], [5, 2], [2, 2]]
    >>> npystore.open_npy("/tmp/doc_man.json").shape
    (10, 2)
    """
    array = sharded_npy(
        urls,
        axis=axis,
        stack=stack,
        storage_options=storage_options,
        max_header_size=max_header_size,
    )
    manifest = manifest_dict(array)
    if out is not None:
        from npystore.fetch import write_object  # noqa: PLC0415

        options = storage_options if out_options is None else out_options
        write_object(out, json.dumps(manifest).encode(), options)
    return manifest


def _read_json(url: str, storage_options: Mapping[str, Any] | None) -> Any:
    from npystore.fetch import open_reader  # noqa: PLC0415

    reader = open_reader(url, storage_options, head=1)
    try:
        return json.loads(reader.read(0, reader.size))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{url}: not a JSON manifest ({exc})") from exc


def open_manifest(
    url: str | Mapping[str, Any], storage_options: Mapping[str, Any] | None = None
) -> ShardedArray:
    """The dataset a manifest describes (npystore's own, or kerchunk references made by
    :func:`dataset_kerchunk`), with no request per shard: each shard's reader is pinned to
    the identity recorded, and checked on every read.

    Raises
    ------
    FormatError
        Not a manifest of either kind, or an inconsistent one.
    """
    doc = _read_json(url, storage_options) if isinstance(url, str) else url
    where = url if isinstance(url, str) else "manifest"
    if isinstance(doc, Mapping) and isinstance(doc.get("npystore"), Mapping):
        doc = doc["npystore"]  # kerchunk references carry npystore's manifest beside them
    if not isinstance(doc, Mapping) or doc.get("format") != MANIFEST_FORMAT:
        raise FormatError(
            f'{where}: not an npystore manifest (no "format": "{MANIFEST_FORMAT}"); '
            f"kerchunk references without one open with xarray's engine='kerchunk'"
        )
    if doc.get("version") != MANIFEST_VERSION:
        raise UnsupportedError(f"{where}: manifest version {doc.get('version')!r} is not 1")
    try:
        descr = doc["dtype"]
        dtype = np.dtype([tuple(f) for f in descr] if isinstance(descr, list) else descr)
        options = dict(storage_options or {})
        budget = budget_from(options.pop(BUDGET_OPTION, None))
        shards = []
        fs_of: dict[str, Any] = {}
        for entry in doc["shards"]:
            shard_url = str(entry["url"])
            protocol = shard_url.split("://", 1)[0] if "://" in shard_url else ""
            fs = fs_of.get(protocol)
            if fs is None:
                fs, path = filesystem(shard_url, options)
                fs_of[protocol] = fs
            else:
                path = fs._strip_protocol(shard_url)
            name = path if protocol in ("", "file") else fs.unstrip_protocol(path)
            fields = tuple((str(k), str(v)) for k, v in dict(entry["identity"]).items())
            identity = ObjectIdentity(name, int(entry["size"]), fields)
            shape = tuple(int(n) for n in entry["shape"])
            order: Literal["C", "F"] = "F" if entry.get("order") == "F" else "C"
            offset = int(entry["offset"])
            extent = RawExtent(offset, math.prod(shape) * dtype.itemsize)
            if offset < 0 or extent.offset + extent.nbytes > identity.size:
                raise FormatError(
                    f"{where}: shard {name}: data [{offset}, {offset + extent.nbytes}) lies "
                    f"outside its {identity.size} bytes"
                )
            reader = RangeReader(fs, path, identity, budget=budget)
            shards.append(LayoutArray(reader, ArrayLayout(dtype, shape, order, extent)))
        axis, stack = int(doc["axis"]), bool(doc["stack"])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"{where}: a malformed npystore manifest ({exc!r})") from exc
    if not shards:
        raise FormatError(f"{where}: the manifest lists no shard")
    return join_shards(shards, axis=axis, stack=stack, where=where)


# -- kerchunk references of a dataset ------------------------------------------------------


def _grid_chunk(array: ShardedArray) -> int | None:
    """The chunk length along the axis that makes one chunk per shard: every shard as long
    as the first, the last one maybe shorter (an edge chunk). None: no such grid."""
    if array.stack:
        return 1
    lengths = [s.shape[array.axis] for s in array.shards]
    first = lengths[0]
    if first == 0 or any(n != first for n in lengths[:-1]) or lengths[-1] > first:
        return None
    return first


def dataset_kerchunk(
    urls: Any,
    *,
    axis: int | None = None,
    stack: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    zarr_format: int = 2,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
) -> dict[str, Any]:
    """Kerchunk references (Zarr v2 form) of a dataset of ``.npy`` files: one array
    ``data``, one chunk per shard (a reference to the shard's data); a shorter last shard is
    the edge chunk, inlined zero-padded (Zarr reads full chunks only) when at most
    :data:`EDGE_INLINE_MAX` bytes. npystore's manifest rides along under the key
    ``"npystore"`` (ignored by kerchunk's readers), so :func:`npystore.open_npy` reopens
    the references with every shard's identity checked.

    Raises
    ------
    UnsupportedError
        No regular grid (shards of different lengths, or a large shorter last shard; use
        :func:`to_manifest`), ``zarr_format=3``, or shards whose data is not one range.
    """
    if zarr_format != 2:
        raise UnsupportedError(
            "kerchunk references of a dataset of many files are written in the Zarr v2 form "
            "(zarr_format=2), the one kerchunk's tools combine"
        )
    array = sharded_npy(
        urls, axis=axis, stack=stack, storage_options=storage_options,
        max_header_size=max_header_size,
    )  # fmt: skip
    where = urls if isinstance(urls, str) else f"{len(array.shards)} files"
    extents = _raw(array, "kerchunk references")
    length = _grid_chunk(array)
    orders = {s.layout.order for s in array.shards if sum(n > 1 for n in s.shape) > 1}
    if length is None or len(orders) > 1:
        lengths = sorted({s.shape[array.axis] for s in array.shards})
        raise UnsupportedError(
            f"{where}: no regular chunk grid holds these files (lengths along axis "
            f"{array.axis}: {', '.join(map(str, lengths[:6]))}{', ...' if len(lengths) > 6 else ''}"
            f"; Zarr chunks are equal but the last): kerchunk references cannot describe "
            f"them. Write npystore's own manifest instead: npystore.to_manifest(urls, "
            f"'dataset.json'), which npystore.open_npy reopens with no request per file"
        )
    axis_ = array.axis
    first = array.shards[0]
    chunk = list(first.shape)
    if array.stack:
        chunk.insert(axis_, 1)
    else:
        chunk[axis_] = length
    order = orders.pop() if orders else "C"
    dtype = array.dtype
    refs: dict[str, Any] = {
        ".zgroup": json.dumps({"zarr_format": 2}),
        ".zattrs": json.dumps({}),
        "data/.zarray": json.dumps(
            {
                "zarr_format": 2,
                "shape": list(array.shape),
                "chunks": chunk,
                "dtype": dtype.descr if dtype.names else dtype.str,
                "compressor": None,
                "fill_value": None,
                "filters": None,
                "order": order,
                "dimension_separator": ".",
            }
        ),
        "data/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": [f"dim_{i}" for i in range(array.ndim)]}),
    }
    full = math.prod(chunk) * dtype.itemsize
    for k, (shard, extent) in enumerate(zip(array.shards, extents, strict=True)):
        index = [0] * array.ndim
        index[axis_] = k
        key = "data/" + ".".join(map(str, index))
        target = shard.reader.fs.unstrip_protocol(shard.reader.path)
        if extent.nbytes == full:
            refs[key] = [target, extent.offset, extent.nbytes]
            continue
        if full > EDGE_INLINE_MAX:
            raise UnsupportedError(
                f"{shard.source}: the last file is shorter than the others and its padded "
                f"chunk ({full} bytes) is too large to inline into kerchunk references; "
                f"use npystore.to_manifest(urls, 'dataset.json') instead"
            )
        edge = np.zeros(chunk, dtype=dtype, order=order)
        where_ = tuple(slice(0, n) for n in shard.shape)
        edge[where_] = shard[...]
        refs[key] = "base64:" + base64.b64encode(edge.tobytes(order=order)).decode()
    result = {"version": 1, "refs": refs, "npystore": manifest_dict(array)}
    json.dumps(result)
    return result


# -- one member or variable across many archives --------------------------------------------


class ManyFiles(Mapping[str, Any]):
    """One key across many ``.npz`` archives or MAT-files: ``m["x"]`` is every file's ``x``
    concatenated along ``axis`` (stacked with ``stack=True``), a lazy dask array; keys are
    the first file's. Made by :func:`npystore.open_npz` and :func:`npystore.open_mat` when
    given many files.

    Attributes
    ----------
    files : list of str
        The keys (members, variables) of the first file.
    opened : list
        Each file's own :class:`~npystore.NpzFile` or :class:`~npystore.MatFile`.
    """

    def __init__(
        self,
        opened: list[Any],
        keys: list[str],
        shard: Callable[[int, str], LayoutArray],
        *,
        axis: int | None,
        stack: bool,
        chunks: ChunksSpec,
        max_chunks: int,
        where: str,
        remote: bool,
        prefix: Callable[[str], str],
    ) -> None:
        self.opened = opened
        self.files = keys
        self._shard = shard
        self._axis = axis
        self._stack = stack
        self._chunks = chunks
        self._max_chunks = max_chunks
        self._where = where
        self._remote = remote
        self._prefix = prefix

    def array(self, key: str) -> ShardedArray:
        """Every file's ``key`` joined, as a lazy numpy-like array (each file's headers read
        together)."""
        shards = _map(lambda k: self._shard(k, key), list(range(len(self.opened))), self._remote)
        return join_shards(
            shards, axis=self._axis or 0, stack=self._stack, where=f"{self._where}: {key!r}"
        )

    def __getitem__(self, key: str) -> Any:
        if key not in self.files:
            raise KeyError(f"{key!r} is not in {self._where} (the first file's keys: {self.files})")
        return sharded_dask(
            self.array(key), self._chunks, prefix=self._prefix(key), max_chunks=self._max_chunks
        )

    def load(self, key: str) -> np.ndarray[Any, Any]:
        """Every file's ``key`` read into one numpy array, all files at once."""
        return self.array(key).read()

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def __repr__(self) -> str:
        return f"ManyFiles({self._where!r}, {len(self.opened)} files, keys={self.files!r})"

    def close(self) -> None:
        """Close every file."""
        for f in self.opened:
            f.close()

    def __enter__(self) -> ManyFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _opened(
    urls: Any, storage_options: Mapping[str, Any] | None, suffix: str, **open_options: Any
) -> tuple[str, list[RangeReader]]:
    expanded = expand(urls, storage_options, suffixes=(suffix,))
    where = expanded.pattern or f"{len(expanded.objects)} files"
    return where, open_all(expanded.objects, storage_options, **open_options)


def open_npz_many(
    urls: Any,
    *,
    axis: int | None,
    stack: bool,
    chunks: ChunksSpec,
    storage_options: Mapping[str, Any] | None,
    max_chunks: int,
    **npz_options: Any,
) -> ManyFiles:
    """:func:`npystore.open_npz` of many archives (see :class:`ManyFiles`)."""
    from npystore.faces.npz import _dask_prefix, npz_from_reader  # noqa: PLC0415
    from npystore.files.zip import OPEN_TAIL  # noqa: PLC0415

    where, readers = _opened(urls, storage_options, ".npz", head=0, tail=OPEN_TAIL)
    remote = not readers[0].local
    npzs = _map(
        lambda r: npz_from_reader(r, chunks=chunks, max_chunks=max_chunks, **npz_options),
        readers,
        remote,
    )
    return ManyFiles(
        npzs, list(npzs[0].files), lambda k, key: npzs[k].array(key), axis=axis, stack=stack,
        chunks=chunks, max_chunks=max_chunks, where=where, remote=remote, prefix=_dask_prefix,
    )  # fmt: skip


def open_mat_many(
    urls: Any,
    *,
    axis: int | None,
    stack: bool,
    chunks: ChunksSpec,
    storage_options: Mapping[str, Any] | None,
    max_chunks: int,
    **mat_options: Any,
) -> ManyFiles:
    """:func:`npystore.open_mat` of many MAT-files (see :class:`ManyFiles`): numeric
    variables only (small ones read with the file's metadata included)."""
    from npystore.faces.matfile import MAT_OPEN_HEAD, mat_from_reader  # noqa: PLC0415
    from npystore.files.mat.tree import NumericLeaf, ValueLeaf  # noqa: PLC0415
    from npystore.read.layout import InlineExtent  # noqa: PLC0415

    where, readers = _opened(urls, storage_options, ".mat", head=MAT_OPEN_HEAD)
    remote = not readers[0].local
    mats = _map(
        lambda r: mat_from_reader(
            r, read_prefix(r), chunks=chunks, max_chunks=max_chunks, **mat_options
        ),
        readers,
        remote,
    )

    def shard(k: int, name: str) -> LayoutArray:
        node = mats[k].node(name)
        source = f"{mats[k].url}:{name}"
        if isinstance(node, NumericLeaf):
            return node.array
        if isinstance(node, ValueLeaf):
            value = np.ascontiguousarray(node.value)
            layout = ArrayLayout(value.dtype, value.shape, "C", InlineExtent(value.tobytes()))
            return LayoutArray(readers[k], layout, source=source)
        raise UnsupportedError(
            f"{source}: a {type(node).__name__}, not a numeric array: only numeric variables "
            f"join across files (open the files one by one with npystore.open_mat)"
        )

    return ManyFiles(
        mats, list(mats[0]), shard, axis=axis, stack=stack, chunks=chunks,
        max_chunks=max_chunks, where=where, remote=remote,
        prefix=lambda key: "mat-" + key[:40].replace("/", "_"),
    )  # fmt: skip
