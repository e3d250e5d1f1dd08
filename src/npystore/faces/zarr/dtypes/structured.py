"""Records: :class:`NpyStructured`, for the structured dtypes zarr's own record type gets
wrong or lacks (:func:`zarr_structured_is_exact` says which it gets right).

zarr's record type (:data:`ZARR_RECORD`) is ``Struct`` (``"struct"``) from zarr 3.2 on and
``Structured`` (``"structured"``) in zarr 3.1. What zarr alone makes of a record dtype
(``zarr.create_array(dtype=...)``, written, reopened in a new process), measured on zarr 3.1.6
and 3.4.2 (``tests/test_zarr_dtypes.py`` checks it on the zarr installed):

- packed records of little-endian fields zarr knows (nested too): exact on both;
- a big-endian field: 3.1 returns byte-swapped values; 3.4 exact values in native byte order,
  as for zarr's other types (its ``bytes`` codec records the byte order);
- explicit offsets, padding, ``align=True``: packed (offsets and itemsize change) on both;
- titles, subarray fields, no fields, long double fields: fail on both (3.4 refuses titles
  and subarrays with a ``ValueError``);
- a unit-less ``datetime64`` field, a raw bytes (``V``) field: fail on 3.1 (their fill
  value), exact on 3.4.

npystore claims the records zarr gets wrong or lacks, on the zarr installed, and no others.

``{"name": "npystore.structured", "configuration": {"fields": [...], "itemsize": n,
"aligned": bool}}``; a field is ``{"name", "title", "offset", "dtype"}`` and its dtype a
NumPy dtype string with byte order (``">f8"``, ``"|S3"``, ``"<M8[ns]"``), a subarray
``{"base": ..., "shape": [...]}`` (:class:`NpySubarray`) or a nested configuration. Chunks
hold the raw bytes of the exact NumPy dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, TypeAlias, TypeGuard, cast, overload

import numpy as np
import zarr.core.dtype
from zarr.core.common import NamedConfig, ZarrFormat
from zarr.core.dtype import Structured
from zarr.core.dtype.common import DTypeJSON, DTypeSpec_V2, HasItemSize
from zarr.core.dtype.wrapper import TBaseDType, ZDType

from npystore.faces.zarr.dtypes.common import (
    DataTypeValidationError,
    RawScalars,
    config_of,
    has_longdouble,
    leaf_from_str,
    leaf_str,
    longdouble_format,
)
from npystore.faces.zarr.dtypes.scalar import zarr_scalar

__all__ = [
    "ZARR_RECORD",
    "NpyField",
    "NpyStructured",
    "NpySubarray",
    "zarr_record_byte_order",
    "zarr_structured_is_exact",
]

#: zarr's own data type for records: ``Struct`` (zarr >= 3.2), else ``Structured``.
ZARR_RECORD: type[Structured] = getattr(zarr.core.dtype, "Struct", Structured)
#: Whether zarr keeps the byte order of record fields: ``Struct``'s ``bytes`` codec records it
#: (``endian``) and converts on write; zarr 3.1's ``Structured`` drops it (values come back
#: byte-swapped once reopened).
_KEEPS_FIELD_BYTE_ORDER = ZARR_RECORD is not Structured

NpyStructuredJSON_V3 = NamedConfig[Literal["npystore.structured"], Mapping[str, object]]
FieldDType: TypeAlias = "str | NpySubarray | NpyStructured"


def zarr_structured_is_exact(dtype: np.dtype[Any]) -> bool:
    """Whether zarr's own record type (:data:`ZARR_RECORD`) stores ``dtype`` exactly.

    True for packed records (offsets in field order, no padding, no ``align=True``) without
    titles or subarrays, whose leaf fields zarr's own types hold exactly, recursively; with
    zarr 3.1's ``Structured`` also no big-endian or raw bytes (``V``) field. As for zarr's
    other types, reopened arrays have native byte order.
    """
    if not dtype.names or dtype.isalignedstruct or len(dtype.fields) != len(dtype.names):  # type: ignore[arg-type]
        return False
    offset = 0
    for name in dtype.names:
        field, field_offset = dtype.fields[name][:2]  # type: ignore[index]
        if field_offset != offset or field.subdtype is not None:
            return False
        if field.names is not None:
            if not zarr_structured_is_exact(field):
                return False
        elif zarr_scalar(field, field.char) is None or (
            # zarr 3.1's Structured: big-endian fields lose their byte order, and a raw bytes
            # field (V) fails its default fill value
            not _KEEPS_FIELD_BYTE_ORDER and (field.str[0] == ">" or field.kind == "V")
        ):
            return False
        offset += field.itemsize
    return offset == dtype.itemsize


def _leaf_orders(dtype: np.dtype[Any]) -> set[str]:
    if dtype.names is not None:
        return set().union(*(_leaf_orders(dtype.fields[n][0]) for n in dtype.names))  # type: ignore[index]
    return {dtype.str[0]} if dtype.str[0] in "<>" else set()


def zarr_record_byte_order(dtype: np.dtype[Any]) -> str | None:
    """The ``bytes`` codec's ``endian`` under which zarr's record type reads the raw bytes of
    ``dtype`` (a record :func:`zarr_structured_is_exact` accepts) as they are.

    Returns
    -------
    str or None
        ``"little"`` or ``"big"``; ``""`` when no field has a byte order (the codec needs
        none); ``None`` when zarr cannot read them as they are: fields of both byte orders,
        or big-endian fields with zarr 3.1 (whose ``bytes`` codec ignores ``endian`` for
        records).
    """
    orders = _leaf_orders(dtype)
    if not orders:
        return ""
    if orders == {"<"}:
        return "little"
    if orders == {">"} and _KEEPS_FIELD_BYTE_ORDER:
        return "big"
    return None


@dataclass(frozen=True, kw_only=True)
class NpySubarray:
    """A subarray field: ``shape`` elements of ``base`` (a dtype string or a record)."""

    base: str | NpyStructured
    shape: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class NpyField:
    """A field of a record; ``dtype`` is a dtype string, a subarray or a nested record."""

    name: str
    title: str | None
    offset: int
    dtype: FieldDType


def _describe(dtype: np.dtype[Any]) -> FieldDType:
    if dtype.subdtype is not None:
        base = _describe(dtype.subdtype[0])
        assert not isinstance(base, NpySubarray)  # numpy folds nested subarrays
        return NpySubarray(base=base, shape=tuple(dtype.subdtype[1]))
    if dtype.names is not None:
        return NpyStructured.from_numpy(dtype)
    return leaf_str(dtype)


def _native(spec: FieldDType) -> np.dtype[Any]:
    if isinstance(spec, str):
        return np.dtype(spec)
    if isinstance(spec, NpySubarray):
        return np.dtype((_native(spec.base), spec.shape))
    return spec.to_native_dtype()


def _spec_to_json(spec: FieldDType) -> object:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, NpySubarray):
        return {"base": _spec_to_json(spec.base), "shape": list(spec.shape)}
    return spec.configuration()


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _spec_from_json(data: object) -> FieldDType:
    if isinstance(data, Mapping) and set(data) == {"base", "shape"}:
        base, shape = _spec_from_json(data["base"]), data["shape"]
        if isinstance(base, NpySubarray) or not isinstance(shape, list):
            raise DataTypeValidationError(f"invalid subarray {data!r}")
        if not all(_is_count(n) for n in shape):
            raise DataTypeValidationError(f"invalid subarray shape {shape!r}")
        return NpySubarray(base=base, shape=tuple(shape))
    if isinstance(data, Mapping) and set(data) == {"fields", "itemsize", "aligned"}:
        return NpyStructured.from_configuration(data)
    return leaf_from_str(data)


def _field_from_json(data: object) -> NpyField:
    if isinstance(data, Mapping) and set(data) == {"name", "title", "offset", "dtype"}:
        name, title, offset = data["name"], data["title"], data["offset"]
        if isinstance(name, str) and isinstance(title, str | None) and _is_count(offset):
            return NpyField(
                name=name, title=title, offset=offset, dtype=_spec_from_json(data["dtype"])
            )
    raise DataTypeValidationError(f"invalid npystore.structured field {data!r}")


@functools.lru_cache(maxsize=1024)
def _build_structured(record: NpyStructured) -> np.dtype[Any]:
    spec: dict[str, Any] = {
        "names": [f.name for f in record.fields],
        "formats": [_native(f.dtype) for f in record.fields],
        "offsets": [f.offset for f in record.fields],
        "itemsize": record.itemsize,
        "aligned": record.aligned,
    }
    if any(f.title is not None for f in record.fields):
        spec["titles"] = [f.title for f in record.fields]
    built: np.dtype[Any] = np.dtype(cast("Any", spec))
    return built


@dataclass(frozen=True, kw_only=True)
class NpyStructured(RawScalars, ZDType[np.dtypes.VoidDType[int], np.void], HasItemSize):
    """A NumPy structured dtype, exactly: per-field byte order, titles, offsets, padding,
    alignment, subarrays and nested records. Chunks hold the raw bytes of that dtype.

    Attributes
    ----------
    fields : tuple of NpyField
        The fields in order (possibly none).
    itemsize : int
        Bytes per record, padding included.
    aligned : bool
        Whether numpy flags the dtype as an aligned struct (``align=True``).
    """

    _zarr_v3_name: ClassVar[Literal["npystore.structured"]] = "npystore.structured"
    dtype_cls = np.dtypes.VoidDType  # type: ignore[assignment]
    fields: tuple[NpyField, ...]
    itemsize: int
    aligned: bool = False

    @classmethod
    def from_numpy(cls, dtype: np.dtype[Any]) -> Self:
        """Describe any record ``dtype`` of plain data with string titles, exact or not."""
        if dtype.names is None or dtype.hasobject:
            raise DataTypeValidationError(f"{dtype!r} is not a structured dtype of plain data")
        fields = []
        for name in dtype.names:
            entry: tuple[Any, ...] = dtype.fields[name]  # type: ignore[index]
            title = entry[2] if len(entry) > 2 else None
            if not isinstance(title, str | None):
                raise DataTypeValidationError(f"field {name!r} has a non-string title {title!r}")
            fields.append(
                NpyField(name=name, title=title, offset=entry[1], dtype=_describe(entry[0]))
            )
        return cls(fields=tuple(fields), itemsize=dtype.itemsize, aligned=dtype.isalignedstruct)

    @classmethod
    def _check_native_dtype(cls, dtype: TBaseDType) -> TypeGuard[np.dtypes.VoidDType[int]]:
        """Records of plain data that zarr's own ``structured`` type gets wrong."""
        return (
            isinstance(dtype, np.dtypes.VoidDType)
            and dtype.names is not None
            and not dtype.hasobject
            and not zarr_structured_is_exact(dtype)
        )

    @classmethod
    def from_native_dtype(cls, dtype: TBaseDType) -> Self:
        """Wrap ``dtype`` if zarr's own type cannot (see :func:`zarr_structured_is_exact`)."""
        if not cls._check_native_dtype(dtype):
            raise DataTypeValidationError(f"{cls.__name__} does not claim {dtype!r}")
        return cls.from_numpy(dtype)

    def to_native_dtype(self) -> np.dtypes.VoidDType[int]:
        """The exact NumPy dtype."""
        return cast("np.dtypes.VoidDType[int]", _build_structured(self))

    def configuration(self) -> dict[str, object]:
        """The JSON description: ``{"fields": [...], "itemsize": n, "aligned": bool}``."""
        fields = [
            {"name": f.name, "title": f.title, "offset": f.offset, "dtype": _spec_to_json(f.dtype)}
            for f in self.fields
        ]
        return {"fields": fields, "itemsize": self.itemsize, "aligned": self.aligned}

    @classmethod
    def from_configuration(cls, config: Mapping[str, object]) -> Self:
        """Inverse of :meth:`configuration`; validated by building the NumPy dtype."""
        fields, itemsize, aligned = config["fields"], config["itemsize"], config["aligned"]
        if not (isinstance(fields, list) and _is_count(itemsize) and isinstance(aligned, bool)):
            raise DataTypeValidationError(f"invalid npystore.structured configuration {config!r}")
        record = cls(
            fields=tuple(map(_field_from_json, fields)), itemsize=itemsize, aligned=aligned
        )
        try:
            record.to_native_dtype()
        except (TypeError, ValueError) as err:
            raise DataTypeValidationError(f"invalid npystore.structured: {err}") from err
        return record

    @classmethod
    def _check_json_v3(cls, data: DTypeJSON) -> TypeGuard[NpyStructuredJSON_V3]:
        return config_of(data, cls._zarr_v3_name, {"fields", "itemsize", "aligned"}) is not None

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        config = config_of(data, cls._zarr_v3_name, {"fields", "itemsize", "aligned"})
        if config is None:
            raise DataTypeValidationError(f"not an npystore.structured data type: {data!r}")
        return cls.from_configuration(config)

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Self:
        raise DataTypeValidationError("npystore.structured is a Zarr v3 data type")

    @overload
    def to_json(self, zarr_format: Literal[2]) -> DTypeSpec_V2: ...
    @overload
    def to_json(self, zarr_format: Literal[3]) -> NpyStructuredJSON_V3: ...
    def to_json(self, zarr_format: ZarrFormat) -> DTypeSpec_V2 | NpyStructuredJSON_V3:
        """The v3 JSON; for v2, zarr's own form if that is exact (else ``ValueError``)."""
        native = self.to_native_dtype()
        if zarr_format == 2:
            try:
                out = ZARR_RECORD.from_native_dtype(native).to_json(zarr_format=2)
                back = ZARR_RECORD.from_json(out, zarr_format=2).to_native_dtype()
            except (TypeError, ValueError) as err:
                raise ValueError(f"{native!r} has no Zarr v2 form; use Zarr v3 ({err})") from err
            if back != native or back.descr != native.descr or back.itemsize != native.itemsize:
                raise ValueError(f"{native!r} has no exact Zarr v2 form; use Zarr v3")
            return out
        config = self.configuration()
        if has_longdouble(native):
            config["longdouble"] = longdouble_format()
        return {"name": self._zarr_v3_name, "configuration": config}
