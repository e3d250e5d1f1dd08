"""The chunk-index walk (formats/h5index.py + hdf5.prefetch_chunk_index): the nodes it finds
are the ones libhdf5 reads, its leaves name every chunk libhdf5 reports, hostile bytes only
raise FormatError, and over S3 a many-chunk dataset's index costs a request per level."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from npystore.access import LayoutArray
from npystore.blockfile import BlockFile
from npystore.errors import FormatError
from npystore.fetch import open_reader
from npystore.formats import h5index
from npystore.hdf5 import AddressCheck, chunk_records, dataset_layout, open_h5, prefetch_chunk_index

RNG = np.random.default_rng(11)


def write(path: Path, *, userblock: int = 512, libver: Any = "earliest", attrs: int = 0) -> None:
    with h5py.File(path, "w", userblock_size=userblock or 0, libver=libver) as f:
        d = f.create_dataset(
            "x", data=RNG.standard_normal((300, 400)), chunks=(10, 20), compression="gzip"
        )
        for i in range(attrs):  # added after creation: the header grows a continuation
            d.attrs[f"attribute_{i:03d}"] = np.arange(20.0)
        f.create_dataset("c", data=np.arange(10.0))  # contiguous


def walk(raw: bytes, base: int, dset: Any) -> tuple[list[int], list[int]]:
    """Every node address (level by level) and every leaf child, from the raw bytes."""
    sb = h5index.parse_superblock(raw[base:])
    assert sb is not None
    low, high = h5py.h5g.get_objinfo(dset.id).objno
    start = base + low + (high << 64)
    size = h5index.header_size(raw[start : start + h5index.HEADER_PREFIX])
    block = h5index.parse_object_header(raw[start : start + size], sb.sizeof_addr)
    messages = list(block.messages)
    for a, n in block.continuations:
        messages += h5index.parse_object_header(
            raw[base + a : base + a + n], sb.sizeof_addr, continuation=1
        ).messages
    index = h5index.chunk_index(tuple(messages), sb.sizeof_addr)
    assert index is not None
    node_size = h5index.btree_node_size(index.dimensionality, sb.sizeof_addr, sb.chunk_k)
    nodes, leaves, level = [], [], [index.root]
    while level:
        nodes += level
        below = []
        for a in level:
            depth, children = h5index.parse_btree_node(
                raw[base + a : base + a + node_size], index.dimensionality, sb.sizeof_addr
            )
            (below if depth else leaves).extend(children)
        level = below
    return nodes, leaves


@pytest.mark.parametrize("userblock", [0, 512])
@pytest.mark.parametrize("attrs", [0, 40])
def test_leaves_are_the_chunks_libhdf5_reports(tmp_path: Path, userblock: int, attrs: int) -> None:
    path = tmp_path / "a.h5"
    write(path, userblock=userblock, attrs=attrs)
    raw = path.read_bytes()
    with h5py.File(path, "r") as f:
        nodes, leaves = walk(raw, userblock, f["x"])
        reported = sorted(r.address for r in chunk_records(f["x"]))
    assert len(leaves) == 30 * 20
    assert len(nodes) > 1  # 600 chunks need more than one node
    shifted = sorted(userblock + a for a in leaves)
    assert shifted == reported or sorted(leaves) == reported


def test_new_style_index_is_left_to_libhdf5(tmp_path: Path) -> None:
    path = tmp_path / "latest.h5"
    write(path, userblock=0, libver="latest")
    raw = path.read_bytes()
    sb = h5index.parse_superblock(raw)
    assert sb is None  # superblock v3: layout v4 indexes, not walked
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    blockfile = AddressCheck.for_reader(reader).blockfile()
    assert blockfile is not None
    assert prefetch_chunk_index(h5["x"], blockfile, 0, "x") == 0
    h5.close()


def test_prefetch_fetches_what_libhdf5_then_reads(tmp_path: Path) -> None:
    path = tmp_path / "big.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset(
            "x", data=RNG.standard_normal((400, 2000)), chunks=(10, 20), compression="gzip"
        )  # 4000 chunks between which the index nodes are scattered
    reader = open_reader(str(path))
    blockfile = BlockFile(reader, whole_file_limit=0, block_size=4096)
    h5 = h5py.File(blockfile, "r")
    fetched = prefetch_chunk_index(h5["x"], blockfile, 512, "x")
    assert fetched > 10
    before = blockfile.fetches
    records = chunk_records(h5["x"])
    assert len(records) == 4000
    assert blockfile.fetches == before  # every node libhdf5 walked was preloaded
    h5.close()


def test_hostile_bytes_raise_format_error_only(tmp_path: Path) -> None:
    path = tmp_path / "m.h5"
    write(path, userblock=0, attrs=5)
    raw = path.read_bytes()
    with h5py.File(path, "r") as f:
        low, _ = h5py.h5g.get_objinfo(f["x"].id).objno
        nodes, _ = walk(raw, 0, f["x"])
    header = raw[low : low + 4096]
    node = raw[nodes[0] : nodes[0] + 4096]
    rnd = random.Random(5)
    for case in range(3000):
        data = bytearray((header, node, raw[:64])[case % 3])
        for _ in range(rnd.randint(1, 8)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        data = data[: rnd.randrange(len(data) + 1)] if case % 7 == 0 else data
        blob = bytes(data)
        try:
            if case % 3 == 0:
                size = h5index.header_size(blob[: h5index.HEADER_PREFIX])
                block = h5index.parse_object_header(blob[:size], 8)
                h5index.chunk_index(block.messages, 8)
            elif case % 3 == 1:
                h5index.parse_btree_node(blob, 3, 8)
            else:
                h5index.parse_superblock(blob)
        except FormatError:
            pass


def test_s3_many_chunk_index_costs_a_request_per_level(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "many.mat"
    data = RNG.standard_normal((300, 2000))
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("x", data=data, chunks=(10, 20), compression="gzip")  # 3000 chunks
        f.create_dataset("pad", data=RNG.standard_normal((1100, 1000)))  # > whole-file limit
    url = s3.put_file(path, "many.mat")
    reader = open_reader(url, s3.storage_options)
    h5 = open_h5(reader)
    blockfile = AddressCheck.for_reader(reader).blockfile()
    assert blockfile is not None
    before = blockfile.fetches
    with s3.counter.measure() as m:
        layout = dataset_layout(h5["x"], reader)
    with h5py.File(path, "r") as f:
        raw = path.read_bytes()
        nodes, _ = walk(raw, 512, f["x"])
    assert len(nodes) > 40  # without the prefetch: one round trip per node not in cache
    assert blockfile.fetches - before <= 4  # one batch of concurrent requests per level
    assert m.requests <= len(nodes) + 2, m
    np.testing.assert_array_equal(LayoutArray(reader, layout).read(), data)
    h5.close()
