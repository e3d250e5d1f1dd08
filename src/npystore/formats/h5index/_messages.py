"""The object header messages npystore's walks start from: a chunked dataset's data layout,
an old-style group's symbol table, a new-style group's link info.

Data layout message (type 0x08), chunked (class 2)::

    versions 1, 2: version, dimensionality d, class, 5 reserved, O index address, d x u32
    version 3:     version, class, d, O index address (a v1 B-tree), d x u32
    versions 4, 5: version, class, flags, d, w, d x (w-byte) sizes, index type (1 single
                   chunk, 2 implicit, 3 fixed array, 4 extensible array, 5 v2 B-tree),
                   its parameters, O index address
    the d sizes are the chunk dimensions and, last, the element size

Symbol table message (type 0x11)::

    O v1 B-tree address (a group B-tree), O local heap address (the link names)

Link info message (type 0x02)::

    version, flags, u64 maximum creation index if flags & 1, O fractal heap address
    (undefined when the links are in the header), O name index v2 B-tree address, O
    creation order index v2 B-tree address if flags & 2
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from npystore.errors import FormatError
from npystore.formats.h5index._fields import uint, undefined
from npystore.formats.h5index._superblock import Superblock

__all__ = [
    "BTREE_V1", "BTREE_V2", "EXTENSIBLE_ARRAY", "FIXED_ARRAY", "IMPLICIT", "INDEX_NAMES",
    "MAX_RANK", "SINGLE_CHUNK", "ChunkLayout", "chunk_layout", "link_storage", "symbol_table",
]  # fmt: skip

_LAYOUT: Final = 0x08
_SYMBOL_TABLE: Final = 0x11
_LINK_INFO: Final = 0x02

#: Chunk index types (of layout message versions 4 and 5; 0 stands for the version-1
#: B-tree of versions 1 to 3).
BTREE_V1: Final = 0
SINGLE_CHUNK: Final = 1
IMPLICIT: Final = 2
FIXED_ARRAY: Final = 3
EXTENSIBLE_ARRAY: Final = 4
BTREE_V2: Final = 5
INDEX_NAMES: Final = {
    BTREE_V1: "version-1 B-tree",
    SINGLE_CHUNK: "single chunk",
    IMPLICIT: "implicit",
    FIXED_ARRAY: "fixed array",
    EXTENSIBLE_ARRAY: "extensible array",
    BTREE_V2: "version-2 B-tree",
}
#: Bytes of index information after the index type, per type (single chunk: more when
#: filtered).
_INDEX_INFO: Final = {
    SINGLE_CHUNK: 0,
    IMPLICIT: 0,
    FIXED_ARRAY: 1,
    EXTENSIBLE_ARRAY: 5,
    BTREE_V2: 6,
}
#: Most dimensions of an HDF5 dataspace (H5S_MAX_RANK).
MAX_RANK: Final = 32


@dataclass(frozen=True, slots=True)
class ChunkLayout:
    """A chunked dataset's data layout message.

    Attributes
    ----------
    version : int
        Layout message version (1 to 5).
    chunk : tuple of int
        Chunk dimensions (the dataset's rank of them).
    element_size : int
        Bytes per element (the last dimension the message records).
    index_type : int
        :data:`BTREE_V1` ... :data:`BTREE_V2`.
    address : int or None
        Address of the index (for a single chunk: of the chunk; implicit: of the first
        chunk), None while nothing is allocated.
    flags : int
        Version 4/5 flags (bit 0: partial edge chunks are not filtered; bit 1: the single
        chunk is filtered).
    filtered_size, filter_mask : int
        The single chunk's stored size and filter mask when it is filtered (else 0).
    info : bytes
        The index type's parameters as stored (fixed array: page bits; ...).
    """

    version: int
    chunk: tuple[int, ...]
    element_size: int
    index_type: int
    address: int | None
    flags: int = 0
    filtered_size: int = 0
    filter_mask: int = 0
    info: bytes = b""

    @property
    def index_name(self) -> str:
        """The index type's name."""
        return INDEX_NAMES.get(self.index_type, f"type {self.index_type}")


def chunk_layout(messages: tuple[tuple[int, bytes], ...], sb: Superblock) -> ChunkLayout | None:
    """The chunked layout among an object header's ``messages``, or None when the layout is
    not chunked (or there is no layout message: not a dataset).

    Raises
    ------
    FormatError
        A malformed layout message: unknown version, a dimensionality outside 2..33, a
        chunk dimension of 0, an unknown chunk index type, or fields past its end.
    """
    for kind, body in messages:
        if kind == _LAYOUT:
            return _layout(body, sb)
    return None


def _layout(body: bytes, sb: Superblock) -> ChunkLayout | None:
    o = sb.sizeof_addr
    version = uint(body, 0, 1, "layout message")
    if version in (1, 2):
        ndims, cls = uint(body, 1, 1, "layout message"), uint(body, 2, 1, "layout message")
        if cls != 2:
            return None
        address = uint(body, 8, o, "layout message")
        dims = tuple(uint(body, 8 + o + 4 * i, 4, "layout message") for i in range(ndims))
        flags, index_type = 0, BTREE_V1
    elif version == 3:
        if uint(body, 1, 1, "layout message") != 2:
            return None
        ndims = uint(body, 2, 1, "layout message")
        address = uint(body, 3, o, "layout message")
        dims = tuple(uint(body, 3 + o + 4 * i, 4, "layout message") for i in range(ndims))
        flags, index_type = 0, BTREE_V1
    elif version in (4, 5):
        if uint(body, 1, 1, "layout message") != 2:
            return None
        flags = uint(body, 2, 1, "layout message")
        ndims = uint(body, 3, 1, "layout message")
        width = uint(body, 4, 1, "layout message")
        if not 1 <= width <= 8:
            raise FormatError(f"chunked layout message with {width}-byte dimension sizes")
        dims = tuple(uint(body, 5 + width * i, width, "layout message") for i in range(ndims))
        pos = 5 + width * ndims
        index_type = uint(body, pos, 1, "layout message")
        if index_type not in _INDEX_INFO:
            raise FormatError(f"chunked layout message with chunk index type {index_type}")
        pos += 1
        info_size = _INDEX_INFO[index_type]
        filtered_size = filter_mask = 0
        if index_type == SINGLE_CHUNK and flags & 2:
            filtered_size = uint(body, pos, sb.sizeof_len, "layout message")
            filter_mask = uint(body, pos + sb.sizeof_len, 4, "layout message")
            info_size = sb.sizeof_len + 4
        info = body[pos : pos + info_size]
        address = uint(body, pos + info_size, o, "layout message")
    else:
        raise FormatError(f"data layout message of version {version}, expected 1 to 5")
    if not 2 <= ndims <= MAX_RANK + 1:
        raise FormatError(f"chunked layout message of dimensionality {ndims}, expected 2..33")
    if 0 in dims:
        raise FormatError(f"chunked layout message with chunk dimensions {dims}")
    layout = ChunkLayout(
        version, dims[:-1], dims[-1], index_type, None if address == undefined(o) else address,
        flags,
    )  # fmt: skip
    if version >= 4:
        layout = replace(layout, filtered_size=filtered_size, filter_mask=filter_mask, info=info)
    return layout


def symbol_table(
    messages: tuple[tuple[int, bytes], ...], sizeof_addr: int
) -> tuple[int, int] | None:
    """The B-tree and local heap addresses of an old-style group's symbol table message
    (type 0x11) among ``messages``, or None when there is none."""
    for kind, body in messages:
        if kind == _SYMBOL_TABLE:
            o = sizeof_addr
            return uint(body, 0, o, "symbol table message"), uint(
                body, o, o, "symbol table message"
            )
    return None


def link_storage(
    messages: tuple[tuple[int, bytes], ...], sizeof_addr: int
) -> tuple[int, int] | None:
    """The fractal heap and name-index v2 B-tree addresses of a new-style group that stores
    its links densely (a link info message, type 0x02), or None (links in the header, or
    not a group)."""
    for kind, body in messages:
        if kind != _LINK_INFO:
            continue
        flags = uint(body, 1, 1, "link info message")
        pos = 2 + (8 if flags & 1 else 0)
        heap = uint(body, pos, sizeof_addr, "link info message")
        names = uint(body, pos + sizeof_addr, sizeof_addr, "link info message")
        if heap == undefined(sizeof_addr):
            return None
        return heap, names
    return None
