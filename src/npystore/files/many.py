"""Datasets of many ``.npy`` files opened, checked and joined; npystore's manifests of them.

The files are named by :func:`npystore.fetch.many.expand` (natural order for globs and
folders) and opened together by :func:`npystore.fetch.many.open_all` (every opening request
in flight at once); their headers become :class:`~npystore.read.access.LayoutArray` shards
(identical header bytes parsed once), checked against the first (same dtype; same shape but
along ``axis``, or the same shape when stacked), and a
:class:`~npystore.read.shards.ShardedArray` joins them (:func:`sharded_npy`). A
``to_npy_stack`` folder's ``info`` is read by :mod:`npystore.formats.stackinfo` (never
unpickled): its axis is the default, and its block lengths must be the files'.

Manifests (:func:`manifest_dict`, :func:`open_manifest`) keep what the opening learned
(URLs, header offsets, shapes, identities) so that a later open makes no request per
shard; readers made from one are pinned to the recorded identities, so a shard replaced
since is a :class:`~npystore.errors.ConsistencyError` on its first read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Literal

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import ObjectIdentity, RangeReader
from npystore.fetch.many import OnOpen, expand, open_all
from npystore.fetch.naming import is_manifest_url
from npystore.fetch.opening import filesystem
from npystore.fetch.remote import BUDGET_OPTION, budget_from
from npystore.files import read_prefix
from npystore.files.npy import open_layout_array
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.formats.stackinfo import parse_stack_info
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, RawExtent, Unpickle
from npystore.read.shards import ShardedArray

__all__ = [
    "MANIFEST_FORMAT",
    "SHARD_HEAD",
    "is_manifest_url",
    "join_shards",
    "manifest_dict",
    "open_manifest",
    "parallel_map",
    "raw_extents",
    "sharded_npy",
]

#: The ``format`` value of npystore's own manifests (see :func:`manifest_dict`).
MANIFEST_FORMAT: Final = "npystore-manifest"
MANIFEST_VERSION: Final = 1
#: Bytes read with each shard's identity on S3: the header of any ``.npy`` file npystore
#: writes or numpy writes for a plain dtype (128), and room for long structured headers.
SHARD_HEAD: Final = 4096
#: Bytes of a manifest read by its opening request on S3 (a manifest of 10,000 files is
#: about 2.5 MB): the whole manifest in one GET.
MANIFEST_HEAD: Final = 64 * 2**20
#: Largest manifest read (about a million files).
MANIFEST_MAX: Final = 1 << 30


# -- opening -------------------------------------------------------------------------------


def parallel_map(fn: Callable[[Any], Any], items: Sequence[Any], threads: bool) -> list[Any]:
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

    shards = parallel_map(header, readers, remote)
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


# -- manifests -----------------------------------------------------------------------------


def raw_extents(array: ShardedArray, what: str) -> list[RawExtent]:
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
    extents = raw_extents(array, "a manifest")
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


def _read_json(url: str, storage_options: Mapping[str, Any] | None) -> Any:
    from npystore.fetch import open_reader  # noqa: PLC0415

    reader = open_reader(url, storage_options, head=MANIFEST_HEAD)  # S3: one GET for it all
    if reader.size > MANIFEST_MAX:
        raise FormatError(
            f"{url}: {reader.size} bytes, more than a manifest of a million files "
            f"({MANIFEST_MAX} bytes); not a manifest"
        )
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
            elif protocol == "file" and "::" not in shard_url:
                path = shard_url.removeprefix("file://")  # as the manifest recorded it
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
