"""How a reader's bytes travel: the backend interface, and what the remote backends share.

A :class:`~npystore.fetch.RangeReader` serves what it can from memory (the bytes read at
open) and hands every other range to one :class:`Transport`, chosen once when the reader is
made (see :func:`npystore.fetch.reader.transport_for`):

- :class:`~npystore.fetch.local.LocalRanges`, :class:`~npystore.fetch.local.FileRanges`:
  positional reads of a local file or of an open file object;
- :class:`~npystore.fetch.s3.S3Ranges`, :class:`~npystore.fetch.http.HttpRanges`: ranged
  GETs pinned to the identity (:class:`PinnedRanges`), streamed into the caller's buffers;
- :class:`~npystore.fetch.generic.CatFileRanges`,
  :class:`~npystore.fetch.generic.CatRangesRounds`: every other fsspec filesystem.

This module holds the interface (:class:`Transport`: blocking reads, and reads started in
the background, :meth:`Transport.start`), the splitting of large remote ranges into parts
(:data:`REMOTE_PART_SIZE`), the concurrent reads of the async filesystems on fsspec's event
loop, each range retried within the reader's time budget (:class:`AsyncRanges`, over
:func:`npystore.fetch.remote.read_ranges`), and the checks every S3 or http answer passes
before its body is read (:class:`PinnedRanges`).
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar, Final

from npystore.errors import ConsistencyError
from npystore.fetch.identity import ObjectIdentity

if TYPE_CHECKING:
    # the remote classes' machinery, imported when one is used (a local reader needs none)

    from npystore.fetch import remote

__all__ = [
    "REMOTE_PART_SIZE",
    "START_WORKERS",
    "AsyncRanges",
    "PinnedRanges",
    "RemoteTransport",
    "Transport",
    "split_requests",
]

#: Remote ranges larger than this are split into parts fetched concurrently.
REMOTE_PART_SIZE: Final = 8 * 2**20
#: Threads that run the reads :meth:`Transport.start` hands to a thread (every backend but
#: the async ones), shared by the whole process.
START_WORKERS: Final = 32

_start_lock = threading.Lock()
_start_pool: ThreadPoolExecutor | None = None
_start_pid: int | None = None


def _starter() -> ThreadPoolExecutor:
    """The process-wide pool of :meth:`Transport.start` (recreated after a fork)."""
    global _start_pool, _start_pid  # noqa: PLW0603
    with _start_lock:
        if _start_pool is None or _start_pid != os.getpid():
            _start_pool = ThreadPoolExecutor(
                max_workers=START_WORKERS, thread_name_prefix="npystore-fetch"
            )
            _start_pid = os.getpid()
        return _start_pool


class Transport(abc.ABC):
    """Reads of one object's byte ranges over one kind of storage (a backend).

    Parameters
    ----------
    identity : ObjectIdentity
        The object's identity at open: reads that find another object fail.
    """

    def __init__(self, identity: ObjectIdentity):
        self.identity = identity

    @property
    def url(self) -> str:
        """The object's URL, for messages."""
        return self.identity.url

    def read(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Each ``[start, stop)`` range's bytes (ranges checked by the reader)."""
        bufs = [bytearray(stop - start) for start, stop in ranges]
        self.readinto([(s, memoryview(b)) for (s, _), b in zip(ranges, bufs, strict=True)])
        return [bytes(b) for b in bufs]

    @abc.abstractmethod
    def readinto(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> None:
        """Fill each view with the object's bytes from its offset (``parallel``: split
        large local reads across threads)."""

    def start(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> Future[None]:
        """:meth:`readinto` started in the background: returns at once, with a future done
        when every view is filled (or the read failed). Here a thread of a process-wide pool
        runs it (a queued read may still be cancelled); the async backends put the read on
        their event loop instead."""
        return _starter().submit(self.readinto, requests, parallel=parallel)


class RemoteTransport(Transport):
    """A backend over an fsspec filesystem other than the local one: large ranges are split
    into parts of at most :data:`REMOTE_PART_SIZE`, each range retried within ``budget``.

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem
        The filesystem holding the object.
    path : str
        The object's path on ``fs``.
    identity : ObjectIdentity
        The object's identity at open.
    budget : float
        Seconds one range may take, all its attempts and waits included.
    """

    def __init__(self, fs: Any, path: str, identity: ObjectIdentity, budget: float):
        super().__init__(identity)
        self.fs = fs
        self.path = path
        self.budget = budget

    @abc.abstractmethod
    def read(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Each ``[start, stop)`` range's bytes: what a remote backend implements (its
        :meth:`readinto` copies from it)."""

    def readinto(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> None:
        split = split_requests(requests, REMOTE_PART_SIZE)
        self._fill([(s, s + v.nbytes) for s, v in split], [v for _, v in split])

    def _fill(self, ranges: list[tuple[int, int]], views: list[memoryview]) -> None:
        """Write each range's bytes into its view: read, then copied (S3 and http stream)."""
        for view, data in zip(views, self.read(ranges), strict=True):
            view[:] = data


class AsyncRanges(RemoteTransport):
    """An async filesystem's ranges, all in flight at once on fsspec's event loop, each
    retried on its own within the budget (:func:`npystore.fetch.remote.read_ranges`), as many
    at a time as the connection pool has slots. A backend supplies :meth:`get_one` (one
    attempt at one range) and :meth:`slots`.

    :meth:`start` puts the read on the loop and returns: the ranges of many reads started
    one after the other go out together, with no thread per read (a thread that must win
    the GIL from busy decoding threads before its requests go out would delay them)."""

    def read(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        got = self._sync(self._gather, list(ranges), None)
        return [bytes(data) for data in got]  # already bytes: no copy

    def readinto(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> None:
        self._sync(self._fill_parts, requests)

    def start(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> Future[None]:
        """:meth:`readinto` on the event loop; the future is done when the read is (it is
        running from the start: ``cancel()`` does not stop it, waiting for it does)."""
        import asyncio  # noqa: PLC0415 - see the imports above

        done: Future[None] = Future()
        done.set_running_or_notify_cancel()
        coro = self._fill_parts(requests)
        try:
            running = asyncio.run_coroutine_threadsafe(coro, self.fs.loop)
        except BaseException:
            coro.close()  # never scheduled (a closed loop)
            raise

        def finished(f: Future[None]) -> None:
            problem = asyncio.CancelledError() if f.cancelled() else f.exception()
            if problem is None:
                done.set_result(None)
            else:
                done.set_exception(problem)

        running.add_done_callback(finished)
        return done

    @abc.abstractmethod
    def get_one(self, into: list[memoryview] | None) -> remote.GetOne:
        """One attempt at range ``k``: its bytes, or (with ``into``) written into ``into[k]``."""

    @abc.abstractmethod
    async def slots(self) -> remote.Limiter | None:
        """The limit of requests in flight of this backend's connection pool (at most its
        size, adapting to the server): a range's budget runs only while it holds a permit
        (see :func:`npystore.fetch.remote.slots`)."""

    def _sync(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """``await func(*args)`` on fsspec's event loop; its result."""
        from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

        return sync(self.fs.loop, func, *args)

    async def _fill_parts(self, requests: Sequence[tuple[int, memoryview]]) -> None:
        """Fill each view, ranges larger than :data:`REMOTE_PART_SIZE` cut into parts."""
        split = split_requests(requests, REMOTE_PART_SIZE)
        await self._fill_async([(s, s + v.nbytes) for s, v in split], [v for _, v in split])

    async def _fill_async(self, ranges: list[tuple[int, int]], views: list[memoryview]) -> None:
        """Write each range's bytes into its view: read, then copied (S3 and http stream)."""
        for view, data in zip(views, await self._gather(ranges, None), strict=True):
            view[:] = data

    async def _gather(
        self, ranges: list[tuple[int, int]], into: list[memoryview] | None
    ) -> list[bytes | memoryview]:
        """Each range's bytes (or, with ``into``, each written into its view), retried per
        range within :attr:`budget`."""
        from npystore.fetch import remote  # noqa: PLC0415 - see the imports above

        if not ranges:
            return []
        sem = await self.slots()
        return await remote.read_ranges(
            ranges, self.get_one(into), url=self.url, budget=self.budget, sem=sem
        )


class PinnedRanges(AsyncRanges):
    """Ranged GETs pinned to the object opened (S3, http): bodies stream straight into the
    caller's views, and every answer must come from the identity (:meth:`check_answer`)."""

    #: Whether ETags compare exactly (http) or without their quotes (S3).
    strict_etag: ClassVar[bool] = False
    #: What the store calls the version every answer is compared with (GCS: generation).
    version_name: ClassVar[str] = "version"
    #: Whether an answer without a version is refused (GCS: reads are pinned by it).
    version_required: ClassVar[bool] = False

    def __init__(
        self,
        fs: Any,
        path: str,
        identity: ObjectIdentity,
        budget: float,
        want_etag: str | None,
    ):
        super().__init__(fs, path, identity, budget)
        fields = dict(identity.fields)
        #: What every response must carry: the ETag and version id at open.
        self._want_etag = want_etag
        self._want_version = (fields.get("VersionId") or fields.get("version_id")) or None

    async def _fill_async(self, ranges: list[tuple[int, int]], views: list[memoryview]) -> None:
        await self._gather(ranges, views)

    def changed(self, pin: Mapping[str, str], start: int, stop: int) -> ConsistencyError:
        """The error for an answer refused by the pin (412): the object was replaced."""
        return ConsistencyError(
            f"{self.url}: the object changed since it was opened "
            f"({', '.join(f'{k} {v}' for k, v in pin.items())} no longer matches bytes "
            f"[{start}, {stop})); reopen it"
        )

    def check_answer(
        self,
        start: int,
        stop: int,
        etag: str | None,
        version: str | None,
        content_range: str,
    ) -> None:
        """A response (S3, http) must come from the object opened: the same ETag (S3 always
        sends one, and so must an http server that sent a strong one at open), the same
        version id when both have one, and a ``Content-Range`` total equal to the size at
        open. Checked before the body is read, whatever the server did with the pin. (The
        answer has begun: noted for the pool's limiter, see
        :func:`~npystore.fetch.remote.first_byte`.)"""
        from npystore.fetch import remote  # noqa: PLC0415 - see the imports above

        remote.first_byte()
        want = self._want_etag
        if want is not None and not _same_etag(want, etag, strict=self.strict_etag):
            got = f"ETag {etag}" if etag else "no ETag"
            raise ConsistencyError(
                f"{self.url}: the answer for bytes [{start}, {stop}) came with {got}, but the "
                f"object was opened with ETag {want}: it changed since it was opened (and "
                f"the server ignored the pin); reopen it"
            )
        want_version, kind = self._want_version, self.version_name
        if want_version and not version and self.version_required:
            raise ConsistencyError(
                f"{self.url}: the answer for bytes [{start}, {stop}) carries no {kind}, but "
                f"{kind} {want_version} was opened: it cannot be told from another object; "
                f"reopen it"
            )
        if want_version and version and version != want_version:
            raise ConsistencyError(
                f"{self.url}: the answer for bytes [{start}, {stop}) came from {kind} "
                f"{version}, but {kind} {want_version} was opened (the server ignored the "
                f"pin); reopen it"
            )
        from npystore.fetch.opening import CONTENT_RANGE  # noqa: PLC0415

        match = CONTENT_RANGE.fullmatch(content_range)
        if match and match.group(3) != "*" and int(match.group(3)) != self.identity.size:
            raise ConsistencyError(
                f"{self.url}: the object is {match.group(3)} bytes now, {self.identity.size} "
                f"when it was opened; reopen it"
            )


def _same_etag(want: str, got: str | None, *, strict: bool) -> bool:
    """Whether a response's ETag is the one opened. S3 ETags are compared without their
    quotes (listings and some S3-compatible servers differ in quoting); http ones exactly."""
    if got is None:
        return False
    return got == want if strict else got.strip('"') == want.strip('"')


def split_requests(
    requests: Sequence[tuple[int, memoryview]], part: int
) -> list[tuple[int, memoryview]]:
    """The requests with every view larger than ``part`` bytes cut into parts."""
    out: list[tuple[int, memoryview]] = []
    for start, view in requests:
        n = view.nbytes
        if n <= part:
            out.append((start, view))
            continue
        for o in range(0, n, part):
            out.append((start + o, view[o : o + part]))
    return out
