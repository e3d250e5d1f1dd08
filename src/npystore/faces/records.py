"""Dask arrays of structured values that keep every byte of each record (the dask face,
for structured dtypes only; imported with dask, when such an array is opened).

numpy copies structured values field by field, so the bytes between fields (padding) of a
copy are whatever its new buffer held: uninitialised memory. dask assembles a computed
array that way (``np.empty`` and an assignment per chunk, or ``copy()`` of a single chunk),
while ``numpy.load`` gives the file's bytes. :class:`RecordArray` is a
:class:`dask.array.Array` whose result is assembled through whole-record views
(:func:`npystore.read.access.as_records`): the computed array holds the file's bytes, as
its chunks (read straight into their buffers) do. Its slices stay record arrays; other
operations give plain dask arrays (a field, ``a["x"]``, has no padding to keep).
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.array.core import chunks_from_arrays, slices_from_chunks
from dask.core import flatten
from dask.utils import concrete

from npystore.read.access import as_records

__all__ = ["RecordArray", "finalize_records", "keep_records"]


class RecordArray(da.Array):
    """A dask array of structured values whose computed result keeps each record's bytes."""

    def __dask_postcompute__(self) -> tuple[Any, tuple[()]]:
        return finalize_records, ()

    def __getitem__(self, index: Any) -> Any:
        return keep_records(super().__getitem__(index))  # type: ignore[no-untyped-call]


def keep_records(array: Any) -> Any:
    """``array`` as a :class:`RecordArray` when it is a dask array of structured values."""
    if not isinstance(array, da.Array) or isinstance(array, RecordArray):
        return array
    if array.dtype.names is None or array.dtype.hasobject:
        return array
    return RecordArray(  # type: ignore[no-untyped-call]
        array.dask, array.name, array.chunks, meta=array._meta
    )


def finalize_records(results: Any) -> np.ndarray[Any, Any]:
    """The computed chunks (nested lists, one level per dimension) as one new array, each
    copied through its whole-record view (dask's ``finalize``, without the field-by-field
    copies)."""
    arrays = concrete(results)  # type: ignore[no-untyped-call]
    flat = flatten(arrays, container=(list, tuple))  # type: ignore[no-untyped-call]
    blocks = [np.asarray(b) for b in flat]
    if not blocks:
        return np.empty(0)
    if len(blocks) == 1:  # one chunk: a copy (a chunk may be a view of a cached buffer)
        block = blocks[0]
        out = np.empty(block.shape, dtype=block.dtype)
        as_records(out)[...] = as_records(block)
        return out
    chunks = chunks_from_arrays(arrays)  # type: ignore[no-untyped-call]
    out = np.empty(tuple(map(sum, chunks)), dtype=blocks[0].dtype)
    raw = as_records(out)
    slices = slices_from_chunks(chunks)  # type: ignore[no-untyped-call]
    for where, block in zip(slices, blocks, strict=True):
        raw[where] = as_records(block)
    return out
