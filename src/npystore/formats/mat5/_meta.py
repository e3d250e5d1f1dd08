"""The metadata of a miMATRIX: array flags, dimensions, names, field names.

:func:`parse_matrix_header` reads them for a listing (``whos``) without the contents.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.mat5._bulk import _MIN_SIZE, quick_header
from npystore.formats.mat5._tags import (
    _F_COMPLEX,
    _F_GLOBAL,
    _F_LOGICAL,
    _NAME_TYPES,
    MAX_FIELDS,
    MAX_NDIM,
    MAX_NUMEL,
    MI_INT32,
    MI_UINT32,
    MI_UTF8,
    OBJECT,
    OPAQUE,
    SPARSE,
    TAG_SIZE,
    _Bytes,
    _class_name,
    _Elem,
    _element,
    _mi,
    _Reader,
)


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


def _read_string(r: _Reader, pos: int, end: int, where: str, what: str) -> tuple[str, int]:
    """The name in the subelement at ``pos``: miINT8 (latin-1), or miUTF8 as some writers
    use; return it and the offset of the next subelement."""
    e = _element(r, pos, end, where, what)
    if e.mdtype not in _NAME_TYPES:
        raise FormatError(f"{where}: the {what} is {_mi(e.mdtype)}, expected miINT8 (1)")
    raw = bytes(r.take(e.data, e.nbytes))
    if e.mdtype != MI_UTF8:
        return raw.decode("latin-1"), e.next
    try:
        return raw.decode("utf-8"), e.next
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
    dims = struct.unpack(f"{r.order}{ndim}i", r.take(e.data, e.nbytes))
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
    offset of the next subelement. The common layout is read by
    :func:`~npystore.formats.mat5._bulk.quick_header` (one unpack, the same result);
    anything else by :func:`_read_header_generic`."""
    size = end - pos
    if size > TAG_SIZE:
        seg = r.segment(pos, min(end, pos + _MIN_SIZE))
        if seg is not None:
            buf, base = seg
            q = pos - base
            quick = quick_header(buf, q, end - base, r.order)
            if quick is not None:
                word = quick.flags
                _, nzmax = r.pair.unpack_from(buf, q + 16)
                header = MatrixHeader(
                    quick.name, word & 0xFF, quick.matlab_class, quick.dims,
                    bool(word & _F_COMPLEX),
                    bool(word & _F_LOGICAL), bool(word & _F_GLOBAL), nzmax, pos, size,
                )  # fmt: skip
                return header, base + quick.next
    return _read_header_generic(r, pos, end, where)


def _read_header_generic(r: _Reader, pos: int, end: int, where: str) -> tuple[MatrixHeader, int]:
    """:func:`_read_header` subelement by subelement, each checked (and any problem named)."""
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
            text, cur = _read_string(r, cur, end, where, what)
            names.append(text)
        header = MatrixHeader(
            names[0], code, names[2], (1, 1), is_complex, is_logical, is_global, nzmax, pos,
            size, names[1],
        )  # fmt: skip
        return header, cur
    e = _element(r, cur, end, where, "dimensions")
    dims = _read_dims(r, e, where)
    name, cur = _read_string(r, e.next, end, where, "array name")
    if code == OBJECT:
        matlab_class, cur = _read_string(r, cur, end, where, "class name")
    else:
        matlab_class = _class_name(code, is_logical)
    header = MatrixHeader(
        name, code, matlab_class, dims, is_complex, is_logical, is_global, nzmax, pos, size
    )
    return header, cur


def _read_field_names(r: _Reader, cur: int, end: int, where: str) -> tuple[tuple[str, ...], int]:
    """The field name length and field names of a struct or object."""
    e = _element(r, cur, end, where, "field name length")
    if e.mdtype not in (MI_INT32, MI_UINT32) or e.nbytes != 4:
        raise FormatError(
            f"{where}: the field name length is {_mi(e.mdtype)} with {e.nbytes} bytes, "
            "expected miINT32 with 4"
        )
    (width,) = struct.unpack(f"{r.order}i", r.take(e.data, 4))
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
