"""The data behind each variable: :class:`NpystoreBackendArray`, read lazily by xarray.

A variable is made in two steps: :class:`VariableMaker` holds its data, attributes and
npystore's preferred chunking while the dataset is being assembled, and makes the
:class:`xarray.Variable` once its dimension names are known (defaults or ``dims=``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from npystore.faces.dask import normalize_layout_chunks
from npystore.read.access import LayoutArray

__all__ = ["NpystoreBackendArray", "VariableMaker", "drop_axes", "preferred_chunks"]


class NpystoreBackendArray(BackendArray):
    """One variable for xarray's lazy indexing: reads only the selected bytes.

    Parameters
    ----------
    array : LayoutArray or callable
        The array, or a function that makes it on first read (MATLAB v5 variables, whose
        element headers are read only when their data is wanted).
    shape : tuple of int
        The shape xarray sees.
    dtype : numpy.dtype
        The dtype xarray sees (values are cast to it when stored otherwise).
    squeezed : tuple of int
        Axes of ``array`` (all of length 1) that are not in ``shape``.
    """

    def __init__(
        self,
        array: LayoutArray | Callable[[], LayoutArray],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        squeezed: tuple[int, ...] = (),
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self._squeezed = squeezed
        self._array = array if isinstance(array, LayoutArray) else None
        self._make = None if isinstance(array, LayoutArray) else array
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "unread" if self._array is None else self._array.source
        return f"NpystoreBackendArray({state}, shape={self.shape}, dtype={self.dtype})"

    def __getstate__(self) -> dict[str, Any]:
        # travels as the LayoutArray alone (reader + layout), never as the open file
        return {
            "array": self.layout_array(),
            "shape": self.shape,
            "dtype": self.dtype,
            "squeezed": self._squeezed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["array"], state["shape"], state["dtype"], state["squeezed"]
        )

    def layout_array(self) -> LayoutArray:
        """The underlying :class:`~npystore.read.access.LayoutArray` (made on first use)."""
        if self._array is None:
            with self._lock:
                if self._array is None:
                    if self._make is None:  # pragma: no cover - set in __init__
                        raise RuntimeError("no array and no way to make one")
                    self._array = self._make()
                    self._make = None
        return self._array

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.BASIC, self._read
        )

    def _read(self, key: tuple[Any, ...]) -> np.ndarray[Any, Any]:
        full: list[Any] = list(key)
        for axis in self._squeezed:
            full.insert(axis, 0)
        out = self.layout_array()[tuple(full)]
        return np.asarray(out).astype(self.dtype, copy=False)

    def get_duck_array(self, dtype: Any = None) -> np.ndarray[Any, Any]:
        """The whole variable, read in one eager pass (parallel range reads)."""
        out = self.layout_array().read()
        if self._squeezed:
            out = np.squeeze(out, axis=self._squeezed)
        return out.astype(self.dtype, copy=False)


class VariableMaker:
    """A variable waiting for its dimension names.

    Parameters
    ----------
    data : NpystoreBackendArray or numpy.ndarray
        A lazy array, or values already read (MATLAB text).
    dims : tuple of str
        The default dimension names.
    attrs : dict
        The variable's attributes.
    preferred : dict of int to int
        npystore's chunk size per axis (``encoding["preferred_chunks"]``); lazy data only.
    """

    def __init__(
        self,
        data: NpystoreBackendArray | np.ndarray[Any, Any],
        dims: tuple[str, ...],
        attrs: dict[str, Any],
        preferred: dict[int, int],
    ) -> None:
        self.data = data
        self.dims = dims
        self.attrs = attrs
        self.preferred = preferred

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.data.shape)

    def __call__(self, names: Sequence[str] | None) -> xr.Variable:
        """The variable, with dimensions ``names`` (``None``: the defaults)."""
        dims = tuple(names) if names is not None else self.dims
        encoding: dict[str, Any] = {}
        data: Any = self.data
        if isinstance(data, NpystoreBackendArray):
            encoding["preferred_chunks"] = {dims[i]: n for i, n in self.preferred.items()}
            data = indexing.LazilyIndexedArray(data)
        return xr.Variable(dims, data, attrs=self.attrs, encoding=encoding)


def preferred_chunks(array: LayoutArray) -> dict[int, int]:
    """npystore's "auto" chunk size per axis (what its dask face would choose)."""
    chunks = normalize_layout_chunks(array, "auto")
    return {axis: max(1, c[0]) for axis, c in enumerate(chunks) if c}


def drop_axes(preferred: dict[int, int], squeezed: tuple[int, ...]) -> dict[int, int]:
    """``preferred`` (chunk size per axis) without the ``squeezed`` axes, renumbered."""
    if not squeezed:
        return preferred
    kept = [axis for axis in sorted(preferred) if axis not in squeezed]
    return {i: preferred[axis] for i, axis in enumerate(kept)}
