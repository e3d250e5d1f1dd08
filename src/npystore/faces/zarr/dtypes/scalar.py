"""Non-structured dtypes: zarr's own data type where it is exact (:func:`zarr_scalar`), else
:class:`NpyScalar` (``longdouble``, ``clongdouble``, generic-unit datetime64/timedelta64).

``{"name": "npystore.scalar", "configuration": {"dtype": "<f16"}}``: the exact NumPy dtype
string, byte order kept (plus ``"longdouble"`` for long doubles).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, TypeGuard, cast, overload

import numpy as np
from zarr.core.common import NamedConfig, ZarrFormat
from zarr.core.dtype import ANY_DTYPE, Structured
from zarr.core.dtype.common import DTypeJSON, DTypeSpec_V2, HasItemSize
from zarr.core.dtype.wrapper import TBaseDType, ZDType

from npystore.faces.zarr.dtypes.common import (
    AnyZDType,
    DataTypeValidationError,
    RawScalars,
    config_of,
    has_longdouble,
    leaf_from_str,
    leaf_str,
    longdouble_format,
)

__all__ = ["NpyScalar", "zarr_scalar"]

NpyScalarJSON_V3 = NamedConfig[Literal["npystore.scalar"], Mapping[str, object]]
_ZARR_SCALAR_TYPES: tuple[type[AnyZDType], ...] = tuple(
    cast("type[AnyZDType]", c) for c in ANY_DTYPE if not issubclass(c, Structured)
)  # zarr's record types (Structured, and Struct from zarr 3.2) are structured.py's


@functools.cache
def zarr_scalar(dtype: np.dtype[Any], char: str) -> AnyZDType | None:
    """zarr's own data type for a non-structured ``dtype`` if it is exact, else ``None``.

    Exact: it rebuilds ``dtype`` from its JSON (up to byte order, which the ``bytes`` codec
    records) and its default fill value survives JSON. ``char`` is part of the cache key
    (``np.dtype("g") == np.dtype("d")`` where long double is double).

    Parameters
    ----------
    dtype : numpy.dtype
        A non-structured dtype.
    char : str
        ``dtype.char``.

    Returns
    -------
    ZDType or None
        The first of zarr's types that is exact for ``dtype``.
    """
    for cls in _ZARR_SCALAR_TYPES:
        try:
            zdtype = cls.from_native_dtype(dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                back = cls.from_json(zdtype.to_json(zarr_format=3), zarr_format=3)
                fill = zdtype.to_json_scalar(zdtype.default_scalar(), zarr_format=3)
                zdtype.from_json_scalar(fill, zarr_format=3)
        except (ValueError, TypeError):  # incl. DataTypeValidationError: not this type
            continue
        native, rebuilt = zdtype.to_native_dtype(), back.to_native_dtype()
        if (
            type(native) is type(dtype) is type(rebuilt)
            and native.str == dtype.str
            and rebuilt.newbyteorder("=") == dtype.newbyteorder("=")
        ):
            return zdtype
    return None


@dataclass(frozen=True, kw_only=True)
class NpyScalar(RawScalars, ZDType[np.dtype[np.generic], np.generic], HasItemSize):
    """A non-structured NumPy dtype zarr lacks, as its exact dtype string (byte order kept).

    Dtype matching gives it ``longdouble`` and ``clongdouble``;
    :func:`~npystore.faces.zarr.dtypes.zarr_dtype_for` also uses it for
    datetime64/timedelta64 with generic units.

    Attributes
    ----------
    descr : str
        The NumPy dtype string, e.g. ``"<f16"`` or ``">c32"``.
    """

    _zarr_v3_name: ClassVar[Literal["npystore.scalar"]] = "npystore.scalar"
    dtype_cls = np.dtypes.LongDoubleDType
    descr: str

    def __post_init__(self) -> None:
        leaf_from_str(self.descr)

    @classmethod
    def _check_native_dtype(cls, dtype: TBaseDType) -> TypeGuard[np.dtype[np.generic]]:
        """``longdouble`` and ``clongdouble``, which no zarr type claims."""
        return isinstance(dtype, np.dtypes.LongDoubleDType | np.dtypes.CLongDoubleDType)

    @classmethod
    def from_native_dtype(cls, dtype: TBaseDType) -> Self:
        """Wrap a ``longdouble`` or ``clongdouble`` dtype of either byte order."""
        if not cls._check_native_dtype(dtype):
            raise DataTypeValidationError(f"{cls.__name__} does not claim {dtype!r}")
        return cls(descr=leaf_str(dtype))

    def to_native_dtype(self) -> np.dtype[np.generic]:
        """The exact NumPy dtype."""
        return np.dtype(self.descr)

    @classmethod
    def _check_json_v3(cls, data: DTypeJSON) -> TypeGuard[NpyScalarJSON_V3]:
        return config_of(data, cls._zarr_v3_name, {"dtype"}) is not None

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        config = config_of(data, cls._zarr_v3_name, {"dtype"})
        if config is None:
            raise DataTypeValidationError(f"not an npystore.scalar data type: {data!r}")
        return cls(descr=leaf_from_str(config["dtype"]))

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Self:
        raise DataTypeValidationError("npystore.scalar is a Zarr v3 data type")

    @overload
    def to_json(self, zarr_format: Literal[2]) -> DTypeSpec_V2: ...
    @overload
    def to_json(self, zarr_format: Literal[3]) -> NpyScalarJSON_V3: ...
    def to_json(self, zarr_format: ZarrFormat) -> DTypeSpec_V2 | NpyScalarJSON_V3:
        """The v3 JSON (there is no v2 form: ``ValueError``)."""
        if zarr_format == 2:
            raise ValueError(f"npystore.scalar ({self.descr}) is a Zarr v3 data type")
        config: dict[str, object] = {"dtype": self.descr}
        if has_longdouble(self.to_native_dtype()):
            config["longdouble"] = longdouble_format()
        return {"name": self._zarr_v3_name, "configuration": config}
