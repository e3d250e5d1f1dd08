"""The format-neutral tree every hierarchical face consumes: arrays and groups.

An :class:`ArrayNode` is an array with its layout (where its bytes are), attributes,
chunk shape and dimension names; a :class:`GroupNode` is a group with attributes. The tree
of a file is a mapping of paths (``""`` the root, ``"a/b"``) to nodes, built once by
:func:`npystore.faces.tree.file_nodes`; the Zarr store, the kerchunk references and
``convert`` all serve that same tree, and node names are decided once (:func:`node_name`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

import numpy as np

from npystore.read.access import LayoutArray, read_selection
from npystore.read.layout import contiguous_chunks

__all__ = [
    "CHUNK_TARGET",
    "CONSOLIDATED_MAX",
    "MAX_NODE_NAME",
    "ArrayNode",
    "GroupNode",
    "Node",
    "node_name",
]

#: Target bytes of a Zarr chunk (contiguous ranges of the file, like dask's "auto").
CHUNK_TARGET: Final = 16 * 2**20
#: Longest node name (ASCII characters); longer ones are shortened with a hash (see
#: :func:`node_name`). File systems allow 255 bytes per path component.
MAX_NODE_NAME: Final = 200
#: Most nodes of a hierarchy whose root carries consolidated metadata (every node's
#: document in the root's ``zarr.json``, or a Zarr v2 reference set's ``.zmetadata``: zarr
#: then never lists, but parses them all when the group is opened; 1,000 documents take
#: zarr some 0.1 s and 1 MB).
CONSOLIDATED_MAX: Final = 1000


def node_name(name: str) -> str:
    """The Zarr node name of a member or variable name: safe as a key component and as a
    file or directory name, the same in :func:`npystore.open_store` and ``convert``.

    The scheme (deterministic; different names never give the same node name):

    - UTF-8 bytes other than ASCII letters, digits and ``-._`` are percent-encoded
      (``%XX``, upper case), so ``/`` never splits a name and every node name is ASCII;
      ``~`` is encoded too (it marks shortened names, below).
    - a leading ``.`` (hidden files, ``.``, ``..``, zarr v2's ``.zarray``, the conversion
      manifest ``.npystore-convert.json``) is ``%2E``; a leading ``__`` (reserved by Zarr)
      starts ``%5F``; a name that is ``zarr.json`` in any letter case (the metadata
      document of the group holding it, also on case-insensitive file systems) is
      ``zarr%2Ejson``.
    - the empty name is ``~empty``.
    - a node name longer than :data:`MAX_NODE_NAME` characters (file systems allow 255
      bytes per component) is cut to its first 183 characters (never inside an escape)
      plus ``~`` and the first 16 hex digits of the SHA-256 of the name's UTF-8.

    Everything but shortened names decodes back with :func:`urllib.parse.unquote`; the
    original name is also kept in the node's attributes and, for every name that changed,
    in the root group's ``npystore.renamed`` (or ``matlab_name``) attribute.

    Examples
    --------
    >>> node_name("temperature"), node_name("a/b"), node_name("zarr.json")
    ('temperature', 'a%2Fb', 'zarr%2Ejson')
    >>> node_name(".npystore-convert.json"), node_name("")
    ('%2Enpystore-convert.json', '~empty')
    """
    safe = quote(name, safe="").replace("~", "%7E")
    if not safe:
        return "~empty"
    if safe.startswith("."):
        safe = "%2E" + safe[1:]
    elif safe.startswith("__"):
        safe = "%5F" + safe[1:]
    elif safe.lower() == "zarr.json":
        safe = safe[:4] + "%2E" + safe[5:]
    if len(safe) <= MAX_NODE_NAME:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    cut = MAX_NODE_NAME - 17
    escape = safe.rfind("%", cut - 2, cut)  # never cut an escape in two
    if escape != -1:
        cut = escape
    return f"{safe[:cut]}~{digest}"


@dataclass(frozen=True)
class ArrayNode:
    """An array of the hierarchy: where its bytes are, and its Zarr attributes."""

    array: LayoutArray
    attributes: Mapping[str, Any] = field(default_factory=dict)
    chunk_shape: tuple[int, ...] | None = None
    #: Names of the dimensions (xarray needs them); default ``{prefix}dim_{i}``.
    dimension_names: tuple[str, ...] | None = None
    dimension_prefix: str = ""

    def dims(self) -> tuple[str, ...]:
        """The dimension names: given, or ``{prefix}dim_{i}`` (unique per array)."""
        if self.dimension_names is not None:
            return self.dimension_names
        return tuple(f"{self.dimension_prefix}dim_{i}" for i in range(self.array.layout.ndim))

    def chunks(self) -> tuple[int, ...]:
        """The regular chunk shape: contiguous ranges of about :data:`CHUNK_TARGET` bytes."""
        if self.chunk_shape is not None:
            return self.chunk_shape
        layout = self.array.layout
        grid = contiguous_chunks(layout.shape, layout.dtype.itemsize, layout.order, CHUNK_TARGET)
        return tuple(max(1, c[0]) if c else 1 for c in grid)

    def chunk_nbytes(self) -> int:
        """Bytes of one full (padded) chunk."""
        return math.prod(self.chunks()) * self.array.layout.dtype.itemsize

    def chunk_bytes(self, index: tuple[int, ...]) -> bytes:
        """The values of chunk ``index`` (grid position): the full chunk in the layout's
        order and stored dtype, an edge chunk zero-padded to the full chunk shape (as Zarr
        stores edge chunks)."""
        layout = self.array.layout
        chunks = self.chunks()
        sel = tuple(
            (i * c, min(c, n - i * c), 1)
            for i, c, n in zip(index, chunks, layout.shape, strict=True)
        )
        data = read_selection(self.array.reader, layout, sel)
        if all(count == c for (_, count, _), c in zip(sel, chunks, strict=True)):
            return data.tobytes(order=layout.order)
        padded = np.zeros(chunks, dtype=layout.dtype, order=layout.order)
        padded[tuple(slice(0, count) for _, count, _ in sel)] = data
        return padded.tobytes(order=layout.order)


@dataclass(frozen=True)
class GroupNode:
    """A group of the hierarchy, with its attributes."""

    attributes: Mapping[str, Any] = field(default_factory=dict)


Node = ArrayNode | GroupNode
