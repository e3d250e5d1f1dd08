"""``save``: one ``.npy`` file, its blocks written in parallel at their byte offsets.

The file's size and every block's offset are known before any block is computed (header
plus the data in order), so each part is written by the dask task that makes it:

- a sink without a part minimum (local files, spooled filesystems): one write per block
  at its offset, from the block's own task; the header is written first by the caller;
- S3: parts of :func:`part_size` bytes cut at fixed offsets (the first holds the header;
  a block that straddles a cut feeds both parts), each uploaded by the task that gathers
  its bytes. Under dask.distributed those tasks run on the workers, which upload their
  own parts: only part numbers and ETags travel back to the client, which completes the
  upload. On dask's threaded scheduler, :attr:`Sink.concurrency` threads run them.
  The uploads go in ascending order with a bounded lookahead (:attr:`Sink.ordered`):
  part ``n`` starts only once part ``n - concurrency`` is uploaded, so at most
  ``concurrency`` parts are in flight and the lowest part not yet uploaded is always
  among them or free to start. A server that takes parts only in order (rclone's
  ``serve s3`` holds a part until the ones before it arrived, within a buffer) never
  waits on a part that no thread will start, which dask's own order allowed.

An open file object is written in order from its position instead (the slabs computed a
window at a time, as an archive's are), as ``numpy.save`` writes it. Any failure aborts the
sink: nothing appears at the URL.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Mapping
from typing import IO, Any, Final

import dask.threaded
import numpy as np
from dask.base import get_scheduler
from dask.delayed import delayed

from npystore.fetch.sink import Receipt, Sink
from npystore.write.source import (
    Source,
    WriteError,
    as_source,
    block_bytes,
    compute_named,
    in_order,
    open_target,
    target_name,
)

__all__ = ["PART_SIZE", "part_size", "save"]

#: Target size of an S3 part (more when the object needs more than 10,000 parts).
PART_SIZE: Final = 16 * 2**20


def part_size(total: int, sink: Sink) -> int:
    """Bytes per part for an object of ``total`` bytes (every part but the last)."""
    return max(PART_SIZE, sink.min_part, -(-total // sink.max_parts))


def _write_block(
    sink: Sink, number: int, offset: int, block: Any, dtype: Any, shape: Any, where: str
) -> Receipt:
    return sink.write(number, offset, block_bytes(block, dtype, shape, where))


def _write_part(
    sink: Sink,
    number: int,
    start: int,
    stop: int,
    head: bytes,
    pieces: list[tuple[int, int, Any, Any]],
    blocks: list[Any],
    dtype: Any,
    after: Receipt | None = None,
) -> Receipt:
    """Gather bytes ``[start, stop)`` of the file (header bytes, then block slices) and
    write them as part ``number`` (``after``: the receipt of the part this one waits for,
    only a dependency of the graph)."""
    # joined straight into the bytes the upload sends: one copy (an ndarray filled and
    # then turned into bytes took two: 0.7 s of CPU against 0.1 s per 512 MiB, measured
    # alone on this project's VM; a bytearray body is copied again by aiohttp)
    chunks: list[Any] = [head]
    for (lo, hi, shape, where), block in zip(pieces, blocks, strict=True):
        chunks.append(block_bytes(block, dtype, shape, where)[lo:hi])
    part = b"".join(chunks)
    if len(part) != stop - start:
        raise WriteError(
            f"{sink.url}: part {number} gathered {len(part)} bytes, expected {stop - start}"
        )
    return sink.write(number, start, part)


def _raw(
    head: bytes, block: Any, meta: tuple[Any, Any, str] | None, final: bool, start: int
) -> list[Any]:
    """A slab's bytes (the header before the first) as buffers to write in order."""
    pieces: list[Any] = [head] if head else []
    if meta is not None:
        pieces.append(block_bytes(block, *meta))
    return pieces


def write_npy_in_order(sink: Sink, src: Source) -> list[Receipt]:
    """Write ``src`` into a sequential sink (a file object), slab after slab."""
    receipts: list[Receipt] = []
    offset = 0
    for pieces in in_order(src, sink.url, _raw):
        for data in pieces:
            receipts.append(sink.write(len(receipts) + 1, offset, data))
            offset += memoryview(data).nbytes
    return receipts


def write_npy(sink: Sink, src: Source) -> list[Receipt]:
    """Write ``src`` into ``sink`` (not committed); the parts' receipts."""
    if sink.sequential:
        return write_npy_in_order(sink, src)
    if src.raw is not None and sink.min_part == 0:
        # an array in memory into a local file: written from this thread, as numpy.save
        # writes it (a dask graph over its slabs cost a 128 MiB save 30% more than numpy's)
        receipts = [sink.write(1, 0, src.header)]
        if src.raw.nbytes:
            receipts.append(sink.write(2, len(src.header), src.raw))
        return receipts
    x = src.data
    keys = x.to_delayed(optimize_graph=True).ravel().tolist()  # type: ignore[no-untyped-call]
    indices = list(np.ndindex(*x.numblocks))
    sizes = src.block_sizes()
    shapes = [tuple(c[i] for c, i in zip(x.chunks, idx, strict=True)) for idx in indices]
    head = src.header
    offsets = [len(head), *(len(head) + o for o in itertools.accumulate(sizes))]
    where = [f"{sink.url}: block {idx}" for idx in indices]
    write = delayed(_write_block, pure=False)
    part = delayed(_write_part, pure=False)
    if sink.min_part == 0:
        receipts = [sink.write(1, 0, head)]
        tasks = [
            write(sink, k + 2, offsets[k], key, x.dtype, shapes[k], where[k])
            for k, key in enumerate(keys)
            if sizes[k]
        ]
    else:
        receipts = []
        size = part_size(src.size, sink)
        cuts = [*range(0, src.size, size), src.size]
        tasks = []
        for number, (start, stop) in enumerate(itertools.pairwise(cuts), start=1):
            first = max(0, bisect.bisect_right(offsets, start) - 1)
            pieces, blocks = [], []
            for k in range(first, len(keys)):
                lo, hi = max(start, offsets[k]), min(stop, offsets[k + 1])
                if offsets[k] >= stop:
                    break
                if hi > lo:
                    pieces.append((lo - offsets[k], hi - offsets[k], shapes[k], where[k]))
                    blocks.append(keys[k])
            piece_head = head[start:stop] if start < len(head) else b""
            window = max(1, sink.concurrency)
            after = tasks[number - 1 - window] if sink.ordered and number > window else None
            tasks.append(
                part(sink, number, start, stop, piece_head, pieces, blocks, x.dtype, after)
            )
    kwargs: dict[str, Any] = {}
    # no scheduler configured (None) means dask's default for arrays, the threaded one: it
    # would run as many part uploads at once as there are cores
    if get_scheduler() in (None, dask.threaded.get):  # type: ignore[no-untyped-call]
        kwargs["num_workers"] = max(sink.concurrency, 2)
    return receipts + compute_named(tasks, sink.url, **kwargs)


def save(
    url: str | os.PathLike[str] | IO[bytes],
    array: Any,
    *,
    durable: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``array`` to ``url`` as ``numpy.save`` would, in parallel and atomically.

    Parameters
    ----------
    url : str, os.PathLike or file object
        Local path, any fsspec URL (``s3://...``), or an open binary file object. A local
        path that does not end in ``.npy`` gets it appended, as ``numpy.save`` does; a URL
        (``://``) is written as given. A file object is written from its position, in order
        (not atomically: a failure leaves what was written), as ``numpy.save`` writes it.
    array : numpy.ndarray, dask.array.Array or array-like
        The array. A numpy array's bytes are exactly ``numpy.save``'s (Fortran order
        kept); a dask array is written in C order, as ``numpy.save(numpy.asarray(x))``.
    durable : bool
        Local files: ``fsync`` the file before it is renamed into place and its directory
        after, so that it survives a power loss once ``save`` returns. Off by default, as
        ``numpy.save`` (the rename is atomic either way: readers see the old file or the
        new one, never a part).
    storage_options : mapping, optional
        fsspec's ``storage_options`` for the URL.

    Raises
    ------
    UnsupportedError
        An object array (also a :class:`TypeError`), a masked array; nothing is written.
    WriteError
        A block failed (the error names it; the original exception is chained); nothing
        appears at the URL, and a local file keeps its previous content.
    FetchError
        An S3 request failed (the error names the URL and the step).

    Examples
    --------
    >>> import numpy as np, npystore
    >>> npystore.save("/tmp/doc_save.npy", np.asfortranarray(np.eye(3, dtype=">i2")))
    >>> open("/tmp/doc_save.npy", "rb").read() == (np.save("/tmp/doc_np.npy",
    ...     np.asfortranarray(np.eye(3, dtype=">i2"))) or open("/tmp/doc_np.npy", "rb").read())
    True
    """
    src = as_source(array, target_name(url, ".npy"))
    sink = open_target(url, ".npy", storage_options, src.size, durable=durable)
    try:
        receipts = write_npy(sink, src)
        sink.commit(receipts, src.size)
    except BaseException:
        sink.abort()
        raise
