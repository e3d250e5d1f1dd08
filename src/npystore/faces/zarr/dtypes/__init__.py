"""Zarr v3 data types for every dtype an ``.npy`` file can hold (object dtypes excepted).

zarr gets some NumPy dtypes wrong or lacks them, and which depends on its version: zarr 3.1's
``structured`` type writes fields without byte order and its ``bytes`` codec has no endianness
for records, so big-endian fields come back byte-swapped once reopened (zarr 3.2's ``struct``
type keeps their values); on every version subarray fields, titles, offsets, padding,
``align=True`` and zero-field records are lost or fail, ``longdouble``/``clongdouble`` have no
zarr type, and unit-less ``datetime64`` writes a fill value zarr cannot read back.

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
only where zarr's own v2 form is exact. Both JSON forms are the same under every zarr version,
so such arrays written under one reopen under another.

zarr tries every registered type on a NumPy dtype and wants exactly one match, so
:func:`register_dtypes` (run on import) also puts a gate under each name zarr registers a
record type of its own under (``structured``, ``struct``): it declines the records zarr gets
wrong or lacks and otherwise returns zarr's own instance, so importing npystore never changes
what zarr does with a dtype it stores exactly.

One family per module, as in zarr's ``zarr.core.dtype.npy``:

- :mod:`~npystore.faces.zarr.dtypes.structured`: :class:`NpyStructured` and its fields;
  which records zarr's own type gets right (:func:`zarr_structured_is_exact`), measured per
  zarr version.
- :mod:`~npystore.faces.zarr.dtypes.scalar`: :class:`NpyScalar`; which of zarr's own
  non-structured types are exact.
- :mod:`~npystore.faces.zarr.dtypes.registry`: :func:`register_dtypes`, the gates
  (:func:`gate_for`), :func:`zarr_dtype_for` and :func:`bytes_codec_for`.
- :mod:`~npystore.faces.zarr.dtypes.common`: exact dtype strings, the JSON configuration,
  fill values as raw bytes.
"""

from __future__ import annotations

from npystore.errors import missing_dependency

try:
    import zarr.core.dtype  # noqa: F401  (the modules below build on zarr's data type API)
except ImportError as exc:
    raise missing_dependency("zarr", "zarr", "npystore's Zarr data types", exc) from exc

from npystore.faces.zarr.dtypes.common import DataTypeValidationError
from npystore.faces.zarr.dtypes.registry import (
    ExactStructuredGate,
    bytes_codec_for,
    gate_for,
    register_dtypes,
    zarr_dtype_for,
)
from npystore.faces.zarr.dtypes.scalar import NpyScalar
from npystore.faces.zarr.dtypes.structured import (
    ZARR_RECORD,
    NpyField,
    NpyStructured,
    NpySubarray,
    zarr_structured_is_exact,
)

__all__ = [
    "ZARR_RECORD",
    "DataTypeValidationError",
    "ExactStructuredGate",
    "NpyField",
    "NpyScalar",
    "NpyStructured",
    "NpySubarray",
    "bytes_codec_for",
    "gate_for",
    "register_dtypes",
    "zarr_dtype_for",
    "zarr_structured_is_exact",
]

register_dtypes()
