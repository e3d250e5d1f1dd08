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

- version-1 B-tree (what MATLAB, hdf5storage and h5py's defaults write), walked one level
  per batch: :mod:`._btree`;
- single chunk, implicit and fixed array, indexes of datasets without unlimited
  dimensions: :mod:`._arrays`.

Extensible arrays and version-2 B-trees raise :class:`~npystore.errors.UnsupportedError`.

What every walk shares (the dataset geometry it checks against, the chunk table it builds,
the walk protocol and :func:`run`) is in :mod:`._walk`; :func:`chunk_walk` picks the walk.
"""

from __future__ import annotations

import math

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.h5chunks._arrays import (
    MAX_FIXED_ARRAY_BYTES,
    FixedArrayWalk,
    implicit_table,
    single_table,
)
from npystore.formats.h5chunks._btree import MAX_BTREE_LEVEL, BTreeV1Walk, btree_node_size
from npystore.formats.h5chunks._walk import (
    ChunkTable,
    Done,
    Geometry,
    Walk,
    empty_table,
    grid_of,
    run,
    span,
)
from npystore.formats.h5index import (
    BTREE_V1,
    FIXED_ARRAY,
    IMPLICIT,
    SINGLE_CHUNK,
    ChunkLayout,
    Superblock,
)

__all__ = [
    "MAX_BTREE_LEVEL",
    "MAX_FIXED_ARRAY_BYTES",
    "BTreeV1Walk",
    "ChunkTable",
    "FixedArrayWalk",
    "Geometry",
    "Walk",
    "btree_node_size",
    "chunk_walk",
    "run",
    "span",
]


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
    grid = grid_of(geo.shape, layout.chunk)
    if math.prod(grid) > geo.max_chunks:
        raise UnsupportedError(
            f"{geo.source}: a dataset of shape {geo.shape} in chunks of {layout.chunk} has a "
            f"grid of {math.prod(grid)} chunks; npystore indexes at most {geo.max_chunks} "
            f"chunks per dataset"
        )
    if layout.address is None:
        return Done(empty_table(rank))
    if layout.index_type == BTREE_V1:
        return BTreeV1Walk(layout, sb, geo)
    if layout.index_type in (SINGLE_CHUNK, IMPLICIT, FIXED_ARRAY):
        if any(m is None for m in geo.maxshape):
            raise FormatError(
                f"{geo.source}: a {layout.index_name} chunk index for a dataset with "
                f"unlimited dimensions (maximum shape {geo.maxshape})"
            )
        if layout.index_type == SINGLE_CHUNK:
            return Done(single_table(layout, geo))
        if layout.index_type == IMPLICIT:
            return Done(implicit_table(layout, geo))
        return FixedArrayWalk(layout, sb, geo)
    raise UnsupportedError(
        f"{geo.source}: chunk index of type {layout.index_name} (data layout message "
        f"version {layout.version}); npystore reads version-1 B-tree, single chunk, implicit "
        f"and fixed array chunk indexes"
    )
