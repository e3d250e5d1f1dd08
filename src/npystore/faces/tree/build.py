"""The tree of any file: :func:`file_nodes` sniffs it once and builds its nodes.

An ``.npy`` file is one array at the root; an ``.npz`` archive a group with one array per
``.npy`` member, named by the member's key (:func:`~npystore.faces.tree.nodes.node_name`
makes it safe), the members it cannot serve listed in the root's ``npystore.skipped``
(:class:`NpzTree`: built member by member, when asked for); a MAT-file the hierarchy of
:func:`~npystore.faces.tree.mat.mat_nodes`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, Final

from npystore.faces.tree.nodes import ArrayNode, GroupNode, Node, node_name
from npystore.fetch import RangeReader
from npystore.files.npy import open_layout_array
from npystore.files.open import sniff_reader
from npystore.files.zip import MemberInfo, ZipArchive, member_key, unique_keys
from npystore.formats.mat5 import CharErrors
from npystore.read.access import LayoutArray

__all__ = ["KEPT_NODES", "PAGE_MEMBERS", "NpzTree", "file_nodes"]

#: Members whose headers are read together (one batch of concurrent range reads) when an
#: archive's tree is listed.
PAGE_MEMBERS: Final = 4096
#: Array nodes of an archive's tree kept built (the least recently used are built again
#: when asked for: a member's header, once read, stays with the archive).
KEPT_NODES: Final = 4096


class NpzTree(Mapping[str, Node]):
    """The tree of an ``.npz`` archive: ``""`` (the root group) and one array node per
    ``.npy`` member, each built when first asked for.

    Making the tree reads nothing beyond the archive's directory (node names come from the
    member names). Asking for one node reads that member's header; listing the tree
    (iterating, ``len``, the root node, whose attributes name the members that are no
    arrays) reads the headers of every member, :data:`PAGE_MEMBERS` at a time, each page in
    one batch of concurrent reads. At most :data:`KEPT_NODES` array nodes are kept built.
    A malformed member raises when its node is asked for (or the tree listed).

    Parameters
    ----------
    reader : RangeReader
        The archive.
    archive : ZipArchive
        Its directory.
    about : mapping
        The root's ``npystore`` attributes (source, format).
    """

    def __init__(self, reader: RangeReader, archive: ZipArchive, about: Mapping[str, Any]):
        self._reader = reader
        self._archive = archive
        self._about = dict(about)
        self._names = archive.names
        keys = unique_keys(self._names)
        self._keys = keys
        self._paths = [node_name(keys[name]) for name in self._names]
        self._member = dict(zip(self._paths, self._names, strict=True))
        self._kept: OrderedDict[str, ArrayNode] = OrderedDict()
        self._root: GroupNode | None = None
        self._lock = threading.Lock()

    @property
    def members(self) -> int:
        """Members of the archive (from its directory: no header read)."""
        return len(self._names)

    @property
    def token(self) -> tuple[Any, ...]:
        """What two trees of the same archive, opened from the same object, share."""
        return (self._reader.token,)

    def __getstate__(self) -> dict[str, Any]:
        return {"reader": self._reader, "archive": self._archive, "about": self._about}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["reader"], state["archive"], state["about"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"NpzTree({self._reader.url!r}, members={len(self._names)})"

    # -- Mapping ----------------------------------------------------------------------------

    def __getitem__(self, path: str) -> Node:
        if path == "":
            return self._root_node()
        with self._lock:
            node = self._kept.get(path)
            if node is not None:
                self._kept.move_to_end(path)
                return node
        name = self._member.get(path) if isinstance(path, str) else None
        if name is None:
            raise KeyError(path)
        built = self._build(name, self._archive.info(name))
        if built is None:
            raise KeyError(path)
        with self._lock:
            self._kept[path] = built
            if len(self._kept) > KEPT_NODES:
                self._kept.popitem(last=False)
        return built

    def __contains__(self, path: object) -> bool:
        if path == "":
            return True
        name = self._member.get(path) if isinstance(path, str) else None
        return name is not None and _is_array(self._archive.info(name))

    def __iter__(self) -> Iterator[str]:
        """Array paths in the archive's order, then ``""``."""
        for lo in range(0, len(self._names), PAGE_MEMBERS):
            page = self._names[lo : lo + PAGE_MEMBERS]
            infos = self._archive.resolve(page)
            for name, path in zip(page, self._paths[lo : lo + PAGE_MEMBERS], strict=True):
                if _is_array(infos[name]):
                    yield path
        yield ""

    def __len__(self) -> int:
        return sum(1 for _ in self)

    # -- nodes ------------------------------------------------------------------------------

    def _build(self, name: str, info: MemberInfo) -> ArrayNode | None:
        """The array node of a member (None: not an array npystore serves)."""
        if not _is_array(info):
            return None
        layout = self._archive.layout(name)
        array = LayoutArray(self._reader, layout, source=f"{self._reader.url}:{name}")
        key = self._keys[name]  # as numpy reads it: members x and x.npy are x and x.npy
        safe = node_name(key)
        return ArrayNode(
            array,
            attributes={"npystore": {"member": name, "key": key}},
            dimension_prefix=f"{safe}_",
        )

    def _root_node(self) -> GroupNode:
        """The root group: the archive's attributes, with the members that are no arrays
        (``skipped``) and those whose node name is not their key (``renamed``)."""
        if self._root is not None:
            return self._root
        skipped: dict[str, str] = {}
        for lo in range(0, len(self._names), PAGE_MEMBERS):
            page = self._names[lo : lo + PAGE_MEMBERS]
            for name, info in self._archive.resolve(page).items():
                if info.header is None:
                    skipped[name] = "not an .npy member"
                elif info.header.is_pickled:
                    skipped[name] = f"object array ({info.header.dtype}): a pickle"
        renamed = {
            name: path
            for name, path in zip(self._names, self._paths, strict=True)
            if path != member_key(name) and _is_array(self._archive.info(name))
        }
        extra: dict[str, Any] = {"skipped": skipped} if skipped else {}
        if renamed:
            extra["renamed"] = renamed
        root = GroupNode({"npystore": {**self._about, **extra}})
        self._root = root
        return root


def _is_array(info: MemberInfo) -> bool:
    return info.header is not None and not info.header.is_pickled


def file_nodes(
    reader: RangeReader,
    *,
    max_header_size: int,
    max_members: int,
    char_errors: CharErrors = "strict",
) -> Mapping[str, Node]:
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
        return NpzTree(reader, archive, about["npystore"])
    from npystore.faces.matfile import mat_from_reader  # noqa: PLC0415
    from npystore.faces.tree.mat import mat_nodes  # noqa: PLC0415

    mat = mat_from_reader(reader, prefix, char_errors=char_errors)
    about["npystore"]["mat_version"] = mat.version
    about["matlab_header"] = mat.header_text
    variables = {name: mat.node(name) for name in mat}
    return mat_nodes(reader, variables, root_attributes=about)
