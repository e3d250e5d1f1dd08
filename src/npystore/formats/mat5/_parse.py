"""Parsing a variable: a miMATRIX element into a tree of nodes with DataRefs, no values read."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.mat5._bulk import DecodedChars
from npystore.formats.mat5._char import CharArray, char_dims_problem
from npystore.formats.mat5._meta import MatrixHeader, _read_field_names, _read_header
from npystore.formats.mat5._nodes import (
    CellArray,
    MatNode,
    MatVariable,
    OpaqueObject,
    StructArray,
)
from npystore.formats.mat5._numeric import NumericArray, SparseArray, numeric_dtype
from npystore.formats.mat5._tags import (
    _CHAR_ENCODINGS,
    _CLASS_DTYPES,
    _MI_DTYPES,
    _MI_INTEGERS,
    CELL,
    CHAR,
    DEFAULT_MAX_DEPTH,
    FUNCTION,
    MAX_DEPTH_LIMIT,
    MAX_UNBACKED,
    MI_DOUBLE,
    MI_MATRIX,
    OBJECT,
    OPAQUE,
    SPARSE,
    STRUCT,
    TAG_SIZE,
    DataRef,
    _Bytes,
    _dt,
    _Elem,
    _element,
    _mi,
    _Reader,
)
from npystore.formats.mat5._vector import decode_children
from npystore.formats.need import NeedMoreBytes
from npystore.formats.shapes import check_shape


def parse_variable(
    element: _Bytes,
    element_offset: int,
    byte_order: str,
    *,
    source: str,
    max_depth: int = DEFAULT_MAX_DEPTH,
    inflated: bool = False,
    extra: Mapping[int, _Bytes] | None = None,
    decode_below: int = 0,
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
    decode_below : int
        Numeric, logical and char matrices inside cells and structs whose values take at
        most this many bytes (decoded) and lie in the given bytes are decoded here: they
        appear in the tree as read-only numpy arrays (MATLAB shape, the class's dtype) and,
        for char rows of common encodings, :class:`DecodedChars`. 0 (the default): none.
        Many small elements cost little then: the common layout is read without the
        generic parser's per-subelement work.

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
    reader.decode_below = max(0, decode_below)
    pos, end = reader.root()
    node = _parse_matrix(reader, pos, end, 0, max_depth, f"{source}: {reader.what(pos)}")
    if isinstance(node, np.ndarray | str | DecodedChars):  # pragma: no cover
        raise RuntimeError("only values below the top level are decoded while parsing")
    return MatVariable(node.name, node, pos, end - pos, inflated, node.is_global, source)


def _parse_matrix(
    r: _Reader, pos: int, end: int, depth: int, max_depth: int, where: str
) -> MatNode:
    """Parse the miMATRIX at ``pos``, whose tag is known to end at ``end``."""
    h, cur = _read_header(r, pos, end, where)
    if depth == 0:
        where = f"{r.source}: variable {h.name!r}"
    code, dims, numel = h.class_code, h.dims, math.prod(h.dims)
    order = r.order
    dense = _dense_dtype(h)
    if dense is not None:  # an empty array of huge dimensions: refused before any is made
        check_shape(dims, dense, source=where)
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
        numeric = NumericArray(
            h.name, dims, h.matlab_class, h.is_complex, real, imag, pos, h.size, h.is_global
        )
        if depth and r.decode_below and numel * numeric.dtype.itemsize <= r.decode_below:
            return _decoded(r, numeric)
        return numeric
    if code == CHAR:
        e = _element(r, cur, end, where, "char data")
        encoding, ref = _char_ref(e, numel, order, where, dims)
        return CharArray(h.name, dims, encoding, ref, pos, h.size, h.is_global)
    if code == SPARSE:
        return _parse_sparse(r, h, cur, end, order, where)
    if code == CELL:
        _check_children(numel, cur, end, where, f"{numel} cells")
        cells = _parse_children(
            r, cur, end, depth, max_depth, numel, lambda i: f"{where}{{{i + 1}}}"
        )
        return CellArray(h.name, dims, cells, pos, h.size, h.is_global)
    if code in (STRUCT, OBJECT):
        fields, cur = _read_field_names(r, cur, end, where)
        if not fields and numel > MAX_UNBACKED:
            # no bytes behind its elements: nothing else bounds the count (each element
            # becomes a Python object when the struct is decoded)
            raise UnsupportedError(
                f"{where}: a struct array of {numel} elements without fields (dims {dims}), "
                f"more than the {MAX_UNBACKED} this parser reads"
            )
        k = len(fields)
        _check_children(numel * k, cur, end, where, f"{numel} x {k} fields")
        values = _parse_children(
            r,
            cur,
            end,
            depth,
            max_depth,
            numel * k,
            lambda i: f"{where}({i // k + 1}).{fields[i % k]}",
        )
        class_name = h.matlab_class if code == OBJECT else None
        return StructArray(h.name, dims, fields, values, class_name, pos, h.size, h.is_global)
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


def _dense_dtype(h: MatrixHeader) -> np.dtype[Any] | None:
    """The dtype of the numpy array of ``h.dims`` the matrix decodes to, if there is one:
    the class's dtype, ``<U1`` for the code points of a char array, object for cells and
    structs; None for sparse matrices, function handles and opaque objects."""
    code = h.class_code
    if code in _CLASS_DTYPES:
        return numeric_dtype(h.matlab_class, h.is_complex and not h.is_logical)
    if code == CHAR:
        return np.dtype("<U1")
    if code in (CELL, STRUCT, OBJECT):
        return np.dtype(object)
    return None


def _parse_child(
    r: _Reader, pos: int, end: int, depth: int, max_depth: int, where: str
) -> tuple[MatNode, int]:
    """Parse the nested miMATRIX at ``pos``; return it and the offset after it."""
    if depth + 1 > max_depth:
        raise FormatError(
            f"{where}: nested more than max_depth={max_depth} levels deep; pass "
            f"open_mat(..., max_depth=N) (at most {MAX_DEPTH_LIMIT}) to read deeper values"
        )
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


def _parse_children(
    r: _Reader,
    pos: int,
    end: int,
    depth: int,
    max_depth: int,
    count: int,
    label: Callable[[int], str],
) -> tuple[MatNode, ...]:
    """Parse ``count`` consecutive nested miMATRIX elements from ``pos`` (``label(i)``
    names the i-th in messages): the walk shared by cell elements and struct fields.

    With ``r.decode_below`` and the elements in one segment, small leaves of the common
    layout are decoded by :func:`~npystore.formats.mat5._vector.decode_children` (no
    per-subelement objects); the others go through the generic parser.
    """
    nodes: list[MatNode] = []
    limit = r.decode_below
    seg = r.segment(pos, end) if limit and depth < max_depth else None
    if seg is None:
        for i in range(count):
            node, pos = _parse_child(r, pos, end, depth, max_depth, label(i))
            nodes.append(node)
        return tuple(nodes)

    def fallback(i: int, at: int) -> tuple[MatNode, int]:
        return _parse_child(r, at, end, depth, max_depth, label(i))

    buf, base = seg
    return tuple(decode_children(buf, base, pos, end, count, r.order, limit, r.memo, fallback))


def _decoded(r: _Reader, node: NumericArray) -> MatNode:
    """The values of a small numeric leaf, read-only, when they lie in the given bytes;
    else the node itself (its values are read later), as for complex integers (whose
    class complex128 values would not tell)."""
    if node.is_complex and node.matlab_class not in ("double", "single"):
        return node
    try:
        real = np.frombuffer(r.take(node.real.offset, node.real.nbytes), node.real.stored_dtype)
        imag = None
        if node.imag is not None:
            imag = np.frombuffer(r.take(node.imag.offset, node.imag.nbytes), node.imag.stored_dtype)
    except NeedMoreBytes:
        return node
    arr = node.convert(real, imag).reshape(node.dims, order="F")
    arr.setflags(write=False)
    return arr


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
