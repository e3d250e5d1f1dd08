"""A read-only file object over a :class:`~npystore.fetch.RangeReader`, in cached blocks.

:class:`BlockFile` is what h5py parses HDF5 metadata through
(:func:`npystore.files.mat.hdf5.open_h5`):
libhdf5 makes many small reads (object headers, B-tree nodes, heaps), one at a time, each of
which would be a round trip on an object store.

- An object up to :data:`WHOLE_FILE_LIMIT` is read whole, in one request, when the file
  object is made: every later read is free.
- A larger one is fetched in aligned blocks kept in a bounded LRU cache. A miss fetches
  :data:`DEFAULT_BLOCK_SIZE` bytes; a miss right after the previous fetch (a sequential
  scan) doubles the fetch, up to :data:`DEFAULT_MAX_READAHEAD`, so dense metadata costs few
  requests while metadata scattered between large data (B-tree nodes interleaved with the
  chunks they index, the object headers of many variables) costs a few hundred KiB per
  place rather than a read of the whole file.
"""

from __future__ import annotations

import bisect
import io
import threading
from collections import OrderedDict
from typing import Any, Final

from npystore.fetch.reader import RangeReader

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_MAX_READAHEAD",
    "WHOLE_FILE_LIMIT",
    "BlockFile",
]

#: Bytes per block: what an isolated miss fetches.
DEFAULT_BLOCK_SIZE: Final = 256 * 2**10
#: Largest fetch of a sequential scan (the fetch doubles while misses are sequential).
DEFAULT_MAX_READAHEAD: Final = 4 * 2**20
#: Objects up to this size are read whole, in one request, when the file object is made.
WHOLE_FILE_LIMIT: Final = 8 * 2**20
#: Bytes of blocks a :class:`BlockFile` keeps (least recently used blocks go first).
DEFAULT_CACHE_BYTES: Final = 64 * 2**20


class BlockFile(io.RawIOBase):
    """A read-only, seekable file object over a reader, fetching cached blocks.

    Parameters
    ----------
    reader : RangeReader
        Reader of the object.
    block_size : int, optional
        Bytes per block (default :data:`DEFAULT_BLOCK_SIZE`).
    max_readahead : int
        Largest fetch while misses are sequential (at least one block).
    cache_bytes : int
        Bytes of blocks kept (least recently used first out); a read at least half this
        size bypasses the cache.
    whole_file_limit : int
        An object up to this size is read whole, in one request, at construction.

    Notes
    -----
    All the blocks one ``readinto`` call misses are fetched in one ``read_many`` call
    (consecutive missing blocks as one range), with the readahead after the last one.
    Thread-safe; no ``fileno()`` (callers that would bypass the reader see
    :class:`io.UnsupportedOperation`).
    """

    def __init__(
        self,
        reader: RangeReader,
        *,
        block_size: int | None = None,
        max_readahead: int = DEFAULT_MAX_READAHEAD,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        whole_file_limit: int = WHOLE_FILE_LIMIT,
    ) -> None:
        super().__init__()
        size = DEFAULT_BLOCK_SIZE if block_size is None else int(block_size)
        if size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.reader = reader
        self.block_size = size
        self.max_readahead_blocks = max(1, max_readahead // size)
        self._ahead = 1  # blocks the next sequential miss fetches
        self._next = -1  # the block after the last fetch
        self.cache_bytes = cache_bytes
        self._size = reader.size
        self._pos = 0
        self._lock = threading.Lock()
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._cached = 0
        #: Number of ``read_many``/``read`` calls made so far (for tests and benchmarks).
        self.fetches = 0
        self._whole: bytes | None = None
        # extents fetched by preload(): sorted starts, and (start, data) by start
        self._starts: list[int] = []
        self._extents: dict[int, bytes] = {}
        if self._size <= whole_file_limit:
            self._whole = reader.read(0, self._size)
            self.fetches = 1

    def __repr__(self) -> str:
        return f"BlockFile({self.reader.url!r}, block_size={self.block_size})"

    @property
    def name(self) -> str:
        """The object's URL."""
        return self.reader.url

    def readable(self) -> bool:
        """Always True."""
        return True

    def seekable(self) -> bool:
        """Always True."""
        return True

    def writable(self) -> bool:
        """Always False: the file is read-only."""
        return False

    def tell(self) -> int:
        """The current position."""
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset`` from the start, the current position or the end."""
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence!r}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readinto(self, buffer: Any) -> int:
        """Read up to ``len(buffer)`` bytes at the current position into ``buffer``."""
        view = memoryview(buffer).cast("B")
        n = self._copy(self._pos, view)
        self._pos += n
        return n

    def read_at(self, start: int, stop: int) -> bytes:
        """The bytes ``[start, stop)`` (clipped to the object), from the cache when there."""
        buf = bytearray(max(0, min(stop, self._size) - start))
        n = self._copy(start, memoryview(buf))
        return bytes(buf[:n])

    def preload(self, ranges: list[tuple[int, int]]) -> int:
        """Fetch ``[start, stop)`` ranges in one batch of concurrent requests and keep them,
        so that later reads lying inside one are served from memory.

        For metadata whose places are known before libhdf5 asks for them (the nodes of one
        level of a chunk B-tree). Ranges already cached, empty or outside the object are
        skipped. Returns the number of ranges fetched.
        """
        with self._lock:
            if self.closed:
                raise ValueError("I/O operation on a closed BlockFile")
            if self._whole is not None:
                return 0
            todo = sorted(
                {
                    (a, min(b, self._size))
                    for a, b in ranges
                    if 0 <= a < min(b, self._size) and not self._is_cached(a, min(b, self._size))
                }
            )
        if not todo:
            return 0
        datas = self.reader.read_many(todo)
        with self._lock:
            self.fetches += 1
            for (a, _), data in zip(todo, datas, strict=True):
                if a not in self._extents:
                    bisect.insort(self._starts, a)
                self._extents[a] = data
        return len(todo)

    def cached(self, start: int, stop: int) -> bool:
        """Whether reading ``[start, stop)`` needs no request."""
        with self._lock:
            return self._is_cached(start, stop)

    def _is_cached(self, start: int, stop: int) -> bool:
        """:meth:`cached`, with the lock held."""
        if self._whole is not None or stop <= len(self.reader.head):
            return True
        if self._starts and self._extent(start, stop) is not None:
            return True
        bs = self.block_size
        last = (max(stop, start + 1) - 1) // bs
        return all(i in self._blocks for i in range(start // bs, last + 1))

    def drop_preloaded(self) -> None:
        """Forget the extents :meth:`preload` fetched."""
        with self._lock:
            self._starts.clear()
            self._extents.clear()

    def _extent(self, start: int, stop: int) -> bytes | None:
        """The bytes ``[start, stop)`` if they lie inside one preloaded extent."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return None
        a = self._starts[i]
        data = self._extents[a]
        if stop - a > len(data):
            return None
        return data[start - a : stop - a]

    def close(self) -> None:
        """Drop the cache."""
        with self._lock:
            self._blocks.clear()
            self._cached = 0
            self._whole = None
            self._starts.clear()
            self._extents.clear()
        super().close()

    def _copy(self, start: int, view: memoryview) -> int:
        n = max(0, min(view.nbytes, self._size - start))
        if n == 0:
            return 0
        with self._lock:
            if self.closed:
                raise ValueError("I/O operation on a closed BlockFile")
            head = self.reader.head
            if self._whole is not None:
                view[:n] = self._whole[start : start + n]
            elif start + n <= len(head):  # read with the identity at open
                view[:n] = head[start : start + n]
            elif self._starts and (extent := self._extent(start, start + n)) is not None:
                view[:n] = extent
            elif 2 * n >= self.cache_bytes:
                self.fetches += 1
                self.reader.readinto_many([(start, view[:n])])
            else:
                self._copy_blocks(start, view[:n])
        return n

    def _copy_blocks(self, start: int, view: memoryview) -> None:
        bs = self.block_size
        first, last = start // bs, (start + view.nbytes - 1) // bs
        got: dict[int, bytes] = {}
        missing: list[int] = []
        for i in range(first, last + 1):
            block = self._blocks.get(i)
            if block is None:
                missing.append(i)
            else:
                self._blocks.move_to_end(i)
                got[i] = block
        if missing:
            self._fetch(missing, got)
        done = 0
        for i in range(first, last + 1):
            block = got[i]
            a = start + done - i * bs
            k = min(len(block) - a, view.nbytes - done)
            view[done : done + k] = block[a : a + k]
            done += k

    def _fetch(self, missing: list[int], got: dict[int, bytes]) -> None:
        """Fetch the ``missing`` blocks (plus readahead) in one batch, into ``got``."""
        bs = self.block_size
        self._ahead = (
            min(2 * self._ahead, self.max_readahead_blocks) if missing[0] == self._next else 1
        )
        n_blocks = -(-self._size // bs)
        wanted = list(missing)
        # a sequential miss fetches at least `_ahead` blocks (uncached ones, in one run)
        i = missing[-1] + 1
        while i < min(missing[0] + self._ahead, n_blocks) and i not in self._blocks:
            wanted.append(i)
            i += 1
        runs: list[tuple[int, int]] = []  # first and last block of each run
        for i in wanted:
            if runs and runs[-1][1] == i - 1:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        self.fetches += 1
        datas = self.reader.read_many([(a * bs, min((b + 1) * bs, self._size)) for a, b in runs])
        for (a, b), data in zip(runs, datas, strict=True):
            for i in range(a, b + 1):
                block = data[(i - a) * bs : (i - a + 1) * bs]
                got[i] = block
                self._blocks[i] = block
                self._cached += len(block)
        self._next = wanted[-1] + 1
        while self._cached > self.cache_bytes and len(self._blocks) > 1:
            _, old = self._blocks.popitem(last=False)
            self._cached -= len(old)
