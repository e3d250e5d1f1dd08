"""The symbol table of an old-style HDF5 group, walked and validated before libhdf5 is
allowed to iterate the group.

libhdf5 trusts a group's B-tree like a chunk index: a node that lists itself as its child
crashes the process (SIGSEGV) when h5py lists the group. What MATLAB, hdf5storage and h5py's
defaults write for every group (the root, ``#refs#``, structs) is a symbol table: a
version-1 B-tree of type 0 whose leaves point to symbol-table nodes, and a local heap that
holds the link names. Both are walked here with the same bounds as the chunk index
(:mod:`npystore.formats.h5chunks`), one level per batch of requests::

    local heap    0 "HEAP"  4 version (0)  8 L data segment size, L free-list offset,
                  O data segment address
    B-tree node   0 "TREE"  4 type (0)  5 level  6 u16 entries n  8 siblings (O each)
                  then key 0, child 0, ..., child n-1, key n; key: L heap offset of a name
    symbol node   0 "SNOD"  4 version (1)  6 u16 symbols; then entries of L name offset,
                  O object header address, u32 cache type, u32 reserved, 16 scratch bytes

Checked: signatures and versions; levels (root at most 64, each child one below); 1 to
2K entries per node (an empty root leaf: an empty group); at most 2 x leaf K symbols per
node; every node and the heap inside the file, every node reached once; every key and name
offset inside the heap's data, each name NUL-terminated there; every object header address
inside the file, except for soft links (cache type 2), whose address is undefined. The
walk's result is the list of links (name, header address; :data:`SOFT_LINK` for a soft
link).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from npystore.errors import FormatError
from npystore.formats.h5chunks import MAX_BTREE_LEVEL, span
from npystore.formats.h5index import Superblock

__all__ = ["SOFT_LINK", "SymbolTableWalk", "group_node_size"]

#: Most links of one group the walk accepts.
MAX_LINKS: Final = 1 << 24
#: The header address :meth:`SymbolTableWalk.result` gives a soft link (it has none).
SOFT_LINK: Final = -1
_CACHE_SOFT_LINK: Final = 2


def group_node_size(sb: Superblock) -> int:
    """Bytes libhdf5 gives one group B-tree node."""
    o, n = sb.sizeof_addr, sb.sizeof_len
    k = sb.group_internal_k
    return 8 + 2 * o + 2 * k * o + (2 * k + 1) * n


@dataclass(frozen=True, slots=True)
class _Pending:
    address: int
    level: int | None  # None: the root; -1: a symbol-table node


class SymbolTableWalk:
    """The walk of one group's B-tree and local heap (see the module docstring).

    Parameters
    ----------
    btree, heap : int
        Addresses from the group's symbol table message (relative to the base).
    sb : Superblock
        Sizes and K values.
    file_end : int
        Bytes of the file after the base address.
    source : str
        Name of the group for messages.
    """

    def __init__(self, btree: int, heap: int, sb: Superblock, file_end: int, source: str) -> None:
        self.sb = sb
        self.file_end = file_end
        self.source = source
        self.heap = heap
        self.node_size = group_node_size(sb)
        o, n = sb.sizeof_addr, sb.sizeof_len
        self.heap_header = 8 + 2 * n + o
        self.snod_size = 8 + 2 * sb.group_leaf_k * (n + o + 24)
        for what, address in (("B-tree", btree), ("local heap", heap)):
            if address >= file_end:
                raise FormatError(f"{source}: group {what} at {address} lies outside the file")
        self._pending: list[_Pending] = [_Pending(btree, None)]
        self._seen: set[int] = {btree}
        self._heap_data: bytes | None = None
        self._heap_range: tuple[int, int] | None = None
        self._offsets: list[int] = []  # key offsets to check against the heap
        self._symbols: list[tuple[int, int]] = []  # (name offset, header address)
        self._first = True

    def wanted(self) -> list[tuple[int, int]]:
        end = self.file_end
        ranges = [
            span(p.address, self.snod_size if p.level == -1 else self.node_size, end)
            for p in self._pending
        ]
        if self._first:
            ranges.append(span(self.heap, self.heap_header, end))
        elif self._heap_range is not None and self._heap_data is None:
            ranges.append(self._heap_range)
        return ranges

    def feed(self, datas: list[bytes]) -> None:
        if self._first:
            self._first = False
            self._heap_header(datas[-1])
            datas = datas[:-1]
        elif self._heap_range is not None and self._heap_data is None:
            self._heap_data = datas[-1]
            datas = datas[:-1]
            if self._heap_range[1] - self._heap_range[0] != len(self._heap_data):
                raise FormatError(f"{self.source}: local heap data cut short by the file's end")
        below: list[_Pending] = []
        for pending, data in zip(self._pending, datas, strict=True):
            if pending.level == -1:
                self._snod(pending.address, data)
            else:
                below.extend(self._node(pending, data))
        self._pending = below
        if len(self._symbols) > MAX_LINKS:
            raise FormatError(f"{self.source}: more than {MAX_LINKS} links in one group")

    def _heap_header(self, data: bytes) -> None:
        where = f"{self.source}: local heap at {self.heap}"
        n, o = self.sb.sizeof_len, self.sb.sizeof_addr
        if len(data) < self.heap_header or data[:4] != b"HEAP" or data[4] != 0:
            raise FormatError(f"{where}: starts {data[:5]!r}, not 'HEAP' version 0")
        size = int.from_bytes(data[8 : 8 + n], "little")
        address = int.from_bytes(data[8 + 2 * n : 8 + 2 * n + o], "little")
        if size == 0 or address + size > self.file_end:
            raise FormatError(
                f"{where}: data segment of {size} bytes at {address} lies outside the file "
                f"({self.file_end} bytes)"
            )
        self._heap_range = (address, address + size)

    def _node(self, pending: _Pending, data: bytes) -> list[_Pending]:
        where = f"{self.source}: group B-tree node at {pending.address}"
        o, n = self.sb.sizeof_addr, self.sb.sizeof_len
        if len(data) < 8 + 2 * o or data[:4] != b"TREE":
            raise FormatError(f"{where}: starts {data[:4]!r}, not 'TREE'")
        if data[4] != 0:
            raise FormatError(f"{where}: node type {data[4]}, expected 0 (group)")
        level = data[5]
        entries = int.from_bytes(data[6:8], "little")
        limit = 2 * self.sb.group_internal_k
        if pending.level is None and level > MAX_BTREE_LEVEL:
            raise FormatError(f"{where}: root level {level}, more than {MAX_BTREE_LEVEL}")
        if pending.level is not None and level != pending.level:
            raise FormatError(f"{where}: level {level}, expected {pending.level}")
        least = 0 if pending.level is None and level == 0 else 1
        if not least <= entries <= limit:
            raise FormatError(f"{where}: {entries} entries, expected {least} to {limit} (2K)")
        need = 8 + 2 * o + entries * (n + o) + n
        if len(data) < need:
            raise FormatError(f"{where}: {entries} entries need {need} bytes, it has {len(data)}")
        out: list[_Pending] = []
        pos = 8 + 2 * o
        for i in range(entries + 1):
            self._offsets.append(int.from_bytes(data[pos : pos + n], "little"))
            pos += n
            if i == entries:
                break
            child = int.from_bytes(data[pos : pos + o], "little")
            pos += o
            if child in self._seen:
                raise FormatError(
                    f"{where}: child {i} at {child} is a node reached before (a cycle or a "
                    f"shared node)"
                )
            if child + 8 > self.file_end:
                raise FormatError(f"{where}: child {i} at {child} lies outside the file")
            self._seen.add(child)
            out.append(_Pending(child, level - 1 if level else -1))
        return out

    def _snod(self, address: int, data: bytes) -> None:
        where = f"{self.source}: symbol table node at {address}"
        o, n = self.sb.sizeof_addr, self.sb.sizeof_len
        if len(data) < 8 or data[:4] != b"SNOD" or data[4] != 1:
            raise FormatError(f"{where}: starts {data[:5]!r}, not 'SNOD' version 1")
        count = int.from_bytes(data[6:8], "little")
        limit = 2 * self.sb.group_leaf_k
        if count > limit:
            raise FormatError(f"{where}: {count} symbols, at most {limit} (2K)")
        size = n + o + 24
        if len(data) < 8 + count * size:
            raise FormatError(f"{where}: {count} symbols run past the end of the file")
        for i in range(count):
            pos = 8 + i * size
            name = int.from_bytes(data[pos : pos + n], "little")
            header = int.from_bytes(data[pos + n : pos + n + o], "little")
            cache = int.from_bytes(data[pos + n + o : pos + n + o + 4], "little")
            if cache == _CACHE_SOFT_LINK and header == (1 << 8 * o) - 1:
                # a soft link: its value is in the heap, its header address undefined;
                # libhdf5 resolves it by name (checked by npystore.files.mat.h5safe first)
                self._symbols.append((name, SOFT_LINK))
                continue
            if header >= self.file_end:
                raise FormatError(
                    f"{where}: symbol {i} names an object header at {header}, outside the file"
                )
            self._symbols.append((name, header))

    def result(self) -> list[tuple[str, int]]:
        """The group's links: (name, object header address), in the file's order."""
        data = self._heap_data
        if data is None or self._pending:
            raise ValueError("the symbol table walk has not finished")
        for offset in self._offsets:
            if offset >= len(data):
                raise FormatError(
                    f"{self.source}: group B-tree key {offset} lies outside the local heap's "
                    f"{len(data)} bytes"
                )
        out: list[tuple[str, int]] = []
        for offset, header in self._symbols:
            end = data.find(b"\x00", offset) if offset < len(data) else -1
            if end < 0:
                raise FormatError(
                    f"{self.source}: link name at heap offset {offset} is not a NUL-terminated "
                    f"string inside the local heap's {len(data)} bytes"
                )
            out.append((data[offset:end].decode("utf-8", "replace"), header))
        return out
