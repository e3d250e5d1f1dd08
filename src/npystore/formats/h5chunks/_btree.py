"""The walk of a version-1 B-tree chunk index (what MATLAB, hdf5storage and h5py's defaults
write), one tree level per batch of requests.

Node::

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError
from npystore.formats.h5chunks._walk import ChunkTable, Geometry, empty_table, grid_of, span
from npystore.formats.h5index import ChunkLayout, Superblock

__all__ = ["MAX_BTREE_LEVEL", "BTreeV1Walk", "btree_node_size"]

#: Highest root level accepted for a version-1 B-tree (real trees of 2**24 chunks with
#: K = 1 are 24 levels deep).
MAX_BTREE_LEVEL: Final = 64

_ADDR_DTYPES: Final = {2: "<u2", 4: "<u4", 8: "<u8"}


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
        self.grid = grid_of(geo.shape, layout.chunk)
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
            return empty_table(self.rank)
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
