"""Crafting hostile HDF5 files: write a small real file with h5py, find its structures with
npystore's own parser (superblock, object header, layout message, B-tree nodes), patch bytes.

Only ever opens with h5py the pristine file it wrote (its object header addresses), never a
patched one: libhdf5 may crash on those.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from npystore.formats import h5index

MAT_HEADER = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."


def stamp(path: Path) -> None:
    """Write MATLAB's header text into the 512-byte user block."""
    with path.open("r+b") as f:
        f.write(MAT_HEADER.ljust(116) + b" " * 8 + b"\x00\x02IM")


@dataclass
class Node:
    """A version-1 B-tree node: its absolute position, level, entries, and where (absolute)
    its children's addresses and its keys are stored."""

    at: int
    level: int
    entries: int
    children: list[int]
    child_fields: list[int]
    key_fields: list[int]


class H5File:
    """The bytes of an HDF5 file and the structures of its objects, found by npystore's
    parser."""

    def __init__(self, path: Path, base: int) -> None:
        self.path = path
        self.base = base
        self.raw = bytearray(path.read_bytes())
        self.sb = h5index.parse_superblock(bytes(self.raw[base : base + h5index.SUPERBLOCK_SIZE]))
        with h5py.File(path, "r") as f:  # the pristine file
            self.headers = {name: _address(f[name]) for name in _walk(f)}

    def messages(self, name: str) -> tuple[tuple[int, bytes], ...]:
        raw = bytes(self.raw)
        return h5index.object_header_messages(
            lambda a, b: raw[a:b], self.base, self.headers[name], self.sb.sizeof_addr
        )

    def node(self, address: int, key_size: int) -> Node:
        """The node at ``address`` (relative to the base)."""
        o = self.sb.sizeof_addr
        at = self.base + address
        level, entries = self.raw[at + 5], struct.unpack_from("<H", self.raw, at + 6)[0]
        pos = at + 8 + 2 * o
        children, child_fields, key_fields = [], [], []
        for i in range(entries + 1):
            key_fields.append(pos)
            pos += key_size
            if i < entries:
                child_fields.append(pos)
                children.append(int.from_bytes(self.raw[pos : pos + o], "little"))
                pos += o
        return Node(at, level, entries, children, child_fields, key_fields)

    def chunk_tree(self, name: str) -> list[list[Node]]:
        """The nodes of ``name``'s chunk B-tree, level by level from the root."""
        layout = h5index.chunk_layout(self.messages(name), self.sb)
        assert layout is not None
        assert layout.address is not None
        key = 8 + 8 * (len(layout.chunk) + 1)
        levels = [[self.node(layout.address, key)]]
        while levels[-1][0].level > 0:
            levels.append([self.node(c, key) for n in levels[-1] for c in n.children])
        return levels

    def group_tree(self, name: str) -> list[list[Node]]:
        """The nodes of a group's B-tree (``"/"``: the root group), level by level."""
        stab = h5index.symbol_table(self.messages(name), self.sb.sizeof_addr)
        assert stab is not None
        key = self.sb.sizeof_len
        levels = [[self.node(stab[0], key)]]
        while levels[-1][0].level > 0:
            levels.append([self.node(c, key) for n in levels[-1] for c in n.children])
        return levels

    def put(self, at: int, value: int, width: int) -> None:
        self.raw[at : at + width] = value.to_bytes(width, "little")

    def address(self, node: Node) -> int:
        return node.at - self.base

    def save(self, path: Path) -> Path:
        path.write_bytes(bytes(self.raw))
        return path


def _walk(f: h5py.File) -> list[str]:
    names = ["/"]
    f.visit(names.append)
    return names


def _address(obj: Any) -> int:
    low, high = h5py.h5g.get_objinfo(obj.id).objno
    return int(low) + (int(high) << 64)


def mat_file(path: Path, *, rows: int = 200, chunk: tuple[int, int] = (2, 10)) -> H5File:
    """A MAT v7.3 file: ``x`` (double, ``rows`` x 10, chunked and deflated: 2 B-tree levels
    for the default 100 chunks), ``s`` (a char row, chunked), ``y`` (contiguous)."""
    with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
        x = f.create_dataset("x", data=np.arange(rows * 10.0).reshape(rows, 10), chunks=chunk,
                             compression="gzip")  # fmt: skip
        x.attrs["MATLAB_class"] = np.bytes_("double")
        s = f.create_dataset("s", data=np.frombuffer("hello world".encode("utf-16-le"),
                             "<u2").reshape(-1, 1), chunks=(4, 1))  # fmt: skip
        s.attrs["MATLAB_class"] = np.bytes_("char")
        y = f.create_dataset("y", data=np.arange(6.0).reshape(3, 2))
        y.attrs["MATLAB_class"] = np.bytes_("double")
    stamp(path)
    return H5File(path, 512)


def many_vars(path: Path, count: int) -> H5File:
    """A MAT v7.3 file of ``count`` small variables: a root group B-tree of several nodes."""
    with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
        for i in range(count):
            d = f.create_dataset(f"v{i:04d}", data=np.full((1, 1), float(i)))
            d.attrs["MATLAB_class"] = np.bytes_("double")
    stamp(path)
    return H5File(path, 512)
