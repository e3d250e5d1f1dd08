"""Range reads on every other fsspec filesystem (part of the fetch layer).

- :class:`CatFileRanges`: an async filesystem (gcs, azure, ...) whose ``_cat_ranges`` is
  fsspec's own: one ``_cat_file`` per range, all concurrently on fsspec's event loop, each
  retried on its own within the reader's budget, like S3's and http's ranges;
- :class:`CatRangesRounds`: everything else, through ``fs.cat_ranges`` in rounds: the ranges
  that failed or came back short are asked again after a backoff, up to
  :data:`~npystore.fetch.remote.REMOTE_ATTEMPTS` rounds or the budget (checked between
  rounds: a synchronous call cannot be cut).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import fsspec

from npystore.errors import ConsistencyError
from npystore.fetch import remote
from npystore.fetch.remote import REMOTE_ATTEMPTS
from npystore.fetch.transport import AsyncRanges, RemoteTransport

__all__ = ["CatFileRanges", "CatRangesRounds", "default_cat_ranges"]


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
            got = self.fs.cat_ranges(
                [self.path] * len(todo),
                [ranges[i][0] for i in todo],
                [ranges[i][1] for i in todo],
                on_error="return",
            )
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
