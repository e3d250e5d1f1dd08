"""The chunk index of an HDF5 chunked dataset, parsed and validated here, never by libhdf5.

libhdf5 trusts a chunk index: a version-1 B-tree node whose child is the node itself sends
its walk into endless recursion and the process dies (SIGSEGV). So npystore walks every
chunk index itself, bounded and checked, and builds the chunk table from what it found;
libhdf5's ``chunk_iter`` is never called.

A walk is a small state machine driven by the IO layer (:func:`run`): :meth:`Walk.wanted`
names the byte ranges it needs next (every node of one B-tree level at once: one batch of
concurrent requests per level), :meth:`Walk.feed` takes their bytes, :meth:`Walk.result`
gives the :class:`ChunkTable`. All addresses are relative to the base address.

Index types (data layout message versions 1 to 3: a version-1 B-tree; 4 and 5: the type
the message names):

- version-1 B-tree (what MATLAB, hdf5storage and h5py's defaults write). Node::

      0 "TREE"  4 type (1)  5 level  6 u16 entries n  8 left, right sibling addresses
      then key 0, child 0, key 1, ..., child n-1, key n
      key: u32 chunk size, u32 filter mask, (rank + 1) x u64 offsets (element coordinates;
      the last is 0 for a chunk)

  Checked: signature and type; the root's level at most :data:`MAX_BTREE_LEVEL` and each
  child's exactly one less than its parent's; 1 to 2K entries; every node inside the file
  and reached once (a cycle or a shared node is refused); keys strictly increasing and
  each node's keys within the range its parent gives it; chunk offsets aligned to the
  chunk shape and inside the dataset's shape; every chunk inside the file; no chunk twice;
  no more chunks than the grid has.
- single chunk: the chunk at the index address (its stored size and filter mask in the
  layout message when filtered); the dataset must fit in one chunk.
- implicit: unfiltered chunks stored back to back in grid order (of the maximum shape).
- fixed array (``FAHD`` header, ``FADB`` data block, pages): one entry per chunk of the
  maximum shape's grid, checksums verified.

Extensible arrays and version-2 B-trees raise :class:`~npystore.errors.UnsupportedError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, UnsupportedError
from npystore.formats import h5sum
from npystore.formats.h5index import (
    BTREE_V1,
    FIXED_ARRAY,
    IMPLICIT,
    SINGLE_CHUNK,
    ChunkLayout,
    Superblock,
    undefined,
)

__all__ = [
    "MAX_BTREE_LEVEL",
    "ChunkTable",
    "Geometry",
    "Walk",
    "btree_node_size",
    "chunk_walk",
    "run",
    "span",
]

#: Highest root level accepted for a version-1 B-tree (real trees of 2**24 chunks with
#: K = 1 are 24 levels deep).
MAX_BTREE_LEVEL: Final = 64
#: Most bytes of one fixed array's data block and pages.
MAX_FIXED_ARRAY_BYTES: Final = 1 << 30

_ADDR_DTYPES: Final = {2: "<u2", 4: "<u4", 8: "<u8"}


@dataclass(frozen=True, slots=True)
class Geometry:
    """What a walk checks chunk records against (from the dataset's dataspace and type,
    which libhdf5 parsed, and the file).

    Attributes
    ----------
    source : str
        Name of the dataset for messages (URL and path).
    shape : tuple of int
        The dataset's current shape (no zero).
    maxshape : tuple of int or None
        Its maximum shape (None: unlimited).
    itemsize : int
        Bytes per element of its datatype.
    filtered : bool
        Whether it has a filter pipeline.
    file_end : int
        Bytes of the file after the base address: every node and chunk lies before it.
    max_chunks : int
        Most chunks a grid may have (refused before anything is allocated).
    """

    source: str
    shape: tuple[int, ...]
    maxshape: tuple[int | None, ...]
    itemsize: int
    filtered: bool
    file_end: int
    max_chunks: int


@dataclass(frozen=True, slots=True, eq=False)
class ChunkTable:
    """Every stored chunk of a dataset, as found and checked.

    Attributes
    ----------
    grid : ndarray of intp, shape (n, rank)
        Chunk grid coordinates (the chunk's first element divided by the chunk shape).
    addresses, sizes : ndarray of int64, shape (n,)
        Where each stored chunk is (relative to the base address) and its stored bytes.
    masks : ndarray of uint32, shape (n,)
        Filter masks (bit i set: filter i skipped).
    """

    grid: npt.NDArray[np.intp]
    addresses: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    masks: npt.NDArray[np.uint32]

    def __len__(self) -> int:
        return int(self.addresses.shape[0])


class Walk(Protocol):
    """A chunk-index walk: ask, feed, repeat until nothing is wanted, then the result."""

    def wanted(self) -> list[tuple[int, int]]:
        """Byte ranges ``[start, stop)`` (relative to the base) needed next; empty: done."""
        ...

    def feed(self, datas: list[bytes]) -> None:
        """The bytes of the ranges :meth:`wanted` returned, in order (short at the file's
        end)."""
        ...

    def result(self) -> ChunkTable:
        """The chunk table (after :meth:`wanted` returned nothing)."""
        ...


def run(walk: Walk, fetch: Callable[[list[tuple[int, int]]], list[bytes]]) -> ChunkTable:
    """Drive ``walk`` with ``fetch`` (one call per batch of ranges) to its table."""
    while ranges := walk.wanted():
        walk.feed(fetch(ranges))
    return walk.result()


def _grid(shape: tuple[int, ...], chunk: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-(-n // c) for n, c in zip(shape, chunk, strict=True))


def _empty(rank: int) -> ChunkTable:
    return ChunkTable(
        np.zeros((0, rank), np.intp),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.uint32),
    )


def chunk_walk(layout: ChunkLayout, sb: Superblock, geo: Geometry) -> Walk:
    """The walk of ``layout``'s chunk index.

    Raises
    ------
    FormatError
        The layout disagrees with the dataset (rank, element size) or names an index
        type that the dataset's shape excludes.
    UnsupportedError
        An extensible array or version-2 B-tree index, or a chunk grid of more than
        ``geo.max_chunks`` chunks.
    """
    rank = len(geo.shape)
    if len(layout.chunk) != rank:
        raise FormatError(
            f"{geo.source}: chunk dimensions {layout.chunk} for a dataset of shape {geo.shape}"
        )
    if layout.element_size != geo.itemsize:
        raise FormatError(
            f"{geo.source}: the layout message records {layout.element_size}-byte elements, "
            f"the datatype has {geo.itemsize}"
        )
    grid = _grid(geo.shape, layout.chunk)
    if math.prod(grid) > geo.max_chunks:
        raise UnsupportedError(
            f"{geo.source}: a dataset of shape {geo.shape} in chunks of {layout.chunk} has a "
            f"grid of {math.prod(grid)} chunks; npystore indexes at most {geo.max_chunks} "
            f"chunks per dataset"
        )
    if layout.address is None:
        return _Done(_empty(rank))
    if layout.index_type == BTREE_V1:
        return BTreeV1Walk(layout, sb, geo)
    if layout.index_type in (SINGLE_CHUNK, IMPLICIT, FIXED_ARRAY):
        if any(m is None for m in geo.maxshape):
            raise FormatError(
                f"{geo.source}: a {layout.index_name} chunk index for a dataset with "
                f"unlimited dimensions (maximum shape {geo.maxshape})"
            )
        if layout.index_type == SINGLE_CHUNK:
            return _Done(_single(layout, geo))
        if layout.index_type == IMPLICIT:
            return _Done(_implicit(layout, geo))
        return FixedArrayWalk(layout, sb, geo)
    raise UnsupportedError(
        f"{geo.source}: chunk index of type {layout.index_name} (data layout message "
        f"version {layout.version}); npystore reads version-1 B-tree, single chunk, implicit "
        f"and fixed array chunk indexes"
    )


class _Done:
    """A walk that needs no bytes."""

    def __init__(self, table: ChunkTable) -> None:
        self._table = table

    def wanted(self) -> list[tuple[int, int]]:
        return []

    def feed(self, datas: list[bytes]) -> None:
        raise ValueError("nothing was asked")

    def result(self) -> ChunkTable:
        return self._table


def _chunk_bytes(layout: ChunkLayout) -> int:
    return math.prod(layout.chunk) * layout.element_size


def _check_extent(geo: Geometry, what: str, address: int, size: int) -> None:
    if size <= 0 or address + size > geo.file_end:
        raise FormatError(
            f"{geo.source}: {what} at bytes [{address}, {address + size}) of the HDF5 data "
            f"lies outside the file ({geo.file_end} bytes after the base address)"
            if size > 0
            else f"{geo.source}: {what} of {size} bytes at {address}"
        )


def _single(layout: ChunkLayout, geo: Geometry) -> ChunkTable:
    grid = _grid(geo.shape, layout.chunk)
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
    size = layout.filtered_size if filtered else _chunk_bytes(layout)
    assert layout.address is not None  # chunk_walk handles None
    _check_extent(geo, "the single chunk", layout.address, size)
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
    grid = _grid(maxshape, layout.chunk)
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


def _implicit(layout: ChunkLayout, geo: Geometry) -> ChunkTable:
    if geo.filtered:
        raise FormatError(f"{geo.source}: an implicit chunk index for a filtered dataset")
    max_grid = _max_grid(layout, geo)
    count = math.prod(max_grid)
    size = _chunk_bytes(layout)
    assert layout.address is not None  # chunk_walk handles None
    _check_extent(geo, f"the {count} chunks of an implicit index", layout.address, count * size)
    coords, inside = _in_shape(np.arange(count, dtype=np.int64), max_grid,
                               _grid(geo.shape, layout.chunk))  # fmt: skip
    n = int(inside.sum())
    return ChunkTable(
        coords[inside],
        layout.address + np.flatnonzero(inside).astype(np.int64) * size,
        np.full(n, size, np.int64),
        np.zeros(n, np.uint32),
    )


def btree_node_size(dimensionality: int, sizeof_addr: int, k: int) -> int:
    """Bytes libhdf5 gives one chunk B-tree node: header, 2K children, 2K+1 keys."""
    key = 8 + 8 * dimensionality
    return 8 + 2 * sizeof_addr + 2 * k * sizeof_addr + (2 * k + 1) * key


@dataclass(frozen=True, slots=True)
class _Pending:
    """A node to read: its address, the level its parent expects (None: the root) and the
    linear key range ``[lo, hi]`` its parent gives it."""

    address: int
    level: int | None
    lo: int
    hi: int


class BTreeV1Walk:
    """The walk of a version-1 B-tree chunk index, one level per batch."""

    def __init__(self, layout: ChunkLayout, sb: Superblock, geo: Geometry) -> None:
        assert layout.address is not None
        self.geo = geo
        self.layout = layout
        self.rank = len(geo.shape)
        self.grid = _grid(geo.shape, layout.chunk)
        self.capacity = math.prod(self.grid)
        self.max_entries = 2 * sb.chunk_k
        self.sizeof_addr = sb.sizeof_addr
        self.node_size = btree_node_size(self.rank + 1, sb.sizeof_addr, sb.chunk_k)
        # keys are compared as linear indexes over the grid extended by one in each
        # dimension (a right key lies one chunk past the last), times two plus whether the
        # element offset is set; < 2**58 for rank <= 32
        radix = np.array(self.grid, np.int64) + 1
        self._strides = np.array(
            [math.prod(int(r) for r in radix[d + 1 :]) for d in range(self.rank)], np.int64
        )
        self._limit = np.array(self.grid, np.uint64) * np.array(layout.chunk, np.uint64)
        self._chunk = np.array(layout.chunk, np.uint64)
        self._record = np.dtype(
            [
                ("size", "<u4"),
                ("mask", "<u4"),
                ("offsets", "<u8", (self.rank + 1,)),
                ("child", _ADDR_DTYPES[sb.sizeof_addr]),
            ]
        )
        self._key = np.dtype(
            [("size", "<u4"), ("mask", "<u4"), ("offsets", "<u8", (self.rank + 1,))]
        )
        top = int(np.dot(np.array(self.grid, np.int64), self._strides)) * 2 + 1
        self._level: list[_Pending] = [_Pending(layout.address, None, 0, top)]
        self._seen: set[int] = {layout.address}
        self._leaves: list[tuple[npt.NDArray[Any], npt.NDArray[np.int64]]] = []
        self._count = 0
        self.nodes = 0

    def wanted(self) -> list[tuple[int, int]]:
        return [span(p.address, self.node_size, self.geo.file_end) for p in self._level]

    def feed(self, datas: list[bytes]) -> None:
        below: list[_Pending] = []
        for pending, data in zip(self._level, datas, strict=True):
            below.extend(self._node(pending, data))
            if len(below) > self.capacity:
                raise FormatError(
                    f"{self.geo.source}: chunk B-tree has more than {self.capacity} nodes on "
                    f"one level, more than the chunks of the grid {self.grid}"
                )
        self.nodes += len(self._level)
        self._level = below

    def _where(self, pending: _Pending) -> str:
        return f"{self.geo.source}: chunk B-tree node at {pending.address}"

    def _node(self, pending: _Pending, data: bytes) -> list[_Pending]:
        where = self._where(pending)
        o = self.sizeof_addr
        if len(data) < 8 + 2 * o:
            raise FormatError(f"{where}: {len(data)} bytes before the end of the file")
        if data[:4] != b"TREE":
            raise FormatError(f"{where}: starts {data[:4]!r}, not 'TREE'")
        if data[4] != 1:
            raise FormatError(f"{where}: node type {data[4]}, expected 1 (chunks)")
        level = data[5]
        entries = int.from_bytes(data[6:8], "little")
        if pending.level is None and level > MAX_BTREE_LEVEL:
            raise FormatError(f"{where}: root level {level}, more than {MAX_BTREE_LEVEL}")
        if pending.level is not None and level != pending.level:
            raise FormatError(
                f"{where}: level {level}, expected {pending.level} (one below its parent)"
            )
        if not 1 <= entries <= self.max_entries:
            raise FormatError(f"{where}: {entries} entries, expected 1 to {self.max_entries} (2K)")
        first = 8 + 2 * o
        need = first + entries * self._record.itemsize + self._key.itemsize
        if len(data) < need:
            raise FormatError(
                f"{where}: {entries} entries need {need} bytes, the file has {len(data)} there"
            )
        records = np.frombuffer(data, self._record, entries, first)
        last = np.frombuffer(data, self._key, 1, first + entries * self._record.itemsize)
        offsets = np.concatenate([records["offsets"], last["offsets"]])[:, : self.rank]
        if np.any(offsets > self._limit) or np.any(offsets % self._chunk):
            bad = int(np.flatnonzero(np.any((offsets > self._limit) | (offsets % self._chunk > 0),
                                            axis=1))[0])  # fmt: skip
            raise FormatError(
                f"{where}: key {bad} has chunk offsets {tuple(int(v) for v in offsets[bad])}, "
                f"outside the shape {self.geo.shape} or not on the chunk grid "
                f"{self.layout.chunk}"
            )
        # the element offset of a chunk's key is 0; a right key may carry the element size
        # (libhdf5 writes it one past the last chunk, or at it with the element offset set)
        element = np.concatenate([records["offsets"][:, self.rank], last["offsets"][:, self.rank]])
        if np.any((element != 0) & (element != self.layout.element_size)):
            raise FormatError(
                f"{where}: a key with element offset {int(element[element != 0][0])}, expected "
                f"0 or the element size {self.layout.element_size}"
            )
        keys = (offsets // self._chunk).astype(np.int64) @ self._strides * 2 + (element != 0)
        if level == 0 and np.any(np.diff(keys[:-1]) == 0):
            twice = int(np.flatnonzero(np.diff(keys[:-1]) == 0)[0])
            raise FormatError(
                f"{where}: names the chunk at {tuple(int(v) for v in offsets[twice])} twice"
            )
        if np.any(np.diff(keys) <= 0) or keys[0] < pending.lo or keys[-1] > pending.hi:
            raise FormatError(
                f"{where}: keys out of order or outside the range its parent gives it "
                f"(chunk offsets {self._describe(offsets)})"
            )
        children = records["child"].astype(np.uint64)
        if level == 0:
            return self._leaf(pending, records, offsets[:-1], keys[:-1], children)
        out: list[_Pending] = []
        for i, child in enumerate(children.tolist()):
            if child in self._seen:
                raise FormatError(
                    f"{where}: child {i} at {child} is a node reached before (a cycle or a "
                    f"shared node)"
                )
            if child + 8 + 2 * o > self.geo.file_end:
                raise FormatError(
                    f"{where}: child {i} at {child} lies outside the file "
                    f"({self.geo.file_end} bytes)"
                )
            self._seen.add(child)
            out.append(_Pending(child, level - 1, int(keys[i]), int(keys[i + 1])))
        return out

    def _describe(self, offsets: npt.NDArray[np.uint64]) -> str:
        rows = [tuple(int(v) for v in row) for row in offsets[:6]]
        return ", ".join(map(str, rows)) + (" ..." if len(offsets) > 6 else "")

    def _leaf(
        self,
        pending: _Pending,
        records: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64],
        keys: npt.NDArray[np.int64],
        children: npt.NDArray[np.uint64],
    ) -> list[_Pending]:
        where = self._where(pending)
        inside = np.all(offsets < np.array(self.geo.shape, np.uint64), axis=1)
        if not inside.all():
            bad = int(np.flatnonzero(~inside)[0])
            raise FormatError(
                f"{where}: chunk at {tuple(int(v) for v in offsets[bad])} lies outside the "
                f"shape {self.geo.shape}"
            )
        if np.any(keys % 2):
            raise FormatError(f"{where}: a chunk key whose element offset is not 0")
        sizes = records["size"].astype(np.int64)
        ends = children + sizes.astype(np.uint64)
        bad_extent = (
            (sizes <= 0)
            | (children >= np.uint64(self.geo.file_end))
            | (ends > np.uint64(self.geo.file_end))
        )
        if bad_extent.any():
            i = int(np.flatnonzero(bad_extent)[0])
            raise FormatError(
                f"{where}: chunk at {tuple(int(v) for v in offsets[i])} of {int(sizes[i])} bytes "
                f"at {int(children[i])} lies outside the file ({self.geo.file_end} bytes after "
                f"the base address)"
            )
        self._count += len(keys)
        if self._count > self.capacity:
            raise FormatError(
                f"{where}: more than {self.capacity} chunks, the size of the grid {self.grid}"
            )
        grid = (offsets // self._chunk).astype(np.intp)
        self._leaves.append((np.column_stack([grid, keys]), np.column_stack(
            [children.astype(np.int64), sizes, records["mask"].astype(np.int64)])))  # fmt: skip
        return []

    def result(self) -> ChunkTable:
        if not self._leaves:
            return _empty(self.rank)
        coords = np.concatenate([c for c, _ in self._leaves])
        values = np.concatenate([v for _, v in self._leaves])
        keys = coords[:, -1]
        if len(np.unique(keys)) != len(keys):
            raise FormatError(f"{self.geo.source}: chunk B-tree names a chunk twice")
        return ChunkTable(
            np.ascontiguousarray(coords[:, :-1], dtype=np.intp),
            np.ascontiguousarray(values[:, 0]),
            np.ascontiguousarray(values[:, 1]),
            values[:, 2].astype(np.uint32),
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
            self._table = _empty(len(self.geo.shape))
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
            sizes = np.full(self.count, _chunk_bytes(self.layout), np.uint64)
            masks = np.zeros(self.count, np.uint64)
        stored = present & (addresses != np.uint64(undefined(o)))
        linear = np.flatnonzero(stored).astype(np.int64)
        coords, inside = _in_shape(linear, self.max_grid, _grid(self.geo.shape, self.layout.chunk))
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


def span(address: int, size: int, end: int) -> tuple[int, int]:
    """``[address, address + size)`` clipped to ``[0, end)`` (empty past the end: the parse
    of what comes back reports it)."""
    return min(address, end), min(address + size, end)


def _le(columns: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """Little-endian unsigned integers from rows of bytes (1 to 8 per row)."""
    out = np.zeros(columns.shape[0], np.uint64)
    for i in range(columns.shape[1]):
        out |= columns[:, i].astype(np.uint64) << np.uint64(8 * i)
    return out
