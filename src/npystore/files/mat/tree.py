"""MATLAB values as a tree of layouts: what both MAT readers (v5/v4 and v7.3) produce.

A reader turns one variable into a :data:`MatNode` tree without reading numeric data:
numeric leaves hold a :class:`~npystore.read.access.LayoutArray` in MATLAB shape (the layout's
dtype is the MATLAB class's dtype), chars are decoded (they arrive with the metadata),
containers hold their children, objects become :class:`MatlabObject` placeholders. The faces
consume the tree: :func:`to_value` gives what :func:`npystore.open_mat` returns (dask arrays,
str, mappings, object arrays, scipy.sparse), and :mod:`npystore.matstore` gives Zarr nodes.
Nothing here parses bytes or does IO beyond reading leaves through their LayoutArrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, overload

import numpy as np

from npystore.errors import FormatError, require
from npystore.fetch import RangeReader
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, InlineExtent

__all__ = [
    "EAGER_BYTES",
    "CellNode",
    "LeafCells",
    "CharLeaf",
    "MatInfo",
    "MatNode",
    "MatStruct",
    "MatlabObject",
    "NumericLeaf",
    "ObjectLeaf",
    "SparseLeaf",
    "StructNode",
    "ValueLeaf",
    "build_csc",
    "empty_struct_array",
    "row_leaf",
    "to_value",
]

#: Numeric, logical and complex arrays inside cells and structs whose values take at most
#: this many bytes are read with their container (:class:`ValueLeaf`), not one by one: a
#: cell of 100,000 scalars costs one parse, not 100,000 lazy arrays.
EAGER_BYTES: Final = 64 * 2**10


@dataclass(frozen=True, slots=True)
class MatInfo:
    """One variable as MATLAB's ``whos`` lists it, known without reading its data.

    Attributes
    ----------
    name : str
        Variable name.
    matlab_class : str
        MATLAB's ``class()``: ``"double"`` ... ``"uint64"``, ``"logical"``, ``"char"``,
        ``"cell"``, ``"struct"``, ``"function_handle"`` or an object's class name.
    dims : tuple of int
        MATLAB's ``size()`` (at least 2 values); ``()`` when the file does not record it
        (some objects).
    sparse, complex, is_global : bool
        Attributes as in ``whos``.
    refused : str
        Why npystore refuses to read the variable (reading it raises
        :class:`~npystore.errors.UnsupportedError`), e.g. an HDF5 external link or external
        storage; ``""`` when nothing was refused while listing it.
    """

    name: str
    matlab_class: str
    dims: tuple[int, ...]
    sparse: bool = False
    complex: bool = False
    is_global: bool = False
    refused: str = ""

    def __str__(self) -> str:
        size = "x".join(map(str, self.dims)) if self.dims else "?"
        extra = " ".join(
            word
            for word, on in (("sparse", self.sparse), ("complex", self.complex),
                             ("global", self.is_global), ("refused", bool(self.refused)))
            if on
        )  # fmt: skip
        return f"{self.name}  {size}  {self.matlab_class}" + (f"  {extra}" if extra else "")


@dataclass(frozen=True, slots=True)
class MatlabObject:
    """A MATLAB value npystore does not decode: a classdef object, function handle, string,
    table, datetime, ... (its data lives in MATLAB's undocumented subsystem).

    Attributes
    ----------
    matlab_class : str
        The MATLAB class name (e.g. ``"table"``, ``"function_handle"``, ``"MyClass"``).
    dims : tuple of int
        Its ``size()`` when the file records it, else ``()``.
    reason : str
        Why it is a placeholder.
    """

    matlab_class: str
    dims: tuple[int, ...] = ()
    reason: str = "MATLAB objects are stored in an undocumented format"

    def __repr__(self) -> str:
        size = "x".join(map(str, self.dims)) if self.dims else "?"
        return f"<MATLAB {self.matlab_class} {size}: not read ({self.reason})>"


class MatStruct(Mapping[str, Any]):
    """One element of a MATLAB struct: an ordered, read-only mapping of field -> value.

    ``matlab_class`` is ``"struct"`` or, for an old-style object, its class name.
    """

    __slots__ = ("_fields", "matlab_class")

    def __init__(self, fields: Mapping[str, Any], matlab_class: str = "struct") -> None:
        self._fields = dict(fields)
        self.matlab_class = matlab_class

    @classmethod
    def _adopt(cls, fields: dict[str, Any], matlab_class: str) -> MatStruct:
        """A struct over ``fields`` itself (a new dict nobody else holds): no copy."""
        out = cls.__new__(cls)
        out._fields = fields
        out.matlab_class = matlab_class
        return out

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        kind = "" if self.matlab_class == "struct" else f" {self.matlab_class}"
        return f"<MatStruct{kind} fields={list(self._fields)}>"


@dataclass(frozen=True)
class NumericLeaf:
    """A numeric, logical or complex array: lazy, in MATLAB shape and class dtype."""

    array: LayoutArray
    matlab_class: str
    dims: tuple[int, ...]


#: MATLAB class of the values of a :class:`ValueLeaf`, by dtype (complex: of its parts).
_CLASS_BY_DTYPE: Final = {
    np.dtype(code): name
    for code, name in (
        ("f8", "double"), ("f4", "single"), ("i1", "int8"), ("u1", "uint8"), ("i2", "int16"),
        ("u2", "uint16"), ("i4", "int32"), ("u4", "uint32"), ("i8", "int64"), ("u8", "uint64"),
        ("?", "logical"), ("c16", "double"), ("c8", "single"),
    )
}  # fmt: skip


class ValueLeaf:
    """A small numeric, logical or complex array read with its container (see
    :data:`EAGER_BYTES`): ``value`` is a read-only numpy array in MATLAB shape and the
    class's dtype (complex64/complex128 for complex single/double).

    Leaves of identical content may share one ``value``; ``numpy.array(leaf.value)`` gives
    a writable copy.
    """

    __slots__ = ("value",)

    def __init__(self, value: np.ndarray[Any, Any]) -> None:
        self.value = value

    @property
    def matlab_class(self) -> str:
        """MATLAB's ``class()``: from the dtype."""
        return _CLASS_BY_DTYPE[self.value.dtype]

    @property
    def dims(self) -> tuple[int, ...]:
        """MATLAB's ``size()``."""
        shape: tuple[int, ...] = self.value.shape
        return shape

    def __repr__(self) -> str:
        return f"ValueLeaf({self.matlab_class} {'x'.join(map(str, self.dims))})"

    def as_array(self, reader: RangeReader, source: str) -> LayoutArray:
        """The values as a :class:`~npystore.read.access.LayoutArray` (held in its layout; the
        reader is never read): what the faces that need one use."""
        data = np.asfortranarray(self.value)
        layout = ArrayLayout(data.dtype, data.shape, "F", InlineExtent(data.tobytes(order="F")))
        return LayoutArray(reader, layout, source=source)


class CharLeaf:
    """A char array, already decoded.

    ``value`` is a ``str`` (one row) or an object array of ``str`` (one per row: shape
    ``(dims[0],) + dims[2:]``); ``units`` holds the UTF-16 code units in MATLAB shape.

    ``units`` may be given as None for a single row (or none) whose code units are its
    characters' code points (no character beyond the BMP): they are then made from
    ``value`` when first asked for (a cell of 100,000 strings rarely needs them).
    """

    __slots__ = ("_units", "dims", "value")

    matlab_class = "char"

    def __init__(
        self, value: Any, units: np.ndarray[Any, Any] | None, dims: tuple[int, ...]
    ) -> None:
        self.value = value
        self._units = units
        self.dims = dims

    @property
    def units(self) -> np.ndarray[Any, Any]:
        """The code units, uint32, MATLAB shape."""
        if self._units is None:
            points = np.frombuffer(str(self.value).encode("utf-32-le"), "<u4")
            self._units = points.astype(np.uint32).reshape(self.dims, order="F")
        return self._units

    def __repr__(self) -> str:
        return f"CharLeaf({self.value!r}, dims={self.dims})"


@dataclass(frozen=True)
class SparseLeaf:
    """A sparse matrix: compressed sparse columns, parts read on access.

    ``data`` holds the values in the class dtype (bool, float64 or complex128);
    ``ir`` the row of each value, ``jc`` the ``dims[1] + 1`` column starts.
    """

    dims: tuple[int, ...]
    matlab_class: str
    data: LayoutArray
    ir: LayoutArray
    jc: LayoutArray
    is_complex: bool = False

    def load(self) -> Any:
        """The matrix as ``scipy.sparse.csc_matrix``."""
        return build_csc(
            self.dims, self.data.read(), self.ir.read(), self.jc.read(), source=self.data.source
        )


@dataclass(frozen=True)
class ObjectLeaf:
    """A value kept as a placeholder."""

    obj: MatlabObject

    @property
    def matlab_class(self) -> str:
        """The object's class."""
        return self.obj.matlab_class

    @property
    def dims(self) -> tuple[int, ...]:
        """Its size, if known."""
        return self.obj.dims


@dataclass(frozen=True)
class CellNode:
    """A cell array: its elements in column-major order (a tuple, or :class:`LeafCells`
    when most are small values read with the cell)."""

    dims: tuple[int, ...]
    cells: Sequence[MatNode]
    matlab_class: str = "cell"


class LeafCells(Sequence["MatNode"]):
    """The elements of a cell, small values kept as they are: a numpy array becomes a
    :class:`ValueLeaf`, a ``str`` a one-row :class:`CharLeaf` when it is looked at (a new
    one each time), and :func:`to_value` takes them as they are. A cell of 100,000
    numbers or strings then costs no object per element beyond its value.

    Parameters
    ----------
    items : list
        Per element: its read-only numpy array (a :class:`ValueLeaf`'s value), its text (a
        char row of ``(1, len(text))`` characters, each one code unit), or its node.
    """

    __slots__ = ("_items",)

    def __init__(self, items: list[np.ndarray[Any, Any] | str | MatNode]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> MatNode: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[MatNode, ...]: ...

    def __getitem__(self, index: int | slice) -> MatNode | tuple[MatNode, ...]:
        if isinstance(index, slice):
            return tuple(_leaf(item) for item in self._items[index])
        return _leaf(self._items[index])

    def raw(self) -> list[np.ndarray[Any, Any] | str | MatNode]:
        """The elements as held: arrays and str for the small values."""
        return self._items

    def __repr__(self) -> str:
        return f"LeafCells({len(self._items)} elements)"


def _leaf(item: np.ndarray[Any, Any] | str | MatNode) -> MatNode:
    if isinstance(item, np.ndarray):
        return ValueLeaf(item)
    if isinstance(item, str):
        return row_leaf(item)
    return item


def row_leaf(text: str) -> CharLeaf:
    """The leaf of a char row of ``(1, len(text))`` characters, each one code unit."""
    return CharLeaf(text, None, (1, len(text)))


@dataclass(frozen=True)
class StructNode:
    """A struct array (or old-style object): per element (column-major), field -> node."""

    dims: tuple[int, ...]
    fields: tuple[str, ...]
    elements: tuple[Mapping[str, MatNode], ...]
    matlab_class: str = "struct"
    attributes: Mapping[str, Any] = field(default_factory=dict)


MatNode: TypeAlias = (
    NumericLeaf | ValueLeaf | CharLeaf | SparseLeaf | ObjectLeaf | CellNode | StructNode
)


def build_csc(
    dims: tuple[int, ...],
    data: np.ndarray[Any, Any],
    ir: np.ndarray[Any, Any],
    jc: np.ndarray[Any, Any],
    *,
    source: str,
) -> Any:
    """A ``scipy.sparse.csc_matrix`` from MATLAB's parts, checked first.

    Raises
    ------
    FormatError
        Column starts that are not non-decreasing from 0, or rows out of range.
    """
    scipy_sparse = require("scipy.sparse", "scipy", "mat", f"{source}: a sparse variable")

    if len(dims) != 2:
        raise FormatError(f"{source}: sparse matrix with dims {dims}, expected 2 dims")
    m, n = dims
    jc, ir = (_integers(np.asarray(a).ravel()) for a in (jc, ir))  # checked before a cast
    data = np.asarray(data).ravel()
    if jc.size != n + 1:
        raise FormatError(f"{source}: sparse jc has {jc.size} values, expected {n + 1}")
    nnz = int(jc[-1])
    if jc[0] != 0 or (jc[1:] < jc[:-1]).any() or nnz > min(ir.size, data.size):
        raise FormatError(
            f"{source}: sparse column starts {jc[:8].tolist()}... are not non-decreasing from 0 "
            f"to at most {min(ir.size, data.size)} values"
        )
    ir, data = ir[:nnz], data[:nnz]
    if nnz and (int(ir.min()) < 0 or int(ir.max()) >= m):
        raise FormatError(f"{source}: sparse row index outside 0..{m - 1}")
    # every value now fits the index type (rows below m, starts at most nnz)
    index_dtype = np.int32 if max(m, n, nnz) < 2**31 else np.int64
    return scipy_sparse.csc_matrix(
        (data, ir.astype(index_dtype, copy=False), jc.astype(index_dtype, copy=False)),
        shape=(m, n),
    )


def _integers(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """An integer array as it is, another as int64."""
    return a if a.dtype.kind in "iu" else a.astype(np.int64)


def to_value(
    node: MatNode,
    *,
    numeric: Callable[[NumericLeaf], Any],
    array: Callable[[np.ndarray[Any, Any]], Any] | None = None,
    depth: int = 0,
) -> Any:
    """The user-facing value of a tree (what :func:`npystore.open_mat` returns).

    Parameters
    ----------
    node : MatNode
        The tree.
    numeric : callable
        Makes the value of a numeric leaf (the dask array, with the caller's chunks and
        squeeze choice).
    array : callable, optional
        Makes the value of a :class:`ValueLeaf` from its numpy array (e.g. squeezes it);
        the array itself by default.

    Returns
    -------
    Any
        dask or numpy array, str / object array of str, :class:`MatStruct` or object array
        of them (an empty struct array: an empty structured array, see
        :func:`empty_struct_array`), object array (cells), ``scipy.sparse.csc_matrix`` or
        :class:`MatlabObject`.
    """
    if isinstance(node, ValueLeaf):
        return node.value if array is None else array(node.value)
    if isinstance(node, CharLeaf):
        return node.value
    if isinstance(node, NumericLeaf):
        return numeric(node)
    if isinstance(node, SparseLeaf):
        return node.load()
    if isinstance(node, ObjectLeaf):
        return node.obj
    if isinstance(node, CellNode):
        items = node.cells.raw() if isinstance(node.cells, LeafCells) else node.cells
        cells = [_child_value(c, numeric, array, depth) for c in items]
        return _object_array(cells, node.dims)
    if not node.elements and math.prod(node.dims) == 0:
        return empty_struct_array(node.fields, node.dims, node.matlab_class)
    adopt, cls = MatStruct._adopt, node.matlab_class  # its own fast path
    elements = [
        adopt({f: _child_value(v, numeric, array, depth) for f, v in e.items()}, cls)
        for e in node.elements
    ]
    if math.prod(node.dims) == 1 and len(elements) == 1:
        return elements[0]
    return _object_array(elements, node.dims)


def empty_struct_array(
    fields: Sequence[str], dims: tuple[int, ...], matlab_class: str = "struct"
) -> np.ndarray[Any, Any]:
    """The value of a struct array with no elements (MATLAB's ``struct('a', {})``, a 0x0
    or 1x0 struct): an empty numpy structured array in MATLAB's shape with one object
    field per MATLAB field, in order, as ``scipy.io.loadmat`` gives it; the class (
    ``"struct"`` or an old-style object's) is ``dtype.metadata["matlab_class"]``.

    An empty object array would hold neither the field names nor the class, and would
    read as an empty cell.
    """
    dtype = np.dtype(
        {"names": list(fields), "formats": [object] * len(fields)},
        metadata={"matlab_class": matlab_class},
    )
    return np.empty(dims, dtype=dtype)


def _child_value(
    node: MatNode | np.ndarray[Any, Any] | str,
    numeric: Callable[[NumericLeaf], Any],
    array: Callable[[np.ndarray[Any, Any]], Any] | None,
    depth: int,
) -> Any:
    """A child's value (a node, or a :class:`LeafCells` array): small leaves (the many
    elements of big containers) without another call of :func:`to_value`."""
    if isinstance(node, str):
        return node
    if isinstance(node, np.ndarray):
        return node if array is None else array(node)
    if isinstance(node, ValueLeaf) and array is None:
        return node.value
    if isinstance(node, CharLeaf):
        return node.value
    return to_value(node, numeric=numeric, array=array, depth=depth + 1)


def _object_array(items: list[Any], dims: tuple[int, ...]) -> np.ndarray[Any, Any]:
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out.reshape(dims, order="F")
