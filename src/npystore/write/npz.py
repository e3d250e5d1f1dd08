"""``savez`` and ``savez_compressed``: ZIP archives of ``.npy`` members, streamed in order.

A compressed member's size is known only once it is compressed, so an archive is written as
a stream: members one after the other, each a local header (flag bit 3: CRC-32 and sizes
follow the data in a data descriptor), the member's bytes (exactly ``numpy.save``'s,
stored or deflated), the descriptor; then the central directory and the end records. The
stream is cut into parts (:class:`PartStream`) written concurrently through the sink
(S3: parts of an multipart upload, uploaded from this process while the next blocks
compute); the sink commits at the end or aborts on any failure.

The blocks of each member are computed by dask a window at a time (a few slabs, in
parallel) and joined in order. ``savez_compressed`` deflates every slab as independent
pieces, in parallel on a thread pool (ISA-L when installed): each piece but the member's
last ends with a full flush, so the joined pieces are one valid deflate stream, and the
CRC-32 is combined from the pieces'. The member's blocks are fixed before any slab is
computed (:func:`block_bounds`): the ``.npy`` header is block 0, and every later block
holds whole chunks of the array (:func:`aligned_block_size`: rows of the slowest axis, at
most :func:`deflate_block_size` bytes); a slab cut inside a block gives two pieces that,
joined, are that block. The block boundaries are written into the member's central
directory entry (npystore's block index, :mod:`npystore.formats.zipdir._blocks`):
:func:`npystore.open_npz` slices such a member with one range read and no index pass, and
:func:`npystore.to_kerchunk` refers to each block as one chunk.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from dask.delayed import delayed

from npystore.fetch.sink import Receipt, Sink, open_sink
from npystore.formats import zipdir
from npystore.formats.deflate import crc32, deflate_block
from npystore.read.crccheck import crc32_combine
from npystore.read.layout import largest_divisor
from npystore.write.npy import PART_SIZE, part_size
from npystore.write.source import Source, as_source, block_bytes, compute_named

__all__ = [
    "PartStream",
    "aligned_block_size",
    "block_bounds",
    "deflate_block_size",
    "savez",
    "savez_compressed",
    "write_archive",
]

#: Uncompressed bytes of one independent deflate block (more for members so large that
#: the block index would need more than ~4,000 blocks).
DEFLATE_BLOCK: Final = 2**20
#: Smallest block of whole chunks when rows are larger than a block (a divisor of the next
#: axis); below it, blocks are cut every DEFLATE_BLOCK bytes instead.
MIN_ALIGNED_BLOCK: Final = 128 * 2**10
#: Members (and directories) whose sizes may reach this are written with ZIP64 records.
ZIP64_FROM: int = zipdir.ZIP64_LIMIT
STORED, DEFLATED = 0, 8

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _deflate_pool() -> ThreadPoolExecutor:
    global _pool  # noqa: PLW0603 - one pool per process, made on first use
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="npystore-deflate")
        return _pool


def deflate_block_size(usize: int) -> int:
    """Uncompressed bytes per deflate block for a member of ``usize`` bytes."""
    per = -(-usize // 4000)
    return max(DEFLATE_BLOCK, -(-per // 2**20) * 2**20)


def aligned_block_size(shape: tuple[int, ...], itemsize: int, target: int) -> int | None:
    """Bytes per block such that every block holds whole chunks of an array, or ``None``.

    ``shape`` is in the order of the array's bytes. Where one index along the slowest axis
    (a row) fits ``target``, blocks hold as many rows as fit (the last block what is left);
    otherwise they hold ``c`` indices of the first axis whose index fits, with ``c`` dividing
    that axis (the axes before it chunked by 1), so every block is whole chunks of one
    shape. ``None`` where no such block fits ``target`` within :data:`zipdir.MAX_BLOCKS`,
    or where the divisor leaves blocks under :data:`MIN_ALIGNED_BLOCK` (they would compress
    poorly).

    >>> aligned_block_size((100_000, 3), 8, 2**20), aligned_block_size((5, 700, 1000), 4, 2**20)
    (1048560, 700000)
    """
    data = math.prod(shape) * itemsize
    if data == 0:
        return target
    for d, n in enumerate(shape):
        unit = itemsize * math.prod(shape[d + 1 :])
        if unit > target:
            continue
        count = min(n, target // unit) if d == 0 else largest_divisor(n, target // unit)
        size = count * unit
        if d > 0 and size < MIN_ALIGNED_BLOCK:
            return None
        return size if -(-data // size) < zipdir.MAX_BLOCKS else None
    return data if not shape and data <= target else None


def block_bounds(src: Source) -> tuple[int, int]:
    """Where a member's blocks end: ``(first, step)``, block boundaries at ``first + k *
    step`` of the member's bytes (the header alone in block 0, then whole chunks; or, when
    no aligned size fits, every :func:`deflate_block_size` bytes from the start)."""
    target = deflate_block_size(src.size)
    size = aligned_block_size(src.shape, src.itemsize, target)
    if size is None:
        return target, target
    return len(src.header), size


class PartStream:
    """Bytes appended in order, cut into parts written concurrently through a sink."""

    def __init__(self, sink: Sink, part: int) -> None:
        self.sink = sink
        self.part = part
        self.offset = 0
        self._buf = bytearray()
        self._number = 0
        self._pool = ThreadPoolExecutor(max(1, sink.concurrency), thread_name_prefix="npystore-put")
        self._slots = threading.BoundedSemaphore(max(1, sink.concurrency) + 1)
        self._futures: list[Future[Receipt]] = []

    def append(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            take = min(self.part - len(self._buf), view.nbytes)
            self._buf += view[:take]
            view = view[take:]
            self.offset += take
            if len(self._buf) == self.part:
                self._flush()

    def _flush(self) -> None:
        for f in self._futures:
            if f.done() and f.exception() is not None:
                f.result()  # raise the first failure now
        self._number += 1
        data, self._buf = self._buf, bytearray()
        start = self.offset - len(data)
        self._slots.acquire()
        fut = self._pool.submit(self.sink.write, self._number, start, data)
        fut.add_done_callback(lambda _f: self._slots.release())
        self._futures.append(fut)

    def close(self) -> list[Receipt]:
        """Write what is left (at least one part) and wait for every part."""
        if self._buf or self._number == 0:
            self._flush()
        try:
            return [f.result() for f in self._futures]
        finally:
            self._pool.shutdown(wait=True)

    def cancel(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class _Encoded:
    data: Any
    usize: int
    crc: int
    #: per piece: compressed size, uncompressed size, CRC-32, whether a block ends with it
    pieces: tuple[tuple[int, int, int, bool], ...] = ()


def _encode(
    head: bytes,
    block: Any,
    meta: tuple[Any, Any, str] | None,
    compress: bool,
    final: bool,
    start: int,
    bounds: tuple[int, int],
) -> _Encoded:
    """A slab's bytes (the member's npy header before the first), stored or deflated as
    independent pieces cut at the member's block boundaries (``start``: where the slab's
    bytes begin in the member)."""
    raw: Any = block_bytes(block, *meta) if meta is not None else np.empty(0, np.uint8)
    if head:
        raw = np.concatenate([np.frombuffer(head, np.uint8), raw])
    if not compress:
        return _Encoded(raw, raw.nbytes, crc32(raw))
    first, step = bounds
    stop = start + raw.nbytes
    cut = first if start < first else first + (start - first) // step * step + step
    cuts = [start, *range(cut, stop, step), stop] if cut < stop else [start, stop]
    ends = [(c == stop and final) or c == first or (c > first and (c - first) % step == 0)
            for c in cuts[1:]]  # fmt: skip
    pieces = [raw[a - start : b - start] for a, b in itertools.pairwise(cuts)]
    last = len(pieces) - 1

    def one(k: int) -> tuple[bytes, int]:
        return deflate_block(pieces[k], final=final and k == last), crc32(pieces[k])

    done = list(_deflate_pool().map(one, range(len(pieces))))
    crc = 0
    for (_, c), p in zip(done, pieces, strict=True):
        crc = crc32_combine(crc, c, p.nbytes)
    out = tuple((len(d), p.nbytes, c, e) for (d, c), p, e in zip(done, pieces, ends, strict=True))
    return _Encoded(b"".join(d for d, _ in done), raw.nbytes, crc, out)


def _member(src: Source, url: str, compress: bool) -> Iterator[_Encoded]:
    """The member's encoded slabs, in order, computed a window at a time."""
    x = src.data
    keys = x.to_delayed(optimize_graph=True).ravel().tolist()  # type: ignore[no-untyped-call]
    indices = list(np.ndindex(*x.numblocks))
    sizes = src.block_sizes()
    todo = [k for k in range(len(keys)) if sizes[k]]
    bounds = block_bounds(src)
    if not todo:
        yield _encode(src.header, None, None, compress, True, 0, bounds)
        return
    starts = list(itertools.accumulate(sizes, initial=len(src.header)))
    encode = delayed(_encode, pure=False)
    window = max(2, os.cpu_count() or 1)
    for w in range(0, len(todo), window):
        tasks = []
        for k in todo[w : w + window]:
            shape = tuple(c[i] for c, i in zip(x.chunks, indices[k], strict=True))
            meta = (x.dtype, shape, f"{url}: block {indices[k]}")
            head = src.header if k == todo[0] else b""
            start = 0 if head else starts[k]
            tasks.append(encode(head, keys[k], meta, compress, k == todo[-1], start, bounds))
        yield from compute_named(tasks, url)


def write_archive(
    url: str,
    arrays: Mapping[str, Any],
    *,
    compress: bool,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``arrays`` (member key -> array) as an ``.npz`` archive at ``url``."""
    sources = {name: as_source(a, f"{url}:{name}.npy") for name, a in arrays.items()}
    bound = sum(s.size + s.size // 1000 + 2**16 for s in sources.values()) + 2**20
    sink = open_sink(url, storage_options, None)
    stream = PartStream(sink, part_size(bound, sink) if sink.min_part else PART_SIZE)
    when = zipdir.dos_time(*time.localtime(time.time())[:6])
    method = DEFLATED if compress else STORED
    try:
        records = []
        for key, src in sources.items():
            name = f"{key}.npy"
            zip64 = src.size + src.size // 1000 + 2**20 >= ZIP64_FROM
            offset = stream.offset
            stream.append(zipdir.local_header(name, method, zip64, when))
            crc = csize = 0
            csizes: list[int] = []
            usizes: list[int] = []
            crcs: list[int] = []
            block = (0, 0, 0)  # the block being joined from pieces
            for enc in _member(src, url, compress):
                stream.append(enc.data)
                crc = crc32_combine(crc, enc.crc, enc.usize)
                csize += memoryview(enc.data).nbytes
                for c, u, bc, ends in enc.pieces:
                    c0, u0, crc0 = block
                    block = (c0 + c, u0 + u, crc32_combine(crc0, bc, u))
                    if ends:
                        csizes.append(block[0])
                        usizes.append(block[1])
                        crcs.append(block[2])
                        block = (0, 0, 0)
            stream.append(zipdir.data_descriptor(crc, csize, src.size, zip64))
            extra = b""
            if compress:
                extra = zipdir.blocks_extra(
                    zipdir.BlockIndex(tuple(csizes), tuple(usizes), tuple(crcs))
                )
            records.append(
                zipdir.CentralRecord(name, method, crc, csize, src.size, offset, zip64, when, extra)
            )
        cd_offset = stream.offset
        for rec in records:
            stream.append(zipdir.central_record(rec))
        cd_size = stream.offset - cd_offset
        force = cd_offset + cd_size >= ZIP64_FROM
        stream.append(zipdir.end_records(len(records), cd_offset, cd_size, force_zip64=force))
        receipts = stream.close()
        sink.commit(receipts, stream.offset)
    except BaseException:
        stream.cancel()
        sink.abort()
        raise


def _named(args: tuple[Any, ...], kwds: dict[str, Any]) -> dict[str, Any]:
    """numpy.savez's naming: positional arrays are ``arr_0``, ``arr_1``, ..."""
    named = dict(kwds)
    for i, value in enumerate(args):
        key = f"arr_{i}"
        if key in named:
            raise ValueError(f"Cannot use un-named variables and keyword {key}")
        named[key] = value
    return named


def savez(
    url: str, *args: Any, storage_options: Mapping[str, Any] | None = None, **arrays: Any
) -> None:
    """Write arrays into an uncompressed ``.npz`` archive, as :func:`numpy.savez` does.

    Each member's bytes are exactly ``numpy.save``'s; positional arrays are named
    ``arr_0``, ``arr_1``, ...; ``numpy.load`` and :mod:`zipfile` read the archive (ZIP64
    when needed). Written atomically: on failure nothing appears at ``url``.

    Parameters
    ----------
    url : str
        Local path or any fsspec URL.
    *args, **arrays
        numpy or dask arrays (or array-likes).
    storage_options : mapping, optional
        fsspec's ``storage_options`` for the URL.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> npystore.savez("/tmp/doc_savez.npz", np.arange(3), b=np.eye(2))
    >>> sorted(np.load("/tmp/doc_savez.npz").files)
    ['arr_0', 'b']
    """
    write_archive(url, _named(args, arrays), compress=False, storage_options=storage_options)


def savez_compressed(
    url: str, *args: Any, storage_options: Mapping[str, Any] | None = None, **arrays: Any
) -> None:
    """Write arrays into a deflated ``.npz`` archive, as :func:`numpy.savez_compressed`
    does, deflating in parallel and embedding a checkpoint index.

    Members are deflated as independent blocks (one valid deflate stream each) whose
    boundaries are stored in the archive (an extra field numpy and zipfile ignore), so
    :func:`npystore.open_npz` slices a member with one range read and no index pass.
    Arguments as :func:`savez`.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> npystore.savez_compressed("/tmp/doc_savezc.npz", x=np.zeros((100, 100)))
    >>> float(np.load("/tmp/doc_savezc.npz")["x"].sum())
    0.0
    """
    write_archive(url, _named(args, arrays), compress=True, storage_options=storage_options)
