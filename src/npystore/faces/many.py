"""Datasets of many files as one lazy array: the dask face of ``.npy`` shards (a list, a glob,
a ``to_npy_stack`` folder, a manifest), one member of many ``.npz`` archives, one variable of
many MAT-files, manifests and kerchunk references of a dataset.

The files are opened, checked and joined by :mod:`npystore.files.many` into a
:class:`~npystore.read.shards.ShardedArray`. The dask array (:func:`sharded_dask`) has chunks
that never span two files: each shard is chunked on its own (``"auto"``: contiguous chunks
of about dask's ``array.chunk-size``, a large shard split along its slowest axis; an int or a
dict: per shard; explicit sizes: cut again at every shard boundary). It is one
``from_array`` layer over the :class:`~npystore.read.shards.ShardedArray`, stored once in the
graph: a task is a getter and its slices (about 80 bytes pickled), a file is its path,
identity and layout, once.

:func:`to_manifest` writes npystore's own manifest (any dataset);
:func:`dataset_kerchunk` writes kerchunk references of the whole dataset where a regular
chunk grid exists, with the manifest beside them.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from npystore.errors import UnsupportedError
from npystore.faces.dask import DEFAULT_MAX_CHUNKS, ChunksSpec
from npystore.fetch import RangeReader
from npystore.fetch.many import expand, open_all
from npystore.files import read_prefix
from npystore.files.many import (
    is_manifest_url,
    join_shards,
    manifest_dict,
    open_manifest,
    parallel_map,
    raw_extents,
    sharded_npy,
)
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, contiguous_chunks
from npystore.read.shards import ShardedArray

if TYPE_CHECKING:
    import dask.array as da

__all__ = [
    "ManyFiles",
    "dataset_kerchunk",
    "is_manifest_url",
    "open_manifest",
    "open_mat_many",
    "open_npz_many",
    "shard_chunks",
    "sharded_dask",
    "sharded_npy",
    "to_manifest",
]

#: Largest edge (last, shorter) shard inlined, zero-padded, into kerchunk references by
#: default (Zarr wants every chunk full-sized): the budget of inlined bytes of one set of
#: references (``to_kerchunk``'s ``max_inline``).
EDGE_INLINE_MAX: Final = 16 * 2**20


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
    max_inline: int = EDGE_INLINE_MAX,
) -> dict[str, Any]:
    """Kerchunk references (Zarr v2 form) of a dataset of ``.npy`` files: one array
    ``data``, one chunk per shard (a reference to the shard's data); a shorter last shard is
    the edge chunk, inlined zero-padded (Zarr reads full chunks only) when at most
    ``max_inline`` bytes. Dtypes Zarr v2 cannot hold exactly are refused, as for one file.
    npystore's manifest rides along under the key ``"npystore"`` (ignored by kerchunk's
    readers), so :func:`npystore.open_npy` reopens the references with every shard's
    identity checked.

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
    from npystore.faces.refs.kerchunk import v2_dtype_problem  # noqa: PLC0415

    problem = v2_dtype_problem(array.dtype)
    if problem is not None:
        raise UnsupportedError(
            f"{where}: the files' dtype {array.dtype} is {problem}, which Zarr v2 cannot "
            f"hold exactly; write npystore's own manifest instead (npystore.to_manifest)"
        )
    extents = raw_extents(array, "kerchunk references")
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
        if full > max_inline:
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
        shards = parallel_map(
            lambda k: self._shard(k, key), list(range(len(self.opened))), self._remote
        )
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
    npzs = parallel_map(
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
    mats = parallel_map(
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
