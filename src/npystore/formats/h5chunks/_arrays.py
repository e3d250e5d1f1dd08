"""The chunk indexes of datasets without unlimited dimensions (data layout message versions
4 and 5): single chunk, implicit and fixed array.

- single chunk: the chunk at the index address (its stored size and filter mask in the
  layout message when filtered); the dataset must fit in one chunk. No request.
- implicit: unfiltered chunks stored back to back in grid order (of the maximum shape).
  No request.
- fixed array (``FAHD`` header, ``FADB`` data block, pages): one entry per chunk of the
  maximum shape's grid, checksums verified. Two requests: the header, then the data
  block with its pages.

Fixed array header, at the index address (a version-4/5 data layout message's)::

    0 "FAHD"  4 version (0)  5 client (0 chunks, 1 filtered chunks)  6 entry size
    7 page bits  8 L entries  8+L O data block address, then a u32 checksum

Fixed array data block, at that address::

    0 "FADB"  4 version (0)  5 client  6 O header address
    up to 2**page bits entries: the entries, a u32 checksum
    more: a bitmap of the pages that are initialised (a bit per page, ceil(pages / 8)
    bytes), a u32 checksum, then each page: its (up to) 2**page bits entries and a u32
    checksum
    entry: O chunk address (undefined: not stored); for filtered chunks then its stored
    size (entry size - O - 4 bytes) and u32 filter mask
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, UnsupportedError
from npystore.formats import h5sum
from npystore.formats.h5chunks._walk import (
    ChunkTable,
    Geometry,
    check_extent,
    chunk_bytes,
    empty_table,
    grid_of,
    span,
)
from npystore.formats.h5index import ChunkLayout, Superblock, undefined

__all__ = [
    "MAX_FIXED_ARRAY_BYTES", "FixedArrayWalk", "implicit_table", "single_table",
]  # fmt: skip

#: Most bytes of one fixed array's data block and pages.
MAX_FIXED_ARRAY_BYTES: Final = 1 << 30


def single_table(layout: ChunkLayout, geo: Geometry) -> ChunkTable:
    """The table of a single-chunk index (no request: the layout message has it all)."""
    grid = grid_of(geo.shape, layout.chunk)
    if any(g != 1 for g in grid):
        raise FormatError(
            f"{geo.source}: a single-chunk index for shape {geo.shape} in chunks of "
            f"{layout.chunk} (a grid of {grid})"
        )
    filtered = bool(layout.flags & 2)
    if filtered != geo.filtered:
        raise FormatError(
            f"{geo.source}: single-chunk layout {'with' if filtered else 'without'} a filtered "
            f"size, for a dataset {'with' if geo.filtered else 'without'} filters"
        )
    size = layout.filtered_size if filtered else chunk_bytes(layout)
    assert layout.address is not None  # chunk_walk handles None
    check_extent(geo, "the single chunk", layout.address, size)
    rank = len(geo.shape)
    return ChunkTable(
        np.zeros((1, rank), np.intp),
        np.array([layout.address], np.int64),
        np.array([size], np.int64),
        np.array([layout.filter_mask if filtered else 0], np.uint32),
    )


def _max_grid(layout: ChunkLayout, geo: Geometry) -> tuple[int, ...]:
    maxshape = tuple(int(m) for m in geo.maxshape if m is not None)
    if len(maxshape) != len(geo.shape) or any(
        m < n for m, n in zip(maxshape, geo.shape, strict=True)
    ):
        raise FormatError(f"{geo.source}: maximum shape {geo.maxshape} below shape {geo.shape}")
    grid = grid_of(maxshape, layout.chunk)
    if math.prod(grid) > geo.max_chunks:
        raise UnsupportedError(
            f"{geo.source}: a {layout.index_name} index over a maximum shape of {maxshape} in "
            f"chunks of {layout.chunk} has {math.prod(grid)} entries; npystore indexes at "
            f"most {geo.max_chunks} chunks per dataset"
        )
    return grid


def _in_shape(
    linear: npt.NDArray[np.int64], max_grid: tuple[int, ...], grid: tuple[int, ...]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Grid coordinates of linear indexes over ``max_grid`` and which lie in ``grid``."""
    coords = np.stack(np.unravel_index(linear, max_grid), axis=1).astype(np.intp)
    inside = np.all(coords < np.array(grid, np.intp), axis=1)
    return coords.reshape(len(linear), len(grid)), inside


def implicit_table(layout: ChunkLayout, geo: Geometry) -> ChunkTable:
    """The table of an implicit index: every chunk of the maximum shape's grid stored back
    to back from the index address, those inside the current shape kept."""
    if geo.filtered:
        raise FormatError(f"{geo.source}: an implicit chunk index for a filtered dataset")
    max_grid = _max_grid(layout, geo)
    count = math.prod(max_grid)
    size = chunk_bytes(layout)
    assert layout.address is not None  # chunk_walk handles None
    check_extent(geo, f"the {count} chunks of an implicit index", layout.address, count * size)
    coords, inside = _in_shape(np.arange(count, dtype=np.int64), max_grid,
                               grid_of(geo.shape, layout.chunk))  # fmt: skip
    n = int(inside.sum())
    return ChunkTable(
        coords[inside],
        layout.address + np.flatnonzero(inside).astype(np.int64) * size,
        np.full(n, size, np.int64),
        np.zeros(n, np.uint32),
    )


class FixedArrayWalk:
    """The walk of a fixed array chunk index: its header, then its data block and pages in
    one range."""

    def __init__(self, layout: ChunkLayout, sb: Superblock, geo: Geometry) -> None:
        assert layout.address is not None
        self.layout = layout
        self.geo = geo
        self.o = sb.sizeof_addr
        self.sizeof_len = sb.sizeof_len
        self.max_grid = _max_grid(layout, geo)
        self.count = math.prod(self.max_grid)
        self.header_size = 12 + sb.sizeof_len + self.o
        self._ranges = [span(layout.address, self.header_size, geo.file_end)]
        self._block: tuple[int, int, int, int] | None = None  # address, entry size, page bits
        self._table: ChunkTable | None = None

    def wanted(self) -> list[tuple[int, int]]:
        return self._ranges

    def feed(self, datas: list[bytes]) -> None:
        (data,) = datas
        if self._block is None:
            self._header(data)
        else:
            self._table = self._data_block(data)
            self._ranges = []

    def _header(self, data: bytes) -> None:
        where = f"{self.geo.source}: fixed array header at {self.layout.address}"
        if len(data) < self.header_size:
            raise FormatError(f"{where}: {len(data)} bytes before the end of the file")
        if data[:4] != b"FAHD" or data[4] != 0:
            raise FormatError(f"{where}: starts {data[:5]!r}, not 'FAHD' version 0")
        h5sum.check(data[: self.header_size], where)
        client, entry_size, page_bits = data[5], data[6], data[7]
        entries = int.from_bytes(data[8 : 8 + self.sizeof_len], "little")
        block = int.from_bytes(data[8 + self.sizeof_len : 8 + self.sizeof_len + self.o], "little")
        filtered = client == 1
        if client not in (0, 1) or filtered != self.geo.filtered:
            raise FormatError(
                f"{where}: client {client} (0: chunks, 1: filtered chunks) for a dataset "
                f"{'with' if self.geo.filtered else 'without'} filters"
            )
        if entry_size != self.o and not (filtered and self.o + 5 <= entry_size <= self.o + 12):
            raise FormatError(f"{where}: entries of {entry_size} bytes")
        if not 0 < page_bits < 32 or (self.layout.info and page_bits != self.layout.info[0]):
            raise FormatError(f"{where}: {page_bits} page bits")
        if entries != self.count:
            raise FormatError(
                f"{where}: {entries} entries, the grid of the maximum shape "
                f"{self.geo.maxshape} has {self.count}"
            )
        if block == undefined(self.o):
            self._table = empty_table(len(self.geo.shape))
            self._ranges = []
            return
        page = 1 << page_bits
        pages = -(-entries // page) if entries > page else 0
        prefix = 6 + self.o + (-(-pages // 8) if pages else 0) + 4
        total = prefix + entries * entry_size + (4 * pages if pages else 0)
        if pages == 0:
            total = prefix + entries * entry_size
        if total > MAX_FIXED_ARRAY_BYTES or block + total > self.geo.file_end:
            raise FormatError(
                f"{where}: data block of {total} bytes at {block} lies outside the file "
                f"({self.geo.file_end} bytes)"
            )
        self._block = (block, entry_size, page_bits, pages)
        self._ranges = [(block, block + total)]

    def _data_block(self, data: bytes) -> ChunkTable:
        assert self._block is not None
        block, entry_size, page_bits, pages = self._block
        where = f"{self.geo.source}: fixed array data block at {block}"
        o = self.o
        if data[:4] != b"FADB" or data[4:6] != b"\x00" + bytes([1 if self.geo.filtered else 0]):
            raise FormatError(f"{where}: starts {data[:6]!r}, not 'FADB' version 0 of its client")
        if int.from_bytes(data[6 : 6 + o], "little") != self.layout.address:
            raise FormatError(f"{where}: its header address is not {self.layout.address}")
        if pages == 0:
            elements = data[6 + o : 6 + o + self.count * entry_size]
            h5sum.check(data[: 6 + o + self.count * entry_size + 4], where)
            present = np.ones(self.count, bool)
        else:
            bitmap_size = -(-pages // 8)
            start = 6 + o + bitmap_size + 4
            h5sum.check(data[:start], where)
            bitmap = np.unpackbits(np.frombuffer(data, np.uint8, bitmap_size, 6 + o),
                                   bitorder="big")[:pages].astype(bool)  # fmt: skip
            page = 1 << page_bits
            parts: list[bytes] = []
            present = np.zeros(self.count, bool)
            pos = start
            for i in range(pages):
                n = min(page, self.count - i * page)
                size = n * entry_size
                if bitmap[i]:
                    h5sum.check(data[pos : pos + size + 4], f"{where}: page {i}")
                    present[i * page : i * page + n] = True
                parts.append(data[pos : pos + size])
                pos += size + 4
            elements = b"".join(parts)
        if len(elements) != self.count * entry_size:
            raise FormatError(f"{where}: {len(elements)} bytes of entries, expected "
                              f"{self.count * entry_size}")  # fmt: skip
        raw = np.frombuffer(elements, np.uint8).reshape(self.count, entry_size)
        addresses = _le(raw[:, :o])
        if self.geo.filtered:
            sizes = _le(raw[:, o : entry_size - 4])
            masks = _le(raw[:, entry_size - 4 :])
        else:
            sizes = np.full(self.count, chunk_bytes(self.layout), np.uint64)
            masks = np.zeros(self.count, np.uint64)
        stored = present & (addresses != np.uint64(undefined(o)))
        linear = np.flatnonzero(stored).astype(np.int64)
        coords, inside = _in_shape(
            linear, self.max_grid, grid_of(self.geo.shape, self.layout.chunk)
        )
        if not inside.all():
            bad = tuple(int(c) * k for c, k in zip(coords[~inside][0], self.layout.chunk,
                                                   strict=True))  # fmt: skip
            raise FormatError(f"{where}: chunk at {bad} lies outside the shape {self.geo.shape}")
        addresses, sizes = addresses[stored], sizes[stored]
        ends = addresses + sizes
        bad_extent = (
            (sizes == 0)
            | (addresses >= np.uint64(self.geo.file_end))
            | (ends > np.uint64(self.geo.file_end))
        )
        if bad_extent.any():
            i = int(np.flatnonzero(bad_extent)[0])
            raise FormatError(
                f"{where}: chunk {tuple(int(c) for c in coords[i])} of {int(sizes[i])} bytes at "
                f"{int(addresses[i])} lies outside the file ({self.geo.file_end} bytes)"
            )
        return ChunkTable(
            coords,
            addresses.astype(np.int64),
            sizes.astype(np.int64),
            masks[stored].astype(np.uint32),
        )

    def result(self) -> ChunkTable:
        if self._table is None:
            raise ValueError("the fixed array walk has not finished")
        return self._table


def _le(columns: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """Little-endian unsigned integers from rows of bytes (1 to 8 per row)."""
    out = np.zeros(columns.shape[0], np.uint64)
    for i in range(columns.shape[1]):
        out |= columns[:, i].astype(np.uint64) << np.uint64(8 * i)
    return out
