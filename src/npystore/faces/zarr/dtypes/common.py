"""What npystore's two data types share: exact dtype strings, the JSON configuration
envelope with its long double check, and fill values as base64 raw bytes
(:class:`RawScalars`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
import zarr.core.dtype.common
import zarr.errors
from zarr.core.common import ZarrFormat
from zarr.core.dtype.common import DTypeJSON
from zarr.core.dtype.wrapper import TBaseDType, TBaseScalar, ZDType

from npystore.errors import UnsupportedError


def _validation_error() -> type[ValueError]:
    """zarr's ``DataTypeValidationError``: in ``zarr.errors`` since zarr 3.2, whose
    ``zarr.core.dtype`` still has it with a deprecation warning; in ``zarr.core.dtype.common``
    in zarr 3.1."""
    found = getattr(zarr.errors, "DataTypeValidationError", None)
    if found is None:
        found = vars(zarr.core.dtype.common)["DataTypeValidationError"]
    return cast("type[ValueError]", found)


#: The error zarr's data type registry takes as "not this data type".
DataTypeValidationError = _validation_error()

__all__ = [
    "AnyZDType",
    "DataTypeValidationError",
    "RawScalars",
    "config_of",
    "has_longdouble",
    "leaf_from_str",
    "leaf_str",
    "longdouble_format",
]

AnyZDType: TypeAlias = ZDType[TBaseDType, TBaseScalar]


def longdouble_format() -> dict[str, int]:
    """This machine's ``np.longdouble``: ``{"itemsize", "nmant", "nexp"}``."""
    info = np.finfo(np.longdouble)
    return {"itemsize": np.dtype(np.longdouble).itemsize, "nmant": info.nmant, "nexp": info.nexp}


def has_longdouble(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` holds long doubles anywhere (fields and subarrays included)."""
    if dtype.subdtype is not None:
        return has_longdouble(dtype.subdtype[0])
    if dtype.names is not None:
        return any(has_longdouble(dtype.fields[n][0]) for n in dtype.names)  # type: ignore[index]
    return dtype.char in "gG"


def config_of(data: DTypeJSON, name: str, keys: set[str]) -> Mapping[str, object] | None:
    """The configuration of ``{"name": name, "configuration": {keys, "longdouble"?}}``.

    Parameters
    ----------
    data : JSON
        A data type's JSON from Zarr v3 metadata.
    name : str
        The data type name expected.
    keys : set of str
        The configuration keys expected (besides the optional ``"longdouble"``).

    Returns
    -------
    mapping or None
        The configuration, or ``None`` when ``data`` is not of that form.

    Raises
    ------
    UnsupportedError
        The recorded long double format is not this machine's.
    """
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
    if recorded is not None and recorded != longdouble_format():
        raise UnsupportedError(
            f"{name}: the array was written with long doubles of format {recorded}, "
            f"but here np.longdouble is {longdouble_format()}"
        )
    return config


def leaf_str(dtype: np.dtype[Any]) -> str:
    """The exact dtype string of a non-structured dtype of plain data."""
    text = dtype.str
    rebuilt = np.dtype(text)
    if dtype.hasobject or rebuilt != dtype or type(rebuilt) is not type(dtype):
        raise DataTypeValidationError(f"{dtype!r} has no exact dtype string of plain data")
    return text


def leaf_from_str(text: object) -> str:
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


class RawScalars:
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
