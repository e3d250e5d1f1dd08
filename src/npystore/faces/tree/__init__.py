"""The format-neutral tree of a file (arrays with layouts, attributes, chunks and dimension
names; groups), built once and served by the Zarr store, the kerchunk references and
``convert``.

- :mod:`~npystore.faces.tree.nodes`: :class:`ArrayNode`, :class:`GroupNode`, :func:`node_name`
- :mod:`~npystore.faces.tree.build`: :func:`file_nodes`, the tree of any file
- :mod:`~npystore.faces.tree.mat`: :func:`mat_nodes`, a MAT-file's variables as nodes
"""

from npystore.faces.tree.build import file_nodes
from npystore.faces.tree.mat import mat_nodes
from npystore.faces.tree.nodes import (
    CHUNK_TARGET,
    MAX_NODE_NAME,
    ArrayNode,
    GroupNode,
    Node,
    node_name,
)

__all__ = [
    "CHUNK_TARGET",
    "MAX_NODE_NAME",
    "ArrayNode",
    "GroupNode",
    "Node",
    "file_nodes",
    "mat_nodes",
    "node_name",
]
