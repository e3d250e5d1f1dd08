"""How npystore's data types meet zarr's: the registry entries (:func:`register_dtypes`,
:data:`ExactStructuredGate`), the data type for a NumPy dtype (:func:`zarr_dtype_for`) and
the ``bytes`` codec that reads raw bytes of it (:func:`bytes_codec_for`).

zarr tries every registered type on a NumPy dtype and wants exactly one match. zarr's own
record types are registered under their names (``"structured"`` in zarr 3.1; ``"struct"``
from zarr 3.2, whose ``Struct`` also reads ``"structured"`` metadata): each of those keys gets a
gate (:func:`gate_for`) that declines the records zarr gets wrong or lacks (those are
:class:`~npystore.faces.zarr.dtypes.structured.NpyStructured`'s) and otherwise returns zarr's
own instances, from NumPy dtypes and from JSON alike. So importing npystore never changes what
zarr does with a record it stores exactly.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, TypeGuard, cast

import numpy as np
from zarr.core.dtype import Structured, data_type_registry
from zarr.core.dtype.common import DTypeJSON
from zarr.core.dtype.wrapper import TBaseDType

from npystore.errors import UnsupportedError
from npystore.faces.zarr.dtypes.common import AnyZDType, DataTypeValidationError, leaf_str
from npystore.faces.zarr.dtypes.scalar import NpyScalar, zarr_scalar
from npystore.faces.zarr.dtypes.structured import (
    ZARR_RECORD,
    NpyStructured,
    zarr_record_byte_order,
    zarr_structured_is_exact,
)

__all__ = [
    "ExactStructuredGate",
    "bytes_codec_for",
    "gate_for",
    "register_dtypes",
    "zarr_dtype_for",
]


class _Gate:
    """What a gate adds to the zarr record type it subclasses (``_wraps``): matching a NumPy
    dtype declines the records zarr's type gets wrong; every constructor returns zarr's own
    class, so no instance of the gate ever exists."""

    _wraps: ClassVar[type[Structured]]

    @classmethod
    def _check_native_dtype(cls, dtype: TBaseDType) -> TypeGuard[np.dtypes.VoidDType[int]]:
        return bool(cls._wraps._check_native_dtype(dtype)) and zarr_structured_is_exact(dtype)

    @classmethod
    def from_native_dtype(cls, dtype: TBaseDType) -> Structured:
        if not cls._check_native_dtype(dtype):
            raise DataTypeValidationError(
                f"zarr's {cls._wraps.__name__} is not exact for {dtype!r}"
            )
        return cls._wraps.from_native_dtype(dtype)

    @classmethod
    def from_json(cls, data: DTypeJSON, *, zarr_format: Any) -> Structured:
        return cls._wraps.from_json(data, zarr_format=zarr_format)

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Structured:
        return cls._wraps._from_json_v2(data)

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Structured:
        return cls._wraps._from_json_v3(data)

    @classmethod
    def _from_json_resolved(cls, data: DTypeJSON, *, resolver: Any) -> Structured:
        """zarr >= 3.4 reads JSON through this (with nested data types resolved in context)."""
        resolve = cls._wraps._from_json_resolved  # type: ignore[attr-defined,unused-ignore]
        found: Structured = resolve(data, resolver=resolver)
        return found


@functools.cache
def gate_for(zarr_type: type[Structured]) -> type[Structured]:
    """The registry entry that stands for zarr's record type ``zarr_type``.

    A subclass of ``zarr_type`` that matches only the NumPy dtypes
    :func:`~npystore.faces.zarr.dtypes.structured.zarr_structured_is_exact` accepts and
    returns ``zarr_type``'s own instances (from NumPy dtypes and from JSON).

    Parameters
    ----------
    zarr_type : type
        zarr's ``Structured`` or ``Struct``.

    Returns
    -------
    type
        The gate (one per ``zarr_type``).
    """
    namespace = {"_wraps": zarr_type, "__module__": __name__, "__doc__": _Gate.__doc__}
    gate = type(f"Exact{zarr_type.__name__}Gate", (_Gate, zarr_type), namespace)
    return cast("type[Structured]", gate)


#: The gate for zarr's record type in this zarr (``Struct`` from zarr 3.2, else
#: ``Structured``): what :func:`register_dtypes` puts under its name.
ExactStructuredGate = gate_for(ZARR_RECORD)


def register_dtypes() -> None:
    """Register npystore's data types with zarr (idempotent; done on import of
    :mod:`npystore.faces.zarr.dtypes`).

    Adds :class:`NpyStructured` and :class:`NpyScalar` to zarr's data type registry and puts
    a gate (:func:`gate_for`) under every name zarr registered a record type of its own
    under, so matching a NumPy dtype (``zarr.create_array(..., dtype=...)``) picks npystore's
    type exactly where zarr's own would be wrong or missing.
    """
    # .contents, not .get(): this runs while zarr loads its entry points (one of them imports
    # this module), and get() would load them again from inside that loop
    for key, found in list(data_type_registry.contents.items()):
        zarr_type = getattr(found, "_wraps", found)
        if issubclass(zarr_type, Structured) and zarr_type.__module__.startswith("zarr."):
            data_type_registry.register(key, gate_for(zarr_type))
    data_type_registry.register(NpyStructured._zarr_v3_name, NpyStructured)
    data_type_registry.register(NpyScalar._zarr_v3_name, NpyScalar)


def zarr_dtype_for(dtype: np.dtype[Any]) -> AnyZDType:
    """The Zarr data type for the metadata of an array whose chunks are raw bytes of ``dtype``.

    zarr's own type where it reads those bytes exactly (with :func:`bytes_codec_for`), else
    :class:`NpyStructured` or :class:`NpyScalar`. Independent of the registry's state.

    Parameters
    ----------
    dtype : numpy.dtype
        The dtype of an ``.npy`` array.

    Returns
    -------
    ZDType
        Its ``to_native_dtype()`` is ``dtype``: exactly, or in another byte order for zarr's
        types, whose byte order belongs in the ``bytes`` codec.

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
        if zarr_structured_is_exact(dtype) and zarr_record_byte_order(dtype) is not None:
            return cast("AnyZDType", ZARR_RECORD.from_native_dtype(dtype))
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


def bytes_codec_for(dtype: np.dtype[Any], zdtype: AnyZDType) -> dict[str, Any]:
    """The ``bytes`` codec under which ``zdtype`` (from :func:`zarr_dtype_for`) reads raw
    bytes of ``dtype`` as they are.

    Parameters
    ----------
    dtype : numpy.dtype
        The dtype of the raw bytes.
    zdtype : ZDType
        ``zarr_dtype_for(dtype)``.

    Returns
    -------
    dict
        ``{"name": "bytes"}``, with ``"configuration": {"endian": ...}`` where zarr's type
        needs the byte order: its multi-byte scalars, and records of zarr 3.2 or later.
    """
    endian: str | None = None
    if getattr(zdtype, "endianness", None) is not None and dtype.itemsize > 1:
        endian = "big" if dtype.str[0] == ">" else "little"
    elif isinstance(zdtype, Structured) and ZARR_RECORD is not Structured:
        endian = zarr_record_byte_order(dtype) or None
    if endian is None:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": endian}}
