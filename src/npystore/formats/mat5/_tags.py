"""The data-element layer of a Level-5 MAT-file: type and class codes, limits, tags.

Everything the other modules share: the codes and tables of the format (see the package
docstring), :class:`DataRef` (where an element's data lies), and the reading of tags from
the bytes of one address space (:class:`_Reader`, :func:`_element`).
"""

from __future__ import annotations

import bisect
import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError
from npystore.formats.need import NeedMoreBytes

#: Size of the Level-5 file header.
HEADER_SIZE: Final = 128
#: Size of a full data element tag (and of a whole small data element).
TAG_SIZE: Final = 8
#: Most dimensions a variable may have (numpy's limit).
MAX_NDIM: Final = 64
#: Most elements a variable may have: MATLAB's own limit, 2**48 - 1.
MAX_NUMEL: Final = 2**48 - 1
#: Default and largest allowed ``max_depth`` of :func:`parse_variable`.
DEFAULT_MAX_DEPTH: Final = 64
MAX_DEPTH_LIMIT: Final = 256
#: Most fields a struct may have (each becomes a numpy field and a Python str).
MAX_FIELDS: Final = 1 << 16
#: Most characters or strings a char array may decode to without data bytes behind them:
#: 0 bytes of data read as blanks (as scipy does), or rows of length 0 (dims (N, 0)); and
#: most elements of a struct array without fields.
MAX_UNBACKED: Final = 1 << 20

MI_INT8, MI_UINT8, MI_INT16, MI_UINT16, MI_INT32, MI_UINT32 = 1, 2, 3, 4, 5, 6
MI_SINGLE, MI_DOUBLE, MI_INT64, MI_UINT64 = 7, 9, 12, 13
MI_MATRIX: Final = 14
MI_COMPRESSED: Final = 15
MI_UTF8, MI_UTF16, MI_UTF32 = 16, 17, 18

_MI_NAMES: Final = {
    1: "miINT8", 2: "miUINT8", 3: "miINT16", 4: "miUINT16", 5: "miINT32", 6: "miUINT32",
    7: "miSINGLE", 9: "miDOUBLE", 12: "miINT64", 13: "miUINT64", 14: "miMATRIX",
    15: "miCOMPRESSED", 16: "miUTF8", 17: "miUTF16", 18: "miUTF32",
}  # fmt: skip
#: Numeric data types and the dtype (without byte order) of their values.
_MI_DTYPES: Final = {
    1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8",
}  # fmt: skip
_MI_INTEGERS: Final = frozenset({1, 2, 3, 4, 5, 6, 12, 13})
#: How char data of each type is read: as bytes, UTF-16 code units or code points.
_CHAR_ENCODINGS: Final = {
    1: ("latin-1", "u1"), 2: ("latin-1", "u1"), 3: ("utf-16", "u2"), 4: ("utf-16", "u2"),
    17: ("utf-16", "u2"), 5: ("utf-32", "u4"), 6: ("utf-32", "u4"), 18: ("utf-32", "u4"),
    16: ("utf-8", "u1"),
}  # fmt: skip
_NAME_TYPES: Final = frozenset({MI_INT8, MI_UINT8, MI_UTF8})

CELL, STRUCT, OBJECT, CHAR, SPARSE = 1, 2, 3, 4, 5
FUNCTION, OPAQUE = 16, 17
#: MATLAB class names of the array classes (array flags, low byte).
CLASS_NAMES: Final = {
    1: "cell", 2: "struct", 3: "object", 4: "char", 5: "sparse", 6: "double", 7: "single",
    8: "int8", 9: "uint8", 10: "int16", 11: "uint16", 12: "int32", 13: "uint32",
    14: "int64", 15: "uint64", 16: "function_handle", 17: "opaque",
}  # fmt: skip
#: Numeric classes and the dtype (without byte order) MATLAB gives their values.
_CLASS_DTYPES: Final = {
    6: "f8", 7: "f4", 8: "i1", 9: "u1", 10: "i2", 11: "u2", 12: "i4", 13: "u4", 14: "i8",
    15: "u8",
}  # fmt: skip
_CLASS_CODES: Final = {name: code for code, name in CLASS_NAMES.items() if code in _CLASS_DTYPES}
_F_LOGICAL, _F_GLOBAL, _F_COMPLEX = 0x200, 0x400, 0x800

_PAIR: Final = {"<": struct.Struct("<II"), ">": struct.Struct(">II")}

_Bytes: TypeAlias = bytes | bytearray | memoryview


@functools.cache
def _dt(order: str, code: str) -> np.dtype[Any]:
    return np.dtype(order + code)


def _class_name(code: int, is_logical: bool) -> str:
    """MATLAB's ``class()`` of a matrix that is not an object (an object's class is named in
    the file): numeric and sparse arrays are ``"logical"`` with the logical flag, sparse ones
    ``"double"`` without it."""
    if code in _CLASS_DTYPES or code == SPARSE:
        if is_logical:
            return "logical"
        return "double" if code == SPARSE else CLASS_NAMES[code]
    return CLASS_NAMES.get(code, f"<class {code}>")


def _mi(code: int) -> str:
    return f"{_MI_NAMES.get(code, 'an unknown type')} ({code})"


def _pair(byte_order: str) -> struct.Struct:
    if byte_order not in _PAIR:
        raise ValueError(f"byte_order must be '<' or '>', got {byte_order!r}")
    return _PAIR[byte_order]


# ---------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class DataRef:
    """Where values lie: a range of the file, or of an inflated miCOMPRESSED buffer.

    Attributes
    ----------
    offset : int
        Offset of the first value byte (absolute in the file, or in the inflated buffer).
    nbytes : int
        Number of bytes, a multiple of ``stored_dtype.itemsize``.
    stored_dtype : numpy.dtype
        The values as stored, byte order included (for chars: unsigned code units).
    data_type : int
        The data element type code (miINT8 = 1 ... miUTF32 = 18).
    """

    offset: int
    nbytes: int
    stored_dtype: np.dtype[Any]
    data_type: int

    @property
    def count(self) -> int:
        """Number of stored values."""
        return self.nbytes // self.stored_dtype.itemsize

    @property
    def end(self) -> int:
        """Offset just past the last value byte."""
        return self.offset + self.nbytes

    def view(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[Any]:
        """The stored values, read-only, without a copy.

        Parameters
        ----------
        buffer : bytes
            Bytes holding the range; ``buffer[0]`` is at offset ``base``.
        base : int
            Offset of ``buffer[0]`` in the address space of ``offset``.

        Returns
        -------
        numpy.ndarray
            1-D, ``count`` values of ``stored_dtype``.

        Raises
        ------
        NeedMoreBytes
            The range is not inside ``buffer``.
        """
        start = self.offset - base
        if start < 0 or start + self.nbytes > len(buffer):
            raise NeedMoreBytes(
                f"the values at offset {self.offset} ({self.nbytes} bytes) are not inside the "
                f"{len(buffer)} bytes given from offset {base}",
                offset=self.offset,
                needed=self.nbytes,
            )
        return np.frombuffer(buffer, self.stored_dtype, self.count, start)


# ---------------------------------------------------------------- reading tags


class _Reader:
    """Bytes of one address space (the file, or an inflated buffer), given as segments."""

    __slots__ = (
        "_ends",
        "_segments",
        "_starts",
        "decode_below",
        "inflated",
        "memo",
        "order",
        "pair",
        "root_offset",
        "source",
    )

    def __init__(
        self,
        element: _Bytes,
        offset: int,
        extra: Mapping[int, _Bytes] | None,
        byte_order: str,
        source: str,
        inflated: bool,
    ) -> None:
        self.pair = _pair(byte_order)
        self.order = byte_order  # "<" or ">", checked by _pair
        self.source = source
        self.inflated = inflated
        self.root_offset = offset
        segments = [(offset, memoryview(element).cast("B"))]
        segments += [(start, memoryview(buf).cast("B")) for start, buf in (extra or {}).items()]
        segments.sort(key=lambda item: item[0])
        self._segments = segments
        self._starts = [start for start, _ in segments]
        self._ends = [start + len(buf) for start, buf in segments]
        #: Numeric leaves inside containers of at most this many bytes are decoded.
        self.decode_below = 0
        #: Small elements decoded so far, by their bytes (identical ones share a value).
        self.memo: dict[bytes, Any] = {}

    def segment(self, start: int, stop: int) -> tuple[memoryview, int] | None:
        """One segment holding bytes ``[start, stop)`` and its offset, or None."""
        i = bisect.bisect_right(self._starts, start) - 1
        while i >= 0:
            if self._ends[i] >= stop:
                return self._segments[i][1], self._starts[i]
            i -= 1
        return None

    def what(self, pos: int) -> str:
        """How to name the matrix at ``pos`` before its name is known."""
        return f"matrix at offset {pos}" + (" of the inflated data" if self.inflated else "")

    def take(self, offset: int, n: int) -> memoryview:
        """``n`` bytes at ``offset``, from a segment that holds them all."""
        i = bisect.bisect_right(self._starts, offset) - 1
        while i >= 0:
            if self._ends[i] >= offset + n:
                start, buf = self._segments[i]
                return buf[offset - start : offset - start + n]
            i -= 1
        raise NeedMoreBytes(
            f"{self.source}: need {n} bytes at offset {offset}"
            + (" of the inflated data" if self.inflated else ""),
            offset=offset,
            needed=n,
        )

    def root(self) -> tuple[int, int]:
        """Check the variable's tag; return the offset and end of its miMATRIX."""
        pos = self.root_offset
        mdtype, nbytes = self.pair.unpack(self.take(pos, TAG_SIZE))
        if mdtype == MI_COMPRESSED:
            hint = (
                " inside compressed data (nested compression)"
                if self.inflated
                else ": inflate its data and pass that with inflated=True"
            )
            raise FormatError(f"{self.source}: the element at offset {pos} is miCOMPRESSED{hint}")
        if mdtype != MI_MATRIX:
            raise FormatError(
                f"{self.source}: the element at offset {pos} has data type {_mi(mdtype)}, "
                "expected miMATRIX (14)"
            )
        return pos, pos + TAG_SIZE + nbytes


class _Elem(NamedTuple):
    """A subelement: type, offset and size of its data, offset of the next subelement."""

    mdtype: int
    data: int
    nbytes: int
    next: int


def _element(r: _Reader, pos: int, end: int, where: str, what: str) -> _Elem:
    """Read the tag of the subelement at ``pos``, which must lie before ``end``."""
    if pos + TAG_SIZE > end:
        raise FormatError(
            f"{where}: the {what} at offset {pos} needs an {TAG_SIZE}-byte tag, "
            f"{max(0, end - pos)} bytes are left in the matrix"
        )
    word, nbytes = r.pair.unpack(r.take(pos, TAG_SIZE))
    if word >> 16:
        nbytes, mdtype = word >> 16, word & 0xFFFF
        if nbytes > 4:
            raise FormatError(
                f"{where}: the {what} at offset {pos} is a small data element of {nbytes} "
                "bytes, expected at most 4"
            )
        return _Elem(mdtype, pos + 4, nbytes, pos + TAG_SIZE)
    if nbytes > end - pos - TAG_SIZE:
        raise FormatError(
            f"{where}: the {what} at offset {pos} ({_mi(word)}) claims {nbytes} bytes, "
            f"{end - pos - TAG_SIZE} are left in the matrix"
        )
    return _Elem(word, pos + TAG_SIZE, nbytes, min(pos + TAG_SIZE + nbytes + (-nbytes % 8), end))
