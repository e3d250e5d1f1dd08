"""The ``.npy`` format: preamble, header dictionary and data offset, parsed from bytes.

Byte layout (what ``numpy.save`` writes, see ``numpy/lib/_format_impl.py``)::

    offset  size  field
    0       6     magic b"\\x93NUMPY"
    6       1     major version: 1, 2 or 3
    7       1     minor version: 0
    8       2|4   HEADER_LEN, little endian: uint16 for 1.0, uint32 for 2.0 and 3.0
    10|12   N     header: a Python dict literal, latin1 (1.0, 2.0) or utf8 (3.0), padded
                  with spaces and terminated by "\\n" so that the data is (usually) 64-byte
                  aligned; keys exactly 'descr', 'fortran_order', 'shape'
    10|12+N ...   data: prod(shape) * itemsize bytes in C or Fortran order, or a pickle
                  stream when the dtype holds Python objects

The header is parsed with :func:`npystore.formats._literal.parse_literal`, a small literal
parser with depth and size limits (:data:`MAX_HEADER_NESTING` brackets, as numpy's reader);
it is never evaluated as code. The text ``numpy.save`` itself writes for a dtype named by a
string (``{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }``, then spaces and
``\n``) is recognised by one regular expression first, giving the values the literal
parser gives, some 5 times faster (an archive of 50,000 small members has 50,000
headers); any other text goes to the literal parser. ``shape == ()`` is one element. A
header may be larger than 64 KiB (version 2.0 exists for that); the caller decides the size
limit with ``max_header_size``. Whether numpy can hold an array of the shape and dtype is
checked by the caller once the file's size is known (:func:`npystore.formats.shapes.check_shape`).

This module is pure: bytes in, frozen dataclasses out.
"""

from __future__ import annotations

import functools
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.formats._literal import parse_literal
from npystore.formats.npy_descr import descr_to_dtype

__all__ = [
    "DEFAULT_MAX_HEADER_SIZE",
    "MAGIC",
    "MAX_HEADER_NESTING",
    "MAX_NDIM",
    "NpyHeader",
    "NpyPreamble",
    "PREAMBLE_MAX_LEN",
    "is_npy",
    "parse_header",
    "parse_preamble",
    "pickle_refused",
]

MAGIC: Final = b"\x93NUMPY"
#: Longest preamble (magic + version + HEADER_LEN field), version 2.0 and 3.0.
PREAMBLE_MAX_LEN: Final = 12
#: Default limit on HEADER_LEN. numpy.load refuses more than 10,000 characters unless told
#: otherwise; npystore reads large structured headers (version 2.0) up to this bound.
DEFAULT_MAX_HEADER_SIZE: Final = 2**20
#: numpy's NPY_MAXDIMS.
MAX_NDIM: Final = 64
#: Most brackets a header may have open at once. numpy.load reads the header with
#: ast.literal_eval, whose parser allows 200: a structured dtype nested 99 deep (two brackets
#: a level, one for the dict), or 98 deep around a subarray or titled field.
MAX_HEADER_NESTING: Final = 200

_EXPECTED_KEYS: Final = frozenset({"descr", "fortran_order", "shape"})
_LENGTH_FORMAT: Final = {1: ("<H", "latin1"), 2: ("<I", "latin1"), 3: ("<I", "utf8")}


def is_npy(prefix: bytes) -> bool:
    """Return whether ``prefix`` (the first bytes of a file) starts with the ``.npy`` magic."""
    return prefix[: len(MAGIC)] == MAGIC


@dataclass(frozen=True, slots=True)
class NpyPreamble:
    """The fixed-size start of an ``.npy`` file.

    Attributes
    ----------
    version : tuple of int
        Format version, ``(1, 0)``, ``(2, 0)`` or ``(3, 0)``.
    header_start : int
        Byte offset of the header text (10 or 12).
    header_length : int
        ``HEADER_LEN``: the number of header bytes after the preamble.
    """

    version: tuple[int, int]
    header_start: int
    header_length: int

    @property
    def data_offset(self) -> int:
        """Byte offset of the first data byte (end of the header)."""
        return self.header_start + self.header_length

    @property
    def encoding(self) -> str:
        """Text encoding of the header for this version."""
        return _LENGTH_FORMAT[self.version[0]][1]


@dataclass(frozen=True, slots=True)
class NpyHeader:
    """What an ``.npy`` header says, plus where the data starts.

    Attributes
    ----------
    version : tuple of int
        Format version ``(major, minor)``.
    dtype : numpy.dtype
        The array's dtype exactly as ``numpy.load`` builds it, byte order included.
    shape : tuple of int
        The array's shape; ``()`` holds one element.
    fortran_order : bool
        Whether the data is stored in Fortran (column-major) order.
    data_offset : int
        Absolute byte offset of element 0 (or of the pickle stream for object arrays).
    """

    version: tuple[int, int]
    dtype: np.dtype[np.generic]
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int

    @property
    def order(self) -> str:
        """``"F"`` for Fortran order, ``"C"`` otherwise."""
        return "F" if self.fortran_order else "C"

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of raw data (not meaningful for object arrays, which are pickled)."""
        return self.size * self.dtype.itemsize

    @property
    def is_pickled(self) -> bool:
        """Whether the data is a pickle stream (the dtype holds Python objects)."""
        return bool(self.dtype.hasobject)


def parse_preamble(prefix: bytes, *, source: str = "<bytes>") -> NpyPreamble:
    """Parse the magic, version and header length from the first bytes of a file.

    Parameters
    ----------
    prefix : bytes
        At least the first 10 (version 1.0) or 12 (2.0, 3.0) bytes of the file; more is fine.
    source : str
        Name of the file for error messages (URL or member name).

    Returns
    -------
    NpyPreamble

    Raises
    ------
    FormatError
        Wrong magic or a file too short to hold the preamble.
    UnsupportedError
        A format version other than 1.0, 2.0 or 3.0.
    """
    if len(prefix) < len(MAGIC) + 2 or not is_npy(prefix):
        raise FormatError(
            f"{source}: not an .npy file: expected magic {MAGIC!r} at byte 0, "
            f"found {bytes(prefix[: len(MAGIC)])!r}"
        )
    major, minor = prefix[6], prefix[7]
    if major not in _LENGTH_FORMAT or minor != 0:
        raise UnsupportedError(
            f"{source}: .npy format version {major}.{minor} is not supported "
            "(expected 1.0, 2.0 or 3.0)"
        )
    fmt = _LENGTH_FORMAT[major][0]
    start = 8 + struct.calcsize(fmt)
    if len(prefix) < start:
        raise FormatError(
            f"{source}: truncated .npy preamble: {len(prefix)} bytes, expected {start}"
        )
    (length,) = struct.unpack_from(fmt, prefix, 8)
    return NpyPreamble(version=(major, minor), header_start=start, header_length=length)


_INT: Final = r"(?:0|[1-9][0-9]*)"
#: The header text numpy.save writes for a dtype named by a string: ``descr`` (no quote or
#: backslash: the literal's value is the text itself), ``fortran_order``, a shape of ints
#: (one with its comma, as a tuple of one needs) and the padding. What it matches, the
#: literal parser reads as the same three values.
_NUMPY_HEADER: Final = re.compile(
    r"\{'descr': '([^'\\\n]{1,64})', 'fortran_order': (True|False), "
    rf"'shape': \(((?:{_INT},|{_INT}(?:, {_INT})+,?)?)\), \}} *\n?"
)


@functools.lru_cache(maxsize=256)
def _string_dtype(descr: str) -> np.dtype[Any]:
    return descr_to_dtype(descr)


def _dtype_of(descr: str, source: str) -> np.dtype[Any]:
    """:func:`descr_to_dtype` of a descr string (few distinct ones in a process: kept;
    dtypes are immutable); a refusal is made again naming ``source``."""
    try:
        return _string_dtype(descr)
    except (FormatError, UnsupportedError):
        return descr_to_dtype(descr, source=source)  # raises, naming the file


def _header_values(text: str, source: str) -> tuple[object, object, object]:
    """``(descr, fortran_order, shape)`` of a header's text, as the literal parser gives
    them (numpy's own text by :data:`_NUMPY_HEADER`), not yet checked."""
    quick = _NUMPY_HEADER.fullmatch(text)
    if quick is not None:
        descr, fortran, shape = quick.groups()
        return descr, fortran == "True", tuple(int(n) for n in shape.replace(",", " ").split())
    try:
        value = parse_literal(text, max_depth=MAX_HEADER_NESTING)
    except FormatError as exc:
        raise FormatError(f"{source}: cannot parse .npy header: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError(
            f"{source}: .npy header is a {type(value).__name__}, expected a dict literal"
        )
    if set(value) != _EXPECTED_KEYS:
        raise FormatError(
            f"{source}: .npy header keys are {sorted(map(repr, value))}, "
            f"expected {sorted(_EXPECTED_KEYS)}"
        )
    return value["descr"], value["fortran_order"], value["shape"]


def parse_header(
    preamble: NpyPreamble,
    header: bytes,
    *,
    source: str = "<bytes>",
) -> NpyHeader:
    """Parse the header text that follows the preamble.

    Parameters
    ----------
    preamble : NpyPreamble
        The parsed preamble.
    header : bytes
        Exactly ``preamble.header_length`` bytes following the preamble.
    source : str
        Name of the file for error messages.

    Returns
    -------
    NpyHeader

    Raises
    ------
    FormatError
        The header is not valid text, not a dict literal with exactly the keys 'descr',
        'fortran_order' and 'shape', or holds invalid values.
    """
    if len(header) != preamble.header_length:
        raise FormatError(
            f"{source}: truncated .npy header: {len(header)} bytes, "
            f"expected {preamble.header_length}"
        )
    try:
        text = header.decode(preamble.encoding)
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{source}: .npy header is not valid {preamble.encoding}: {exc}"
        ) from None
    descr, fortran_order, shape = _header_values(text, source)
    if (
        not isinstance(shape, tuple)
        or not all(type(n) is int and n >= 0 for n in shape)
        or len(shape) > MAX_NDIM
    ):
        raise FormatError(
            f"{source}: .npy shape {_short_repr(shape)} is invalid: expected a tuple of at "
            f"most {MAX_NDIM} non-negative ints"
        )
    if not isinstance(fortran_order, bool):
        raise FormatError(
            f"{source}: .npy fortran_order is {_short_repr(fortran_order)}, expected a bool"
        )
    dtype = (
        _dtype_of(descr, source) if isinstance(descr, str) else descr_to_dtype(descr, source=source)
    )
    dims: tuple[int, ...] = tuple(n for n in shape if isinstance(n, int))
    if dtype.subdtype is not None:
        raise UnsupportedError(
            f"{source}: .npy descr {dtype.str!r} is a subarray dtype at the top level, which "
            "numpy never writes; expected a scalar or structured dtype"
        )
    return NpyHeader(
        version=preamble.version,
        dtype=dtype,
        shape=dims,
        fortran_order=fortran_order,
        data_offset=preamble.data_offset,
    )


def pickle_refused(source: str, dtype: np.dtype[Any]) -> UnsupportedError:
    """The error for an object array read without ``allow_pickle=True``."""
    return UnsupportedError(
        f"{source}: holds an object array ({dtype}), stored as a pickle; loading it can "
        "execute arbitrary code. Pass allow_pickle=True only if you trust the file."
    )


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
