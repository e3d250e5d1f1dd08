"""A MATLAB file's variables as nodes of the tree (what the Zarr store serves).

=================  ===========================================================================
MATLAB value       Zarr node
=================  ===========================================================================
numeric, logical   array in MATLAB shape (``transpose`` codec: the bytes stay column-major),
complex            chunks aligned to the file's own (HDF5) chunks; small arrays read with
                   their cell or struct (:class:`~npystore.files.mat.tree.ValueLeaf`): one chunk
char               uint16 array of UTF-16 code units in MATLAB shape; the decoded text in the
                   ``matlab_text`` attribute
struct (1x1)       group, one member per field
struct array       group with members ``0``, ``1``, ... (column-major), each a group of fields
cell               group with members ``0``, ``1``, ... (column-major)
sparse             group with arrays ``data``, ``ir`` (rows), ``jc`` (column starts) as the
                   file stores them: ``data`` and ``ir`` may hold more than the ``jc[-1]``
                   values of the matrix (MATLAB's nzmax; an all-zero matrix keeps one row)
object, handle     empty group naming the class (``matlab_placeholder`` says why)
=================  ===========================================================================

Every node carries ``matlab_class`` and ``matlab_dims`` attributes; names that are not safe
Zarr names are percent-encoded (the original is in ``matlab_name``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import dask.array as da
import numpy as np

from npystore.faces.dask import native_chunks
from npystore.faces.tree import nodes
from npystore.faces.tree.nodes import ArrayNode, GroupNode, Node, node_name
from npystore.fetch import RangeReader
from npystore.files.mat.tree import (
    CellNode,
    CharLeaf,
    MatNode,
    NumericLeaf,
    ObjectLeaf,
    SparseLeaf,
    StructNode,
    ValueLeaf,
)
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, InlineExtent

__all__ = ["mat_nodes"]

#: Longest decoded text copied into a char array's attributes.
MAX_TEXT_ATTR: Final = 64 * 2**10


def mat_nodes(
    reader: RangeReader,
    variables: Mapping[str, MatNode],
    *,
    root_attributes: Mapping[str, Any],
) -> dict[str, Node]:
    """The hierarchy of a MAT-file: the root group and one node tree per variable.

    Every variable or field whose node name is not its own name (see
    :func:`~npystore.faces.tree.node_name`) is listed in the root's
    ``npystore.renamed`` attribute (its path in the file, names ``/``-joined -> its node
    path) and keeps its name in its node's ``matlab_name`` attribute.
    """
    nodes: dict[str, Node] = {}
    renamed: dict[str, str] = {}
    for name, node in variables.items():
        _add(nodes, reader, node_name(name), name, node, name, renamed)
    root = dict(root_attributes)
    if renamed:
        root["npystore"] = {**root.get("npystore", {}), "renamed": renamed}
    return {"": GroupNode(root), **nodes}


def _attrs(node: MatNode, name: str, **more: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"matlab_class": node.matlab_class, "matlab_dims": list(node.dims)}
    if node_name(name) != name:
        attrs["matlab_name"] = name
    attrs.update(more)
    return attrs


def _chunk_shape(layout: ArrayLayout) -> tuple[int, ...] | None:
    native = native_chunks(layout)
    if native is None or 0 in layout.shape:
        return None
    chunks = da.core.normalize_chunks(  # type: ignore[no-untyped-call]
        "auto", layout.shape, limit=nodes.CHUNK_TARGET, dtype=layout.dtype, previous_chunks=native
    )
    return tuple(max(1, c[0]) for c in chunks)


def _add(
    nodes: dict[str, Node],
    reader: RangeReader,
    path: str,
    name: str,
    node: MatNode,
    origin: str,
    renamed: dict[str, str],
) -> None:
    """Add ``node`` (named ``name``, at ``origin`` in the file) at ``path``; note it in
    ``renamed`` when its node name is not its name."""
    if node_name(name) != name:
        renamed[origin] = path
    prefix = path.replace("/", ".") + "."
    if isinstance(node, NumericLeaf):
        layout = node.array.layout
        nodes[path] = ArrayNode(
            node.array,
            _attrs(node, name),
            chunk_shape=_chunk_shape(layout),
            dimension_prefix=prefix,
        )
    elif isinstance(node, ValueLeaf):
        array = node.as_array(reader, f"{reader.url}:{name}")
        nodes[path] = ArrayNode(array, _attrs(node, name), dimension_prefix=prefix)
    elif isinstance(node, CharLeaf):
        units = np.asarray(node.units)
        dtype = np.dtype(np.uint16) if units.size == 0 or units.max() < 2**16 else units.dtype
        data = np.asfortranarray(units.astype(dtype))
        layout = ArrayLayout(data.dtype, data.shape, "F", InlineExtent(data.tobytes(order="F")))
        array = LayoutArray(reader, layout, source=f"{reader.url}:{name}")
        text = node.value if isinstance(node.value, str) else np.asarray(node.value).tolist()
        more = {"matlab_text": text} if len(str(text)) <= MAX_TEXT_ATTR else {}
        nodes[path] = ArrayNode(array, _attrs(node, name, **more), dimension_prefix=prefix)
    elif isinstance(node, SparseLeaf):
        nnz = node.data.shape[0] if node.data.shape else 0
        nodes[path] = GroupNode(_attrs(node, name, matlab_sparse=True, nnz=nnz))
        for part, array in (("data", node.data), ("ir", node.ir), ("jc", node.jc)):
            nodes[f"{path}/{part}"] = ArrayNode(array, {}, dimension_prefix=f"{prefix}{part}.")
    elif isinstance(node, CellNode):
        nodes[path] = GroupNode(_attrs(node, name))
        for i, cell in enumerate(node.cells):
            _add(nodes, reader, f"{path}/{i}", str(i), cell, f"{origin}/{i}", renamed)
    elif isinstance(node, StructNode):
        fields = list(node.fields)
        nodes[path] = GroupNode(_attrs(node, name, matlab_fields=fields))
        if math.prod(node.dims) == 1 and len(node.elements) == 1:
            for field, child in node.elements[0].items():
                where = f"{path}/{node_name(field)}"
                _add(nodes, reader, where, field, child, f"{origin}/{field}", renamed)
        else:
            for i, element in enumerate(node.elements):
                nodes[f"{path}/{i}"] = GroupNode({"matlab_class": node.matlab_class,
                                                   "matlab_fields": fields})  # fmt: skip
                for field, child in element.items():
                    where = f"{path}/{i}/{node_name(field)}"
                    _add(nodes, reader, where, field, child, f"{origin}/{i}/{field}", renamed)
    elif isinstance(node, ObjectLeaf):
        nodes[path] = GroupNode(_attrs(node, name, matlab_placeholder=node.obj.reason))
    else:  # pragma: no cover - MatNode is closed
        raise TypeError(f"unexpected MATLAB node {node!r}")
