"""``npystore info``: the facts of an ``.npy``, ``.npz`` or MATLAB file, and their printing.

:func:`info` reads the headers (an ``.npy`` header; the ZIP directory and member headers of an
``.npz``; MATLAB variable headers, and the struct and cell trees below them as deep as asked)
and returns JSON-ready data; :func:`print_info` prints it as the command's tables.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

import numpy as np

from npystore.errors import UnsupportedError
from npystore.fetch import RangeReader
from npystore.files.npy import header_from_prefix
from npystore.files.open import sniff_source
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE

if TYPE_CHECKING:
    from npystore.files.mat.tree import MatNode, StructNode

# Each format's modules are imported where that format is handled: `npystore info` of an
# .npy file loads no ZIP or MATLAB code (and no dask, zarr, h5py or scipy).

__all__ = ["MAX_TREE_ITEMS", "dims_text", "info", "print_info", "struct_element"]

#: Most elements of a container (cell, struct array) listed by ``info``.
MAX_TREE_ITEMS: Final = 100
_PLAIN_CLASSES: Final = frozenset(
    ("double", "single", "logical", "char", "int8", "uint8", "int16", "uint16", "int32",
     "uint32", "int64", "uint64")
)  # fmt: skip


def _descr(dtype: np.dtype[Any]) -> Any:
    return np.lib.format.dtype_to_descr(dtype)


def dims_text(dims: Sequence[int]) -> str:
    """Dimensions as text, ``"3x4"`` (``"?"`` for none)."""
    return "x".join(map(str, dims)) if dims else "?"


def _npy_info(url: str, reader: RangeReader, prefix: bytes) -> dict[str, Any]:
    h = header_from_prefix(reader, prefix, DEFAULT_MAX_HEADER_SIZE)
    size = reader.size
    return {
        "url": url,
        "format": "npy",
        "version": f"{h.version[0]}.{h.version[1]}",
        "dtype": _descr(h.dtype),
        "shape": list(h.shape),
        "order": h.order,
        "data_offset": h.data_offset,
        "nbytes": None if h.is_pickled else h.nbytes,
        "file_size": size,
    }


def _npz_info(url: str, reader: RangeReader) -> dict[str, Any]:
    from npystore.faces.npz import npz_from_reader  # noqa: PLC0415 - see the imports

    npz = npz_from_reader(reader)
    size = reader.size
    npz.headers  # noqa: B018 - one batch of range reads for every member header
    members = []
    for key in npz.member_keys.values():  # one per member (x and x.npy are x and x.npy)
        info = npz.info(key)
        h, e = info.header, info.entry
        storage = {0: "stored", 8: "deflated"}.get(e.method, f"method {e.method}")
        members.append({
            "name": key,
            "member": e.name,
            "dtype": None if h is None else _descr(h.dtype),
            "shape": None if h is None else list(h.shape),
            "order": None if h is None else h.order,
            "storage": storage,
            "compressed_size": e.compressed_size,
            "size": e.uncompressed_size,
        })  # fmt: skip
    return {"url": url, "format": "npz", "file_size": size, "members": members}


def _tree(node: MatNode, path: str, name: str, depth: int | None) -> dict[str, Any]:
    from npystore.files.mat.tree import (  # noqa: PLC0415 - see the imports
        CellNode,
        NumericLeaf,
        SparseLeaf,
        StructNode,
        ValueLeaf,
    )

    entry: dict[str, Any] = {"name": name, "path": path, "class": node.matlab_class,
                             "size": list(node.dims)}  # fmt: skip
    if isinstance(node, SparseLeaf):
        entry["sparse"] = True
    if (
        (isinstance(node, SparseLeaf) and node.is_complex)
        or (isinstance(node, NumericLeaf) and node.array.dtype.kind == "c")
        or (isinstance(node, ValueLeaf) and node.value.dtype.kind == "c")
    ):
        entry["complex"] = True
    children: list[tuple[str, MatNode]] = []
    if isinstance(node, StructNode):
        if math.prod(node.dims) == 1 and len(node.elements) == 1:
            children = list(node.elements[0].items())
        else:
            children = [(str(i), struct_element(node, i)) for i in range(len(node.elements))]
    elif isinstance(node, CellNode):
        children = [(str(i), c) for i, c in enumerate(node.cells)]
    if children and (depth is None or depth > 0):
        more = None if depth is None else depth - 1
        entry["children"] = [
            _tree(child, f"{path}/{key}", key, more) for key, child in children[:MAX_TREE_ITEMS]
        ]
        if len(children) > MAX_TREE_ITEMS:
            entry["more"] = len(children) - MAX_TREE_ITEMS
    return entry


def struct_element(node: StructNode, i: int) -> StructNode:
    """Element ``i`` of a struct array, as a 1x1 struct."""
    from npystore.files.mat.tree import StructNode  # noqa: PLC0415

    return StructNode((1, 1), node.fields, (node.elements[i],), node.matlab_class)


def _mat_info(url: str, reader: RangeReader, prefix: bytes, depth: int | None) -> dict[str, Any]:
    from npystore.faces.matfile import mat_from_reader  # noqa: PLC0415 - see the imports

    size = reader.size
    with mat_from_reader(reader, prefix) as mat:
        if depth is None:  # headers only: v7.3 structure is metadata, v5 structure is data
            depth = -1 if mat.version == "7.3" else 0
        if depth < 0:
            depth = None
        variables = []
        for name, info in mat.variables.items():
            entry: dict[str, Any] = {"name": name, "path": name, "class": info.matlab_class,
                                     "size": list(info.dims)}  # fmt: skip
            entry.update({k: True for k in ("sparse", "complex") if getattr(info, k)})
            if info.is_global:
                entry["global"] = True
            if info.refused:
                entry["refused"] = info.refused
            plain = info.matlab_class in _PLAIN_CLASSES or info.sparse or bool(info.refused)
            if not plain and (depth is None or depth > 0):
                try:
                    tree = _tree(mat.node(name), name, name, depth)
                except UnsupportedError as exc:  # e.g. a field behind an external link
                    entry["refused"] = str(exc)
                else:
                    entry.update({k: tree[k] for k in ("children", "more") if k in tree})
            variables.append(entry)
        return {"url": url, "format": "mat", "version": mat.version, "file_size": size,
                "header": mat.header_text, "variables": variables}  # fmt: skip


def info(
    url: str, options: Mapping[str, Any] | None = None, depth: int | None = None
) -> dict[str, Any]:
    """What ``npystore info`` reports, as JSON-ready data.

    Parameters
    ----------
    url : str
        Local path or fsspec URL of an ``.npy``, ``.npz`` or MATLAB file.
    options : mapping, optional
        fsspec storage options.
    depth : int, optional
        Levels of struct and cell contents listed for MATLAB files (``-1``: all; ``0``: the
        variables alone). ``None`` reads headers only: all levels of a v7.3 file (HDF5
        metadata), none of a v5/v4 file (whose struct and cell contents are stored with the
        data, compressed variables inflated whole).

    Returns
    -------
    dict
        ``format`` (``"npy"``, ``"npz"``, ``"mat"``), ``url``, ``file_size`` and the facts
        of that format (header fields; ``members``; ``version``, ``header``, ``variables``).

    Raises
    ------
    FormatError
        Not a file npystore knows.
    """
    found = sniff_source(url, options)  # one open serves the sniff and the format's reader
    if found.kind == "npy":
        return _npy_info(url, found.reader, found.prefix)
    if found.kind == "npz":
        return _npz_info(url, found.reader)
    return _mat_info(url, found.reader, found.prefix, depth)


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)


def print_info(facts: dict[str, Any], out: TextIO) -> None:
    """Print what :func:`info` returned as the tables of ``npystore info``.

    Parameters
    ----------
    facts : dict
        The result of :func:`info`.
    out : text file
        Where to print.
    """
    print(facts["url"], file=out)
    if facts["format"] == "npy":
        dtype = np.lib.format.descr_to_dtype(facts["dtype"])
        shape = " x ".join(map(str, facts["shape"])) or "() (one element)"
        _table([
            ["  format", f"npy {facts['version']}"],
            ["  dtype", f"{facts['dtype']} ({dtype})"],
            ["  shape", shape],
            ["  order", facts["order"]],
            ["  data offset", str(facts["data_offset"])],
            ["  data bytes", "pickled" if facts["nbytes"] is None else str(facts["nbytes"])],
            ["  file size", str(facts["file_size"])],
        ], out)  # fmt: skip
        return
    if facts["format"] == "npz":
        rows = [["Name", "Dtype", "Shape", "Order", "Storage", "Stored bytes", "Bytes"]]
        for m in facts["members"]:
            shape = "-" if m["shape"] is None else "x".join(map(str, m["shape"])) or "()"
            rows.append([m["name"], "-" if m["dtype"] is None else str(m["dtype"]), shape,
                         m["order"] or "-", m["storage"], str(m["compressed_size"]),
                         str(m["size"])])  # fmt: skip
        print(f"npz, {len(facts['members'])} members, {facts['file_size']} bytes", file=out)
        _table(rows, out)
        return
    print(f"MAT-file v{facts['version']}: {facts['header']}".rstrip(": "), file=out)
    rows = [["Name", "Class", "Size", "Attributes"]]

    def add(entry: dict[str, Any], level: int) -> None:
        attrs = " ".join(k for k in ("sparse", "complex", "global", "refused") if entry.get(k))
        size = dims_text(entry["size"])
        rows.append(["  " * level + entry["name"], entry["class"], size, attrs])
        for child in entry.get("children", ()):
            add(child, level + 1)
        if entry.get("more"):
            rows.append(["  " * (level + 1) + f"... {entry['more']} more", "", "", ""])

    for variable in facts["variables"]:
        add(variable, 0)
    _table(rows, out)
    for variable in facts["variables"]:
        if variable.get("refused"):
            print(f"{variable['name']}: refused: {variable['refused']}", file=out)
