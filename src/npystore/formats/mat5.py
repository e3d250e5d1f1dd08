"""MATLAB Level-5 MAT-files (``save -v6``, ``-v7``), parsed from byte ranges into descriptions.

Reading order (what the IO layer does; every step gets only the bytes it names)::

    1. prefix = file[0:min(128, size)]                     -> parse_header (also spots v4
                                                              files: see mat4.py)
    2. windows of file[data_start:], e.g. 64 KiB at a time -> scan_elements: one
       VariableEntry per top-level element, from its 8-byte tag alone; it returns the
       offset of the next tag it could not see, read a window there and call it again
    3. per variable, uncompressed: file[entry.offset:entry.offset + n] for some n
                                                           -> parse_matrix_header (name,
                                                              class, dims: a listing), or
                                                              parse_variable (the tree)
       per variable, miCOMPRESSED: inflate file[entry.data_offset:entry.end] (a zlib stream,
       wbits 15) and pass the inflated bytes with ``inflated=True``; offsets in the result
       are then offsets into the inflated buffer
    4. per numeric leaf: the DataRef ranges (the values, never read before this step)
                                                           -> node.decode / node.convert
    A NeedMoreBytes from step 3 names a range inside the element (tags and small metadata
    only, never numeric data): read it and retry with it in ``extra``. It is not an error.

Byte layout (MathWorks, "MAT-File Format", Level 5; integers in the file's byte order)::

    File header, 128 bytes
    0    116  descriptive text, "MATLAB 5.0 MAT-file, Platform: ..., Created on: ..."; its
              first 4 bytes are never 0 (a zero there marks a Level-4 file)
    116  8    subsystem data offset: 0 or all spaces when there is none
    124  2    version: 0x0100 (0x0200 is v7.3, an HDF5 file with a 512-byte user block)
    126  2    endian indicator: b"IM" little endian, b"MI" big endian

    Data element: one after another from offset 128 to the end of the file
    0    4    data type (table below)           small data element (SDE), when the upper
    4    4    number of bytes n                 16 bits of the first word are not zero:
    8    n    data, then zero padding to a      0 2+2 type and n <= 4 (one uint32 word in
              multiple of 8 (not at top level)  the file's byte order: n << 16 | type)
                                                4 4  data, zero padded

    Data types: 1 miINT8, 2 miUINT8, 3 miINT16, 4 miUINT16, 5 miINT32, 6 miUINT32,
    7 miSINGLE, 9 miDOUBLE, 12 miINT64, 13 miUINT64, 14 miMATRIX, 15 miCOMPRESSED,
    16 miUTF8, 17 miUTF16, 18 miUTF32.

    miCOMPRESSED (15), top level only: n bytes of zlib stream (with zlib header) inflating
    to exactly one data element, normally a miMATRIX. Top-level elements are not padded
    (MATLAB and scipy write the next tag right after n bytes).

    miMATRIX (14): a sequence of subelements, each a data element as above
    array flags  miUINT32, 8 bytes: word 0 = class | flags << 8 (bit 9 logical, bit 10
                 global, bit 11 complex; MATLAB also sets bit 12 on sparse arrays);
                 word 1 = nzmax (sparse only)
    dimensions   miINT32, >= 2 values (column-major MATLAB dims)
    array name   miINT8 (ASCII; scipy tolerates miUTF8): "" below the top level
    then by class:
      6..15 numeric  real part (any numeric type: MATLAB stores values in the smallest
                     type that holds them, a double array of small integers as miUINT8),
                     imaginary part if complex; logical arrays are class uint8 + bit 9
      4  char        one element: miUTF8 (MATLAB: ASCII only), miUTF16 (UTF-16 code
                     units, surrogate pairs as two units), miUINT16 (MATLAB < 7, SOL2),
                     miUINT8/miINT8; characters in column-major order
      5  sparse      ir (row indices, miINT32, nzmax), jc (column starts, N + 1), pr
                     (values), pi if complex; logical sparse pr is declared miDOUBLE but
                     holds one byte per value
      1  cell        one miMATRIX per element, column-major; an element may be a
                     miMATRIX with n = 0, MATLAB's [] (0x0 double)
      2  struct      field name length L (miINT32, 1 value), field names (miINT8, L bytes
                     each, NUL padded), then per element (column-major) one miMATRIX per
                     field
      3  object      class name (miINT8), then as struct
      16 function    one miMATRIX (a struct describing the handle)
      17 opaque      no dimensions: three miINT8 strings (name, type system "MCOS",
                     class name "string"/"table"/"datetime"/a classdef), then one
                     miMATRIX (metadata; the object's properties are in the subsystem)

    Subsystem data: the element at the header's subsystem offset, an unnamed uint8
    miMATRIX holding a small MAT-file of its own (MCOS objects, function workspaces);
    scipy loads it as ``__function_workspace__``.

This module describes; it never copies numeric data. A :class:`MatVariable` holds a tree of
nodes (:data:`MatNode`): numeric and char leaves carry :class:`DataRef` ranges with the
stored dtype; every node has a ``decode`` that turns the bytes of a buffer into the value
with MATLAB's class and shape (Fortran order). Sparse decoding builds a
``scipy.sparse.csc_matrix``; scipy is imported only then (``decode_parts`` needs numpy
alone).

Decoding choices where scipy.io.loadmat (``mat_dtype=True``) answers otherwise:

- complex arrays keep their imaginary part (scipy's ``mat_dtype`` cast drops it); complex
  integer classes decode to complex128 (numpy has no complex integers), single to complex64
- a 0-byte miMATRIX (MATLAB's ``[]`` in a cell) is a 0x0 double (scipy: shape (1, 0))
- char: one str per row along ``dims[1]``, shape ``(dims[0],) + dims[2:]`` (scipy joins the
  last axis of N-d char); UTF-16 surrogate pairs joined per row after reshaping (scipy
  decodes the column-major stream and breaks on them); miUINT16 is UTF-16 (scipy keeps
  the low byte); NULs are kept (numpy's str dtype drops trailing ones: object arrays here)
- logical sparse is bool (scipy: uint8 when the values are declared miUINT8)
- a struct without fields is a structured array without fields (scipy: object array)
- decoded arrays are in native byte order (scipy: the file's)

This module is pure: bytes in, frozen dataclasses out.
"""

from __future__ import annotations

import bisect
import functools
import math
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.zipdir import NeedMoreBytes

__all__ = [
    "CLASS_NAMES", "DEFAULT_MAX_DEPTH", "HEADER_SIZE", "MAX_DEPTH_LIMIT", "MAX_FIELDS",
    "MAX_NDIM", "MAX_NUMEL", "MAX_UNBACKED", "MI_COMPRESSED", "MI_MATRIX", "TAG_SIZE",
    "CellArray", "CharArray", "DataRef", "MatHeader", "MatNode", "MatVariable", "MatrixHeader",
    "Mopt",
    "NeedMoreBytes", "NumericArray", "OpaqueObject", "SparseArray", "StructArray",
    "VariableEntry", "char_dims_problem", "chars_from_units", "decode_mopt", "is_v73",
    "iter_data_refs", "parse_header", "parse_matrix_header", "parse_variable", "scan_elements",
    "with_source",
]  # fmt: skip

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
#: 0 bytes of data read as blanks (as scipy does), or rows of length 0 (dims (N, 0)).
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
_F_LOGICAL, _F_GLOBAL, _F_COMPLEX = 0x200, 0x400, 0x800

_PAIR: Final = {"<": struct.Struct("<II"), ">": struct.Struct(">II")}
_WORD: Final = {"<": struct.Struct("<I"), ">": struct.Struct(">I")}

_Bytes: TypeAlias = bytes | bytearray | memoryview


# ---------------------------------------------------------------- header and top level


@dataclass(frozen=True, slots=True)
class MatHeader:
    """What the start of a MAT-file says.

    Attributes
    ----------
    version : int
        4 (Level 4, no header) or 5 (Level 5: ``-v6`` and ``-v7`` files).
    text : str
        The descriptive text, latin-1, trailing blanks and NULs removed ("" for v4).
    byte_order : str
        ``"<"`` or ``">"``: from the endian indicator (v5) or the first matrix's type (v4).
    subsys_offset : int or None
        Absolute offset of the subsystem data element, None when there is none.
    data_start : int
        Offset of the first data element (128) or v4 matrix (0).
    """

    version: int
    text: str
    byte_order: str
    subsys_offset: int | None
    data_start: int


@dataclass(frozen=True, slots=True)
class Mopt:
    """A Level-4 matrix type, ``MOPT = M*1000 + O*100 + P*10 + T``.

    Attributes
    ----------
    byte_order : str
        ``"<"`` (M = 0) or ``">"`` (M = 1).
    precision : int
        P: 0 double, 1 single, 2 int32, 3 int16, 4 uint16, 5 uint8.
    kind : int
        T: 0 full, 1 text, 2 sparse.
    """

    byte_order: str
    precision: int
    kind: int

    @property
    def value(self) -> int:
        """The MOPT integer."""
        return (0 if self.byte_order == "<" else 1000) + self.precision * 10 + self.kind


def decode_mopt(word: _Bytes, *, source: str) -> Mopt:
    """Read a Level-4 matrix type from its 4 bytes, working out their byte order.

    The same 4 bytes are read little and big endian; the reading whose M digit names the
    byte order it was read in wins (MOPT 0, little-endian double, reads 0 both ways).

    Parameters
    ----------
    word : bytes
        The 4 bytes of the type field.
    source : str
        Name of the file, for messages.

    Returns
    -------
    Mopt

    Raises
    ------
    FormatError
        Neither reading is a valid MOPT.
    UnsupportedError
        A valid MOPT for VAX or Cray floating point (M = 2, 3, 4).
    """
    if len(word) < 4:
        raise FormatError(f"{source}: a v4 matrix type needs 4 bytes, found {len(word)}")
    readings = [(order, int.from_bytes(word[:4], "little" if order == "<" else "big"))
                for order in "<>"]  # fmt: skip
    for order, value in readings:
        if value >= 5000:
            continue
        m, rest = divmod(value, 1000)
        o, rest = divmod(rest, 100)
        p, t = divmod(rest, 10)
        if o == 0 and p <= 5 and t <= 2 and m == "<>".index(order):
            return Mopt(order, p, t)
    for _, value in readings:
        m, o, p, t = value // 1000, value // 100 % 10, value // 10 % 10, value % 10
        if 2 <= m <= 4 and o == 0 and p <= 5 and t <= 2:
            raise UnsupportedError(
                f"{source}: v4 matrix type {value} stores VAX or Cray floating point "
                f"(M = {m}), expected IEEE little (0) or big (1) endian"
            )
    raise FormatError(
        f"{source}: {bytes(word[:4])!r} is not a v4 matrix type MOPT (M in 0..4, O = 0, "
        "P in 0..5, T in 0..2) in either byte order"
    )


def is_v73(prefix: _Bytes) -> bool:
    """Whether the first 128 bytes are the header of a v7.3 (HDF5) MAT-file.

    Such files are refused by :func:`parse_header`; read them as HDF5 (user block of 512).
    """
    if len(prefix) < HEADER_SIZE or 0 in bytes(prefix[:4]):
        return False
    indicator = bytes(prefix[126:128])
    if indicator not in (b"IM", b"MI"):
        return False
    return int.from_bytes(prefix[124:126], "little" if indicator == b"IM" else "big") == 0x0200


def parse_header(prefix: _Bytes, *, source: str, file_size: int | None = None) -> MatHeader:
    """Parse the start of a MAT-file: the Level-5 header, or the first Level-4 matrix type.

    Like scipy (and as the format document requires), a zero byte among the first 4 bytes
    marks a Level-4 file, which has no header; its byte order is that of the first matrix.

    Parameters
    ----------
    prefix : bytes
        The first ``min(128, file size)`` bytes of the file (more is fine).
    source : str
        Name of the file (URL), for messages.
    file_size : int, optional
        Size of the file; lets a short prefix be told apart from a short file.

    Returns
    -------
    MatHeader

    Raises
    ------
    FormatError
        Neither a v5 header nor a v4 matrix type; bad endian indicator or version.
    UnsupportedError
        A v7.3 (HDF5) file, or a v4 file of VAX or Cray numbers.
    NeedMoreBytes
        ``prefix`` holds fewer than 128 bytes of a file that may be longer.
    """
    if len(prefix) >= 4 and 0 in bytes(prefix[:4]):
        try:
            mopt = decode_mopt(prefix[:4], source=source)
        except FormatError:
            raise FormatError(
                f"{source}: not a MAT-file: the first bytes {bytes(prefix[:4])!r} hold a zero, "
                "so no v5 header, and are not a v4 matrix type MOPT (M in 0..4, O = 0, "
                "P in 0..5, T in 0..2) either"
            ) from None
        return MatHeader(4, "", mopt.byte_order, None, 0)
    if len(prefix) < HEADER_SIZE:
        if file_size is None or file_size > len(prefix):
            raise NeedMoreBytes(
                f"{source}: {len(prefix)} bytes are too few for a MAT-file header, read "
                f"{HEADER_SIZE}",
                offset=0,
                needed=HEADER_SIZE,
            )
        raise FormatError(
            f"{source}: not a MAT-file: {len(prefix)} bytes, expected a {HEADER_SIZE}-byte "
            "v5 header (or a v4 matrix type: a zero among the first 4 bytes)"
        )
    indicator = bytes(prefix[126:128])
    if indicator not in (b"IM", b"MI"):
        raise FormatError(
            f"{source}: not a MAT-file: endian indicator {indicator!r} at byte 126, "
            "expected b'IM' or b'MI'"
        )
    order = "<" if indicator == b"IM" else ">"
    endian: Literal["little", "big"] = "little" if order == "<" else "big"
    version = int.from_bytes(prefix[124:126], endian)
    text = bytes(prefix[:116]).decode("latin-1").rstrip(" \t\n\x00")
    if version == 0x0200:
        raise UnsupportedError(
            f"{source}: a v7.3 MAT-file (version 0x0200, {text[:40]!r}...) is an HDF5 file "
            "with a 512-byte user block; this parser reads v4, v6 and v7 files"
        )
    if version != 0x0100:
        raise FormatError(
            f"{source}: MAT-file version 0x{version:04x} at byte 124, expected 0x0100 "
            "(Level 5) or 0x0200 (v7.3)"
        )
    raw = bytes(prefix[116:124])
    subsys = None if raw in (b"\x00" * 8, b" " * 8) else int.from_bytes(raw, endian)
    return MatHeader(5, text, order, subsys, HEADER_SIZE)


@dataclass(frozen=True, slots=True)
class VariableEntry:
    """One top-level data element, known from its tag alone.

    Attributes
    ----------
    offset : int
        Absolute offset of the tag.
    total_size : int
        Tag + data bytes (top-level elements are not padded).
    compressed : bool
        miCOMPRESSED: the data is a zlib stream holding the variable's element.
    data_type : int
        14 (miMATRIX) or 15 (miCOMPRESSED).
    is_subsystem : bool
        The element at the header's subsystem offset (not a user variable).
    """

    offset: int
    total_size: int
    compressed: bool
    data_type: int = MI_MATRIX
    is_subsystem: bool = False

    @property
    def data_offset(self) -> int:
        """Absolute offset of the data (the zlib stream of a compressed element)."""
        return self.offset + TAG_SIZE

    @property
    def data_size(self) -> int:
        """Bytes of data after the tag."""
        return self.total_size - TAG_SIZE

    @property
    def end(self) -> int:
        """Absolute offset just past the element: the next element's tag."""
        return self.offset + self.total_size


def scan_elements(
    data: _Bytes,
    data_offset: int,
    file_size: int,
    byte_order: str,
    *,
    source: str,
    subsys_offset: int | None = None,
) -> tuple[list[VariableEntry], int | None]:
    """Walk the top-level data element tags inside a window of the file.

    Only the 8-byte tags are read; an element's data may lie outside ``data``.

    Parameters
    ----------
    data : bytes
        ``file[data_offset:data_offset + len(data)]``; the first tag at ``data_offset``.
    data_offset : int
        Absolute offset of ``data[0]``, a tag: ``header.data_start`` or a returned offset.
    file_size : int
        Size of the file.
    byte_order : str
        ``header.byte_order``.
    source : str
        Name of the file, for messages.
    subsys_offset : int, optional
        ``header.subsys_offset``: that element is flagged ``is_subsystem``.

    Returns
    -------
    entries : list of VariableEntry
        The elements whose tags lie in ``data``, in file order.
    next_offset : int or None
        Absolute offset of the next tag, not in ``data``: scan a window read there. None
        when the last element ends exactly at ``file_size``.

    Raises
    ------
    FormatError
        A tag that is not miMATRIX or miCOMPRESSED, an element running past the end of
        the file, or fewer than 8 bytes left after the last element.
    """
    pair = _pair(byte_order)
    entries: list[VariableEntry] = []
    pos = data_offset
    stop = data_offset + len(data)
    while pos < file_size:
        if pos + TAG_SIZE > file_size:
            raise FormatError(
                f"{source}: {file_size - pos} bytes after the last element at offset {pos}, "
                f"expected an {TAG_SIZE}-byte tag or the end of the file (truncated?)"
            )
        if pos + TAG_SIZE > stop:
            return entries, pos
        mdtype, nbytes = pair.unpack_from(data, pos - data_offset)
        if mdtype not in (MI_MATRIX, MI_COMPRESSED):
            raise FormatError(
                f"{source}: top-level element at offset {pos} has data type {_mi(mdtype)}, "
                f"expected miMATRIX (14) or miCOMPRESSED (15)"
            )
        end = pos + TAG_SIZE + nbytes
        if end > file_size:
            raise FormatError(
                f"{source}: top-level element at offset {pos} claims {nbytes} bytes, only "
                f"{file_size - pos - TAG_SIZE} are left in the {file_size}-byte file (truncated?)"
            )
        entries.append(
            VariableEntry(
                pos, TAG_SIZE + nbytes, mdtype == MI_COMPRESSED, mdtype, pos == subsys_offset
            )
        )
        pos = end
    return entries, None


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


@dataclass(frozen=True, slots=True)
class NumericArray:
    """A full numeric or logical array.

    Attributes
    ----------
    name : str
        Variable name ("" below the top level).
    dims : tuple of int
        MATLAB dimensions (at least 2), column-major.
    matlab_class : str
        ``"double"``, ``"single"``, ``"int8"`` ... ``"uint64"`` or ``"logical"``.
    is_complex : bool
        Whether there is an imaginary part.
    real, imag : DataRef, DataRef or None
        The stored parts: ``numel`` values each, in a type that may be narrower than the
        class (a double array of small integers stored as miUINT8).
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    matlab_class: str
    is_complex: bool
    real: DataRef
    imag: DataRef | None
    offset: int
    size: int
    is_global: bool = False

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of decoded values, native byte order.

        The class's dtype (``bool`` for logical); complex: complex64 for single,
        complex128 otherwise (numpy has no complex integers; exact up to 2**53).
        """
        if self.matlab_class == "logical":
            return np.dtype(np.bool_)
        if self.is_complex:
            return np.dtype(np.complex64 if self.matlab_class == "single" else np.complex128)
        return np.dtype(_CLASS_DTYPES[_CLASS_CODES[self.matlab_class]])

    def data_refs(self) -> tuple[DataRef, ...]:
        """The ranges holding this array's values."""
        return (self.real,) if self.imag is None else (self.real, self.imag)

    def convert(
        self, real: npt.NDArray[Any], imag: npt.NDArray[Any] | None = None
    ) -> npt.NDArray[Any]:
        """Turn stored values (any slice of them) into values of the class's dtype.

        Parameters
        ----------
        real, imag : numpy.ndarray
            Stored values (``DataRef.view``), matching slices of both parts if complex.

        Returns
        -------
        numpy.ndarray
            Same shape, ``self.dtype``, a new writable array.
        """
        with np.errstate(all="ignore"):
            if self.is_complex:
                out = np.empty(real.shape, self.dtype)
                out.real = real
                out.imag = real.dtype.type(0) if imag is None else imag
                return out
            return real.astype(self.dtype)

    def decode(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[Any]:
        """The array: MATLAB shape, Fortran order, the class's dtype.

        Parameters
        ----------
        buffer : bytes
            Bytes holding the data ranges (the element, the inflated buffer, the file).
        base : int
            Offset of ``buffer[0]`` in the address space of the DataRefs.

        Returns
        -------
        numpy.ndarray
        """
        imag = None if self.imag is None else self.imag.view(buffer, base)
        return self.convert(self.real.view(buffer, base), imag).reshape(self.dims, order="F")


@dataclass(frozen=True, slots=True)
class CharArray:
    """A char array: UTF-16 code units in MATLAB, stored in one of several encodings.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        MATLAB dimensions; ``dims[1]`` runs along a row (one string).
    encoding : str
        How ``data`` is read: ``"utf-8"`` (miUTF8), ``"utf-16"`` (code units: miUTF16,
        miUINT16, miINT16), ``"utf-32"`` (code points: miUTF32, miUINT32, miINT32) or
        ``"latin-1"`` (bytes: miUINT8, miINT8).
    data : DataRef
        The characters, column-major; ``stored_dtype`` is the unsigned code unit.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    encoding: str
    data: DataRef
    offset: int
    size: int
    is_global: bool = False

    matlab_class = "char"

    @property
    def numel(self) -> int:
        """Number of characters MATLAB counts (UTF-16 code units)."""
        return math.prod(self.dims)

    def data_refs(self) -> tuple[DataRef, ...]:
        """The range holding the characters."""
        return (self.data,)

    def code_units(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[np.uint32]:
        """The characters as ``numel`` integers, column-major.

        UTF-16 code units (a character outside the BMP is two units, as in MATLAB) or, for
        UTF-8 and UTF-32 data whose count matches ``dims`` that way, code points (scipy's
        ``savemat`` counts code points).

        Raises
        ------
        FormatError
            Invalid UTF-8, values above U+10FFFF, or a count that matches neither.
        """
        n = self.numel
        if self.data.nbytes == 0:
            return np.full(n, 0x20, np.uint32)
        raw = self.data.view(buffer, base)
        if self.encoding == "utf-8":
            try:
                text = raw.tobytes().decode("utf-8", "surrogatepass")
            except UnicodeDecodeError as exc:
                raise FormatError(
                    f"char variable {self.name!r}: invalid UTF-8 at byte {exc.start} of "
                    f"{self.data.nbytes}"
                ) from None
            units = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4")
            if len(units) != n:
                units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), "<u2")
        else:
            units = raw
        if len(units) != n:
            raise FormatError(
                f"char variable {self.name!r}: {len(units)} characters in {self.data.nbytes} "
                f"bytes of {self.encoding}, expected {n} for dims {self.dims}"
            )
        out = units.astype(np.uint32)
        if n and int(out.max()) > 0x10FFFF:
            raise FormatError(
                f"char variable {self.name!r}: character value {int(out.max())}, expected at "
                "most 0x10FFFF"
            )
        return out

    def decode(self, buffer: _Bytes, base: int = 0, *, as_strings: bool = True) -> npt.NDArray[Any]:
        """The characters, as strings (one per row) or as a grid of characters.

        Parameters
        ----------
        buffer, base
            As for :meth:`NumericArray.decode`.
        as_strings : bool
            True: an object array of ``str`` of shape ``(dims[0],) + dims[2:]``, each the
            row along ``dims[1]`` with UTF-16 surrogate pairs joined (lone surrogates kept;
            NULs and trailing blanks kept). False: a ``<U1`` array of shape ``dims``, one
            code unit each, as scipy's ``chars_as_strings=False``.

        Returns
        -------
        numpy.ndarray
        """
        return chars_from_units(self.code_units(buffer, base), self.dims, as_strings=as_strings)


def char_dims_problem(dims: tuple[int, ...]) -> str | None:
    """Why char dims would decode to too many empty strings, or None.

    With ``dims[1] == 0`` there is no data at all, yet ``dims[0] * dims[2] * ...`` strings;
    more than :data:`MAX_UNBACKED` of them are refused.
    """
    strings = math.prod(dims) // dims[1] if dims[1] else dims[0] * math.prod(dims[2:])
    if dims[1] == 0 and strings > MAX_UNBACKED:
        return (
            f"char dims {dims} give {strings} empty strings, more than {MAX_UNBACKED} without data"
        )
    return None


def chars_from_units(
    units: npt.NDArray[Any], dims: tuple[int, ...], *, as_strings: bool = True
) -> npt.NDArray[Any]:
    """Arrange column-major character codes as MATLAB does: strings along ``dims[1]``.

    Parameters
    ----------
    units : numpy.ndarray
        ``prod(dims)`` UTF-16 code units or code points (at most 0x10FFFF), column-major.
    dims : tuple of int
        MATLAB dimensions, at least 2.
    as_strings : bool
        True: an object array of ``str``, shape ``(dims[0],) + dims[2:]``, each the row
        along ``dims[1]`` with surrogate pairs joined. False: ``<U1``, shape ``dims``.

    Returns
    -------
    numpy.ndarray
    """
    if not as_strings:
        return units.astype("<u4").view("<U1").reshape(dims, order="F")
    problem = char_dims_problem(dims)
    if problem:
        raise FormatError(problem)
    grid = np.moveaxis(units.reshape(dims, order="F"), 1, -1)
    width = grid.shape[-1]
    if width and grid.size and not np.any((grid == 0) | ((grid >= 0xD800) & (grid <= 0xDFFF))):
        # no NULs (numpy's str dtype would drop trailing ones), no surrogates to join
        rows = np.ascontiguousarray(grid, dtype="<u4").view(f"<U{width}")[..., 0]
        return rows.astype(object)
    out = np.empty(grid.shape[:-1], dtype=object)
    for index in np.ndindex(out.shape):
        out[index] = _join_units(grid[index])
    return out


@dataclass(frozen=True, slots=True)
class SparseArray:
    """A sparse matrix, compressed sparse column (CSC) as MATLAB stores it.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        ``(M, N)``.
    matlab_class : str
        ``"double"`` or ``"logical"``.
    is_complex : bool
        Whether ``pi`` holds an imaginary part.
    nzmax : int
        The array flags' nzmax (room allocated, >= the number of nonzeros).
    ir, jc, pr, pi : DataRef
        Row indices, column starts (``N + 1`` used), real values, imaginary values. A
        logical ``pr`` declared miDOUBLE but holding a byte per value has ``stored_dtype``
        uint8 when that can be seen from sizes; :meth:`decode_parts` checks again against
        the number of nonzeros (``jc[N]``), as scipy does.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    matlab_class: str
    is_complex: bool
    nzmax: int
    ir: DataRef
    jc: DataRef
    pr: DataRef
    pi: DataRef | None
    offset: int
    size: int
    is_global: bool = False

    def data_refs(self) -> tuple[DataRef, ...]:
        """The ranges holding indices and values."""
        refs = (self.ir, self.jc, self.pr)
        return refs if self.pi is None else (*refs, self.pi)

    @property
    def dtype(self) -> np.dtype[Any]:
        """``bool``, ``float64`` or ``complex128``."""
        if self.matlab_class == "logical":
            return np.dtype(np.bool_)
        return np.dtype(np.complex128 if self.is_complex else np.float64)

    def decode_parts(
        self, buffer: _Bytes, base: int = 0
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64], tuple[int, int]]:
        """The checked CSC arrays ``(data, indices, indptr, shape)``, numpy only.

        Raises
        ------
        FormatError
            Column starts that do not start at 0 or decrease, more nonzeros than stored
            indices or values, or a row index outside ``0 .. M - 1``.
        """
        m, n = self.dims[0], self.dims[1]
        where = f"sparse variable {self.name!r}"
        indptr = self.jc.view(buffer, base)[: n + 1].astype(np.int64)
        if indptr[0] != 0 or (n and bool(np.any(np.diff(indptr) < 0))):
            raise FormatError(
                f"{where}: column starts (jc) {_short(indptr)} must start at 0 and not decrease"
            )
        nnz = int(indptr[-1])
        indices = self.ir.view(buffer, base).astype(np.int64)
        values = self.pr.view(buffer, base)
        if self.matlab_class == "logical" and values.dtype.itemsize != 1 and self.pr.nbytes == nnz:
            values = np.frombuffer(buffer, np.uint8, nnz, self.pr.offset - base)
        if nnz > len(indices) or nnz > len(values):
            raise FormatError(
                f"{where}: jc[{n}] = {nnz} nonzeros, but {len(indices)} row indices and "
                f"{len(values)} values are stored"
            )
        indices = indices[:nnz]
        if nnz and (int(indices.min()) < 0 or int(indices.max()) >= m):
            raise FormatError(
                f"{where}: row indices (ir) run from {int(indices.min())} to "
                f"{int(indices.max())}, expected 0 to {m - 1}"
            )
        with np.errstate(all="ignore"):
            if self.pi is not None:
                data = np.empty(nnz, np.complex128)
                data.real = values[:nnz]
                imag = self.pi.view(buffer, base)
                if len(imag) < nnz:
                    raise FormatError(f"{where}: {nnz} nonzeros, but {len(imag)} imaginary values")
                data.imag = imag[:nnz]
            else:
                data = values[:nnz].astype(self.dtype)
        return data, indices, indptr, (m, n)

    def decode(self, buffer: _Bytes, base: int = 0) -> Any:
        """A ``scipy.sparse.csc_matrix`` (scipy is imported here, and only here).

        Logical sparse arrays decode to dtype ``bool``.
        """
        data, indices, indptr, shape = self.decode_parts(buffer, base)
        from scipy import sparse  # noqa: PLC0415 - optional, only for sparse values

        return sparse.csc_matrix((data, indices, indptr), shape=shape)


@dataclass(frozen=True, slots=True)
class CellArray:
    """A cell array: one node per element, column-major.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        MATLAB dimensions.
    cells : tuple of MatNode
        The elements in column-major order (``numel`` of them).
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    cells: tuple[MatNode, ...]
    offset: int
    size: int
    is_global: bool = False

    matlab_class = "cell"

    def decode(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[np.object_]:
        """An object array of MATLAB shape holding each element decoded."""
        out = np.empty(len(self.cells), dtype=object)
        for i, cell in enumerate(self.cells):
            out[i] = cell.decode(buffer, base)
        return out.reshape(self.dims, order="F")


@dataclass(frozen=True, slots=True)
class StructArray:
    """A struct array, or an (old-style, ``@class`` directory) object.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        MATLAB dimensions.
    field_names : tuple of str
        The fields, in stored order; duplicates renamed ``_1_name``, ... as scipy does.
    values : tuple of MatNode
        ``numel * len(field_names)`` nodes: for each element (column-major), each field.
    class_name : str or None
        The class of an object (array class 3), None for a struct.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    field_names: tuple[str, ...]
    values: tuple[MatNode, ...]
    class_name: str | None
    offset: int
    size: int
    is_global: bool = False

    @property
    def matlab_class(self) -> str:
        """``"struct"``, or the object's class name."""
        return "struct" if self.class_name is None else self.class_name

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)

    def element(self, index: int) -> dict[str, MatNode]:
        """The fields of element ``index`` (column-major linear index)."""
        k = len(self.field_names)
        return dict(zip(self.field_names, self.values[index * k : index * k + k], strict=True))

    def field(self, name: str) -> tuple[MatNode, ...]:
        """One field's node for every element, column-major."""
        j, k = self.field_names.index(name), len(self.field_names)
        return self.values[j::k]

    def decode(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[Any]:
        """A structured array of MATLAB shape with one object field per MATLAB field.

        As scipy's ``struct_as_record=True``; a struct without fields gives a structured
        array with no fields (scipy: a plain object array of None).
        """
        dtype = np.dtype([(name, object) for name in self.field_names])
        out = np.zeros(self.numel, dtype=dtype)
        k = len(self.field_names)
        for j, name in enumerate(self.field_names):
            column = out[name]
            for i in range(self.numel):
                column[i] = self.values[i * k + j].decode(buffer, base)
        return out.reshape(self.dims, order="F")


@dataclass(frozen=True, slots=True)
class OpaqueObject:
    """A value this parser does not decode: function handle, MCOS object, unknown class.

    Attributes
    ----------
    name : str
        Variable name.
    matlab_class : str
        ``"function_handle"``, the opaque's class name (``"string"``, ``"table"``,
        ``"datetime"``, a classdef name), or ``"<class N>"`` for an unknown array class.
    kind : str
        ``"function_handle"`` (class 16), ``"opaque"`` (class 17) or ``"unknown"``.
    class_code : int
        The array class from the array flags.
    type_system : str
        The opaque's type system (``"MCOS"``, ``"java"``, ``"handle"``); "" otherwise.
    dims : tuple of int
        As stored; ``(1, 1)`` for opaques, whose real size is in the subsystem data.
    content : MatNode or None
        The nested miMATRIX: the handle's struct, or the opaque's metadata (for MCOS a
        uint32 column naming the object in the subsystem); None for unknown classes.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    matlab_class: str
    kind: str
    class_code: int
    type_system: str
    dims: tuple[int, ...]
    content: MatNode | None
    offset: int
    size: int
    is_global: bool = False

    def decode(self, buffer: _Bytes, base: int = 0) -> OpaqueObject:
        """The placeholder itself: there is no array value to decode."""
        del buffer, base
        return self


#: Any node of a variable's tree.
MatNode: TypeAlias = NumericArray | CharArray | SparseArray | CellArray | StructArray | OpaqueObject


@dataclass(frozen=True, slots=True)
class MatrixHeader:
    """The start of a miMATRIX: enough for a listing (``whos``) without its contents.

    Attributes
    ----------
    name : str
        Variable name.
    class_code : int
        Array class (1 cell ... 17 opaque), 0 for an empty miMATRIX (n = 0).
    matlab_class : str
        As MATLAB's ``class()``: ``"double"`` ... ``"logical"``, ``"char"``, ``"cell"``,
        ``"struct"``, an object's or opaque's class name, ``"function_handle"``; sparse
        arrays are ``"double"`` or ``"logical"`` with ``is_sparse``.
    dims : tuple of int
        MATLAB dimensions.
    is_complex, is_logical, is_global : bool
        The array flags.
    nzmax : int
        Sparse: allocated nonzeros.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    type_system : str
        Opaque objects: ``"MCOS"`` etc.; "" otherwise.
    """

    name: str
    class_code: int
    matlab_class: str
    dims: tuple[int, ...]
    is_complex: bool
    is_logical: bool
    is_global: bool
    nzmax: int
    offset: int
    size: int
    type_system: str = ""

    @property
    def is_sparse(self) -> bool:
        """Whether the array is sparse."""
        return self.class_code == SPARSE


@dataclass(frozen=True, slots=True)
class MatVariable:
    """One top-level variable: its name and the tree describing its value.

    Attributes
    ----------
    name : str
        Variable name ("" for the subsystem data).
    value : MatNode
        The tree.
    offset : int
        Offset of the (inner) miMATRIX tag in the address space of the DataRefs.
    size : int
        Its tag + data bytes.
    inflated : bool
        The DataRefs are offsets into the inflated data of a miCOMPRESSED element (the
        caller's buffer), not into the file.
    is_global : bool
        The global flag.
    source : str
        Name of the file, prefixed to the messages of errors from :meth:`decode`.
    """

    name: str
    value: MatNode
    offset: int
    size: int
    inflated: bool
    is_global: bool
    source: str = "<bytes>"

    @property
    def matlab_class(self) -> str:
        """The value's MATLAB class."""
        return self.value.matlab_class

    def decode(self, buffer: _Bytes, base: int = 0, *, as_strings: bool = True) -> Any:
        """The value decoded: see each node's ``decode``.

        ``as_strings`` is passed on when the variable is a char array.

        Raises
        ------
        FormatError
            Values that contradict the description (sparse indices, char encodings).
        NeedMoreBytes
            A DataRef range is not inside ``buffer``.
        """
        try:
            if isinstance(self.value, CharArray):
                return self.value.decode(buffer, base, as_strings=as_strings)
            return self.value.decode(buffer, base)
        except (FormatError, NeedMoreBytes) as exc:
            raise with_source(exc, self.source) from None

    def data_refs(self) -> list[DataRef]:
        """Every range of values in the tree, in file order."""
        return sorted(iter_data_refs(self.value), key=lambda ref: ref.offset)


def with_source(exc: FormatError | NeedMoreBytes, source: str) -> FormatError | NeedMoreBytes:
    """The same error with its message prefixed by ``f"{source}: "``."""
    message = f"{source}: {exc}"
    if isinstance(exc, NeedMoreBytes):
        return NeedMoreBytes(message, offset=exc.offset, needed=exc.needed)
    return FormatError(message)


def iter_data_refs(node: MatNode) -> Iterator[DataRef]:
    """Every DataRef in a tree (numeric, char and sparse leaves), depth first."""
    stack: list[MatNode] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, NumericArray | CharArray | SparseArray):
            yield from item.data_refs()
        elif isinstance(item, CellArray):
            stack.extend(reversed(item.cells))
        elif isinstance(item, StructArray):
            stack.extend(reversed(item.values))
        elif item.content is not None:
            stack.append(item.content)


# ---------------------------------------------------------------- parsing a variable


def parse_matrix_header(
    element: _Bytes,
    element_offset: int,
    byte_order: str,
    *,
    source: str,
    inflated: bool = False,
    extra: Mapping[int, _Bytes] | None = None,
) -> MatrixHeader:
    """Parse the array flags, dimensions and name of a top-level miMATRIX.

    Needs the first 40 to 100-odd bytes of the element (for objects, also the class name).

    Parameters
    ----------
    element, element_offset, byte_order, source, inflated, extra
        As for :func:`parse_variable`.

    Returns
    -------
    MatrixHeader

    Raises
    ------
    FormatError, UnsupportedError, NeedMoreBytes
        As for :func:`parse_variable`.
    """
    reader = _Reader(element, element_offset, extra, byte_order, source, inflated)
    pos, end = reader.root()
    header, _ = _read_header(reader, pos, end, f"{source}: {reader.what(pos)}")
    return header


def parse_variable(
    element: _Bytes,
    element_offset: int,
    byte_order: str,
    *,
    source: str,
    max_depth: int = DEFAULT_MAX_DEPTH,
    inflated: bool = False,
    extra: Mapping[int, _Bytes] | None = None,
) -> MatVariable:
    """Describe one top-level variable: a tree of nodes with DataRefs, no values read.

    Parameters
    ----------
    element : bytes
        Bytes from the element's tag on: a miMATRIX element of the file (uncompressed), or
        the inflated data of a miCOMPRESSED element (its inner miMATRIX) with
        ``inflated=True``. It may stop short: numeric and char values are never read.
        Bytes after the element are ignored.
    element_offset : int
        Offset of ``element[0]`` in the address space of the result: the entry's
        absolute offset, or 0 for an inflated buffer.
    byte_order : str
        ``header.byte_order``.
    source : str
        Name of the file, for messages.
    max_depth : int
        Most nesting levels (cells, structs, handles, opaques) below the variable, at
        most :data:`MAX_DEPTH_LIMIT`.
    inflated : bool
        ``element`` is inflated miCOMPRESSED data: offsets refer to that buffer.
    extra : mapping of int to bytes, optional
        More bytes of the same address space, keyed by offset: the ranges that earlier
        calls asked for with NeedMoreBytes.

    Returns
    -------
    MatVariable

    Raises
    ------
    FormatError
        Malformed: a subelement outside its matrix, sizes that disagree with the
        dimensions, bad type codes, nesting deeper than ``max_depth``.
    UnsupportedError
        Well-formed content this parser does not read (e.g. char data stored as floats).
    NeedMoreBytes
        A tag or small metadata (flags, dimensions, names) at an offset inside the element
        but outside ``element`` and ``extra``: add that range to ``extra`` and call again.
    """
    if not 0 <= max_depth <= MAX_DEPTH_LIMIT:
        raise ValueError(f"max_depth must be 0 to {MAX_DEPTH_LIMIT}, got {max_depth}")
    reader = _Reader(element, element_offset, extra, byte_order, source, inflated)
    pos, end = reader.root()
    node = _parse_matrix(reader, pos, end, 0, max_depth, f"{source}: {reader.what(pos)}")
    return MatVariable(node.name, node, pos, end - pos, inflated, node.is_global, source)


class _Reader:
    """Bytes of one address space (the file, or an inflated buffer), given as segments."""

    __slots__ = ("_ends", "_segments", "_starts", "inflated", "pair", "root_offset", "source")

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
        self.source = source
        self.inflated = inflated
        self.root_offset = offset
        segments = [(offset, memoryview(element).cast("B"))]
        segments += [(start, memoryview(buf).cast("B")) for start, buf in (extra or {}).items()]
        segments.sort(key=lambda item: item[0])
        self._segments = segments
        self._starts = [start for start, _ in segments]
        self._ends = [start + len(buf) for start, buf in segments]

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


def _read_string(r: _Reader, e: _Elem, where: str, what: str) -> str:
    """A name: miINT8 (latin-1), or miUTF8 as some writers use."""
    if e.mdtype not in _NAME_TYPES:
        raise FormatError(f"{where}: the {what} is {_mi(e.mdtype)}, expected miINT8 (1)")
    raw = bytes(r.take(e.data, e.nbytes))
    if e.mdtype != MI_UTF8:
        return raw.decode("latin-1")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{where}: the {what} {raw[:80]!r} is miUTF8 but not UTF-8") from None


def _read_dims(r: _Reader, e: _Elem, where: str) -> tuple[int, ...]:
    """The dimensions: 2 to 64 non-negative int32 values."""
    if e.mdtype not in (MI_INT32, MI_UINT32) or e.nbytes % 4:
        raise FormatError(
            f"{where}: dimensions are {_mi(e.mdtype)} with {e.nbytes} bytes, expected "
            "miINT32 with a multiple of 4"
        )
    ndim = e.nbytes // 4
    if not 2 <= ndim <= MAX_NDIM:
        raise FormatError(f"{where}: {ndim} dimensions, expected 2 to {MAX_NDIM}")
    order = "<" if r.pair is _PAIR["<"] else ">"
    dims = struct.unpack(f"{order}{ndim}i", r.take(e.data, e.nbytes))
    if min(dims) < 0:
        raise FormatError(f"{where}: dimensions {dims} include a negative value")
    if math.prod(dims) > MAX_NUMEL:
        raise FormatError(
            f"{where}: dimensions {dims} give {math.prod(dims)} elements, MATLAB allows at "
            f"most {MAX_NUMEL}"
        )
    return tuple(dims)


def _read_header(r: _Reader, pos: int, end: int, where: str) -> tuple[MatrixHeader, int]:
    """Parse the header of the miMATRIX at ``pos`` (ending at ``end``); return it and the
    offset of the next subelement."""
    size = end - pos
    if size == TAG_SIZE:  # MATLAB's [] in a cell: a miMATRIX without subelements
        return MatrixHeader("", 0, "double", (0, 0), False, False, False, 0, pos, size), end
    flags = _element(r, pos + TAG_SIZE, end, where, "array flags")
    if flags.mdtype not in (MI_UINT32, MI_INT32) or flags.nbytes != 8:
        raise FormatError(
            f"{where}: array flags are {_mi(flags.mdtype)} with {flags.nbytes} bytes, "
            "expected miUINT32 with 8"
        )
    word, nzmax = r.pair.unpack(r.take(flags.data, 8))
    code = word & 0xFF
    is_logical, is_global, is_complex = (
        bool(word & f) for f in (_F_LOGICAL, _F_GLOBAL, _F_COMPLEX)
    )
    cur = flags.next
    if code == OPAQUE:
        names = []
        for what in ("object name", "type system name", "class name"):
            e = _element(r, cur, end, where, what)
            names.append(_read_string(r, e, where, what))
            cur = e.next
        header = MatrixHeader(
            names[0], code, names[2], (1, 1), is_complex, is_logical, is_global, nzmax, pos,
            size, names[1],
        )  # fmt: skip
        return header, cur
    e = _element(r, cur, end, where, "dimensions")
    dims = _read_dims(r, e, where)
    e = _element(r, e.next, end, where, "array name")
    name = _read_string(r, e, where, "array name")
    cur = e.next
    if code == OBJECT:
        e = _element(r, cur, end, where, "class name")
        matlab_class = _read_string(r, e, where, "class name")
        cur = e.next
    elif code in _CLASS_DTYPES or code == SPARSE:
        matlab_class = "logical" if is_logical else CLASS_NAMES.get(code, "double")
        matlab_class = "double" if code == SPARSE and not is_logical else matlab_class
    else:
        matlab_class = CLASS_NAMES.get(code, f"<class {code}>")
    header = MatrixHeader(
        name, code, matlab_class, dims, is_complex, is_logical, is_global, nzmax, pos, size
    )
    return header, cur


def _parse_matrix(
    r: _Reader, pos: int, end: int, depth: int, max_depth: int, where: str
) -> MatNode:
    """Parse the miMATRIX at ``pos``, whose tag is known to end at ``end``."""
    h, cur = _read_header(r, pos, end, where)
    if depth == 0:
        where = f"{r.source}: variable {h.name!r}"
    code, dims, numel = h.class_code, h.dims, math.prod(h.dims)
    order = "<" if r.pair is _PAIR["<"] else ">"
    if code == 0 and h.size == TAG_SIZE:
        empty = DataRef(pos + TAG_SIZE, 0, _dt(order, "f8"), MI_DOUBLE)
        return NumericArray("", (0, 0), "double", False, empty, None, pos, h.size)
    if code in _CLASS_DTYPES:
        if h.is_complex and h.is_logical:
            raise FormatError(f"{where}: array flags say both logical and complex")
        e = _element(r, cur, end, where, "real part")
        real = _numeric_ref(e, numel, order, where, "real part", dims)
        imag = None
        if h.is_complex:
            e = _element(r, e.next, end, where, "imaginary part")
            imag = _numeric_ref(e, numel, order, where, "imaginary part", dims)
        return NumericArray(
            h.name, dims, h.matlab_class, h.is_complex, real, imag, pos, h.size, h.is_global
        )
    if code == CHAR:
        e = _element(r, cur, end, where, "char data")
        encoding, ref = _char_ref(e, numel, order, where, dims)
        return CharArray(h.name, dims, encoding, ref, pos, h.size, h.is_global)
    if code == SPARSE:
        return _parse_sparse(r, h, cur, end, order, where)
    if code == CELL:
        _check_children(numel, cur, end, where, f"{numel} cells")
        cells: list[MatNode] = []
        for i in range(numel):
            node, cur = _parse_child(r, cur, end, depth, max_depth, f"{where}{{{i + 1}}}")
            cells.append(node)
        return CellArray(h.name, dims, tuple(cells), pos, h.size, h.is_global)
    if code in (STRUCT, OBJECT):
        fields, cur = _read_field_names(r, cur, end, where)
        _check_children(numel * len(fields), cur, end, where, f"{numel} x {len(fields)} fields")
        values: list[MatNode] = []
        for i in range(numel if fields else 0):
            for field in fields:
                label = f"{where}({i + 1}).{field}"
                node, cur = _parse_child(r, cur, end, depth, max_depth, label)
                values.append(node)
        class_name = h.matlab_class if code == OBJECT else None
        return StructArray(
            h.name, dims, fields, tuple(values), class_name, pos, h.size, h.is_global
        )
    if code in (FUNCTION, OPAQUE):
        content, _ = _parse_child(r, cur, end, depth, max_depth, f"{where} (content)")
        kind = "function_handle" if code == FUNCTION else "opaque"
        return OpaqueObject(
            h.name, h.matlab_class, kind, code, h.type_system, dims, content, pos, h.size,
            h.is_global,
        )  # fmt: skip
    return OpaqueObject(
        h.name, h.matlab_class, "unknown", code, "", dims, None, pos, h.size, h.is_global
    )


def _parse_child(
    r: _Reader, pos: int, end: int, depth: int, max_depth: int, where: str
) -> tuple[MatNode, int]:
    """Parse the nested miMATRIX at ``pos``; return it and the offset after it."""
    if depth + 1 > max_depth:
        raise FormatError(f"{where}: nested more than max_depth={max_depth} levels deep")
    if pos + TAG_SIZE > end:
        raise FormatError(
            f"{where}: expected a miMATRIX tag at offset {pos}, {max(0, end - pos)} bytes "
            "are left in the enclosing matrix"
        )
    mdtype, nbytes = r.pair.unpack(r.take(pos, TAG_SIZE))
    if mdtype != MI_MATRIX:
        raise FormatError(
            f"{where}: expected a miMATRIX tag at offset {pos}, found data type {_mi(mdtype)}"
        )
    if nbytes > end - pos - TAG_SIZE:
        raise FormatError(
            f"{where}: the miMATRIX at offset {pos} claims {nbytes} bytes, "
            f"{end - pos - TAG_SIZE} are left in the enclosing matrix"
        )
    child_end = pos + TAG_SIZE + nbytes
    return _parse_matrix(r, pos, child_end, depth + 1, max_depth, where), child_end


def _check_children(count: int, cur: int, end: int, where: str, what: str) -> None:
    """``count`` nested matrices take at least 8 bytes each: refuse absurd counts early."""
    if count * TAG_SIZE > end - cur:
        raise FormatError(
            f"{where}: {what} need at least {count * TAG_SIZE} bytes, {end - cur} are left "
            "in the matrix"
        )


def _numeric_ref(
    e: _Elem, numel: int, order: str, where: str, what: str, dims: tuple[int, ...]
) -> DataRef:
    """A DataRef for numeric values, which must be ``numel`` of them."""
    code = _MI_DTYPES.get(e.mdtype)
    if code is None:
        raise FormatError(f"{where}: the {what} is {_mi(e.mdtype)}, expected a numeric type")
    dtype = _dt(order, code)
    if e.nbytes != numel * dtype.itemsize:
        raise FormatError(
            f"{where}: the {what} holds {e.nbytes} bytes of {_mi(e.mdtype)}, expected "
            f"{numel * dtype.itemsize} ({numel} values for dims {dims})"
        )
    return DataRef(e.data, e.nbytes, dtype, e.mdtype)


def _char_ref(
    e: _Elem, numel: int, order: str, where: str, dims: tuple[int, ...]
) -> tuple[str, DataRef]:
    """The encoding and DataRef of char data, sizes checked against ``numel``."""
    spec = _CHAR_ENCODINGS.get(e.mdtype)
    if spec is None:
        if e.mdtype in _MI_DTYPES:
            raise UnsupportedError(f"{where}: char data stored as {_mi(e.mdtype)}")
        raise FormatError(f"{where}: char data is {_mi(e.mdtype)}, expected miUTF8/16/32")
    encoding, unit = spec
    dtype = _dt(order, unit)
    problem = char_dims_problem(dims)
    if problem:
        raise FormatError(f"{where}: {problem}")
    if e.nbytes == 0:
        ok = numel <= MAX_UNBACKED
    elif encoding == "utf-8":
        ok = numel <= e.nbytes <= 4 * numel
    else:
        ok = e.nbytes == numel * dtype.itemsize
    if not ok:
        raise FormatError(
            f"{where}: {e.nbytes} bytes of {_mi(e.mdtype)} char data, expected "
            f"{numel * dtype.itemsize}{' to ' + str(4 * numel) if encoding == 'utf-8' else ''} "
            f"for dims {dims}"
        )
    return encoding, DataRef(e.data, e.nbytes, dtype, e.mdtype)


def _parse_sparse(
    r: _Reader, h: MatrixHeader, cur: int, end: int, order: str, where: str
) -> SparseArray:
    """The ir, jc, pr (and pi) subelements of a sparse matrix."""
    if len(h.dims) != 2:
        raise FormatError(f"{where}: sparse with dimensions {h.dims}, expected 2")
    refs: list[DataRef] = []
    labels = ["row indices (ir)", "column starts (jc)", "real part (pr)"]
    for what in labels + (["imaginary part (pi)"] if h.is_complex else []):
        e = _element(r, cur, end, where, what)
        cur = e.next
        code = _MI_DTYPES.get(e.mdtype)
        if code is None or (what in labels[:2] and e.mdtype not in _MI_INTEGERS):
            kind = "an integer" if what in labels[:2] else "a numeric"
            raise FormatError(f"{where}: the {what} is {_mi(e.mdtype)}, expected {kind} type")
        dtype = _dt(order, code)
        is_pr = what == labels[2]
        if h.is_logical and is_pr and dtype.itemsize > 1 and _bytewise(e.nbytes, dtype, refs[0]):
            dtype = _dt(order, "u1")  # MATLAB: one byte per value, declared miDOUBLE
        if e.nbytes % dtype.itemsize:
            raise FormatError(
                f"{where}: the {what} holds {e.nbytes} bytes of {_mi(e.mdtype)}, expected a "
                f"multiple of {dtype.itemsize}"
            )
        refs.append(DataRef(e.data, e.nbytes, dtype, e.mdtype))
    ncols = h.dims[1]
    if refs[1].count < ncols + 1:
        raise FormatError(
            f"{where}: {refs[1].count} column starts (jc), expected {ncols + 1} for {ncols} columns"
        )
    if h.is_complex and refs[3].count != refs[2].count:
        raise FormatError(
            f"{where}: {refs[2].count} real and {refs[3].count} imaginary values, expected "
            "as many of each"
        )
    if h.is_complex and h.is_logical:
        raise FormatError(f"{where}: array flags say both logical and complex")
    pi = refs[3] if h.is_complex else None
    return SparseArray(
        h.name, h.dims, h.matlab_class, h.is_complex, h.nzmax, refs[0], refs[1], refs[2], pi,
        h.offset, h.size, h.is_global,
    )  # fmt: skip


def _bytewise(nbytes: int, dtype: np.dtype[Any], ir: DataRef) -> bool:
    """Whether logical sparse values declared wider than a byte are one byte each."""
    return bool(nbytes % dtype.itemsize) or nbytes == ir.count


def _read_field_names(r: _Reader, cur: int, end: int, where: str) -> tuple[tuple[str, ...], int]:
    """The field name length and field names of a struct or object."""
    e = _element(r, cur, end, where, "field name length")
    if e.mdtype not in (MI_INT32, MI_UINT32) or e.nbytes != 4:
        raise FormatError(
            f"{where}: the field name length is {_mi(e.mdtype)} with {e.nbytes} bytes, "
            "expected miINT32 with 4"
        )
    order = "<" if r.pair is _PAIR["<"] else ">"
    (width,) = struct.unpack(f"{order}i", r.take(e.data, 4))
    e = _element(r, e.next, end, where, "field names")
    if e.mdtype not in _NAME_TYPES:
        raise FormatError(f"{where}: field names are {_mi(e.mdtype)}, expected miINT8 (1)")
    if e.nbytes == 0:
        return (), e.next
    if width <= 0 or e.nbytes % width:
        raise FormatError(
            f"{where}: {e.nbytes} bytes of field names are not a whole number of names of "
            f"the field name length {width}"
        )
    if e.nbytes // width > MAX_FIELDS:
        raise UnsupportedError(
            f"{where}: {e.nbytes // width} fields, this parser reads at most {MAX_FIELDS}"
        )
    raw = bytes(r.take(e.data, e.nbytes))
    names: list[str] = []
    seen: dict[str, int] = {}
    for i in range(0, e.nbytes, width):
        chunk = raw[i : i + width].split(b"\x00", 1)[0]
        try:
            name = chunk.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{where}: field name {chunk!r} is not UTF-8") from None
        if not name:
            raise FormatError(f"{where}: field {i // width + 1} has an empty name")
        if name in seen:  # as scipy: the second "a" becomes "_1_a"
            seen[name] += 1
            name = f"_{seen[name]}_{name}"
        seen.setdefault(name, 0)
        names.append(name)
    try:
        valid = np.dtype([(name, object) for name in names]).names == tuple(names)
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise FormatError(f"{where}: field names {names[:10]} cannot be told apart")
    return tuple(names), e.next


@functools.cache
def _dt(order: str, code: str) -> np.dtype[Any]:
    return np.dtype(order + code)


def _mi(code: int) -> str:
    return f"{_MI_NAMES.get(code, 'an unknown type')} ({code})"


def _pair(byte_order: str) -> struct.Struct:
    if byte_order not in _PAIR:
        raise ValueError(f"byte_order must be '<' or '>', got {byte_order!r}")
    return _PAIR[byte_order]


def _join_units(units: npt.NDArray[Any]) -> str:
    """A row of code units or code points as a str, UTF-16 surrogate pairs joined."""
    text = units.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _short(values: npt.NDArray[Any], limit: int = 8) -> str:
    shown = ", ".join(str(int(v)) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


_CLASS_CODES: Final = {name: code for code, name in CLASS_NAMES.items() if code in _CLASS_DTYPES}
