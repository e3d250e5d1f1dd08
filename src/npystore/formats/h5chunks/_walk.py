"""What every chunk-index walk shares: the dataset geometry it checks chunk records against,
the chunk table it builds, the walk protocol and its driver, and chunk-grid arithmetic.

A walk is a small state machine driven by the IO layer (:func:`run`): :meth:`Walk.wanted`
names the byte ranges it needs next, :meth:`Walk.feed` takes their bytes,
:meth:`Walk.result` gives the :class:`ChunkTable`. All addresses are relative to the base
address.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError
from npystore.formats.h5index import ChunkLayout

__all__ = [
    "ChunkTable", "Done", "Geometry", "Walk", "check_extent", "chunk_bytes", "empty_table",
    "grid_of", "run", "span",
]  # fmt: skip


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


def span(address: int, size: int, end: int) -> tuple[int, int]:
    """``[address, address + size)`` clipped to ``[0, end)`` (empty past the end: the parse
    of what comes back reports it)."""
    return min(address, end), min(address + size, end)


def grid_of(shape: tuple[int, ...], chunk: tuple[int, ...]) -> tuple[int, ...]:
    """Chunks per dimension of ``shape`` cut into ``chunk`` (the last ones partial)."""
    return tuple(-(-n // c) for n, c in zip(shape, chunk, strict=True))


def empty_table(rank: int) -> ChunkTable:
    """The table of a dataset of ``rank`` dimensions with no chunk stored."""
    return ChunkTable(
        np.zeros((0, rank), np.intp),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.uint32),
    )


class Done:
    """A walk that needs no bytes."""

    def __init__(self, table: ChunkTable) -> None:
        self._table = table

    def wanted(self) -> list[tuple[int, int]]:
        return []

    def feed(self, datas: list[bytes]) -> None:
        raise ValueError("nothing was asked")

    def result(self) -> ChunkTable:
        return self._table


def chunk_bytes(layout: ChunkLayout) -> int:
    """Bytes of one unfiltered chunk."""
    return math.prod(layout.chunk) * layout.element_size


def check_extent(geo: Geometry, what: str, address: int, size: int) -> None:
    """Refuse (FormatError) ``size`` bytes at ``address`` unless they are some and lie in the
    file; ``what`` names them in the message."""
    if size <= 0 or address + size > geo.file_end:
        raise FormatError(
            f"{geo.source}: {what} at bytes [{address}, {address + size}) of the HDF5 data "
            f"lies outside the file ({geo.file_end} bytes after the base address)"
            if size > 0
            else f"{geo.source}: {what} of {size} bytes at {address}"
        )
