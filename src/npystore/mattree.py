"""MATLAB values as a tree of layouts: what both MAT readers (v5/v4 and v7.3) produce.

A reader turns one variable into a :data:`MatNode` tree without reading numeric data:
numeric leaves hold a :class:`~npystore.access.LayoutArray` in MATLAB shape (the layout's
dtype is the MATLAB class's dtype), chars are decoded (they arrive with the metadata),
containers hold their children, objects become :class:`MatlabObject` placeholders. The faces
consume the tree: :func:`to_value` gives what :func:`npystore.open_mat` returns (dask arrays,
str, mappings, object arrays, scipy.sparse), and :mod:`npystore.matstore` gives Zarr nodes.
Nothing here parses bytes or does IO beyond reading leaves through their LayoutArrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from npystore.access import LayoutArray
from npystore.errors import FormatError, require

__all__ = [
    "CellNode",
    "CharLeaf",
    "MatInfo",
    "MatNode",
    "MatStruct",
    "MatlabObject",
    "NumericLeaf",
    "ObjectLeaf",
    "SparseLeaf",
    "StructNode",
    "build_csc",
    "to_value",
]


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


@dataclass(frozen=True)
class CharLeaf:
    """A char array, already decoded.

    ``value`` is a ``str`` (one row) or an object array of ``str`` (one per row: shape
    ``(dims[0],) + dims[2:]``); ``units`` holds the UTF-16 code units in MATLAB shape.
    """

    value: Any
    units: np.ndarray[Any, Any]
    dims: tuple[int, ...]
    matlab_class: str = "char"


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
    """A cell array: its elements in column-major order."""

    dims: tuple[int, ...]
    cells: tuple[MatNode, ...]
    matlab_class: str = "cell"


@dataclass(frozen=True)
class StructNode:
    """A struct array (or old-style object): per element (column-major), field -> node."""

    dims: tuple[int, ...]
    fields: tuple[str, ...]
    elements: tuple[Mapping[str, MatNode], ...]
    matlab_class: str = "struct"
    attributes: Mapping[str, Any] = field(default_factory=dict)


MatNode: TypeAlias = NumericLeaf | CharLeaf | SparseLeaf | ObjectLeaf | CellNode | StructNode


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
    jc = np.asarray(jc, dtype=np.int64).ravel()
    ir = np.asarray(ir, dtype=np.int64).ravel()
    data = np.asarray(data).ravel()
    if jc.size != n + 1:
        raise FormatError(f"{source}: sparse jc has {jc.size} values, expected {n + 1}")
    nnz = int(jc[-1]) if jc.size else 0
    if jc[0] != 0 or np.any(np.diff(jc) < 0) or nnz > min(ir.size, data.size):
        raise FormatError(
            f"{source}: sparse column starts {jc[:8].tolist()}... are not non-decreasing from 0 "
            f"to at most {min(ir.size, data.size)} values"
        )
    ir, data = ir[:nnz], data[:nnz]
    if nnz and (ir.min() < 0 or ir.max() >= m):
        raise FormatError(f"{source}: sparse row index outside 0..{m - 1}")
    index_dtype = np.int32 if max(m, n, nnz) < 2**31 else np.int64
    return scipy_sparse.csc_matrix(
        (data, ir.astype(index_dtype), jc.astype(index_dtype)), shape=(m, n)
    )


def to_value(
    node: MatNode,
    *,
    numeric: Callable[[NumericLeaf], Any],
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

    Returns
    -------
    Any
        dask array, str / object array of str, :class:`MatStruct` or object array of them,
        object array (cells), ``scipy.sparse.csc_matrix`` or :class:`MatlabObject`.
    """
    if isinstance(node, NumericLeaf):
        return numeric(node)
    if isinstance(node, CharLeaf):
        return node.value
    if isinstance(node, SparseLeaf):
        return node.load()
    if isinstance(node, ObjectLeaf):
        return node.obj
    if isinstance(node, CellNode):
        cells = [to_value(c, numeric=numeric, depth=depth + 1) for c in node.cells]
        return _object_array(cells, node.dims)
    elements = [
        MatStruct(
            {f: to_value(e[f], numeric=numeric, depth=depth + 1) for f in node.fields},
            node.matlab_class,
        )
        for e in node.elements
    ]
    if math.prod(node.dims) == 1 and len(elements) == 1:
        return elements[0]
    return _object_array(elements, node.dims)


def _object_array(items: list[Any], dims: tuple[int, ...]) -> np.ndarray[Any, Any]:
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out.reshape(dims, order="F")
