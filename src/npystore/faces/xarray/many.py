"""A dataset of many ``.npy`` files as one xarray dataset: ``xr.open_dataset(glob,
engine="npystore")``.

The files are opened as :func:`npystore.open_npy` opens them (one listing, every opening
request in flight at once, dtypes and shapes checked) and joined into one variable
``data`` (dimensions ``dim_0, ...`` unless ``dims={"data": [...]}`` names them), read
lazily through :class:`ShardedBackendArray`; ``encoding["preferred_chunks"]`` holds the
per-file chunks (no chunk spans two files), which ``chunks={}`` uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from npystore.faces.many import shard_chunks
from npystore.files.many import sharded_npy
from npystore.read.shards import ShardedArray

__all__ = ["ShardedBackendArray", "sharded_dataset"]

#: The variable of a dataset of ``.npy`` files (as of one ``.npy`` file).
VARIABLE = "data"


class ShardedBackendArray(BackendArray):
    """A :class:`~npystore.read.shards.ShardedArray` for xarray's lazy indexing."""

    def __init__(self, array: ShardedArray) -> None:
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._raw
        )

    def _raw(self, key: tuple[Any, ...]) -> np.ndarray[Any, Any]:
        return self.array[key]


def sharded_dataset(
    urls: Any,
    storage_options: Mapping[str, Any] | None,
    allow_pickle: bool,
    dims: Mapping[str, Sequence[str]],
    drop: frozenset[str] | set[str],
) -> xr.Dataset:
    """One dataset over the ``.npy`` files ``urls`` names (a list, a glob, a folder)."""
    array = sharded_npy(urls, storage_options=storage_options, allow_pickle=allow_pickle)
    unknown = set(dims) - {VARIABLE}
    if unknown:
        raise ValueError(f"dims names {sorted(unknown)}: a dataset of .npy files has only 'data'")
    names = tuple(dims.get(VARIABLE, [f"dim_{i}" for i in range(array.ndim)]))
    if len(names) != array.ndim:
        raise ValueError(f"dims['data'] has {len(names)} names, the array {array.ndim} dimensions")
    if VARIABLE in drop:
        return xr.Dataset()
    data = indexing.LazilyIndexedArray(ShardedBackendArray(array))
    chunks = shard_chunks(array, "auto")
    variable = xr.Variable(names, data, attrs={"files": len(array.shards)})
    variable.encoding["preferred_chunks"] = dict(zip(names, chunks, strict=True))
    return xr.Dataset({VARIABLE: variable})
