"""Which chunks of a chunk grid a selection touches, and how their stored bytes are grouped
into range requests (:mod:`npystore.read.chunked`'s planning, no IO).

- :func:`axis_hits`: per axis of a strided selection, the chunks it touches and the part of
  the output each fills;
- :func:`merge_ranges`: chunks sorted by their offset in the file, neighbours a small gap
  apart merged into one range (a :data:`Range`: start, stop and the chunks it covers);
- :func:`batches_of`: ranges grouped into batches of about a given size, each one read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from npystore.fetch import RangeReader

__all__ = ["AxisHits", "Range", "axis_hits", "batches_of", "merge_ranges"]

#: A merged range: its start and stop in the file, and the chunks (by their index in the
#: planned group) whose stored bytes it holds.
Range = tuple[int, int, list[int]]


@dataclass(frozen=True, slots=True)
class AxisHits:
    """The chunks one axis of a selection touches, and what each contributes.

    ``chunk[j]`` is a chunk index along the axis; the selection's elements
    ``out_lo[j]:out_hi[j]`` fall in it, starting at ``local[j]`` within the chunk, every
    ``step`` elements.
    """

    chunk: np.ndarray[Any, np.dtype[np.int64]]
    out_lo: np.ndarray[Any, np.dtype[np.int64]]
    out_hi: np.ndarray[Any, np.dtype[np.int64]]
    local: np.ndarray[Any, np.dtype[np.int64]]
    step: int


def axis_hits(start: int, count: int, step: int, cs: int) -> AxisHits:
    """The chunks (of ``cs`` elements) that ``count`` elements from ``start`` every ``step``
    touch along one axis."""
    if step >= cs:  # every selected element is in a chunk of its own
        k = np.arange(count, dtype=np.int64)
        idx = start + k * step
        return AxisHits(idx // cs, k, k + 1, idx % cs, step)
    first = start // cs
    last = (start + (count - 1) * step) // cs
    c = np.arange(first, last + 1, dtype=np.int64)
    # first selected k at or after the chunk's start, and the first k past its end
    lo = np.clip(-((start - c * cs) // step), 0, count)
    hi = np.clip(-((start - (c + 1) * cs) // step), 0, count)
    keep = lo < hi
    c, lo, hi = c[keep], lo[keep], hi[keep]
    return AxisHits(c, lo, hi, start + lo * step - c * cs, step)


def merge_ranges(
    order: np.ndarray[Any, np.dtype[np.int64]],
    offsets: np.ndarray[Any, np.dtype[np.int64]],
    sizes: np.ndarray[Any, np.dtype[np.int64]],
    reader: RangeReader,
    span: int,
) -> Iterator[Range]:
    """Ranges covering the chunks ``order`` (sorted by offset): neighbours separated by at
    most ``reader.max_gap`` bytes share a range while it spans at most ``span`` bytes (and
    ``reader.max_span``)."""
    max_gap = reader.max_gap
    max_span = min(reader.max_span, span)
    start = stop = -1
    members: list[int] = []
    for i in order.tolist():
        a = int(offsets[i])
        b = a + int(sizes[i])
        if members and a - stop <= max_gap and max(stop, b) - start <= max_span:
            stop = max(stop, b)
            members.append(i)
            continue
        if members:
            yield start, stop, members
        start, stop, members = a, b, [i]
    if members:
        yield start, stop, members


def batches_of(ranges: Iterator[Range], limit: int) -> Iterator[list[Range]]:
    """Groups of ranges, each of at most about ``limit`` bytes (one larger range goes
    alone)."""
    batch: list[Range] = []
    total = 0
    for r in ranges:
        size = r[1] - r[0]
        if batch and total + size > limit:
            yield batch
            batch, total = [], 0
        batch.append(r)
        total += size
    if batch:
        yield batch
