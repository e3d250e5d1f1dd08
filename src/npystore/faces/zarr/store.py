"""The Zarr face: layouts served as a read-only Zarr v3 store (:class:`LayoutStore`).

Every array of a file becomes a Zarr array whose chunks are computed from its
:class:`~npystore.read.layout.ArrayLayout`; nothing is copied or converted ahead of time:

- ``zarr.json`` documents are synthesized with zarr's own metadata classes. Fortran order is
  the ``transpose`` codec before ``bytes``; big-endian data is the ``bytes`` codec's
  ``endian: "big"``; the root group carries consolidated metadata, so zarr never lists.
- a chunk key (``c/i/j``) maps to a hyperslab of the layout: a full chunk of a raw layout in
  its natural order is one byte range; edge chunks are zero-padded to the full chunk shape,
  as Zarr requires; deflated members are served through their checkpoint index.
- reads run in worker threads (``asyncio.to_thread``) through the fetch layer, so they are
  concurrent and never block zarr's event loop.
- a hierarchy of more than :data:`CONSOLIDATED_MAX` nodes (an archive of many members) has
  no consolidated metadata: zarr lists the store (:meth:`LayoutStore.list_dir`) and reads
  each node's ``zarr.json`` when it needs it, each made when asked for (and at most
  :data:`KEPT_DOCUMENTS` kept), so opening and listing cost what zarr asks for, not a
  document of every member at once.

Keys never contain ``..`` or a leading ``/``: node names are made from member names by
:func:`node_name` (percent-encoding, reserved names escaped, long names shortened), and the
original name is kept in the node's attributes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Final

from npystore.errors import UnsupportedError, missing_dependency

try:
    from zarr.abc.store import (
        ByteRequest,
        OffsetByteRequest,
        RangeByteRequest,
        Store,
        SuffixByteRequest,
    )
    from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
    from zarr.core.config import config as zarr_config
    from zarr.core.group import ConsolidatedMetadata, GroupMetadata
    from zarr.core.metadata.v3 import ArrayV3Metadata
except ImportError as exc:
    raise missing_dependency("zarr", "zarr", "npystore's Zarr store", exc) from exc

from npystore.faces.tree.nodes import MAX_NODE_NAME, ArrayNode, GroupNode, Node, node_name
from npystore.faces.zarr.dtypes import bytes_codec_for, zarr_dtype_for

__all__ = [
    "CONSOLIDATED_MAX",
    "KEPT_DOCUMENTS",
    "MAX_NODE_NAME",
    "ArrayNode",
    "GroupNode",
    "LayoutStore",
    "node_name",
]

_META: Final = "zarr.json"
#: Most nodes of a hierarchy whose root carries consolidated metadata (every node's
#: document in the root's ``zarr.json``: zarr then never lists, but parses them all when
#: the group is opened; 1,000 documents take zarr some 0.1 s and 1 MB).
CONSOLIDATED_MAX: Final = 1000
#: ``zarr.json`` documents kept made (the least recently used are made again).
KEPT_DOCUMENTS: Final = 4096


def _array_metadata(node: ArrayNode, filters: Sequence[Mapping[str, Any]] = ()) -> ArrayV3Metadata:
    """The ``zarr.json`` of an array node; ``filters`` are bytes-to-bytes codecs after the
    ``bytes`` codec (numcodecs ``{"name": "numcodecs.zlib", ...}``, for references to chunks
    stored filtered)."""
    layout = node.array.layout
    if layout.dtype.hasobject:
        raise UnsupportedError(
            f"{node.array.source}: object arrays (pickles) have no Zarr representation"
        )
    zdtype = zarr_dtype_for(layout.dtype)
    codecs: list[dict[str, Any]] = []
    if layout.order == "F" and layout.ndim > 1:
        codecs.append(
            {"name": "transpose", "configuration": {"order": list(range(layout.ndim))[::-1]}}
        )
    codecs.append(bytes_codec_for(layout.dtype, zdtype))
    codecs.extend(dict(f) for f in filters)
    return ArrayV3Metadata(
        shape=layout.shape,
        data_type=zdtype,
        chunk_grid={"name": "regular", "configuration": {"chunk_shape": list(node.chunks())}},
        chunk_key_encoding={"name": "default", "configuration": {"separator": "/"}},
        fill_value=zdtype.default_scalar(),
        codecs=codecs,
        attributes=dict(node.attributes),
        dimension_names=node.dims(),
    )


#: Array documents kept per store as templates (see :func:`_array_document`).
_TEMPLATES_MAX: Final = 256


#: Stand-ins for the attributes and dimension names in a template's text.
_MARKS: Final = ("\x00npystore attributes\x00", "\x00npystore dimension names\x00")


def _template(doc: dict[str, Any], indent: int | str | None) -> tuple[str, ...]:
    """The text of ``doc`` as zarr writes it, cut where its attributes and dimension names
    go: ``(before, ATTRIBUTES or DIMENSIONS, between, the other, after)``."""
    marked = dict(doc)
    marked["attributes"], marked["dimension_names"] = _MARKS
    text = json.dumps(marked, allow_nan=True, indent=indent)
    quoted = [json.dumps(m) for m in _MARKS]
    first = min(quoted, key=text.index)
    second = quoted[1] if first == quoted[0] else quoted[0]
    before, rest = text.split(first)
    between, after = rest.split(second)
    return before, _MARKS[quoted.index(first)], between, _MARKS[quoted.index(second)], after


def _array_document(
    node: ArrayNode,
    filters: Sequence[Mapping[str, Any]],
    templates: OrderedDict[tuple[Any, ...], tuple[str, ...]],
    lock: threading.Lock,
) -> bytes:
    """The bytes of an array's ``zarr.json``: what zarr's own metadata class writes
    (:func:`_array_metadata`), made from the document of an array of the same kind (dtype,
    shape, order, chunks, filters: the many members of an archive share a few), kept in
    ``templates`` as text, with this one's attributes and dimension names put in. zarr
    writes the document with ``json.dumps`` (indented as its ``json_indent`` says): the same
    bytes, without encoding the rest of the document again."""
    layout = node.array.layout
    dims = list(node.dims())
    indent = zarr_config.get("json_indent")
    key = (
        indent,
        layout.dtype,
        str(layout.dtype.descr),  # equal dtypes may differ in what zarr writes (titles...)
        layout.shape,
        layout.order,
        node.chunks(),
        len(dims),
        json.dumps([dict(f) for f in filters], sort_keys=True) if filters else "",
    )
    with lock:
        template = templates.get(key)
        if template is not None:
            templates.move_to_end(key)
    if template is None:
        bare = ArrayNode(node.array, {}, node.chunks(), tuple(f"d{i}" for i in range(len(dims))))
        template = _template(_array_metadata(bare, filters).to_dict(), indent)
        with lock:
            templates[key] = template
            if len(templates) > _TEMPLATES_MAX:
                templates.popitem(last=False)
    values = {_MARKS[0]: dict(node.attributes), _MARKS[1]: dims}
    pad = "\n" + (indent if isinstance(indent, str) else " " * (indent or 0))
    parts = []
    for part in template:
        if part in values:  # a value one level down: its lines indented once more
            text = json.dumps(values[part], allow_nan=True, indent=indent)
            parts.append(text.replace("\n", pad) if indent is not None else text)
        else:
            parts.append(part)
    return "".join(parts).encode()


class LayoutStore(Store):
    """A read-only Zarr v3 store over the arrays of one file.

    Parameters
    ----------
    nodes : mapping of str to ArrayNode or GroupNode
        The hierarchy: ``""`` is the root; other paths are ``/``-separated node names. A
        ``dict`` is copied and its paths checked; any other mapping (a tree built when
        asked, :class:`~npystore.faces.tree.build.NpzTree`) is used as it is, and asked for
        a node only when zarr asks for it.
    url : str
        The file's URL (for ``repr``, equality and messages).
    filters : mapping of str to sequence of mapping, optional
        Per array path, bytes-to-bytes codecs after the ``bytes`` codec (in the metadata
        only: the kerchunk references of chunks stored filtered; this store's own chunks
        are always unfiltered).
    """

    supports_writes: bool = False
    supports_deletes: bool = False
    supports_partial_writes: bool = False  # type: ignore[assignment]
    supports_listing: bool = True

    def __init__(
        self,
        nodes: Mapping[str, Node],
        *,
        url: str,
        read_only: bool = True,
        filters: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        if not read_only:
            raise UnsupportedError(f"{url}: npystore stores are read-only")
        super().__init__(read_only=True)
        self.url = url
        self._nodes: Mapping[str, Node] = dict(nodes) if isinstance(nodes, dict) else nodes
        if "" not in self._nodes:
            raise ValueError("a hierarchy needs a root node at path ''")
        if isinstance(self._nodes, dict):
            for path in self._nodes:
                parts = path.split("/") if path else []
                if any(p in ("", ".", "..") for p in parts):
                    raise ValueError(f"unsafe node path {path!r}")
        self._metadata: OrderedDict[str, bytes] = OrderedDict()
        self._metadata_lock = threading.Lock()
        self._templates: OrderedDict[tuple[Any, ...], tuple[str, ...]] = OrderedDict()
        self._filters = dict(filters or {})

    # -- identity --------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LayoutStore)
            and other.url == self.url
            and self._tokens() == other._tokens()
        )

    def __hash__(self) -> int:
        return hash((self.url, self._tokens()))

    def _tokens(self) -> tuple[Any, ...]:
        token = getattr(self._nodes, "token", None)  # a tree of one file, built when asked
        if token is not None:
            return tuple(token)
        return tuple(
            (p, n.array.reader.token if isinstance(n, ArrayNode) else None)
            for p, n in sorted(self._nodes.items())
        )

    def __repr__(self) -> str:
        if not isinstance(self._nodes, dict):
            return f"LayoutStore({self.url!r}, {self._nodes!r})"
        arrays = sum(isinstance(n, ArrayNode) for n in self._nodes.values())
        return f"LayoutStore({self.url!r}, arrays={arrays})"

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "nodes": self._nodes, "filters": self._filters}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["nodes"], url=state["url"], filters=state.get("filters")
        )

    def with_read_only(self, read_only: bool = False) -> LayoutStore:
        """The same store; asking for a writable one raises :class:`UnsupportedError`."""
        if not read_only:
            raise UnsupportedError(f"{self.url}: npystore stores are read-only")
        return LayoutStore(self._nodes, url=self.url, filters=self._filters)

    # -- metadata --------------------------------------------------------------------------

    def _node_count(self) -> int:
        """Nodes of the hierarchy, or for a tree built when asked, a bound known without
        building it (an archive's member count, plus the root)."""
        members = getattr(self._nodes, "members", None)
        return members + 1 if isinstance(members, int) else len(self._nodes)

    def _metadata_bytes(self, path: str) -> bytes:
        with self._metadata_lock:
            cached = self._metadata.get(path)
            if cached is not None:
                self._metadata.move_to_end(path)
                return cached
        node = self._nodes[path]
        if isinstance(node, ArrayNode):
            doc = _array_document(
                node, self._filters.get(path, ()), self._templates, self._metadata_lock
            )
        else:
            proto = default_buffer_prototype()
            consolidated = None
            if path == "" and self._node_count() <= CONSOLIDATED_MAX:
                members: dict[str, Any] = {}
                for p, n in self._nodes.items():
                    if p == "":
                        continue
                    members[p] = (
                        _array_metadata(n, self._filters.get(p, ()))
                        if isinstance(n, ArrayNode)
                        else GroupMetadata(attributes=dict(n.attributes), zarr_format=3)
                    )
                consolidated = ConsolidatedMetadata(metadata=members)
            meta = GroupMetadata(
                attributes=dict(node.attributes), zarr_format=3, consolidated_metadata=consolidated
            )
            doc = meta.to_buffer_dict(proto)[_META].to_bytes()
        with self._metadata_lock:
            self._metadata[path] = doc
            if len(self._metadata) > KEPT_DOCUMENTS:
                self._metadata.popitem(last=False)
        return doc

    # -- keys ------------------------------------------------------------------------------

    def _resolve(self, key: str) -> tuple[str, tuple[int, ...] | None] | None:
        """``(node path, None)`` for a metadata key, ``(array path, chunk index)`` for a
        chunk key, ``None`` for anything that is not in the store."""
        if key.startswith("/") or ".." in key.split("/"):
            return None
        if key == _META:
            return "", None
        if key.endswith("/" + _META):
            path = key[: -len(_META) - 1]
            return (path, None) if path in self._nodes else None
        # (the root node is asked for last: an archive's is made from every member's header)
        if (key == "c" or key.startswith("c/")) and isinstance(self._nodes[""], ArrayNode):
            head, tail = "", key[1:]
        else:
            head, sep, tail = key.rpartition("/c")
            if not sep or (tail and not tail.startswith("/")):
                return None
        node = self._nodes.get(head)
        if not isinstance(node, ArrayNode):
            return None
        parts = tail.split("/")[1:] if tail else []
        ndim = node.array.layout.ndim
        if len(parts) != ndim or not all(p.isdigit() for p in parts):
            return None
        index = tuple(int(p) for p in parts)
        grid = self._grid(node)
        if any(i >= n for i, n in zip(index, grid, strict=True)):
            return None
        return head, index

    @staticmethod
    def _grid(node: ArrayNode) -> tuple[int, ...]:
        chunks = node.chunks()
        return tuple(math.ceil(n / c) for n, c in zip(node.array.layout.shape, chunks, strict=True))

    def _value(self, key: str) -> bytes | None:
        where = self._resolve(key)
        if where is None:
            return None
        path, index = where
        if index is None:
            return self._metadata_bytes(path)
        node = self._nodes[path]
        if not isinstance(node, ArrayNode):  # pragma: no cover - _resolve checked it
            return None
        return node.chunk_bytes(index)

    # -- the read side of the Store contract ------------------------------------------------

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """The value of ``key`` (or part of it), ``None`` if the key is not in the store."""
        proto = prototype or default_buffer_prototype()
        value = await asyncio.to_thread(self._value, key)
        if value is None:
            return None
        return proto.buffer.from_bytes(_slice(value, byte_range))

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        """Several (possibly partial) values, fetched concurrently."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether ``key`` is in the store (no data is read)."""
        return self._resolve(key) is not None

    async def getsize(self, key: str) -> int:
        """Size in bytes of a value (chunks: the full, padded chunk)."""
        where = self._resolve(key)
        if where is None:
            raise FileNotFoundError(key)
        path, index = where
        if index is None:
            return len(self._metadata_bytes(path))
        node = self._nodes[path]
        assert isinstance(node, ArrayNode)
        return node.chunk_nbytes()

    def _keys(self) -> Iterable[str]:
        for path, node in self._nodes.items():
            yield f"{path}/{_META}" if path else _META
            if isinstance(node, ArrayNode):
                base = f"{path}/c" if path else "c"
                for index in itertools.product(*(range(n) for n in self._grid(node))):
                    yield "/".join([base, *map(str, index)]) if index else base

    async def list(self) -> AsyncIterator[str]:
        """Every key: metadata documents and chunk keys."""
        for key in self._keys():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key starting with ``prefix``."""
        for key in self._keys():
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The names directly under ``prefix`` (keys and sub-directories)."""
        base = prefix.rstrip("/")
        start = f"{base}/" if base else ""
        node = self._nodes.get(base)
        if isinstance(node, GroupNode):  # its document and its children: no chunk key walked
            yield _META
            seen: set[str] = set()
            for path in self._nodes:
                if path.startswith(start) and path != base:
                    child = path[len(start) :].split("/", 1)[0]
                    if child not in seen:
                        seen.add(child)
                        yield child
            return
        seen = set()
        for key in self._keys():
            if not key.startswith(start):
                continue
            child = key[len(start) :].split("/", 1)[0]
            if child not in seen:
                seen.add(child)
                yield child

    # -- writes are refused ------------------------------------------------------------------

    def _refuse(self) -> UnsupportedError:
        return UnsupportedError(f"{self.url}: npystore stores are read-only")

    async def set(self, key: str, value: Buffer) -> None:
        """Refused: the store is read-only."""
        raise self._refuse()

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Refused: the store is read-only."""
        raise self._refuse()

    async def delete(self, key: str) -> None:
        """Refused: the store is read-only."""
        raise self._refuse()

    async def delete_dir(self, prefix: str) -> None:
        """Refused: the store is read-only."""
        raise self._refuse()

    async def clear(self) -> None:
        """Refused: the store is read-only."""
        raise self._refuse()


def _slice(value: bytes, byte_range: ByteRequest | None) -> bytes:
    if byte_range is None:
        return value
    if isinstance(byte_range, RangeByteRequest):
        return value[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return value[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return value[-byte_range.suffix :] if byte_range.suffix else b""
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}")
