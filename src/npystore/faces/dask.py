"""The dask face: a layout read through a reader becomes a lazy :class:`dask.array.Array`.

Each chunk is a task that indexes one :class:`~npystore.read.access.LayoutArray` (stored once in
the graph, so graphs pickle small). Because the tasks are dask's own ``getter`` tasks, dask's
slice fusion applies: ``a[10:20].compute()`` reads only the bytes of those rows, not whole
chunks (``fancy=True``: dask 2026.8 fuses slices only into fancy-capable getters, so
:class:`~npystore.read.access.LayoutArray` accepts integer and boolean index arrays too).
"""

from __future__ import annotations

import math
import numbers
import uuid
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from npystore.errors import UnsupportedError
from npystore.read.access import LayoutArray
from npystore.read.layout import (
    ArrayLayout,
    ChunkedExtent,
    ConvertedExtent,
    DeflatedExtent,
    contiguous_chunks,
    storage_token,
)

if TYPE_CHECKING:  # dask.array is imported when a graph is built, not with npystore
    import dask.array as da

__all__ = [
    "DEFAULT_MAX_CHUNKS",
    "ChunksSpec",
    "check_chunk_count",
    "native_chunks",
    "normalize_layout_chunks",
    "to_dask",
]

ChunksSpec = Any  # whatever dask accepts: "auto", int, tuple, dict, -1, None
#: Largest "auto" chunk of a deflated member.
DEFLATED_CHUNK_TARGET = 32 * 2**20
#: Default most chunks (tasks) in one array's graph (``max_chunks`` of the open functions).
#: A million tasks already cost dask seconds of scheduling and gigabytes of graph.
DEFAULT_MAX_CHUNKS: Final = 1_000_000


def normalize_layout_chunks(array: LayoutArray, chunks: ChunksSpec) -> tuple[tuple[int, ...], ...]:
    """Explicit chunk sizes for ``array``.

    ``"auto"`` gives contiguous chunks of about dask's ``array.chunk-size`` that split only
    the slowest-varying axis when possible (see :func:`npystore.read.layout.contiguous_chunks`);
    every other spec has dask's meaning. Pickled (object) arrays are one chunk.
    """
    layout = array.layout
    if layout.dtype.hasobject:  # a pickle: read whole
        return tuple((n,) for n in layout.shape)
    native = native_chunks(layout)
    if native is not None:
        # chunks made of whole stored chunks: each stored chunk is fetched and decoded once
        from dask.array.core import normalize_chunks  # noqa: PLC0415 - keeps import light

        aligned: tuple[tuple[int, ...], ...] = normalize_chunks(  # type: ignore[no-untyped-call]
            chunks, layout.shape, dtype=layout.dtype, previous_chunks=native
        )
        return aligned
    if isinstance(chunks, str) and chunks == "auto":
        import dask  # noqa: PLC0415 - keeps `import npystore` light
        from dask.utils import parse_bytes  # noqa: PLC0415

        target = parse_bytes(dask.config.get("array.chunk-size"))
        if isinstance(_base_storage(layout), DeflatedExtent):
            # each chunk inflates into a temporary buffer: keep memory per task bounded
            target = min(target, DEFLATED_CHUNK_TARGET)
        return contiguous_chunks(layout.shape, layout.dtype.itemsize, layout.order, target)
    if layout.dtype.itemsize == 0:
        # any number of 0-byte elements fits a size target: "auto" and byte sizes (which
        # dask refuses for itemsize 0) take whole axes, as the "auto" branch above does
        chunks = _sizes_to_whole_axes(chunks)
    from dask.array.core import normalize_chunks  # noqa: PLC0415 - keeps import light

    normalized: tuple[tuple[int, ...], ...] = normalize_chunks(  # type: ignore[no-untyped-call]
        chunks, layout.shape, dtype=layout.dtype
    )
    return normalized


def _sizes_to_whole_axes(chunks: ChunksSpec) -> ChunksSpec:
    """``chunks`` with every ``"auto"`` or byte-size string (e.g. ``"64 MiB"``) replaced by
    ``-1``, the whole axis: the meaning of a size target for elements of 0 bytes."""
    if isinstance(chunks, str):
        return -1
    if isinstance(chunks, dict):
        return {axis: _sizes_to_whole_axes(spec) for axis, spec in chunks.items()}
    if isinstance(chunks, tuple | list):
        return type(chunks)(-1 if isinstance(spec, str) else spec for spec in chunks)
    return chunks


def _base_storage(layout: ArrayLayout) -> object:
    storage = layout.storage
    while isinstance(storage, ConvertedExtent):
        storage = storage.real.storage
    return storage


def native_chunks(layout: ArrayLayout) -> tuple[int, ...] | None:
    """The stored chunk shape of a chunked layout (``None`` for byte-addressable storage)."""
    storage = _base_storage(layout)
    if isinstance(storage, ChunkedExtent):
        return tuple(
            min(c, n) if n else c for c, n in zip(storage.chunk_shape, layout.shape, strict=True)
        )
    return None


def to_dask(
    array: LayoutArray,
    chunks: ChunksSpec = "auto",
    *,
    prefix: str = "npy",
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    name: str | bool | None = None,
    inline_array: bool = False,
) -> da.Array:
    """A lazy dask array over ``array``, named deterministically from the object's identity.

    Parameters
    ----------
    array : LayoutArray
        What to read.
    chunks : chunk spec
        ``"auto"`` or anything :func:`dask.array.core.normalize_chunks` accepts.
    prefix : str
        Prefix of the dask name (e.g. ``"npy"``, or a member name).
    max_chunks : int
        Most chunks (one task each) the array may have. Integer chunk sizes are counted
        arithmetically before dask expands them, so ``chunks=1`` on a huge shape fails at
        once instead of building the chunk tuples; the exact count is checked again after
        normalisation, before the graph is built.
    name : str, bool or None
        ``None``: ``"{prefix}-{token}"``, the token derived from the object's identity, the
        layout and the chunks; a string: that name; ``False``: a random name (as
        :func:`dask.array.from_array`).
    inline_array : bool
        As :func:`dask.array.from_array`: the array in every task instead of once.

    Returns
    -------
    dask.array.Array

    Raises
    ------
    UnsupportedError
        ``chunks`` would give more than ``max_chunks`` chunks.
    """
    if not array.dtype.hasobject:  # a pickled array is one chunk whatever the spec
        least, exact = _least_blocks(chunks, array.shape)
        check_chunk_count(array, chunks, least, max_chunks, exact=exact)
    normalized = normalize_layout_chunks(array, chunks)
    check_chunk_count(array, chunks, math.prod(len(c) for c in normalized), max_chunks, exact=True)
    import dask.array as da  # noqa: PLC0415 - keeps `import npystore` light
    from dask.base import tokenize  # noqa: PLC0415

    layout = array.layout
    token = tokenize(
        "npystore-v1",
        array.reader.token,
        storage_token(layout.storage),
        layout.shape,
        str(layout.dtype),
        # a string: dask would walk a nested descr with 5 frames a level (99 levels: too deep)
        repr(layout.dtype.descr) if layout.dtype.names else layout.dtype.str,
        layout.order,
        layout.unpickle,
        normalized,
    )
    if name is None:
        name = f"{prefix}-{token}"
    elif name is False:
        name = f"{prefix}-{uuid.uuid4().hex}"
    elif not isinstance(name, str):
        raise TypeError(f"name must be a string, False or None, not {name!r}")
    meta = np.empty((0,) * layout.ndim, dtype=layout.dtype)
    result: da.Array = da.from_array(  # type: ignore[no-untyped-call]
        array,
        chunks=normalized,
        name=name,
        lock=False,
        asarray=False,
        fancy=True,
        meta=meta,
        inline_array=inline_array,
    )
    if layout.dtype.names is not None and not layout.dtype.hasobject:
        # structured values: computed results keep each record's bytes (padding included)
        from npystore.faces.records import keep_records  # noqa: PLC0415 - imports dask

        kept: da.Array = keep_records(result)
        return kept
    return result


def check_chunk_count(
    array: LayoutArray, chunks: ChunksSpec, count: int, max_chunks: int, *, exact: bool = False
) -> None:
    """Refuse ``count`` chunks when it is more than ``max_chunks``.

    Parameters
    ----------
    array : LayoutArray
        The array being chunked (named in the message).
    chunks : chunk spec
        The spec the user passed (shown in the message).
    count : int
        The number of chunks it gives (``exact``) or at least gives.
    max_chunks : int
        The limit.
    exact : bool
        Whether ``count`` is exact rather than a lower bound.

    Raises
    ------
    ValueError
        ``max_chunks`` is less than 1.
    UnsupportedError
        ``count`` is more than ``max_chunks``.
    """
    if max_chunks < 1:
        raise ValueError(f"max_chunks must be at least 1, got {max_chunks}")
    if count <= max_chunks:
        return
    spec = repr(chunks)
    if len(spec) > 60:
        spec = spec[:57] + "..."
    raise UnsupportedError(
        f"{array.source}: chunks={spec} would split shape {array.shape} into "
        f"{'' if exact else 'at least '}{count:_} chunks (one dask task each), more than "
        f"max_chunks={max_chunks:_}; pass larger chunks (e.g. chunks='auto') or a larger "
        "max_chunks"
    )


def _least_blocks(chunks: ChunksSpec, shape: tuple[int, ...]) -> tuple[int, bool]:
    """``(count, exact)``: the number of chunks ``chunks`` gives ``shape``, computed without
    expanding the spec. Exact for integer sizes, ``-1``, ``None`` and explicit sizes; where
    dask decides (``"auto"``, byte sizes) an axis counts 1, so ``count`` is a lower bound."""
    ndim = len(shape)
    per_axis: list[Any]
    if isinstance(chunks, dict):
        per_axis = [chunks.get(axis, -1) for axis in range(ndim)]
    elif isinstance(chunks, tuple | list):
        if len(chunks) != ndim:  # explicit sizes of a 1-D array, or a spec dask refuses
            return (max(1, len(chunks)), False) if ndim == 1 else (1, False)
        per_axis = list(chunks)
    else:
        per_axis = [chunks] * ndim
    counts = [_axis_blocks(spec, n) for spec, n in zip(per_axis, shape, strict=True)]
    return math.prod(c or 1 for c in counts), None not in counts


def _axis_blocks(spec: Any, n: int) -> int | None:
    """Chunks along an axis of length ``n``; None where dask decides."""
    if isinstance(spec, tuple | list):
        return max(1, len(spec))
    if spec is None:
        return 1
    if isinstance(spec, bool) or not isinstance(spec, numbers.Integral):
        return None
    size = int(spec)
    if size == -1:
        return 1
    return max(1, -(-n // size)) if size > 0 else None
