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

Keys never contain ``..`` or a leading ``/``: node names are made from member names by
:func:`node_name` (percent-encoding, reserved names escaped, long names shortened), and the
original name is kept in the node's attributes.
"""

from __future__ import annotations

import asyncio
import itertools
import math
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
    from zarr.core.group import ConsolidatedMetadata, GroupMetadata
    from zarr.core.metadata.v3 import ArrayV3Metadata
except ImportError as exc:
    raise missing_dependency("zarr", "zarr", "npystore's Zarr store", exc) from exc

from npystore.faces.tree.nodes import MAX_NODE_NAME, ArrayNode, GroupNode, Node, node_name
from npystore.faces.zarr.dtypes import bytes_codec_for, zarr_dtype_for

__all__ = ["MAX_NODE_NAME", "ArrayNode", "GroupNode", "LayoutStore", "node_name"]

_META: Final = "zarr.json"


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


class LayoutStore(Store):
    """A read-only Zarr v3 store over the arrays of one file.

    Parameters
    ----------
    nodes : mapping of str to ArrayNode or GroupNode
        The hierarchy: ``""`` is the root; other paths are ``/``-separated node names.
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
        self._nodes = dict(nodes)
        if "" not in self._nodes:
            raise ValueError("a hierarchy needs a root node at path ''")
        for path in self._nodes:
            parts = path.split("/") if path else []
            if any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"unsafe node path {path!r}")
        self._metadata: dict[str, bytes] = {}
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
        return tuple(
            (p, n.array.reader.token if isinstance(n, ArrayNode) else None)
            for p, n in sorted(self._nodes.items())
        )

    def __repr__(self) -> str:
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

    def _metadata_bytes(self, path: str) -> bytes:
        cached = self._metadata.get(path)
        if cached is not None:
            return cached
        node = self._nodes[path]
        proto = default_buffer_prototype()
        if isinstance(node, ArrayNode):
            doc = (
                _array_metadata(node, self._filters.get(path, ()))
                .to_buffer_dict(proto)[_META]
                .to_bytes()
            )
        else:
            consolidated = None
            if path == "":
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
        self._metadata[path] = doc
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
        if isinstance(self._nodes[""], ArrayNode) and (key == "c" or key.startswith("c/")):
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
        seen: set[str] = set()
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
