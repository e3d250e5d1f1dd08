"""A parsed MAT v5 variable (:mod:`npystore.formats.mat5` nodes) as a
:mod:`npystore.files.mat.tree`.

Numeric leaves become :class:`~npystore.read.access.LayoutArray` objects over the variable's
address space (the file, or its zlib stream: see :mod:`npystore.files.mat.v5`); leaves the parser
decoded with their container (``decode_below``) become :class:`~npystore.files.mat.tree.ValueLeaf`
and :class:`~npystore.files.mat.tree.CharLeaf` without any further work, one per distinct value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.files.mat.tree import (
    CellNode,
    CharLeaf,
    LeafCells,
    MatlabObject,
    MatNode,
    NumericLeaf,
    ObjectLeaf,
    SparseLeaf,
    StructNode,
    ValueLeaf,
    row_leaf,
)
from npystore.formats import mat5
from npystore.formats.mat5 import DataRef
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, ConvertedExtent, Storage

__all__ = ["Builder", "char_value"]


class Source(Protocol):
    """Where a variable's bytes are (``npystore.files.mat.v5._Source``)."""

    def read(self, start: int, stop: int) -> bytes: ...

    def storage(self, ref: DataRef) -> Storage: ...


class Builder:
    """Turns a parsed v5 tree into a :data:`~npystore.files.mat.tree.MatNode` tree."""

    def __init__(
        self, src: Source, reader: RangeReader, char_errors: mat5.CharErrors = "strict"
    ) -> None:
        self.src = src
        self.reader = reader
        self.char_errors: mat5.CharErrors = char_errors

    def array(self, dtype: np.dtype[Any], shape: tuple[int, ...], storage: Storage,
              path: str) -> LayoutArray:  # fmt: skip
        layout = ArrayLayout(dtype, shape, "F", storage)
        return LayoutArray(self.reader, layout, source=f"{self.reader.url}:{path}")

    def part(self, ref: DataRef, shape: tuple[int, ...]) -> ArrayLayout:
        return ArrayLayout(ref.stored_dtype, shape, "F", self.src.storage(ref))

    def values(
        self, dtype: np.dtype[Any], shape: tuple[int, ...], real: DataRef,
        imag: DataRef | None, path: str,
    ) -> LayoutArray:  # fmt: skip
        """The leaf's values as ``dtype``: the stored range itself when it already is."""
        if imag is None and real.stored_dtype == dtype:
            return self.array(dtype, shape, self.src.storage(real), path)
        parts = ConvertedExtent(
            self.part(real, shape), None if imag is None else self.part(imag, shape)
        )
        return self.array(dtype, shape, parts, path)

    @staticmethod
    def chars(node: mat5.DecodedChars) -> CharLeaf:
        """The leaf of a char row decoded with its container."""
        return CharLeaf(node.text, None, node.dims)  # its units: its code points

    def children(self, nodes: Sequence[mat5.MatNode], label: Callable[[int], str]) -> list[MatNode]:
        """The leaves and subtrees of a container's elements (``label(i)`` is the path of
        the i-th); decoded values cost one leaf per distinct value."""
        out: list[MatNode] = []
        append = out.append
        for i, node in enumerate(nodes):
            kind = type(node)
            if kind is np.ndarray:
                append(ValueLeaf(node))  # type: ignore[arg-type]  # the type is checked
            elif kind is str:
                append(row_leaf(node))  # type: ignore[arg-type]
            elif kind is mat5.DecodedChars:
                append(CharLeaf(node.text, None, node.dims))  # type: ignore[union-attr]
            else:
                append(self.build(node, label(i)))
        return out

    def cells(self, nodes: Sequence[mat5.MatNode], path: str) -> Sequence[MatNode]:
        """A cell's elements: decoded numeric values kept as their arrays
        (:class:`~npystore.files.mat.tree.LeafCells`) when there are many."""
        if len(nodes) < mat5.VECTOR_MIN:
            return tuple(self.children(nodes, lambda i: f"{path}{{{i}}}"))
        items: list[Any] = []
        append = items.append
        for i, node in enumerate(nodes):
            kind = type(node)
            if kind is np.ndarray or kind is str:
                append(node)
            elif kind is mat5.DecodedChars:
                append(CharLeaf(node.text, None, node.dims))  # type: ignore[union-attr]
            else:
                append(self.build(node, f"{path}{{{i}}}"))
        return LeafCells(items)

    def build(self, node: mat5.MatNode, path: str) -> MatNode:
        if isinstance(node, np.ndarray):
            return ValueLeaf(node)
        if isinstance(node, str):
            return row_leaf(node)
        if isinstance(node, mat5.DecodedChars):
            return self.chars(node)
        if isinstance(node, mat5.NumericArray):
            arr = self.values(node.dtype, node.dims, node.real, node.imag, path)
            return NumericLeaf(arr, node.matlab_class, node.dims)
        if isinstance(node, mat5.CharArray):
            data = self.src.read(node.data.offset, node.data.end)
            try:
                units = node.code_units(data, node.data.offset, errors=self.char_errors)
                value = node.decode(
                    data, node.data.offset, as_strings=True, errors=self.char_errors
                )
            except FormatError as exc:  # name the file and the variable's path in it
                raise FormatError(f"{self.reader.url}:{path}: {exc}") from None
            return CharLeaf(char_value(value), units.reshape(node.dims, order="F"), node.dims)
        if isinstance(node, mat5.SparseArray):
            return self.sparse(node, path)
        if isinstance(node, mat5.CellArray):
            return CellNode(node.dims, self.cells(node.cells, path))
        if isinstance(node, mat5.StructArray):
            fields = node.field_names
            k = len(fields)
            elements: tuple[dict[str, MatNode], ...]
            if not k:  # ``struct()``: elements with no fields (what scipy reads)
                elements = tuple({} for _ in range(node.numel))
                return StructNode(node.dims, fields, elements, node.matlab_class)
            built = self.children(node.values, lambda i: f"{path}({i // k}).{fields[i % k]}")
            elements = (
                tuple({fields[0]: b} for b in built)
                if k == 1
                else tuple(
                    dict(zip(fields, built[i : i + k], strict=True))
                    for i in range(0, len(built), k)
                )
            )
            return StructNode(node.dims, fields, elements, node.matlab_class)
        reason = (
            "function handles are stored in MATLAB's undocumented subsystem"
            if node.kind == "function_handle"
            else f"{node.type_system or 'unknown'} objects are stored in MATLAB's undocumented "
            "subsystem"
        )
        dims = node.dims if node.kind != "opaque" else ()
        return ObjectLeaf(MatlabObject(node.matlab_class, dims, reason))

    def sparse(self, node: mat5.SparseArray, path: str) -> SparseLeaf:
        nnz_max = node.ir.count
        pr = node.pr
        count = min(nnz_max, pr.count)
        real = DataRef(pr.offset, count * pr.stored_dtype.itemsize, pr.stored_dtype, pr.data_type)
        imag = None
        if node.pi is not None:
            pi = node.pi
            imag = DataRef(pi.offset, count * pi.stored_dtype.itemsize, pi.stored_dtype,
                           pi.data_type)  # fmt: skip
        data = self.values(node.dtype, (count,), real, imag, f"{path}.data")
        ir = self.array(node.ir.stored_dtype, (node.ir.count,), self.src.storage(node.ir),
                        f"{path}.ir")  # fmt: skip
        jc = self.array(node.jc.stored_dtype, (node.jc.count,), self.src.storage(node.jc),
                        f"{path}.jc")  # fmt: skip
        return SparseLeaf(node.dims, node.matlab_class, data, ir, jc, node.is_complex)


def char_value(value: Any) -> Any:
    """A char array's user value from its rows: one ``str`` for a single row (or none),
    else the object array of rows."""
    arr = np.asarray(value, dtype=object)
    if arr.size == 1:
        return str(arr.reshape(-1)[0])
    if arr.size == 0 and arr.ndim <= 1:
        return ""
    return arr
