"""Range reads on every other fsspec filesystem (part of the fetch layer).

- :class:`CatFileRanges`: an async filesystem (other than S3, GCS, Azure and http) whose
  ``_cat_ranges`` is
  fsspec's own: one ``_cat_file`` per range, all concurrently on fsspec's event loop, each
  retried on its own within the reader's budget, like S3's and http's ranges;
- :class:`CatRangesRounds`: everything else, through ``fs.cat_ranges`` in rounds: the ranges
  that failed or came back short are asked again after a backoff, up to
  :data:`~npystore.fetch.remote.REMOTE_ATTEMPTS` rounds or the budget (checked between
  rounds: a synchronous call cannot be cut);
- :class:`BlockCacheRanges`: fsspec's block cache (``blockcache::``), whose ``cat_ranges``
  opens, reads and closes the file for every range (a metadata request and a write of the
  cache's index each time): read through one open file object per reader instead, in the
  same retried rounds. Its file fetches only the blocks a read touches, blocks of the
  target filesystem's block size (s3fs: 50 MiB unless ``default_block_size`` says less; a
  warning says so when a block is that large): npystore never picks another size, since
  the cache's index records block numbers, not offsets, and another size would read other
  bytes for them.
"""

from __future__ import annotations

import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, Final

import fsspec

from npystore.errors import ConsistencyError
from npystore.fetch import remote
from npystore.fetch.remote import REMOTE_ATTEMPTS
from npystore.fetch.transport import AsyncRanges, RemoteTransport

__all__ = [
    "LARGE_CACHE_BLOCK",
    "BlockCacheRanges",
    "CatFileRanges",
    "CatRangesRounds",
    "default_cat_ranges",
    "is_block_cache",
]

#: A block of the block cache at least this large gets a warning (every read moves one).
LARGE_CACHE_BLOCK: Final = 16 * 2**20


def default_cat_ranges(fs: Any) -> bool:
    """Whether an async filesystem's ``_cat_ranges`` is fsspec's (one ``_cat_file`` per
    range, gathered): then reading the ranges one by one changes nothing but the budget."""
    from fsspec.asyn import AsyncFileSystem  # noqa: PLC0415

    cls = type(fs)
    return (
        getattr(cls, "_cat_ranges", None) is AsyncFileSystem._cat_ranges
        and getattr(cls, "cat_ranges", None) is fsspec.AbstractFileSystem.cat_ranges
        and getattr(cls, "_cat_file", None) is not AsyncFileSystem._cat_file
    )


class CatFileRanges(AsyncRanges):
    """An async filesystem's ranges, one ``_cat_file`` each, concurrently under the budget."""

    def get_one(self, into: list[memoryview] | None) -> remote.GetOne:
        fs: Any = self.fs

        async def one(k: int, start: int, stop: int) -> bytes:
            data: bytes = await fs._cat_file(self.path, start=start, end=stop)
            return data

        return one

    async def slots(self) -> remote.Limiter | None:
        from fsspec.asyn import _get_batch_size  # noqa: PLC0415 - what fsspec's gather uses

        fs: Any = self.fs
        most = getattr(fs, "batch_size", None) or _get_batch_size(nofiles=True)
        advice = "ask for fewer at once with storage_options={{'batch_size': {n}}}"
        return remote.slots(fs, most, advice)


class CatRangesRounds(RemoteTransport):
    """A synchronous filesystem's ranges, through ``fs.cat_ranges`` in retried rounds."""

    def read(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """``fs.cat_ranges`` in rounds: the ranges that failed are asked again after a backoff,
        until :data:`REMOTE_ATTEMPTS` rounds or :attr:`budget` (checked between rounds: a
        synchronous call cannot be cut) are used up."""
        if not ranges:
            return []
        results: list[bytes | None] = [None] * len(ranges)
        todo = list(range(len(ranges)))
        began = time.monotonic()
        for attempt in range(REMOTE_ATTEMPTS):
            got = self.round([ranges[i] for i in todo])
            retry = []
            problem: BaseException | str | None = None
            for i, data in zip(todo, got, strict=True):
                want = ranges[i][1] - ranges[i][0]
                if isinstance(data, FileNotFoundError):
                    raise ConsistencyError(
                        f"{self.url}: the object disappeared since it was opened ({data})"
                    )
                if isinstance(data, BaseException):
                    if remote.is_fatal(data):
                        raise data
                    problem = data
                    retry.append(i)
                elif len(data) != want:
                    problem = f"got {len(data)} bytes, expected {want}"
                    retry.append(i)
                else:
                    results[i] = bytes(data)
            if not retry:
                break
            todo = retry
            delay = remote.backoff_delay(attempt)
            spent = time.monotonic() - began
            out = spent + delay >= self.budget
            if attempt == REMOTE_ATTEMPTS - 1 or out:
                start, stop = ranges[retry[0]]
                raise remote.failure(
                    self.url, f"bytes [{start}, {stop})", attempt + 1, self.budget, problem, out=out
                )
            time.sleep(delay)
        return [r if r is not None else b"" for r in results]

    def round(self, ranges: list[tuple[int, int]]) -> list[bytes | BaseException]:
        """One try at every range: its bytes, or the exception that stopped it."""
        got: list[bytes | BaseException] = self.fs.cat_ranges(
            [self.path] * len(ranges),
            [start for start, _ in ranges],
            [stop for _, stop in ranges],
            on_error="return",
        )
        return got


def is_block_cache(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's block cache (``blockcache::``/``cached::``), not one of the
    whole-file caches that subclass it."""
    cls = type(fs)
    return cls.__module__ == "fsspec.implementations.cached" and cls.__name__ == "CachingFileSystem"


class BlockCacheRanges(CatRangesRounds):
    """Ranges of an object behind fsspec's block cache, read through one file object (see
    the module doc); reads of one reader take turns on it."""

    def __init__(self, fs: Any, path: str, identity: Any, budget: float):
        super().__init__(fs, path, identity, budget)
        self._lock = threading.Lock()
        self._file: Any = None

    def _opened(self) -> Any:
        if self._file is None or getattr(self._file, "closed", False):
            f = self.fs.open(self.path, "rb")
            self._file = f
            weakref.finalize(self, _close, f)  # the cache's index is saved when it closes
            block = getattr(f, "blocksize", 0) or 0
            if block >= LARGE_CACHE_BLOCK and self.identity.size > 0:
                warnings.warn(
                    f"{self.url}: the block cache moves whole blocks of {block >> 20} MiB (the "
                    f"target filesystem's block size), so a small read moves "
                    f"{min(block, self.identity.size) >> 20} MiB; for smaller blocks set the "
                    f"target's block size, e.g. storage_options={{'s3': {{..., "
                    f"'default_block_size': 4 * 2**20}}}}, on a new cache_storage (a cache "
                    f"holds blocks of one size)",
                    UserWarning,
                    stacklevel=2,
                )
        return self._file

    def round(self, ranges: list[tuple[int, int]]) -> list[bytes | BaseException]:
        out: list[bytes | BaseException] = []
        with self._lock:
            for start, stop in ranges:
                try:
                    f = self._opened()
                    f.seek(start)
                    out.append(f.read(stop - start))
                except Exception as exc:  # returned: read() judges it (fatal or retried)
                    out.append(exc)
                    self._file = None  # opened again for the next try
        return out


def _close(f: Any) -> None:
    """Close a cached file (its blocks are recorded in the cache's index)."""
    try:
        f.close()
    except (OSError, ValueError, NameError):  # the interpreter may be going away
        return
