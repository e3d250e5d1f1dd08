"""npystore's block index: the deflate blocks of a member, carried in a private extra field.

``savez_compressed`` deflates each member as independent blocks: every block but the last
ends with a full flush (byte-aligned, and the next block starts with an empty dictionary),
the last with the end of stream; joined, they are one valid deflate stream. The block
boundaries are a ready-made checkpoint index, stored in the member's central directory
entry as an extra field that numpy, :mod:`zipfile` and unzip skip (unknown header IDs are
ignored, APPNOTE.TXT 4.5)::

    offset  size  field
    0       2     header ID 0x7A6E (bytes b"nz")
    2       2     data size: 6 + 12 * n
    4       1     version: 1
    5       1     flags: 0
    6       4     n, the number of blocks (u32 LE)
    10      12*n  per block: compressed size (u32), uncompressed size (u32), CRC-32 of its
                  uncompressed bytes (u32)

A reader treats it as hostile: :func:`parse_blocks` checks the structure (block count, sizes
summing to the member's sizes, no empty block, no block claiming more than deflate can
produce, none larger than npystore's writer makes for a member of that size,
:func:`block_size`) and answers ``None`` for anything else (the member is then read as any
other); whoever inflates a block checks that it inflates, without a dictionary, to exactly
its size and CRC-32, consuming exactly its compressed bytes, and that the blocks before it
end where the one stream has a block boundary (:mod:`npystore.read.blocks`).
"""

from __future__ import annotations

import bisect
import itertools
import struct
from dataclasses import dataclass
from typing import Final

from npystore.formats.deflate import max_inflated_size

__all__ = [
    "BLOCKS_EXTRA_ID",
    "DEFLATE_BLOCK",
    "MAX_BLOCKS",
    "BlockIndex",
    "block_size",
    "blocks_extra",
    "parse_blocks",
]

BLOCKS_EXTRA_ID: Final = 0x7A6E
#: Most blocks one extra field holds (its data size is a u16, beside a ZIP64 extra).
MAX_BLOCKS: Final = 5000
#: Uncompressed bytes of the blocks npystore's writer makes (more for members over about
#: 4 GiB, see :func:`block_size`).
DEFLATE_BLOCK: Final = 2**20
_HEAD: Final = struct.Struct("<BBI")
_BLOCK: Final = struct.Struct("<III")


@dataclass(frozen=True, slots=True)
class BlockIndex:
    """A member's independent deflate blocks.

    Attributes
    ----------
    csizes, usizes, crcs : tuple of int
        Per block: compressed size, uncompressed size, CRC-32 of its uncompressed bytes.
    """

    csizes: tuple[int, ...]
    usizes: tuple[int, ...]
    crcs: tuple[int, ...]

    @property
    def coffsets(self) -> list[int]:
        """Compressed offset of each block, and the stream's end."""
        return [0, *itertools.accumulate(self.csizes)]

    @property
    def uoffsets(self) -> list[int]:
        """Uncompressed offset of each block, and the stream's end."""
        return [0, *itertools.accumulate(self.usizes)]

    def span(self, start: int, stop: int) -> tuple[int, int]:
        """Blocks ``[i, j)`` holding uncompressed bytes ``[start, stop)`` (``stop > start``)."""
        u = self.uoffsets
        i = bisect.bisect_right(u, start) - 1
        j = bisect.bisect_left(u, stop)
        return max(0, i), min(len(self.usizes), max(j, i + 1))


def block_size(usize: int) -> int:
    """Uncompressed bytes per block of a member of ``usize`` bytes (npystore's writer): 1 MiB,
    or whole MiB enough to keep the index within about 4,000 blocks. A reader refuses an
    index with a larger block: a block is inflated whole to check it."""
    per = -(-usize // 4000)
    return max(DEFLATE_BLOCK, -(-per // 2**20) * 2**20)


def blocks_extra(blocks: BlockIndex) -> bytes:
    """The extra field (ID, size, data) for ``blocks``; ``b""`` when there are too many."""
    n = len(blocks.csizes)
    if n == 0 or n > MAX_BLOCKS:
        return b""
    body = [_HEAD.pack(1, 0, n)]
    body.extend(
        _BLOCK.pack(c, u, crc)
        for c, u, crc in zip(blocks.csizes, blocks.usizes, blocks.crcs, strict=True)
    )
    data = b"".join(body)
    return struct.pack("<HH", BLOCKS_EXTRA_ID, len(data)) + data


def parse_blocks(body: bytes, compressed_size: int, uncompressed_size: int) -> BlockIndex | None:
    """The block index in an extra field's data, or ``None`` when it does not describe a
    member of these sizes (malformed, foreign, or lying)."""
    if len(body) < _HEAD.size:
        return None
    version, flags, n = _HEAD.unpack_from(body, 0)
    if version != 1 or flags != 0 or not 0 < n <= MAX_BLOCKS:
        return None
    if len(body) != _HEAD.size + n * _BLOCK.size:
        return None
    csizes, usizes, crcs = [], [], []
    largest = block_size(uncompressed_size)
    for k in range(n):
        c, u, crc = _BLOCK.unpack_from(body, _HEAD.size + k * _BLOCK.size)
        if c == 0 or (u == 0 and n > 1) or u > max_inflated_size(c) or u > largest:
            return None
        csizes.append(c)
        usizes.append(u)
        crcs.append(crc)
    if sum(csizes) != compressed_size or sum(usizes) != uncompressed_size:
        return None
    return BlockIndex(tuple(csizes), tuple(usizes), tuple(crcs))
