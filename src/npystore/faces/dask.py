"""The dask face: a layout read through a reader becomes a lazy :class:`dask.array.Array`.

Each chunk is a task that indexes one :class:`~npystore.access.LayoutArray` (stored once in
the graph, so graphs pickle small). Because the tasks are dask's own ``getter`` tasks, dask's
slice fusion applies: ``a[10:20].compute()`` reads only the bytes of those rows, not whole
chunks (``fancy=True``: dask 2026.8 fuses slices only into fancy-capable getters, so
:class:`~npystore.access.LayoutArray` accepts integer and boolean index arrays too).
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.utils import parse_bytes

from npystore.access import LayoutArray
from npystore.layout import (
    ArrayLayout,
    ChunkedExtent,
    ConvertedExtent,
    DeflatedExtent,
    contiguous_chunks,
    storage_token,
)

__all__ = ["ChunksSpec", "native_chunks", "normalize_layout_chunks", "to_dask"]

ChunksSpec = Any  # whatever dask accepts: "auto", int, tuple, dict, -1, None
#: Largest "auto" chunk of a deflated member.
DEFLATED_CHUNK_TARGET = 32 * 2**20


def normalize_layout_chunks(array: LayoutArray, chunks: ChunksSpec) -> tuple[tuple[int, ...], ...]:
    """Explicit chunk sizes for ``array``.

    ``"auto"`` gives contiguous chunks of about dask's ``array.chunk-size`` that split only
    the slowest-varying axis when possible (see :func:`npystore.layout.contiguous_chunks`);
    every other spec has dask's meaning. Pickled (object) arrays are one chunk.
    """
    layout = array.layout
    if layout.dtype.hasobject:  # a pickle: read whole
        return tuple((n,) for n in layout.shape)
    native = native_chunks(layout)
    if native is not None:
        # chunks made of whole stored chunks: each stored chunk is fetched and decoded once
        aligned: tuple[tuple[int, ...], ...] = da.core.normalize_chunks(  # type: ignore[no-untyped-call]
            chunks, layout.shape, dtype=layout.dtype, previous_chunks=native
        )
        return aligned
    if isinstance(chunks, str) and chunks == "auto":
        target = parse_bytes(dask.config.get("array.chunk-size"))
        if isinstance(_base_storage(layout), DeflatedExtent):
            # each chunk inflates into a temporary buffer: keep memory per task bounded
            target = min(target, DEFLATED_CHUNK_TARGET)
        return contiguous_chunks(layout.shape, layout.dtype.itemsize, layout.order, target)
    normalized: tuple[tuple[int, ...], ...] = da.core.normalize_chunks(  # type: ignore[no-untyped-call]
        chunks, layout.shape, dtype=layout.dtype
    )
    return normalized


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


def to_dask(array: LayoutArray, chunks: ChunksSpec = "auto", *, prefix: str = "npy") -> da.Array:
    """A lazy dask array over ``array``, named deterministically from the object's identity.

    Parameters
    ----------
    array : LayoutArray
        What to read.
    chunks : chunk spec
        ``"auto"`` or anything :func:`dask.array.core.normalize_chunks` accepts.
    prefix : str
        Prefix of the dask name (e.g. ``"npy"``, or a member name).

    Returns
    -------
    dask.array.Array
    """
    normalized = normalize_layout_chunks(array, chunks)
    layout = array.layout
    token = tokenize(
        "npystore-v1",
        array.reader.token,
        storage_token(layout.storage),
        layout.shape,
        str(layout.dtype),
        layout.dtype.descr if layout.dtype.names else layout.dtype.str,
        layout.order,
        normalized,
    )
    meta = np.empty((0,) * layout.ndim, dtype=layout.dtype)
    result: da.Array = da.from_array(  # type: ignore[no-untyped-call]
        array,
        chunks=normalized,
        name=f"{prefix}-{token}",
        lock=False,
        asarray=False,
        fancy=True,
        meta=meta,
        inline_array=False,
    )
    return result
