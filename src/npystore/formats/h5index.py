"""HDF5 superblocks, object headers and the messages npystore's own walks need.

npystore never lets libhdf5 walk a B-tree it has not checked (a node pointing to itself
crashes the process): chunk indexes (:mod:`npystore.formats.h5chunks`) and group symbol
tables (:mod:`npystore.formats.h5groups`) are parsed here first, from bytes. This module
parses what leads to them: the superblock, object headers (continuation blocks followed,
checksums of version-2 headers verified) and the data layout, symbol table and link info
messages.

All addresses are *relative to the base address* (the superblock's position: the user
block size for MATLAB files); callers add it. Every integer is little-endian; O and L are
the superblock's sizes of offsets and lengths.

Superblock, versions 0 and 1 (at the base address)::

    0   8  signature  \\x89 H D F \\r \\n \\x1a \\n     8  1  version
    13  1  size of offsets O                       14 1  size of lengths L
    16  2  group leaf node K   18 2 group internal node K   20 4 flags
    24  2  version 1 only: chunk B-tree K (32 otherwise), 2 reserved
    then base, free-space, end-of-file and driver addresses (O each) and the root group's
    symbol-table entry (L name offset, O header address, u32 cache type, u32 reserved,
    16 scratch bytes: cache type 1 holds its B-tree and local heap addresses)

Superblock, versions 2 and 3::

    0 signature  8 version  9 O  10 L  11 flags  12 base, extension, end-of-file and root
    header addresses (O each), u32 checksum. Non-default K values are in the extension's
    object header (a B-tree 'K' values message, type 0x13).

Object header, version 1 (at the address ``H5Gget_objinfo`` reports)::

    0   1  version (1)          1  1  reserved
    2   2  number of messages   4  4  reference count
    8   4  header data size     12 4  padding (messages start at 16)
    messages, each 8-byte aligned:  type u16, data size u16, flags u8, reserved 3, data

Object header, version 2::

    0   4  "OHDR"               4  1  version (2)       5  1  flags
    then 16 bytes of times if flags & 0x20, 4 bytes of attribute phase change if flags & 0x10,
    the size of chunk 0 in 1 << (flags & 3) bytes, then messages (type u8, data size u16,
    flags u8, creation order u16 if flags & 0x04, data) and a 4-byte checksum. Continuation
    blocks of a v2 header start with "OCHK" and end with a checksum; their messages have
    the header's layout (creation order if its flags say so).

Data layout message (type 0x08), chunked (class 2)::

    versions 1, 2: version, dimensionality d, class, 5 reserved, O index address, d x u32
    version 3:     version, class, d, O index address (a v1 B-tree), d x u32
    versions 4, 5: version, class, flags, d, w, d x (w-byte) sizes, index type (1 single
                   chunk, 2 implicit, 3 fixed array, 4 extensible array, 5 v2 B-tree),
                   its parameters, O index address
    the d sizes are the chunk dimensions and, last, the element size
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from npystore.errors import FormatError
from npystore.formats import h5sum

__all__ = [
    "BTREE_V1",
    "BTREE_V2",
    "DEFAULT_CHUNK_K",
    "EXTENSIBLE_ARRAY",
    "FIXED_ARRAY",
    "HEADER_PREFIX",
    "IMPLICIT",
    "INDEX_NAMES",
    "MAX_HEADER_SIZE",
    "SINGLE_CHUNK",
    "SUPERBLOCK_SIZE",
    "ChunkLayout",
    "HeaderBlock",
    "Superblock",
    "btree_k_values",
    "chunk_layout",
    "header_size",
    "link_storage",
    "object_header_messages",
    "parse_object_header",
    "symbol_table",
    "undefined",
    "parse_superblock",
]

SIGNATURE: Final = b"\x89HDF\r\n\x1a\n"
#: The chunk B-tree K of files whose superblock does not record one.
DEFAULT_CHUNK_K: Final = 32
_CONTINUATION: Final = 0x10
_LAYOUT: Final = 0x08
_BTREE_K: Final = 0x13
_SYMBOL_TABLE: Final = 0x11
_LINK_INFO: Final = 0x02
_MAX_MESSAGES: Final = 65535


@dataclass(frozen=True, slots=True)
class Superblock:
    """What the walks need from a superblock (any version).

    Attributes
    ----------
    version : int
        0 to 3.
    sizeof_addr, sizeof_len : int
        Bytes per address and per length (2, 4 or 8).
    chunk_k : int
        K of chunk B-trees (nodes hold up to 2K chunks): version 1 records it, versions
        2 and 3 in the superblock extension (see :func:`btree_k_values`), else 32.
    group_leaf_k, group_internal_k : int
        K of symbol-table nodes (up to 2K entries) and of group B-tree nodes.
    base_address : int
        The base address recorded (0 or the superblock's position).
    eof_address : int
        The end-of-file address recorded (relative to the base).
    root_header : int
        The root group's object header address.
    extension : int or None
        Versions 2 and 3: the superblock extension's object header address, if any.
    root_stab : (int, int) or None
        Versions 0 and 1: the root group's B-tree and local heap addresses cached in its
        symbol-table entry (libhdf5 checks them against the group's own message).
    """

    version: int
    sizeof_addr: int
    sizeof_len: int = 8
    chunk_k: int = DEFAULT_CHUNK_K
    group_leaf_k: int = 4
    group_internal_k: int = 16
    base_address: int = 0
    eof_address: int = 0
    root_header: int = 0
    extension: int | None = None
    root_stab: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class HeaderBlock:
    """The messages of one block of an object header and the blocks it continues in.

    Attributes
    ----------
    messages : tuple of (int, bytes)
        Message type and data.
    continuations : tuple of (int, int)
        Address and length of each further block (relative to the base address).
    """

    messages: tuple[tuple[int, bytes], ...]
    continuations: tuple[tuple[int, int], ...]


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


def _uint(data: bytes, offset: int, size: int, what: str) -> int:
    if offset < 0 or offset + size > len(data):
        raise FormatError(
            f"{what}: needs bytes [{offset}, {offset + size}) of a {len(data)}-byte block"
        )
    return int.from_bytes(data[offset : offset + size], "little")


#: Bytes at the base address that hold any superblock :func:`parse_superblock` reads.
SUPERBLOCK_SIZE: Final = 160


def undefined(sizeof_addr: int) -> int:
    """The undefined address (all bits set) for addresses of ``sizeof_addr`` bytes."""
    return (1 << (8 * sizeof_addr)) - 1


def parse_superblock(data: bytes) -> Superblock:
    """The superblock at the start of ``data`` (give it :data:`SUPERBLOCK_SIZE` bytes).

    Raises
    ------
    FormatError
        No HDF5 signature, an unknown version, sizes other than 2, 4 or 8, a K of 0, a
        checksum mismatch (versions 2 and 3), or too few bytes.
    """
    if not data.startswith(SIGNATURE) or len(data) < 16:
        raise FormatError(f"no HDF5 superblock: the bytes start {data[:8]!r}")
    version = data[8]
    if version > 3:
        raise FormatError(f"HDF5 superblock of version {version}, expected 0 to 3")
    new = version >= 2
    sizeof_addr, sizeof_len = (data[9], data[10]) if new else (data[13], data[14])
    for what, size in (("addresses", sizeof_addr), ("lengths", sizeof_len)):
        if size not in (2, 4, 8):
            raise FormatError(f"HDF5 superblock with {size}-byte {what}")
    o = sizeof_addr
    if new:
        fields = [_uint(data, 12 + i * o, o, "superblock") for i in range(4)]
        h5sum.check(data[: 12 + 4 * o + 4], f"HDF5 superblock version {version}")
        base, ext, eof, root = fields
        return Superblock(
            version, o, sizeof_len, base_address=base, eof_address=eof, root_header=root,
            extension=None if ext == undefined(o) else ext,
        )  # fmt: skip
    leaf_k = _uint(data, 16, 2, "superblock")
    internal_k = _uint(data, 18, 2, "superblock")
    chunk_k = _uint(data, 24, 2, "superblock") if version == 1 else DEFAULT_CHUNK_K
    if min(leaf_k, internal_k, chunk_k) <= 0:
        raise FormatError(
            f"HDF5 superblock with a B-tree K of 0 (group leaf {leaf_k}, group internal "
            f"{internal_k}, chunk {chunk_k})"
        )
    pos = 24 if version == 0 else 28
    base, _free, eof, _driver = (_uint(data, pos + i * o, o, "superblock") for i in range(4))
    entry = pos + 4 * o  # the root group's symbol-table entry
    root = _uint(data, entry + sizeof_len, o, "superblock root entry")
    cache = _uint(data, entry + sizeof_len + o, 4, "superblock root entry")
    scratch = entry + sizeof_len + o + 8
    stab = (
        (_uint(data, scratch, o, "root entry"), _uint(data, scratch + o, o, "root entry"))
        if cache == 1
        else None
    )
    return Superblock(
        version, o, sizeof_len, chunk_k, leaf_k, internal_k, base, eof, root, None, stab
    )


def btree_k_values(messages: tuple[tuple[int, bytes], ...], sb: Superblock) -> Superblock:
    """``sb`` with the B-tree K values of its superblock extension's messages (a B-tree 'K'
    values message, type 0x13), if there is one."""
    for kind, body in messages:
        if kind != _BTREE_K:
            continue
        if len(body) < 7 or body[0] != 0:
            raise FormatError(
                f"B-tree 'K' values message of {len(body)} bytes, version {body[:1]!r}"
            )
        chunk_k, internal_k, leaf_k = (_uint(body, 1 + 2 * i, 2, "K values") for i in range(3))
        if min(chunk_k, internal_k, leaf_k) <= 0:
            raise FormatError("B-tree 'K' values message with a K of 0")
        return replace(sb, chunk_k=chunk_k, group_internal_k=internal_k, group_leaf_k=leaf_k)
    return sb


#: Bytes of an object header that :func:`header_size` needs.
HEADER_PREFIX: Final = 40
#: Largest first block of an object header that :func:`header_size` accepts (the size
#: fields allow 4 GiB and more; real headers take a few KiB).
MAX_HEADER_SIZE: Final = 2**20


def header_size(prefix: bytes) -> int:
    """Bytes of an object header's first block, from its first :data:`HEADER_PREFIX` bytes.

    Raises
    ------
    FormatError
        Neither a version-1 nor a version-2 (``OHDR``) object header, or one larger than
        :data:`MAX_HEADER_SIZE`.
    """
    if prefix.startswith(b"OHDR"):
        if _uint(prefix, 4, 1, "object header") != 2:
            raise FormatError(f"OHDR object header of version {prefix[4]}, expected 2")
        flags = _uint(prefix, 5, 1, "object header")
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        size = pos + width + _uint(prefix, pos, width, "object header") + 4
    elif prefix[:1] == b"\x01" and prefix[1:2] == b"\x00":
        size = 16 + _uint(prefix, 8, 4, "object header")
    else:
        raise FormatError(f"no object header here: the bytes start {prefix[:8]!r}")
    if size > MAX_HEADER_SIZE:
        raise FormatError(
            f"object header of {size} bytes, more than the {MAX_HEADER_SIZE} read for a hint"
        )
    return size


def parse_object_header(
    data: bytes, sizeof_addr: int, *, continuation: int = 0, header_flags: int = 0
) -> HeaderBlock:
    """The messages of an object header block.

    Parameters
    ----------
    data : bytes
        The block: from the header's address (``continuation=0``) or a continuation
        block's address, at least as long as the block.
    sizeof_addr : int
        Bytes per address (from the superblock).
    continuation : int
        0 for the header itself, 1 for a continuation block of a version-1 header, 2 for
        one of a version-2 header.
    header_flags : int
        For a continuation block of a version-2 header: the header's flags (bit 2: each
        message carries its creation order).

    Raises
    ------
    FormatError
        An unknown header version, or a message that runs past the block.
    """
    if continuation == 1:
        return _messages_v1(data, 0, len(data), sizeof_addr)
    if continuation == 2 or data.startswith(b"OHDR"):
        return _header_v2(data, sizeof_addr, continuation == 2, header_flags)
    if not data or data[0] != 1:
        raise FormatError(
            f"object header of version {data[0] if data else None}, expected 1 or 'OHDR'"
        )
    count = _uint(data, 2, 2, "object header")
    size = _uint(data, 8, 4, "object header")
    block = _messages_v1(data, 16, 16 + size, sizeof_addr)
    return HeaderBlock(block.messages[:count], block.continuations)


#: Most continuation blocks of an object header followed by :func:`object_header_messages`.
MAX_CONTINUATIONS: Final = 64
#: Largest continuation block :func:`object_header_messages` reads.
MAX_HEADER_BLOCK: Final = 2**20


def object_header_messages(
    read: Callable[[int, int], bytes], base: int, address: int, sizeof_addr: int
) -> tuple[tuple[int, bytes], ...]:
    """Every message of the object header at ``address``, continuation blocks followed.

    Parameters
    ----------
    read : callable
        ``read(start, stop)`` returns the file's bytes ``[start, stop)`` (fewer at its end);
        the caller decides where they come from.
    base : int
        Where the HDF5 file starts (the user block's size).
    address : int
        The object header's address (relative to ``base``).
    sizeof_addr : int
        The superblock's size of addresses.

    Returns
    -------
    tuple of (int, bytes)
        ``(message type, body)`` of the first block, then of each continuation block (at
        most :data:`MAX_CONTINUATIONS`, each at most :data:`MAX_HEADER_BLOCK` bytes).

    Raises
    ------
    FormatError
        A malformed header, or one larger than :data:`MAX_HEADER_SIZE`.
    """
    start = base + address
    prefix = read(start, start + HEADER_PREFIX)
    size = header_size(prefix)
    first = parse_object_header(read(start, start + size), sizeof_addr)
    version = 2 if prefix.startswith(b"OHDR") else 1
    flags = prefix[5] if version == 2 else 0
    messages = list(first.messages)
    todo = list(first.continuations)
    seen = {address}
    for _ in range(MAX_CONTINUATIONS):
        if not todo:
            break
        a, n = todo.pop(0)
        if a in seen:
            raise FormatError(f"object header at {address}: continuation block {a} reached twice")
        seen.add(a)
        block = parse_object_header(
            read(base + a, base + a + min(n, MAX_HEADER_BLOCK)),
            sizeof_addr,
            continuation=version,
            header_flags=flags,
        )
        messages.extend(block.messages)
        todo.extend(block.continuations)
    return tuple(messages)


def _messages_v1(data: bytes, start: int, stop: int, sizeof_addr: int) -> HeaderBlock:
    messages: list[tuple[int, bytes]] = []
    continuations: list[tuple[int, int]] = []
    pos = start
    stop = min(stop, len(data))
    while pos + 8 <= stop and len(messages) < _MAX_MESSAGES:
        kind = _uint(data, pos, 2, "object header message")
        size = _uint(data, pos + 2, 2, "object header message")
        body = data[pos + 8 : pos + 8 + size]
        if len(body) != size:
            raise FormatError(
                f"object header message of type {kind:#x} and {size} bytes at {pos} runs "
                f"past the {stop}-byte block"
            )
        _collect(kind, body, sizeof_addr, messages, continuations)
        pos += 8 + (size + 7) // 8 * 8
    return HeaderBlock(tuple(messages), tuple(continuations))


def _header_v2(
    data: bytes, sizeof_addr: int, is_continuation: bool, header_flags: int
) -> HeaderBlock:
    if is_continuation:
        if not data.startswith(b"OCHK"):
            raise FormatError(f"object header continuation starts {data[:4]!r}, not 'OCHK'")
        h5sum.check(data, "object header continuation block")
        pos, stop, flags = 4, len(data) - 4, header_flags
    else:
        if _uint(data, 4, 1, "object header") != 2:
            raise FormatError(f"OHDR object header of version {data[4]}, expected 2")
        flags = _uint(data, 5, 1, "object header")
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        size = _uint(data, pos, width, "object header")
        pos += width
        stop = pos + size
        if stop + 4 > len(data):
            raise FormatError(
                f"OHDR object header of {stop + 4} bytes, only {len(data)} bytes given"
            )
        h5sum.check(data[: stop + 4], "OHDR object header")
    order = bool(flags & 0x04)
    messages: list[tuple[int, bytes]] = []
    continuations: list[tuple[int, int]] = []
    while pos + 4 <= stop and len(messages) < _MAX_MESSAGES:
        kind = data[pos]
        size = _uint(data, pos + 1, 2, "object header message")
        pos += 4 + (2 if order else 0)
        body = data[pos : pos + size]
        if len(body) != size:
            raise FormatError(
                f"object header message of type {kind:#x} and {size} bytes runs past the "
                f"{stop}-byte block"
            )
        _collect(kind, body, sizeof_addr, messages, continuations)
        pos += size
    return HeaderBlock(tuple(messages), tuple(continuations))


def _collect(
    kind: int,
    body: bytes,
    sizeof_addr: int,
    messages: list[tuple[int, bytes]],
    continuations: list[tuple[int, int]],
) -> None:
    messages.append((kind, body))
    if kind == _CONTINUATION:
        address = _uint(body, 0, sizeof_addr, "continuation message")
        length = _uint(body, sizeof_addr, 8, "continuation message")
        continuations.append((address, length))


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
    version = _uint(body, 0, 1, "layout message")
    if version in (1, 2):
        ndims, cls = _uint(body, 1, 1, "layout message"), _uint(body, 2, 1, "layout message")
        if cls != 2:
            return None
        address = _uint(body, 8, o, "layout message")
        dims = tuple(_uint(body, 8 + o + 4 * i, 4, "layout message") for i in range(ndims))
        flags, index_type = 0, BTREE_V1
    elif version == 3:
        if _uint(body, 1, 1, "layout message") != 2:
            return None
        ndims = _uint(body, 2, 1, "layout message")
        address = _uint(body, 3, o, "layout message")
        dims = tuple(_uint(body, 3 + o + 4 * i, 4, "layout message") for i in range(ndims))
        flags, index_type = 0, BTREE_V1
    elif version in (4, 5):
        if _uint(body, 1, 1, "layout message") != 2:
            return None
        flags = _uint(body, 2, 1, "layout message")
        ndims = _uint(body, 3, 1, "layout message")
        width = _uint(body, 4, 1, "layout message")
        if not 1 <= width <= 8:
            raise FormatError(f"chunked layout message with {width}-byte dimension sizes")
        dims = tuple(_uint(body, 5 + width * i, width, "layout message") for i in range(ndims))
        pos = 5 + width * ndims
        index_type = _uint(body, pos, 1, "layout message")
        if index_type not in _INDEX_INFO:
            raise FormatError(f"chunked layout message with chunk index type {index_type}")
        pos += 1
        info_size = _INDEX_INFO[index_type]
        filtered_size = filter_mask = 0
        if index_type == SINGLE_CHUNK and flags & 2:
            filtered_size = _uint(body, pos, sb.sizeof_len, "layout message")
            filter_mask = _uint(body, pos + sb.sizeof_len, 4, "layout message")
            info_size = sb.sizeof_len + 4
        info = body[pos : pos + info_size]
        address = _uint(body, pos + info_size, o, "layout message")
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
            return _uint(body, 0, o, "symbol table message"), _uint(
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
        flags = _uint(body, 1, 1, "link info message")
        pos = 2 + (8 if flags & 1 else 0)
        heap = _uint(body, pos, sizeof_addr, "link info message")
        names = _uint(body, pos + sizeof_addr, sizeof_addr, "link info message")
        if heap == undefined(sizeof_addr):
            return None
        return heap, names
    return None
