"""Hostile HDF5 B-trees (issue 14, items 1 and 6): a chunk index or group B-tree that points
to itself, claims 0xFFFF entries or level 200, has a child at the wrong level, names a chunk
twice or outside the shape, used to crash libhdf5 (SIGSEGV) or leak its RuntimeError. Each is
crafted from a real small file (tests/h5craft.py) and must be a FormatError naming the file
and what was found, through every entry point."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import npystore
from h5craft import H5File, many_vars, mat_file
from npystore.errors import FormatError

#: How to break a two-level chunk B-tree of ``x`` (100 chunks of 2 x 10), and the message.
ChunkPatch = Callable[[H5File], None]


def _root(h: H5File) -> list:  # type: ignore[type-arg]
    return h.chunk_tree("x")


def self_cycle(h: H5File) -> None:
    root = _root(h)[0][0]
    h.put(root.child_fields[0], h.address(root), 8)


def entries_ffff(h: H5File) -> None:
    h.put(_root(h)[0][0].at + 6, 0xFFFF, 2)


def level_200(h: H5File) -> None:
    h.put(_root(h)[0][0].at + 5, 200, 1)


def wrong_level(h: H5File) -> None:
    h.put(_root(h)[1][1].at + 5, 1, 1)  # a leaf says it is an internal node


def duplicate_chunk(h: H5File) -> None:
    leaf = _root(h)[1][0]
    h.raw[leaf.key_fields[1] : leaf.key_fields[1] + 32] = h.raw[
        leaf.key_fields[0] : leaf.key_fields[0] + 32
    ]


def outside_shape(h: H5File) -> None:
    leaf = _root(h)[1][-1]
    h.put(leaf.key_fields[0] + 8, 400, 8)  # row 400 of a 200-row dataset


def off_grid(h: H5File) -> None:
    leaf = _root(h)[1][0]
    h.put(leaf.key_fields[1] + 8, 1, 8)  # row 1: chunks start at even rows


def chunk_past_end(h: H5File) -> None:
    leaf = _root(h)[1][0]
    h.put(leaf.key_fields[0], 0x7FFF_FFFF, 4)  # a 2 GiB chunk in a small file


def shared_leaf(h: H5File) -> None:
    root = _root(h)[0][0]
    h.put(root.child_fields[1], root.children[0], 8)


CHUNK_CASES: dict[str, tuple[ChunkPatch, str]] = {
    "self-cycle": (self_cycle, r"child 0 at \d+ is a node reached before \(a cycle"),
    "entries-0xffff": (entries_ffff, r"65535 entries, expected 1 to 64"),
    "level-200": (level_200, r"root level 200, more than 64"),
    "wrong-level": (wrong_level, r"level 1, expected 0"),
    "duplicate-chunk": (duplicate_chunk, r"names the chunk at \(0, 0\) twice"),
    "outside-shape": (outside_shape, r"outside the shape \(200, 10\)"),
    "off-grid": (off_grid, r"not on the chunk grid \(2, 10\)"),
    "chunk-past-end": (chunk_past_end, r"lies outside the file"),
    "shared-leaf": (shared_leaf, r"reached before"),
}


def crafted(tmp_path: Path, patch: ChunkPatch, **kw: int) -> Path:
    h = mat_file(tmp_path / "good.mat", **kw)  # type: ignore[arg-type]
    patch(h)
    return h.save(tmp_path / "bad.mat")


@pytest.mark.parametrize("case", sorted(CHUNK_CASES))
def test_hostile_chunk_btree_is_a_format_error(tmp_path: Path, case: str) -> None:
    patch, match = CHUNK_CASES[case]
    path = crafted(tmp_path, patch)
    m = npystore.open_mat(str(path))
    with pytest.raises(FormatError, match=rf"bad\.mat:x: chunk B-tree node at \d+: .*{match}"):
        m["x"].compute()
    assert m["y"].compute().shape == (2, 3)  # the rest of the file still reads


def ancestor_cycle(h: H5File) -> None:
    levels = h.chunk_tree("x")
    assert len(levels) == 3, "needs a three-level tree"
    middle = levels[1][-1]
    h.put(middle.child_fields[-1], h.address(levels[0][0]), 8)


def test_child_pointing_to_an_ancestor(tmp_path: Path) -> None:
    path = crafted(tmp_path, ancestor_cycle, rows=5000, chunk=(1, 10))  # 5,000 chunks
    with pytest.raises(FormatError, match=r"bad\.mat:x: .*is a node reached before"):
        npystore.open_mat(str(path))["x"].compute()


@pytest.mark.parametrize("patch", [self_cycle, ancestor_cycle], ids=["self", "ancestor"])
def test_cycles_through_every_entry_point(tmp_path: Path, patch: ChunkPatch) -> None:
    kw = {"rows": 5000, "chunk": (1, 10)} if patch is ancestor_cycle else {}
    path = str(crafted(tmp_path, patch, **kw))
    match = r"bad\.mat:x: chunk B-tree node at \d+: .*a node reached before"
    with pytest.raises(FormatError, match=match):
        npystore.open_store(path)
    with pytest.raises(FormatError, match=match):
        npystore.to_kerchunk(path)
    with pytest.raises(FormatError, match=match):
        npystore.open_mat(path)["x"].compute()
    # the command line, in a process of its own: an error and exit status 1, not a signal
    run = subprocess.run(
        [sys.executable, "-m", "npystore", "cat", f"{path}:x"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 1, (run.returncode, run.stderr[-2000:])
    assert "a node reached before" in run.stderr


def char_cycle(h: H5File) -> None:
    root = h.chunk_tree("s")[0][0]
    h.put(root.at + 5, 1, 1)  # a leaf made internal, its first chunk the node itself
    h.put(root.child_fields[0], h.address(root), 8)


def test_chunked_char_metadata_with_a_cycle(tmp_path: Path) -> None:
    """Characters are read with the metadata (h5py's dset[()]): libhdf5 walks their chunk
    index, so npystore checks it first."""
    path = crafted(tmp_path, char_cycle)
    m = npystore.open_mat(str(path))
    with pytest.raises(FormatError, match=r"bad\.mat:/s: chunk B-tree node .*reached before"):
        m["s"]
    assert m["x"].compute().shape == (10, 200)


# ---------------------------------------------------------------- group B-trees


def group_self_cycle(h: H5File) -> None:
    root = h.group_tree("/")[0][0]
    h.put(root.child_fields[0], h.address(root), 8)


def group_entries(h: H5File) -> None:
    h.put(h.group_tree("/")[0][0].at + 6, 0xFFFF, 2)


def group_level(h: H5File) -> None:
    h.put(h.group_tree("/")[0][0].at + 5, 200, 1)


def snod_count(h: H5File) -> None:
    snod = h.group_tree("/")[-1][0].children[0]
    h.put(h.base + snod + 6, 0xFFFF, 2)


def snod_is_a_tree(h: H5File) -> None:
    levels = h.group_tree("/")
    h.put(levels[-1][0].child_fields[0], h.address(levels[0][0]), 8)


def heap_too_big(h: H5File) -> None:
    messages = h.messages("/")
    from npystore.formats import h5index

    stab = h5index.symbol_table(messages, 8)
    assert stab is not None
    h.put(h.base + stab[1] + 8, 2**40, 8)


def name_outside_heap(h: H5File) -> None:
    snod = h.group_tree("/")[-1][0].children[0]
    h.put(h.base + snod + 8, 2**20, 8)  # the first symbol's name offset


GROUP_CASES: dict[str, tuple[ChunkPatch, str]] = {
    "self-cycle": (group_self_cycle, r"group B-tree node at \d+: child 0 .* reached before"),
    "entries-0xffff": (group_entries, r"65535 entries, expected 1 to 32"),
    "level-200": (group_level, r"root level 200"),
    "symbol-count": (snod_count, r"65535 symbols, at most 8"),
    "symbol-node-is-a-tree-node": (snod_is_a_tree, r"reached before|not 'SNOD'"),
    "heap-past-end": (heap_too_big, r"local heap at \d+: data segment of 1099511627776 bytes"),
    "name-outside-heap": (name_outside_heap, r"link name at heap offset 1048576"),
}


@pytest.mark.parametrize("case", sorted(GROUP_CASES))
def test_hostile_group_btree_is_a_format_error(tmp_path: Path, case: str) -> None:
    """libhdf5 crashes (SIGSEGV) listing a group whose B-tree node points to itself and
    leaks RuntimeError for the others: npystore checks the root group's symbol table before
    h5py lists it."""
    patch, match = GROUP_CASES[case]
    h = many_vars(tmp_path / "good.mat", 300)
    assert len(h.group_tree("/")) == 2  # 300 links: a root node over ~40 symbol nodes
    patch(h)
    path = h.save(tmp_path / "bad.mat")
    with pytest.raises(FormatError, match=rf"bad\.mat: group /: .*{match}"):
        npystore.open_mat(str(path))


def test_libhdf5_errors_become_format_errors(tmp_path: Path) -> None:
    """What libhdf5 itself detects on a corrupt structure npystore does not parse (here a
    dataset's datatype message) is a FormatError naming the file, not h5py's KeyError."""
    h = mat_file(tmp_path / "good.mat")
    messages = h.messages("y")
    body = next(b for k, b in messages if k == 0x03)
    at = bytes(h.raw).find(body, h.base + h.headers["y"])
    h.put(at, 0x0F, 1)  # datatype class 15 of version 0: no such version
    path = h.save(tmp_path / "bad.mat")
    with pytest.raises(FormatError, match=r"bad\.mat: listing the variables: HDF5 reports .*"
                       r"datatype message") as info:  # fmt: skip
        _ = npystore.open_mat(str(path)).variables  # the listing reads every header
    assert isinstance(info.value.__cause__, KeyError)  # what h5py raised
