"""How npystore's data types meet zarr's: the registry entries (:func:`register_dtypes`,
:class:`ExactStructuredGate`) and the data type for a NumPy dtype (:func:`zarr_dtype_for`).

zarr tries every registered type on a NumPy dtype and wants exactly one match, so zarr's
``structured`` key gets :class:`ExactStructuredGate`: it declines the records zarr gets
wrong (those are :class:`~npystore.faces.zarr.dtypes.structured.NpyStructured`'s) and
otherwise returns zarr's own :class:`~zarr.core.dtype.Structured`.
"""

from __future__ import annotations

from typing import Any, Self, TypeGuard, cast

import numpy as np
from zarr.core.dtype import DataTypeValidationError, Structured, data_type_registry
from zarr.core.dtype.common import DTypeJSON
from zarr.core.dtype.wrapper import TBaseDType

from npystore.errors import UnsupportedError
from npystore.faces.zarr.dtypes.common import AnyZDType, leaf_str
from npystore.faces.zarr.dtypes.scalar import NpyScalar, zarr_scalar
from npystore.faces.zarr.dtypes.structured import NpyStructured, zarr_structured_is_exact

__all__ = ["ExactStructuredGate", "register_dtypes", "zarr_dtype_for"]


class ExactStructuredGate(Structured):
    """The registry entry for zarr's ``"structured"`` name, declining inexact records.

    It matches only what :func:`zarr_structured_is_exact` accepts (the rest is
    :class:`NpyStructured`'s) and returns zarr's own :class:`Structured` instances, so such
    arrays are exactly what zarr alone makes of them.
    """

    @classmethod
    def _check_native_dtype(cls, dtype: TBaseDType) -> TypeGuard[np.dtypes.VoidDType[int]]:
        return super()._check_native_dtype(dtype) and zarr_structured_is_exact(dtype)

    @classmethod
    def from_native_dtype(cls, dtype: TBaseDType) -> Self:
        if not cls._check_native_dtype(dtype):
            raise DataTypeValidationError(f"zarr's Structured is not exact for {dtype!r}")
        return cast("Self", Structured.from_native_dtype(dtype))

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Self:
        return cast("Self", Structured._from_json_v2(data))

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        return cast("Self", Structured._from_json_v3(data))


def register_dtypes() -> None:
    """Register npystore's data types with zarr (idempotent; done on import of
    :mod:`npystore.faces.zarr.dtypes`).

    Adds :class:`NpyStructured` and :class:`NpyScalar` to zarr's data type registry and puts
    :class:`ExactStructuredGate` under zarr's ``structured`` key, so matching a NumPy dtype
    (``zarr.create_array(..., dtype=...)``) picks npystore's type exactly where zarr's own
    would be wrong or missing.
    """
    data_type_registry.register(Structured._zarr_v3_name, ExactStructuredGate)
    data_type_registry.register(NpyStructured._zarr_v3_name, NpyStructured)
    data_type_registry.register(NpyScalar._zarr_v3_name, NpyScalar)


def zarr_dtype_for(dtype: np.dtype[Any]) -> AnyZDType:
    """The Zarr data type for the metadata of an array of ``dtype``.

    zarr's own type where it is exact, else :class:`NpyStructured` or :class:`NpyScalar`.
    Independent of the registry's state.

    Parameters
    ----------
    dtype : numpy.dtype
        The dtype of an ``.npy`` array.

    Returns
    -------
    ZDType
        Its ``to_native_dtype()`` is ``dtype``: exactly, or in another byte order for zarr's
        non-structured types, whose byte order belongs in the ``bytes`` codec.

    Raises
    ------
    UnsupportedError
        For object dtypes and records with object fields, zero-size items, and subarray
        dtypes (numpy folds those into the array's shape).
    """
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise UnsupportedError(
            f"dtype {dtype!r} holds Python objects (a pickled array): it has no Zarr data type"
        )
    if dtype.itemsize == 0:
        raise UnsupportedError(f"dtype {dtype!r} has zero-size items: nothing for Zarr to store")
    if dtype.subdtype is not None:
        raise UnsupportedError(f"subarray dtype {dtype!r}: use its base dtype and a longer shape")
    if dtype.names is not None:
        if zarr_structured_is_exact(dtype):
            return cast("AnyZDType", Structured.from_native_dtype(dtype))
        try:
            return cast("AnyZDType", NpyStructured.from_numpy(dtype))
        except DataTypeValidationError as err:
            raise UnsupportedError(f"dtype {dtype!r}: {err}") from err
    found = zarr_scalar(dtype, dtype.char)
    if found is not None:
        return found
    try:
        return cast("AnyZDType", NpyScalar(descr=leaf_str(dtype)))
    except DataTypeValidationError as err:
        raise UnsupportedError(f"dtype {dtype!r} has no Zarr data type: {err}") from err
