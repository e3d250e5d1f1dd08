"""MATLAB variables as xarray variables, and scalar structs as groups.

Numeric, logical and complex variables become lazy variables in MATLAB's ``size()``
(length-1 dimensions dropped with ``squeeze=True``); char variables become string
variables; a scalar (1x1) struct is a group whose fields are its variables (nested structs
are groups below it). Cells, struct arrays, sparse matrices and objects have no xarray
form: they are reported as skipped, with what reads them instead.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any, Final, TypeGuard

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.faces.matfile import MatFile
from npystore.faces.xarray.array import (
    NpystoreBackendArray,
    VariableMaker,
    drop_axes,
    preferred_chunks,
)
from npystore.faces.xarray.names import default_dims
from npystore.fetch import RangeReader
from npystore.files.mat.tree import CharLeaf, MatInfo, MatNode, NumericLeaf, StructNode, ValueLeaf
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, RawExtent

__all__ = ["MatVariables"]

_NUMERIC_CLASSES: Final = {
    "double": "f8", "single": "f4", "int8": "i1", "uint8": "u1", "int16": "i2",
    "uint16": "u2", "int32": "i4", "uint32": "u4", "int64": "i8", "uint64": "u8",
}  # fmt: skip


class MatVariables:
    """The variables and groups of an open MAT-file, for the engine's datasets.

    Parameters
    ----------
    reader : RangeReader
        The file's reader (``ValueLeaf`` values are read through it).
    mat : MatFile
        The open MAT-file.
    squeeze : bool
        Drop the length-1 dimensions of numeric variables.
    """

    def __init__(self, reader: RangeReader, mat: MatFile, squeeze: bool) -> None:
        self.reader = reader
        self.url = reader.url
        self.mat = mat
        self.squeeze = squeeze
        self._lock = threading.Lock()

    def variables(
        self, group: str | None, drop: frozenset[str], skipped: dict[str, str], warn_structs: bool
    ) -> dict[str, VariableMaker]:
        """The variables of the root (``group=None``) or of a scalar struct (``"s/t"``).

        Parameters
        ----------
        group : str or None
            ``None`` for the file's variables, else the path of a scalar struct.
        drop : frozenset of str
            Names to leave out (never read).
        skipped : dict of str to str
            Filled with the names left out for having no xarray form, and why.
        warn_structs : bool
            Whether scalar structs count as skipped (they are groups of their own in a
            DataTree).

        Returns
        -------
        dict of str to VariableMaker
            The variables, in the file's order.

        Raises
        ------
        UnsupportedError
            A variable npystore refuses to read (``drop_variables`` leaves it out).
        ValueError
            ``group`` is not a scalar struct of the file.
        """
        out: dict[str, VariableMaker] = {}
        if group is None:
            for name, info in self.mat.variables.items():
                if name in drop:
                    continue
                if info.refused:
                    raise UnsupportedError(
                        f"{info.refused}; pass drop_variables={name!r} to open the others"
                    )
                why = _mat_skip_reason(info)
                if why is None and info.matlab_class == "char":
                    out[name] = self._char(name, self._node(name))
                elif why is None:
                    out[name] = self._numeric_lazy(name, info)
                elif why != "struct" or warn_structs:
                    skipped[name] = _explain(why, name)
            return out
        for name, node in self._struct(group).items():
            if name in drop:
                continue
            if isinstance(node, NumericLeaf):
                out[name] = self._numeric(name, node)
            elif isinstance(node, ValueLeaf):  # read with its struct
                leaf = NumericLeaf(
                    node.as_array(self.reader, f"{self.url}:{group}/{name}"),
                    node.matlab_class,
                    node.dims,
                )
                out[name] = self._numeric(name, leaf)
            elif isinstance(node, CharLeaf):
                out[name] = self._char(name, node)
            elif _is_scalar_struct(node):
                if warn_structs:
                    skipped[name] = _explain("struct", f"{group}/{name}")
            else:
                skipped[name] = _explain(_node_skip_reason(node), name)
        return out

    def groups(self, drop: frozenset[str]) -> list[str]:
        """Paths of every scalar struct (nested ones as ``"s/t"``), parents first."""
        paths: list[str] = []
        todo = [
            name
            for name, info in self.mat.variables.items()
            if name not in drop and _mat_skip_reason(info) == "struct"
        ]
        while todo:
            path = todo.pop(0)
            node = self._node_at(path)
            if not _is_scalar_struct(node):
                continue
            paths.append(path)
            fields = self._struct(path)
            todo.extend(
                f"{path}/{f}"
                for f, child in fields.items()
                if f not in drop and _is_scalar_struct(child)
            )
        return paths

    # -- structs -----------------------------------------------------------------------------

    def _node(self, name: str) -> MatNode:
        with self._lock:
            return self.mat.node(name)

    def _node_at(self, path: str) -> MatNode:
        first, *rest = path.split("/")
        if first not in self.mat.variables:
            raise ValueError(
                f"{self.url}: no group {path!r}: {first!r} is not a variable (variables: "
                f"{sorted(self.mat.variables)})"
            )
        node = self._node(first)
        walked = first
        for part in rest:
            if not _is_scalar_struct(node):
                size = "x".join(map(str, node.dims))
                raise ValueError(
                    f"{self.url}: no group {path!r}: {walked!r} is a {size} "
                    f"{node.matlab_class}, not a scalar (1x1) struct"
                )
            if part not in node.elements[0]:
                raise ValueError(
                    f"{self.url}: no group {path!r}: the struct {walked!r} has no field "
                    f"{part!r} (fields: {list(node.fields)})"
                )
            node = node.elements[0][part]
            walked = f"{walked}/{part}"
        return node

    def _struct(self, path: str) -> Mapping[str, MatNode]:
        node = self._node_at(path)
        if not _is_scalar_struct(node):
            size = "x".join(map(str, node.dims))
            raise ValueError(
                f"{self.url}: group {path!r} is a {size} {node.matlab_class}, expected a "
                f"scalar (1x1) struct"
            )
        return node.elements[0]

    # -- variables ---------------------------------------------------------------------------

    def _numeric_lazy(self, name: str, info: MatInfo) -> VariableMaker:
        """A top-level numeric variable. A v5 file's variable is parsed on first read (its
        element may hold the data itself); other versions' trees carry no data."""
        dtype = _mat_dtype(info.matlab_class, info.complex)
        shape, squeezed = self._shape(info.dims)
        attrs = _mat_attrs(info.matlab_class, info.is_global)
        if self.mat.version != "5":
            node = self._node(name)
            if isinstance(node, NumericLeaf):
                return self._numeric(name, node, attrs)
        # chunks as for a raw column-major array of this shape (the layout is not known yet)
        nbytes = math.prod(info.dims) * dtype.itemsize
        virtual = LayoutArray(self.reader, ArrayLayout(dtype, info.dims, "F", RawExtent(0, nbytes)))
        array = NpystoreBackendArray(lambda: self._leaf(name), shape, dtype, squeezed)
        preferred = drop_axes(preferred_chunks(virtual), squeezed)
        return VariableMaker(array, default_dims(name, len(shape)), attrs, preferred)

    def _leaf(self, name: str) -> LayoutArray:
        node = self._node(name)
        if not isinstance(node, NumericLeaf):
            raise FormatError(
                f"{self.url}: variable {name!r} was listed as numeric but reads as a "
                f"{type(node).__name__}"
            )
        return node.array

    def _numeric(
        self, name: str, leaf: NumericLeaf, attrs: dict[str, Any] | None = None
    ) -> VariableMaker:
        array = leaf.array
        dtype = array.dtype.newbyteorder("=")
        shape, squeezed = self._shape(array.shape)
        return VariableMaker(
            NpystoreBackendArray(array, shape, dtype, squeezed),
            default_dims(name, len(shape)),
            attrs if attrs is not None else _mat_attrs(leaf.matlab_class, False),
            drop_axes(preferred_chunks(array), squeezed),
        )

    def _char(self, name: str, node: MatNode) -> VariableMaker:
        if not isinstance(node, CharLeaf):
            raise FormatError(
                f"{self.url}: variable {name!r} was listed as char but reads as a "
                f"{type(node).__name__}"
            )
        value = node.value
        text = np.array(value) if isinstance(value, str) else np.asarray(value).astype(str)
        return VariableMaker(text, default_dims(name, text.ndim), {"matlab_class": "char"}, {})

    def _shape(self, dims: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if not self.squeeze:
            return dims, ()
        squeezed = tuple(i for i, n in enumerate(dims) if n == 1)
        return tuple(n for n in dims if n != 1), squeezed


# -- MATLAB classes --------------------------------------------------------------------------


def _mat_dtype(matlab_class: str, is_complex: bool) -> np.dtype[Any]:
    if matlab_class == "logical":
        return np.dtype(np.bool_)
    if is_complex:
        return np.dtype(np.complex64 if matlab_class == "single" else np.complex128)
    return np.dtype(_NUMERIC_CLASSES[matlab_class])


def _mat_attrs(matlab_class: str, is_global: bool) -> dict[str, Any]:
    attrs: dict[str, Any] = {"matlab_class": matlab_class}
    if is_global:
        attrs["matlab_global"] = True
    return attrs


def _mat_skip_reason(info: MatInfo) -> str | None:
    """``None`` for a variable that becomes a data variable, else what it is."""
    if info.sparse:
        return "sparse"
    if info.matlab_class == "char":
        return None
    if info.matlab_class in _NUMERIC_CLASSES or info.matlab_class == "logical":
        return None if info.dims else "object"
    if info.matlab_class == "struct":
        return "struct" if math.prod(info.dims or (0,)) == 1 else "struct array"
    if info.matlab_class == "cell":
        return "cell"
    return "object"


def _node_skip_reason(node: MatNode) -> str:
    if isinstance(node, StructNode):
        return "struct array" if node.matlab_class == "struct" else "object"
    name = type(node).__name__
    return {"SparseLeaf": "sparse", "CellNode": "cell"}.get(name, "object")


def _explain(why: str, name: str) -> str:
    return {
        "sparse": "a sparse matrix: read it with npystore.open_mat",
        "cell": "a cell array: read it with npystore.open_mat",
        "struct": f"a struct: open it with group={name!r} or xarray.open_datatree",
        "struct array": "a struct array: read it with npystore.open_mat",
        "object": "a MATLAB object: not decoded",
    }[why]


def _is_scalar_struct(node: MatNode) -> TypeGuard[StructNode]:
    return (
        isinstance(node, StructNode)
        and node.matlab_class == "struct"
        and len(node.elements) == 1
        and math.prod(node.dims) == 1
    )
