"""Issue 17: a MAT v7.3 variable on a cloud-shaped network keeps many ranges in flight.

Through the local S3 server behind a proxy that holds every ranged GET for a while (so that
requests sent together are seen in flight together):

- opening and describing a variable costs one round of requests per chunk B-tree level, all
  nodes of a level in flight at once (up to the direct session's connections);
- a full read goes out as many ranges of a few MiB, all in flight at once, not as a ramp of
  1, 2, 4, 8 MiB ranges.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import h5py
import numpy as np
import pytest

import npystore
from faultproxy import FaultProxy
from npystore.fetch import open_reader, s3direct
from npystore.files.mat.h5meta import H5Meta
from npystore.files.mat.hdf5 import MAX_CHUNK_GRID, header_address
from npystore.formats import h5chunks
from npystore.formats.h5chunks import Geometry
from npystore.testing import RequestCounter

#: What MATLAB writes in the user block (its header text).
HEADER = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
#: Seconds the proxy holds each ranged GET.
HOLD = 0.2


def write_v73(path: Path, value: np.ndarray, chunks: tuple[int, ...], **kw: Any) -> None:
    """One double variable ``x`` in a MAT v7.3 file, chunked as given."""
    with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
        d = f.create_dataset("x", data=value, chunks=chunks, **kw)
        d.attrs["MATLAB_class"] = np.bytes_("double")
    with path.open("r+b") as fh:
        fh.write(HEADER.ljust(116) + b" " * 8 + b"\x00\x02IM")


def btree_levels(path: Path) -> list[int]:
    """Nodes per level of ``x``'s chunk B-tree (npystore's own walk of the local file)."""
    meta = H5Meta(open_reader(str(path)))
    meta.attach(None, 512)
    with h5py.File(path) as f:
        d = f["x"]
        geo = Geometry(str(path), d.shape, d.maxshape, 8, False, meta.file_end, MAX_CHUNK_GRID)
        walk = h5chunks.chunk_walk(meta.chunk_layout(header_address(d)), meta.superblock(), geo)
    levels = []
    while ranges := walk.wanted():
        levels.append(len(ranges))
        walk.feed(meta.fetch(ranges))
    return levels


def held_filesystem(s3: Any, proxy: FaultProxy) -> tuple[dict[str, Any], RequestCounter]:
    """Storage options through ``proxy`` and a counter on the filesystem they give."""
    opts: dict[str, Any] = s3.server.storage_options(client_kwargs={"endpoint_url": proxy.url})
    fs = fsspec.filesystem("s3", **opts)  # the instance npystore gets for these options
    return opts, RequestCounter.attach(fs)


@pytest.mark.parametrize(
    ("shape", "chunks"),
    [((200, 6000), (8, 50)), ((300, 4000), (6, 40))],
    ids=["two-levels", "three-levels"],
)
def test_each_index_level_goes_out_at_once(
    s3: Any, tmp_path: Path, shape: tuple[int, int], chunks: tuple[int, int]
) -> None:
    """A file over 8 MiB (its blocks are fetched, not the whole file): the chunk index costs
    one round per level, every node of a level in flight together, up to the connections of
    the direct session (botocore's default pool of 10 sent 53 nodes in six rounds)."""
    path = tmp_path / "index.mat"
    value = np.arange(shape[0] * shape[1], dtype="<f8").reshape(shape)
    write_v73(path, value, chunks)
    assert path.stat().st_size > 8 * 2**20
    levels = btree_levels(path)
    assert len(levels) == len(chunks) + (0 if shape[0] == 200 else 1)  # [1, 53], [1, 2, 88]
    url = s3.put_file(path, "index.mat")
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("slow",), slow_seconds=HOLD) as p:
        opts, counter = held_filesystem(s3, p)
        with counter.measure() as m:
            x = npystore.open_mat(url, storage_options=opts)["x"]
        np.testing.assert_array_equal(x[:, 7].compute(), value[7])
    assert x.shape == shape[::-1]  # MATLAB's shape
    node_size = h5chunks.btree_node_size(3, 8, 32)  # rank 2 (+ the element), K=32
    nodes = [r for r in m.ranges if r[1] is not None and r[1] - r[0] + 1 == node_size]
    # every node below the root (read with the metadata around it) is one GET
    assert sum(levels[1:]) <= len(nodes) <= sum(levels)
    assert m.max_in_flight == min(max(levels), s3direct.DIRECT_CONNECTIONS)


def test_a_full_read_goes_out_as_many_concurrent_ranges(s3: Any, tmp_path: Path) -> None:
    """~20 MB of compressed chunks: ranges of a few MiB, all in flight at once, decoded as
    they come (not 1, 2, 4, 8 MiB ranges growing one after the other)."""
    path = tmp_path / "data.mat"
    rng = np.random.default_rng(17)
    value = rng.standard_normal((1600, 1600))  # 20.5 MB raw, ~19.5 MB deflated
    write_v73(path, value, (100, 100), compression="gzip", compression_opts=1)
    with h5py.File(path) as f:
        stored = f["x"].id.get_storage_size()
    assert 16 * 2**20 < stored < 24 * 2**20
    url = s3.put_file(path, "data.mat")
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("slow",), slow_seconds=HOLD) as p:
        opts, counter = held_filesystem(s3, p)
        x = npystore.open_mat(url, storage_options=opts)["x"]
        with counter.measure() as m:
            got = x.compute()
    np.testing.assert_array_equal(got, value.T)
    sizes = sorted(int(b) - a + 1 for a, b in m.ranges if b is not None)
    assert m.gets == len(sizes) >= 8
    assert sum(sizes) <= 1.01 * stored  # every chunk once
    assert max(sizes) <= 16 * 2**20
    assert max(sizes) <= 2 * sizes[len(sizes) // 2]  # about one size: no ramp
    assert m.max_in_flight == m.gets  # all at once (well under the in-flight bound)
