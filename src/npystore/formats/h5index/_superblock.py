"""The HDF5 superblock: sizes of addresses and lengths, B-tree K values, the root group.

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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from npystore.errors import FormatError
from npystore.formats import h5sum
from npystore.formats.h5index._fields import uint, undefined

__all__ = [
    "DEFAULT_CHUNK_K", "SIGNATURE", "SUPERBLOCK_SIZE", "Superblock", "btree_k_values",
    "parse_superblock",
]  # fmt: skip

SIGNATURE: Final = b"\x89HDF\r\n\x1a\n"
#: The chunk B-tree K of files whose superblock does not record one.
DEFAULT_CHUNK_K: Final = 32
_BTREE_K: Final = 0x13


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


#: Bytes at the base address that hold any superblock :func:`parse_superblock` reads.
SUPERBLOCK_SIZE: Final = 160


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
        fields = [uint(data, 12 + i * o, o, "superblock") for i in range(4)]
        h5sum.check(data[: 12 + 4 * o + 4], f"HDF5 superblock version {version}")
        base, ext, eof, root = fields
        return Superblock(
            version, o, sizeof_len, base_address=base, eof_address=eof, root_header=root,
            extension=None if ext == undefined(o) else ext,
        )  # fmt: skip
    leaf_k = uint(data, 16, 2, "superblock")
    internal_k = uint(data, 18, 2, "superblock")
    chunk_k = uint(data, 24, 2, "superblock") if version == 1 else DEFAULT_CHUNK_K
    if min(leaf_k, internal_k, chunk_k) <= 0:
        raise FormatError(
            f"HDF5 superblock with a B-tree K of 0 (group leaf {leaf_k}, group internal "
            f"{internal_k}, chunk {chunk_k})"
        )
    pos = 24 if version == 0 else 28
    base, _free, eof, _driver = (uint(data, pos + i * o, o, "superblock") for i in range(4))
    entry = pos + 4 * o  # the root group's symbol-table entry
    root = uint(data, entry + sizeof_len, o, "superblock root entry")
    cache = uint(data, entry + sizeof_len + o, 4, "superblock root entry")
    scratch = entry + sizeof_len + o + 8
    stab = (
        (uint(data, scratch, o, "root entry"), uint(data, scratch + o, o, "root entry"))
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
        chunk_k, internal_k, leaf_k = (uint(body, 1 + 2 * i, 2, "K values") for i in range(3))
        if min(chunk_k, internal_k, leaf_k) <= 0:
            raise FormatError("B-tree 'K' values message with a K of 0")
        return replace(sb, chunk_k=chunk_k, group_internal_k=internal_k, group_leaf_k=leaf_k)
    return sb
