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
pieces, in parallel on a thread pool (at ``compresslevel``, see
:func:`npystore.formats.deflate_write.deflate_block`): each piece but the member's
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
from typing import IO, Any, Final

import numpy as np

from npystore.errors import UnsupportedError
from npystore.fetch.sink import Receipt, Sink
from npystore.formats import zipdir
from npystore.formats.deflate import crc32
from npystore.formats.deflate_write import DEFAULT_LEVEL, check_level, deflate_block
from npystore.read.crccheck import crc32_combine
from npystore.read.layout import largest_divisor
from npystore.write.npy import PART_SIZE, part_size
from npystore.write.source import (
    Source,
    as_source,
    block_bytes,
    in_order,
    open_target,
    target_name,
)

__all__ = [
    "PartStream",
    "aligned_block_size",
    "block_bounds",
    "deflate_block_size",
    "savez",
    "savez_compressed",
    "write_archive",
]

#: Smallest block of whole chunks when rows are larger than a block (a divisor of the next
#: axis); below it, blocks are cut every :data:`zipdir.DEFLATE_BLOCK` bytes instead.
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


#: Uncompressed bytes per deflate block for a member of ``usize`` bytes (the reader refuses
#: larger blocks: one rule, in the block index's module).
deflate_block_size = zipdir.block_size


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
    final: bool,
    start: int,
    compress: bool,
    bounds: tuple[int, int],
    level: int,
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
        return deflate_block(pieces[k], final=final and k == last, level=level), crc32(pieces[k])

    done = list(_deflate_pool().map(one, range(len(pieces))))
    crc = 0
    for (_, c), p in zip(done, pieces, strict=True):
        crc = crc32_combine(crc, c, p.nbytes)
    out = tuple((len(d), p.nbytes, c, e) for (d, c), p, e in zip(done, pieces, ends, strict=True))
    return _Encoded(b"".join(d for d, _ in done), raw.nbytes, crc, out)


def _member(src: Source, url: str, compress: bool, level: int) -> Iterator[_Encoded]:
    """The member's encoded slabs, in order, computed a window at a time."""
    return in_order(src, url, _encode, compress, block_bounds(src), level)


#: Longest name a ZIP record holds (a 16-bit length), in UTF-8 bytes.
ZIP_NAME_MAX: Final = 0xFFFF


def _check_name(key: str, url: str) -> str:
    """The member name of ``key`` (``key.npy``) if npystore and ZIP tools can read it back.

    Raises
    ------
    UnsupportedError
        A name :func:`npystore.open_npz` refuses (a ``..`` component, an absolute path, a
        backslash, a NUL; ``numpy.savez`` writes them), one that is not valid UTF-8 text, or
        one longer than a ZIP record holds (65,535 bytes).
    """
    if not isinstance(key, str):
        raise TypeError(f"{url}: member names are strings, got {type(key).__name__}")
    name = f"{key}.npy"
    problem = zipdir.member_name_problem(name)
    if problem is not None:
        raise UnsupportedError(
            f"{url}: member {key!r}: {problem}; npystore.open_npz and unzip refuse such names "
            "(a path outside the archive's folder), so it is not written (numpy.savez writes "
            "it); choose another key"
        )
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsupportedError(f"{url}: member {key!r} is not valid Unicode text: {exc}") from exc
    if len(encoded) > ZIP_NAME_MAX:
        raise UnsupportedError(
            f"{url}: member name of {len(encoded):,} bytes ({key[:40]!r}...): a ZIP archive "
            f"holds names of at most {ZIP_NAME_MAX:,} bytes"
        )
    return name


def write_archive(
    url: str | os.PathLike[str] | IO[bytes],
    arrays: Mapping[str, Any],
    *,
    compress: bool,
    storage_options: Mapping[str, Any] | None = None,
    durable: bool = False,
    level: int = DEFAULT_LEVEL,
) -> None:
    """Write ``arrays`` (member key -> array) as an ``.npz`` archive at ``url`` (a path gets
    ``.npz`` appended when it lacks it; a URL is kept; a file object is written in order)."""
    where = target_name(url, ".npz")
    level = check_level(level)
    names = {key: _check_name(key, where) for key in arrays}
    sources = {key: as_source(a, f"{where}:{key}.npy") for key, a in arrays.items()}
    bound = sum(s.size + s.size // 1000 + 2**16 for s in sources.values()) + 2**20
    sink = open_target(url, ".npz", storage_options, None, durable=durable)
    stream = PartStream(sink, part_size(bound, sink) if sink.min_part else PART_SIZE)
    when = zipdir.dos_time(*time.localtime(time.time())[:6])
    method = DEFLATED if compress else STORED
    try:
        records = []
        for key, src in sources.items():
            name = names[key]
            zip64 = src.size + src.size // 1000 + 2**20 >= ZIP64_FROM
            offset = stream.offset
            stream.append(zipdir.local_header(name, method, zip64, when))
            crc = csize = 0
            csizes: list[int] = []
            usizes: list[int] = []
            crcs: list[int] = []
            block = (0, 0, 0)  # the block being joined from pieces
            for enc in _member(src, sink.url, compress, level):
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
    url: str | os.PathLike[str] | IO[bytes],
    *args: Any,
    storage_options: Mapping[str, Any] | None = None,
    durable: bool = False,
    **arrays: Any,
) -> None:
    """Write arrays into an uncompressed ``.npz`` archive, as :func:`numpy.savez` does.

    Each member's bytes are exactly ``numpy.save``'s; positional arrays are named
    ``arr_0``, ``arr_1``, ...; ``numpy.load`` and :mod:`zipfile` read the archive (ZIP64
    when needed). Written atomically: on failure nothing appears at ``url``.

    Parameters
    ----------
    url : str, os.PathLike or file object
        Local path (``.npz`` is appended when it does not end so, as numpy does), any fsspec
        URL (written as given), or an open binary file object (written from its position,
        in order, not atomically).
    *args, **arrays
        numpy or dask arrays (or array-likes). The keywords ``storage_options`` and
        ``durable`` (and ``compresslevel`` for :func:`savez_compressed`) are this
        function's own: pass arrays of those names in a dict, ``savez(p, **{"durable": a})``
        does not work either; use positional arrays or other keys.
    storage_options : mapping, optional
        fsspec's ``storage_options`` for the URL.
    durable : bool
        Local files: ``fsync`` the file and its directory (see :func:`npystore.save`).

    Raises
    ------
    UnsupportedError
        A key that makes a member name npystore and ZIP tools refuse (a ``..`` component,
        an absolute path, a backslash; ``numpy.savez`` writes those), or longer than a ZIP
        record holds; a masked or object array. Nothing is written.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> npystore.savez("/tmp/doc_savez.npz", np.arange(3), b=np.eye(2))
    >>> sorted(np.load("/tmp/doc_savez.npz").files)
    ['arr_0', 'b']
    """
    write_archive(
        url,
        _named(args, arrays),
        compress=False,
        storage_options=storage_options,
        durable=durable,
    )


def savez_compressed(
    url: str | os.PathLike[str] | IO[bytes],
    *args: Any,
    storage_options: Mapping[str, Any] | None = None,
    durable: bool = False,
    compresslevel: int = DEFAULT_LEVEL,
    **arrays: Any,
) -> None:
    """Write arrays into a deflated ``.npz`` archive, as :func:`numpy.savez_compressed`
    does, deflating in parallel and embedding a checkpoint index.

    Members are deflated as independent blocks (one valid deflate stream each) whose
    boundaries are stored in the archive (an extra field numpy and zipfile ignore), so
    :func:`npystore.open_npz` slices a member with one range read and no index pass.
    Arguments as :func:`savez`, and:

    Parameters
    ----------
    compresslevel : int
        1 (fastest) to 9 (smallest), zlib's scale. 1-3 deflate with ISA-L's levels 1-3:
        many times zlib's speed, output near numpy's size on numeric data but up to 2-4x it
        on text and periodic data. 4-9 (default 6, numpy's level) deflate with zlib's
        levels (zlib-ng's when installed, about 2x faster): near numpy's size (measured
        0.8-1.01x on typical data, up to 1.3x on data that compresses below 1% with a
        period over 1 KiB, since each 1 MiB block starts afresh); a block that compresses
        below 1/8 of its size is also tried with ISA-L level 3, the smaller kept.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> npystore.savez_compressed("/tmp/doc_savezc.npz", x=np.zeros((100, 100)))
    >>> float(np.load("/tmp/doc_savezc.npz")["x"].sum())
    0.0
    """
    write_archive(
        url,
        _named(args, arrays),
        compress=True,
        storage_options=storage_options,
        durable=durable,
        level=compresslevel,
    )
