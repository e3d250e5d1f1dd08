"""Where an HDF5 chunked dataset's chunk index (a version-1 B-tree) is, and its nodes.

npystore reads HDF5 metadata with libhdf5 (h5py), which walks a chunk index one node at a
time: on an object store every node is a round trip, and the nodes of a large dataset are
scattered among its chunks (MATLAB and h5py write them as chunks are allocated). This
module parses just enough of the format to find the nodes *level by level*, so that
:mod:`npystore.hdf5` can fetch each level's nodes in one batch of concurrent requests before
libhdf5 walks them (from cache). libhdf5 stays the authority on what the chunks are: a wrong
guess here costs requests, never correctness.

All addresses below are *relative to the base address* (the superblock's position: the user
block size for MATLAB files); callers add it. Every integer is little-endian.

Superblock, versions 0 and 1 (at the base address)::

    offset  size  field
    0       8     signature  \\x89 H D F \\r \\n \\x1a \\n
    8       1     superblock version (0..3; only 0 and 1 carry the sizes below at these places)
    13      1     size of offsets (bytes per address: 2, 4 or 8)
    14      1     size of lengths
    24      2     version 1 only: indexed storage internal node K (chunk B-tree K; 32
                  otherwise)

Object header, version 1 (at the address ``H5Oget_info`` reports)::

    0   1  version (1)          1  1  reserved
    2   2  number of messages   4  4  reference count
    8   4  header data size     12 4  padding (messages start at 16)
    messages, each 8-byte aligned:  type u16, data size u16, flags u8, reserved 3, data

Object header, version 2::

    0   4  "OHDR"               4  1  version (2)       5  1  flags
    then 16 bytes of times if flags & 0x20, 4 bytes of attribute phase change if flags & 0x10,
    the size of chunk 0 in 1 << (flags & 3) bytes, then messages (type u8, data size u16,
    flags u8, creation order u16 if flags & 0x04, data) and a 4-byte checksum. Continuation
    blocks of a v2 header start with "OCHK".

Messages used: continuation (type 0x10: address, length of another block of messages) and
data layout (type 0x08). Data layout version 3, class 2 (chunked)::

    0  1  version (3)    1  1  layout class (2)    2  1  dimensionality d (rank + 1)
    3  size-of-offsets   address of the chunk B-tree root (undefined: all ones)
    then d x u32 chunk dimensions (the last is the element size)

Version-1 B-tree node of a chunk index (type 1)::

    0   4  "TREE"            4  1  node type (1)      5  1  level (0 = leaf)
    6   2  entries used n    8     left sibling, right sibling (size-of-offsets each)
    keys and children interleaved: key 0, child 0, key 1, ..., child n-1, key n
    key: chunk size u32, filter mask u32, d x u64 chunk offsets (element coordinates)
    child: an address (a node one level down, or a chunk at level 0)

libhdf5 reads a node as ``24 + 2K * address + (2K + 1) * key`` bytes whatever its fill
(:func:`btree_node_size`); that is the extent fetched for it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from npystore.errors import FormatError

__all__ = [
    "DEFAULT_CHUNK_K",
    "ChunkIndex",
    "HEADER_PREFIX",
    "HeaderBlock",
    "MAX_HEADER_SIZE",
    "Superblock",
    "btree_node_size",
    "chunk_index",
    "header_size",
    "object_header_messages",
    "parse_btree_node",
    "parse_object_header",
    "parse_superblock",
]

SIGNATURE: Final = b"\x89HDF\r\n\x1a\n"
#: The chunk B-tree K of files whose superblock does not record one.
DEFAULT_CHUNK_K: Final = 32
_CONTINUATION: Final = 0x10
_LAYOUT: Final = 0x08
_MAX_MESSAGES: Final = 65535


@dataclass(frozen=True, slots=True)
class Superblock:
    """What the chunk-index walk needs from a version 0/1 superblock."""

    version: int
    sizeof_addr: int
    chunk_k: int


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


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """A chunked dataset's version-1 B-tree chunk index.

    Attributes
    ----------
    root : int
        Address of the root node (relative to the base address).
    dimensionality : int
        The rank plus one (keys hold one more offset than the rank).
    """

    root: int
    dimensionality: int


def _uint(data: bytes, offset: int, size: int, what: str) -> int:
    if offset < 0 or offset + size > len(data):
        raise FormatError(
            f"{what}: needs bytes [{offset}, {offset + size}) of a {len(data)}-byte block"
        )
    return int.from_bytes(data[offset : offset + size], "little")


def parse_superblock(data: bytes) -> Superblock | None:
    """The superblock at the start of ``data``, or None for versions 2 and 3.

    Raises
    ------
    FormatError
        No HDF5 signature, or an address size other than 2, 4 or 8.
    """
    if not data.startswith(SIGNATURE) or len(data) < 16:
        raise FormatError(f"no HDF5 superblock: the bytes start {data[:8]!r}")
    version = data[8]
    if version > 1:
        return None
    sizeof_addr = data[13]
    if sizeof_addr not in (2, 4, 8):
        raise FormatError(f"HDF5 superblock with {sizeof_addr}-byte addresses")
    k = _uint(data, 24, 2, "superblock") if version == 1 else DEFAULT_CHUNK_K
    if k <= 0:
        raise FormatError("HDF5 superblock with a chunk B-tree K of 0")
    return Superblock(version, sizeof_addr, k)


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


def parse_object_header(data: bytes, sizeof_addr: int, *, continuation: int = 0) -> HeaderBlock:
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

    Raises
    ------
    FormatError
        An unknown header version, or a message that runs past the block.
    """
    if continuation == 1:
        return _messages_v1(data, 0, len(data), sizeof_addr)
    if continuation == 2 or data.startswith(b"OHDR"):
        return _header_v2(data, sizeof_addr, continuation == 2)
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
    messages = list(first.messages)
    todo = list(first.continuations)
    for _ in range(MAX_CONTINUATIONS):
        if not todo:
            break
        a, n = todo.pop(0)
        block = parse_object_header(
            read(base + a, base + a + min(n, MAX_HEADER_BLOCK)), sizeof_addr, continuation=version
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


def _header_v2(data: bytes, sizeof_addr: int, is_continuation: bool) -> HeaderBlock:
    if is_continuation:
        if not data.startswith(b"OCHK"):
            raise FormatError(f"object header continuation starts {data[:4]!r}, not 'OCHK'")
        pos, stop, flags = 4, len(data) - 4, None
    else:
        if _uint(data, 4, 1, "object header") != 2:
            raise FormatError(f"OHDR object header of version {data[4]}, expected 2")
        flags = _uint(data, 5, 1, "object header")
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        size = _uint(data, pos, width, "object header")
        pos += width
        stop = min(len(data), pos + size)
    order = bool(flags is not None and flags & 0x04)
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


def chunk_index(messages: tuple[tuple[int, bytes], ...], sizeof_addr: int) -> ChunkIndex | None:
    """The version-1 B-tree chunk index named by a layout message among ``messages``, or
    None (not chunked, a layout version other than 3, or no index written yet)."""
    for kind, body in messages:
        if kind != _LAYOUT or len(body) < 3 + sizeof_addr:
            continue
        if body[0] != 3 or body[1] != 2:
            return None
        dimensionality = body[2]
        root = _uint(body, 3, sizeof_addr, "layout message")
        if root == (1 << (8 * sizeof_addr)) - 1 or dimensionality < 2:
            return None
        return ChunkIndex(root, dimensionality)
    return None


def btree_node_size(dimensionality: int, sizeof_addr: int, k: int) -> int:
    """Bytes libhdf5 reads for one chunk B-tree node: header, 2K children, 2K+1 keys."""
    key = 8 + 8 * dimensionality
    return 8 + 2 * sizeof_addr + 2 * k * sizeof_addr + (2 * k + 1) * key


def parse_btree_node(
    data: bytes, dimensionality: int, sizeof_addr: int
) -> tuple[int, tuple[int, ...]]:
    """The level and the child addresses of a chunk B-tree node.

    Raises
    ------
    FormatError
        No ``TREE`` signature, another node type, or entries past the bytes.
    """
    if not data.startswith(b"TREE"):
        raise FormatError(f"B-tree node starts {data[:4]!r}, not 'TREE'")
    if _uint(data, 4, 1, "B-tree node") != 1:
        raise FormatError(f"B-tree node of type {data[4]}, expected 1 (chunks)")
    level = _uint(data, 5, 1, "B-tree node")
    entries = _uint(data, 6, 2, "B-tree node")
    key = 8 + 8 * dimensionality
    first = 8 + 2 * sizeof_addr + key
    step = key + sizeof_addr
    end = first + (entries - 1) * step + sizeof_addr if entries else first
    if end > len(data):
        raise FormatError(
            f"B-tree node with {entries} entries needs {end} bytes, it has {len(data)}"
        )
    fmt = {2: "<H", 4: "<I", 8: "<Q"}[sizeof_addr]
    children = tuple(struct.unpack_from(fmt, data, first + i * step)[0] for i in range(entries))
    return level, children
