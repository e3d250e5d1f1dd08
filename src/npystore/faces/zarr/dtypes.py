"""Zarr v3 data types for every dtype an ``.npy`` file can hold (object dtypes excepted).

zarr 3.1.6 gets some NumPy dtypes wrong or not at all: its ``structured`` type writes fields
without byte order (``"float64"``) and the ``bytes`` codec has no endianness for records, so
big-endian fields come back byte-swapped once reopened; subarray fields, titles, offsets,
padding, ``align=True`` and zero-field records are lost or fail; ``longdouble``/``clongdouble``
have no zarr type; unit-less ``datetime64`` writes a fill value zarr cannot read back.

Two data types fill the gaps; their chunks are the exact bytes of the exact NumPy dtype (no
``endianness``, so the ``bytes`` codec never swaps) and fill values are base64 raw bytes:

- :class:`NpyStructured`, ``{"name": "npystore.structured", "configuration": {"fields":
  [...], "itemsize": n, "aligned": bool}}``; a field is ``{"name", "title", "offset",
  "dtype"}`` and its dtype a NumPy dtype string with byte order (``">f8"``, ``"|S3"``,
  ``"<M8[ns]"``), a subarray ``{"base": ..., "shape": [...]}`` or a nested configuration;
- :class:`NpyScalar`, ``{"name": "npystore.scalar", "configuration": {"dtype": "<f16"}}``.

With long doubles the configuration also records ``"longdouble": {"itemsize", "nmant",
"nexp"}`` (``<f16`` is x87 extended on x86_64, IEEE quad on aarch64); opening the array where
that differs raises :class:`~npystore.errors.UnsupportedError`. Zarr v2 metadata is written
only where zarr's own v2 form is exact.

zarr tries every registered type on a NumPy dtype and wants exactly one match, so
:func:`register_dtypes` (run on import) also puts :class:`ExactStructuredGate` under zarr's
``structured`` key: it declines the records zarr gets wrong and otherwise returns zarr's own
:class:`~zarr.core.dtype.Structured`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeAlias, TypeGuard, cast, overload

import numpy as np

from npystore.errors import UnsupportedError, missing_dependency

try:
    from zarr.core.common import NamedConfig, ZarrFormat
    from zarr.core.dtype import ANY_DTYPE, DataTypeValidationError, Structured, data_type_registry
    from zarr.core.dtype.common import DTypeJSON, DTypeSpec_V2, HasItemSize
    from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar, ZDType
except ImportError as exc:
    raise missing_dependency("zarr", "zarr", "npystore's Zarr data types", exc) from exc

__all__ = [
    "ExactStructuredGate",
    "NpyField",
    "NpyScalar",
    "NpyStructured",
    "NpySubarray",
    "register_dtypes",
    "zarr_dtype_for",
    "zarr_structured_is_exact",
]

AnyZDType: TypeAlias = ZDType[TBaseDType, TBaseScalar]
NpyScalarJSON_V3 = NamedConfig[Literal["npystore.scalar"], Mapping[str, object]]
NpyStructuredJSON_V3 = NamedConfig[Literal["npystore.structured"], Mapping[str, object]]
FieldDType: TypeAlias = "str | NpySubarray | NpyStructured"
_ZARR_SCALAR_TYPES: tuple[type[AnyZDType], ...] = tuple(
    cast("type[AnyZDType]", c) for c in ANY_DTYPE if c is not Structured
)


def _longdouble_format() -> dict[str, int]:
    info = np.finfo(np.longdouble)
    return {"itemsize": np.dtype(np.longdouble).itemsize, "nmant": info.nmant, "nexp": info.nexp}


def _has_longdouble(dtype: np.dtype[Any]) -> bool:
    if dtype.subdtype is not None:
        return _has_longdouble(dtype.subdtype[0])
    if dtype.names is not None:
        return any(_has_longdouble(dtype.fields[n][0]) for n in dtype.names)  # type: ignore[index]
    return dtype.char in "gG"


def _config_of(data: DTypeJSON, name: str, keys: set[str]) -> Mapping[str, object] | None:
    """The configuration of ``{"name": name, "configuration": {keys, "longdouble"?}}``."""
    if not (isinstance(data, Mapping) and set(data) == {"name", "configuration"}):
        return None
    config = data["configuration"]
    if (
        data["name"] != name
        or not isinstance(config, Mapping)
        or set(config) - {"longdouble"} != keys
    ):
        return None
    recorded = config.get("longdouble")
    if recorded is not None and recorded != _longdouble_format():
        raise UnsupportedError(
            f"{name}: the array was written with long doubles of format {recorded}, "
            f"but here np.longdouble is {_longdouble_format()}"
        )
    return config


@functools.cache
def _zarr_scalar(dtype: np.dtype[Any], char: str) -> AnyZDType | None:
    """zarr's own data type for a non-structured ``dtype`` if it is exact, else ``None``.

    Exact: it rebuilds ``dtype`` from its JSON (up to byte order, which the ``bytes`` codec
    records) and its default fill value survives JSON. ``char`` is part of the cache key
    (``np.dtype("g") == np.dtype("d")`` where long double is double).
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


def zarr_structured_is_exact(dtype: np.dtype[Any]) -> bool:
    """Whether zarr's own ``structured`` type represents ``dtype`` exactly in v3 metadata.

    True for packed records (offsets in field order, no padding, no ``align=True``) without
    titles or subarrays, whose leaf fields zarr knows and are not big-endian, recursively.
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
        elif field.str[0] == ">" or _zarr_scalar(field, field.char) is None:
            return False
        offset += field.itemsize
    return offset == dtype.itemsize


def _leaf_str(dtype: np.dtype[Any]) -> str:
    """The exact dtype string of a non-structured dtype of plain data."""
    text = dtype.str
    rebuilt = np.dtype(text)
    if dtype.hasobject or rebuilt != dtype or type(rebuilt) is not type(dtype):
        raise DataTypeValidationError(f"{dtype!r} has no exact dtype string of plain data")
    return text


def _leaf_from_str(text: object) -> str:
    """``text`` if it is the dtype string of a non-structured dtype of plain data."""
    try:
        dtype = np.dtype(text) if isinstance(text, str) else None
    except (TypeError, ValueError, SyntaxError):
        dtype = None
    if dtype is None or dtype.names is not None or dtype.subdtype is not None or dtype.hasobject:
        raise DataTypeValidationError(f"invalid dtype string {text!r} (plain data expected)")
    return cast("str", text)


def _mask_padding(raw: bytes, dtype: np.dtype[Any]) -> bytes:
    """Zero the 6 or 2 padding bytes of x87 long doubles, which numpy leaves undefined."""
    part = dtype.itemsize // (2 if dtype.char == "G" else 1)
    if dtype.char not in "gG" or np.finfo(np.longdouble).nmant != 63 or part <= 10:
        return raw
    parts = np.frombuffer(raw, dtype=np.uint8).reshape(-1, part).copy()
    if dtype.str[0] == "<":
        parts[:, 10:] = 0
    else:
        parts[:, :-10] = 0
    return parts.tobytes()


class _RawScalars:
    """Scalar methods of npystore's types: a fill value is the scalar's raw bytes."""

    if TYPE_CHECKING:  # provided by the ZDType subclasses that mix this in

        def to_native_dtype(self) -> np.dtype[Any]: ...

    def _check_scalar(self, data: object) -> bool:
        return isinstance(data, np.generic | bytes | int | float | complex | tuple | list | str)

    def cast_scalar(self, data: object) -> Any:
        """Cast ``data`` (a scalar, tuple, the raw ``bytes`` of one item, or ``0``)."""
        dtype = self.to_native_dtype()
        if isinstance(data, np.generic) and data.dtype.str == dtype.str and data.dtype == dtype:
            return data
        if isinstance(data, bytes):
            if len(data) != dtype.itemsize:
                raise TypeError(f"{len(data)} bytes given for a {dtype.itemsize}-byte {dtype!r}")
            return np.frombuffer(bytearray(data), dtype=dtype)[0]
        if not self._check_scalar(data):
            raise TypeError(f"cannot cast {data!r} ({type(data).__name__}) to {dtype!r}")
        if isinstance(data, int) and data == 0:
            return self.default_scalar()
        try:
            return np.array(data, dtype=dtype)[()]
        except (ValueError, TypeError) as err:
            raise TypeError(f"cannot cast {data!r} to {dtype!r}: {err}") from err

    def default_scalar(self) -> Any:
        """Zeros of the dtype (``NaT`` for datetime64 and timedelta64)."""
        dtype = self.to_native_dtype()
        if dtype.kind in "mM":
            return dtype.type("NaT")
        return np.zeros((), dtype=dtype)[()]

    def from_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> Any:
        """The scalar whose raw bytes (in the dtype's byte order) ``data`` holds in base64."""
        if not isinstance(data, str):
            raise TypeError(f"invalid fill value {data!r}: expected a base64 string")
        try:
            raw = base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as err:
            raise TypeError(f"invalid fill value {data!r}: not base64") from err
        return self.cast_scalar(raw)

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> str:
        """The base64 of the raw bytes of ``data`` cast to the dtype."""
        dtype = self.to_native_dtype()
        value = self.cast_scalar(data)
        if isinstance(value, np.generic) and value.dtype.str == dtype.str:
            raw = value.tobytes()  # np.void: every byte, padding included
        else:
            raw = np.array(value, dtype=dtype).tobytes()
        return base64.b64encode(_mask_padding(raw, dtype)).decode("ascii")

    @property
    def item_size(self) -> int:
        """Bytes per element."""
        return self.to_native_dtype().itemsize


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
    return _leaf_str(dtype)


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
    return _leaf_from_str(data)


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
class NpyStructured(_RawScalars, ZDType[np.dtypes.VoidDType[int], np.void], HasItemSize):
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
        return _config_of(data, cls._zarr_v3_name, {"fields", "itemsize", "aligned"}) is not None

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        config = _config_of(data, cls._zarr_v3_name, {"fields", "itemsize", "aligned"})
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
                out = Structured.from_native_dtype(native).to_json(zarr_format=2)
                back = Structured.from_json(out, zarr_format=2).to_native_dtype()
            except (TypeError, ValueError) as err:
                raise ValueError(f"{native!r} has no Zarr v2 form; use Zarr v3 ({err})") from err
            if back != native or back.descr != native.descr or back.itemsize != native.itemsize:
                raise ValueError(f"{native!r} has no exact Zarr v2 form; use Zarr v3")
            return out
        config = self.configuration()
        if _has_longdouble(native):
            config["longdouble"] = _longdouble_format()
        return {"name": self._zarr_v3_name, "configuration": config}


@dataclass(frozen=True, kw_only=True)
class NpyScalar(_RawScalars, ZDType[np.dtype[np.generic], np.generic], HasItemSize):
    """A non-structured NumPy dtype zarr lacks, as its exact dtype string (byte order kept).

    Dtype matching gives it ``longdouble`` and ``clongdouble``; :func:`zarr_dtype_for` also
    uses it for datetime64/timedelta64 with generic units.

    Attributes
    ----------
    descr : str
        The NumPy dtype string, e.g. ``"<f16"`` or ``">c32"``.
    """

    _zarr_v3_name: ClassVar[Literal["npystore.scalar"]] = "npystore.scalar"
    dtype_cls = np.dtypes.LongDoubleDType
    descr: str

    def __post_init__(self) -> None:
        _leaf_from_str(self.descr)

    @classmethod
    def _check_native_dtype(cls, dtype: TBaseDType) -> TypeGuard[np.dtype[np.generic]]:
        """``longdouble`` and ``clongdouble``, which no zarr type claims."""
        return isinstance(dtype, np.dtypes.LongDoubleDType | np.dtypes.CLongDoubleDType)

    @classmethod
    def from_native_dtype(cls, dtype: TBaseDType) -> Self:
        """Wrap a ``longdouble`` or ``clongdouble`` dtype of either byte order."""
        if not cls._check_native_dtype(dtype):
            raise DataTypeValidationError(f"{cls.__name__} does not claim {dtype!r}")
        return cls(descr=_leaf_str(dtype))

    def to_native_dtype(self) -> np.dtype[np.generic]:
        """The exact NumPy dtype."""
        return np.dtype(self.descr)

    @classmethod
    def _check_json_v3(cls, data: DTypeJSON) -> TypeGuard[NpyScalarJSON_V3]:
        return _config_of(data, cls._zarr_v3_name, {"dtype"}) is not None

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        config = _config_of(data, cls._zarr_v3_name, {"dtype"})
        if config is None:
            raise DataTypeValidationError(f"not an npystore.scalar data type: {data!r}")
        return cls(descr=_leaf_from_str(config["dtype"]))

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
        if _has_longdouble(self.to_native_dtype()):
            config["longdouble"] = _longdouble_format()
        return {"name": self._zarr_v3_name, "configuration": config}


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
    """Register npystore's data types with zarr (idempotent; done on import of this module).

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
    found = _zarr_scalar(dtype, dtype.char)
    if found is not None:
        return found
    try:
        return cast("AnyZDType", NpyScalar(descr=_leaf_str(dtype)))
    except DataTypeValidationError as err:
        raise UnsupportedError(f"dtype {dtype!r} has no Zarr data type: {err}") from err


register_dtypes()
