"""The ``.npy`` header as ``numpy.save`` writes it: the bytes before the array data.

What numpy's ``lib/format.py`` does (``_write_array_header``, ``_wrap_header``,
``_wrap_header_guess_version``), byte for byte:

- the header is ``{'descr': ..., 'fortran_order': ..., 'shape': ..., }``: the keys sorted,
  each ``'key': repr(value), ``, ``descr`` from :func:`numpy.lib.format.dtype_to_descr`;
- spaces are added so the header could later hold a longer growth axis (21 digits: the
  first axis, or the last in Fortran order; none for 0-d arrays);
- version 1.0 (uint16 length, latin-1) when the header fits, else 2.0 (uint32, latin-1),
  else 3.0 (uint32, UTF-8) when field names are not latin-1;
- spaces and a final newline pad magic + version + length + header to a multiple of 64.

Object arrays are refused (:func:`check_writable`): their data is a pickle, which is
``numpy.save``'s job. This module is pure: values in, bytes out.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any, Final

import numpy as np
from numpy.lib.format import dtype_to_descr

from npystore.errors import UnsupportedError
from npystore.formats.npy import MAGIC

__all__ = ["ARRAY_ALIGN", "check_writable", "header_bytes"]

#: numpy's ARRAY_ALIGN: the header is padded so the data starts at a multiple of it.
ARRAY_ALIGN: Final = 64
_GROWTH_AXIS_MAX_DIGITS: Final = 21
_VERSIONS: Final = (((1, 0), "<H", "latin1"), ((2, 0), "<I", "latin1"), ((3, 0), "<I", "utf8"))


class ObjectArrayError(UnsupportedError, TypeError):
    """An object array (or a dtype holding objects) was given to a writer."""


def check_writable(dtype: np.dtype[Any], source: str) -> None:
    """Refuse dtypes whose data is not raw bytes (objects, user dtypes).

    Raises
    ------
    UnsupportedError
        (also a :class:`TypeError`) for object arrays: ``numpy.save`` pickles them.
    """
    if dtype.hasobject or not type(dtype)._legacy:
        raise ObjectArrayError(
            f"{source}: cannot write an array of dtype {dtype}: it holds Python objects, "
            "which .npy stores as a pickle; npystore writes raw array data only "
            "(use numpy.save for object arrays)"
        )


def _wrap(header: str, version: tuple[int, int], fmt: str, encoding: str) -> bytes:
    data = header.encode(encoding)
    hlen = len(data) + 1
    prefix_len = len(MAGIC) + 2 + struct.calcsize(fmt)
    padlen = ARRAY_ALIGN - ((prefix_len + hlen) % ARRAY_ALIGN)
    length = struct.pack(fmt, hlen + padlen)  # struct.error: too long for this version
    return MAGIC + bytes(version) + length + data + b" " * padlen + b"\n"


def header_bytes(dtype: np.dtype[Any], shape: tuple[int, ...], fortran_order: bool) -> bytes:
    """The bytes ``numpy.save`` writes before the data of such an array.

    Parameters
    ----------
    dtype : numpy.dtype
        The array's dtype (byte order included).
    shape : tuple of int
        The array's shape.
    fortran_order : bool
        Whether the data follows in Fortran order (numpy: the array is Fortran- and not
        C-contiguous).

    Returns
    -------
    bytes
        Magic, version, header length, header; a multiple of 64 bytes long.

    Examples
    --------
    >>> import io, numpy as np
    >>> a = np.zeros((3, 4), ">f4")
    >>> f = io.BytesIO(); np.save(f, a)
    >>> f.getvalue()[:128] == header_bytes(a.dtype, a.shape, False)
    True
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # dtype metadata: numpy drops it too
        descr = dtype_to_descr(dtype)
    d = {"descr": descr, "fortran_order": bool(fortran_order), "shape": tuple(shape)}
    parts = ["{"]
    for key, value in sorted(d.items()):
        parts.append(f"'{key}': {value!r}, ")
    parts.append("}")
    header = "".join(parts)
    if shape:
        axis = shape[-1 if fortran_order else 0]
        header += " " * (_GROWTH_AXIS_MAX_DIGITS - len(repr(axis)))
    for version, fmt, encoding in _VERSIONS:
        try:
            return _wrap(header, version, fmt, encoding)
        except (struct.error, UnicodeEncodeError):
            continue
    raise UnsupportedError(f"an .npy header of {len(header)} characters is too long to write")
