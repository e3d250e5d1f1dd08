"""The tree of any file: :func:`file_nodes` sniffs it once and builds its nodes.

An ``.npy`` file is one array at the root; an ``.npz`` archive a group with one array per
``.npy`` member, named by the member's key (:func:`~npystore.faces.tree.nodes.node_name`
makes it safe), the members it cannot serve listed in the root's ``npystore.skipped``; a
MAT-file the hierarchy of :func:`~npystore.faces.tree.mat.mat_nodes`.
"""

from __future__ import annotations

from typing import Any

from npystore.faces.tree.nodes import ArrayNode, GroupNode, Node, node_name
from npystore.fetch import RangeReader
from npystore.files.npy import open_layout_array
from npystore.files.open import sniff_reader
from npystore.files.zip import ZipArchive, unique_keys
from npystore.formats.mat5 import CharErrors
from npystore.read.access import LayoutArray

__all__ = ["file_nodes"]


def file_nodes(
    reader: RangeReader,
    *,
    max_header_size: int,
    max_members: int,
    char_errors: CharErrors = "strict",
) -> dict[str, Node]:
    """The tree of the file behind ``reader``: path -> array or group node, as
    :func:`~npystore.faces.stores.open_store` serves it, :func:`~npystore.faces.refs.to_kerchunk`
    references it and ``convert`` writes it (``char_errors``: MAT v5 chars that are not
    UTF-8, as :func:`npystore.open_mat` takes it)."""
    found = sniff_reader(reader)
    prefix, kind = found.prefix, found.kind
    about: dict[str, Any] = {"npystore": {"source": reader.url, "format": kind}}
    if kind == "npy":
        array = open_layout_array(reader, prefix, False, max_header_size)
        return {"": ArrayNode(array, attributes=about)}
    if kind == "npz":
        archive = ZipArchive(reader, max_header_size=max_header_size, max_members=max_members)
        infos = archive.resolve(archive.names)
        keys = unique_keys(archive.names)
        nodes: dict[str, Node] = {}
        skipped: dict[str, str] = {}
        renamed: dict[str, str] = {}
        for name, info in infos.items():
            if info.header is None:
                skipped[name] = "not an .npy member"
                continue
            if info.header.is_pickled:
                skipped[name] = f"object array ({info.header.dtype}): a pickle"
                continue
            layout = archive.layout(name)
            array = LayoutArray(reader, layout, source=f"{reader.url}:{name}")
            key = keys[name]  # as numpy reads it: members x and x.npy are x and x.npy
            safe = node_name(key)
            if safe != info.key:
                renamed[name] = safe
            nodes[safe] = ArrayNode(
                array,
                attributes={"npystore": {"member": name, "key": key}},
                dimension_prefix=f"{safe}_",
            )
        root_attrs = dict(about)
        extra = {"skipped": skipped} if skipped else {}
        if renamed:
            extra["renamed"] = renamed
        if extra:
            root_attrs["npystore"] = {**about["npystore"], **extra}
        nodes[""] = GroupNode(root_attrs)
        return nodes
    from npystore.faces.matfile import mat_from_reader  # noqa: PLC0415
    from npystore.faces.tree.mat import mat_nodes  # noqa: PLC0415

    mat = mat_from_reader(reader, prefix, char_errors=char_errors)
    about["npystore"]["mat_version"] = mat.version
    about["matlab_header"] = mat.header_text
    variables = {name: mat.node(name) for name in mat}
    return mat_nodes(reader, variables, root_attributes=about)
