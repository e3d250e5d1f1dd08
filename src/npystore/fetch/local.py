"""Positional reads: local files and open file objects (part of the fetch layer).

:class:`LocalRanges` reads a file on the local filesystem with ``os.preadv`` straight into
the caller's buffers; ranges larger than :data:`LOCAL_PART_SIZE` are split across a small
process-wide thread pool when asked to (the GIL is released while the kernel copies).

Each batch of reads opens the file once and checks its descriptor with ``fstat`` before
and after the reads: device, inode, size, ``mtime_ns`` and ``ctime_ns`` must be the
identity's at open both times (see :mod:`npystore.fetch.identity`). A file replaced since
the open (a rename over it: another inode) fails the first check; one written in place
fails the first check, or the second when the write overlapped the reads: either way
:class:`~npystore.errors.ConsistencyError`, never bytes of two versions. Two ``fstat``
calls per batch, none per range.

:class:`FileRanges` reads an open binary file object (see :mod:`npystore.fetch.fileobj`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from npystore.errors import ConsistencyError
from npystore.fetch.fileobj import FileSource
from npystore.fetch.identity import ObjectIdentity, StatPin
from npystore.fetch.transport import Transport, split_requests

__all__ = ["LOCAL_PART_SIZE", "FileRanges", "LocalRanges"]

#: Local ranges larger than this are split across the thread pool (when asked to).
LOCAL_PART_SIZE: Final = 16 * 2**20

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


def _thread_pool() -> ThreadPoolExecutor:
    """A process-wide pool for parallel local reads (recreated after a fork)."""
    global _pool, _pool_pid  # noqa: PLW0603
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            workers = max(2, min(8, 2 * (os.cpu_count() or 1)))
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="npystore-read")
            _pool_pid = os.getpid()
        return _pool


class LocalRanges(Transport):
    """A local file's ranges, read with ``os.preadv`` between two checks of its identity.

    Parameters
    ----------
    path : str
        The file's local path.
    identity : ObjectIdentity
        The file's identity at open (:meth:`~npystore.fetch.ObjectIdentity.from_stat`).
    """

    def __init__(self, path: str, identity: ObjectIdentity):
        super().__init__(identity)
        self.path = path
        self._pin = StatPin(identity.fields, identity.size)

    def readinto(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> None:
        if parallel:
            requests = split_requests(requests, LOCAL_PART_SIZE)
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self._check_identity(fd, "")
            if parallel and len(requests) > 1:
                pool = _thread_pool()
                futures: list[Future[None]] = [
                    pool.submit(self._pread_full, fd, start, view) for start, view in requests
                ]
                for future in futures:
                    future.result()
            else:
                for start, view in requests:
                    self._pread_full(fd, start, view)
            self._check_identity(fd, " while it was being read")
        finally:
            os.close(fd)

    def _check_identity(self, fd: int, when: str) -> None:
        changed = self._pin.changes(os.fstat(fd))
        if changed is not None:
            raise ConsistencyError(
                f"{self.url}: the file changed since it was opened{when} ({changed}); "
                f"reopen it to read its new content"
            )

    def _pread_full(self, fd: int, start: int, view: memoryview) -> None:
        done = 0
        total = view.nbytes
        while done < total:
            n = os.preadv(fd, [view[done:]], start + done)
            if n <= 0:
                raise ConsistencyError(
                    f"{self.url}: file ended at byte {start + done} while reading "
                    f"[{start}, {start + total}); it is shorter than when it was opened"
                )
            done += n


class FileRanges(Transport):
    """An open file object's ranges, read by its :class:`~npystore.fetch.fileobj.FileSource`.

    Parameters
    ----------
    source : FileSource
        The file object, with its size and position at open.
    identity : ObjectIdentity
        The identity made from ``source``.
    """

    def __init__(self, source: FileSource, identity: ObjectIdentity):
        super().__init__(identity)
        self.source = source

    def readinto(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> None:
        if parallel:
            requests = split_requests(requests, LOCAL_PART_SIZE)
        self.source.readinto_many(requests)
