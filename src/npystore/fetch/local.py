"""Positional reads: local files and open file objects (part of the fetch layer).

:class:`LocalRanges` reads a file on the local filesystem with ``os.preadv`` straight into
the caller's buffers (or ``os.pread`` into new ``bytes`` when the caller wants bytes);
ranges larger than :data:`LOCAL_PART_SIZE` are split across a small process-wide thread
pool when asked to (the GIL is released while the kernel copies).

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

import errno
import os
import stat
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from npystore.errors import ConsistencyError
from npystore.fetch.fileobj import FileSource
from npystore.fetch.identity import ObjectIdentity, StatPin, stat_changes
from npystore.fetch.transport import Transport, split_requests

__all__ = ["LOCAL_PART_SIZE", "FileRanges", "LocalRanges", "open_local"]

#: Local ranges larger than this are split across the thread pool (when asked to).
LOCAL_PART_SIZE: Final = 16 * 2**20
_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)

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


def open_local(path: str, name: str, head: int) -> tuple[ObjectIdentity, bytes]:
    """A local file's identity and, with ``head``, its first ``head`` bytes (fewer for a
    smaller file), read from the descriptor the identity is taken from (``fstat`` again
    after the read: the bytes are what the file holds at that identity); without, the
    identity from ``os.stat`` and no bytes.

    Raises
    ------
    FileNotFoundError, PermissionError
        As ``os.open`` or ``os.stat`` raise them (naming the path).
    IsADirectoryError
        ``path`` is a directory.
    ConsistencyError
        The file changed while its first bytes were read.
    """
    if head <= 0:
        st = os.stat(path)
        _refuse_folder(st, name)
        return ObjectIdentity.from_stat(name, st), b""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        _refuse_folder(st, name)
        want = min(head, st.st_size)
        first = os.pread(fd, want, 0) if want else b""
        after = os.fstat(fd)
    finally:
        os.close(fd)
    identity = ObjectIdentity.from_stat(name, st)
    changed = stat_changes(identity.fields, identity.size, after)
    if changed is not None or len(first) != want:
        raise ConsistencyError(
            f"{name}: the file changed while it was being opened "
            f"({changed or f'{len(first)} of its first {want} bytes read'}); open it again"
        )
    return identity, first


def _refuse_folder(st: os.stat_result, name: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory, expected a file", name)


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
        fd = self._open_checked()
        try:
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

    def read(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Each ``[start, stop)`` range's bytes, read with ``os.pread`` into new ``bytes``
        (no zero-filled buffer, no copy) between the two identity checks."""
        fd = self._open_checked()
        try:
            got = [self._pread_bytes(fd, start, stop - start) for start, stop in ranges]
            self._check_identity(fd, " while it was being read")
            return got
        finally:
            os.close(fd)

    def _open_checked(self) -> int:
        """The file opened for one batch of reads, its identity checked; the caller checks
        it again after the reads (not after a batch that failed) and closes it. (Plain
        try/finally: a generator context manager cost more than the syscalls of a small
        read.)"""
        fd = os.open(self.path, _OPEN_FLAGS)
        try:
            self._check_identity(fd, "")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def is_current(self) -> bool:
        """Whether the file at the path is still the one opened (one ``stat``)."""
        try:
            return self._pin.changes(os.stat(self.path)) is None
        except FileNotFoundError:
            return False

    def _check_identity(self, fd: int, when: str) -> None:
        changed = self._pin.changes(os.fstat(fd))
        if changed is not None:
            raise ConsistencyError(
                f"{self.url}: the file changed since it was opened{when} ({changed}); "
                f"reopen it to read its new content"
            )

    def _pread_bytes(self, fd: int, start: int, size: int) -> bytes:
        data = os.pread(fd, size, start)
        if len(data) == size:
            return data
        pieces = [data]
        done = len(data)
        while done < size:  # a short read (rare): the rest, until the end of the file
            more = os.pread(fd, size - done, start + done)
            if not more:
                raise self._ended(start, done, size)
            pieces.append(more)
            done += len(more)
        return b"".join(pieces)

    def _pread_full(self, fd: int, start: int, view: memoryview) -> None:
        done = 0
        total = view.nbytes
        while done < total:
            n = os.preadv(fd, [view[done:]], start + done)
            if n <= 0:
                raise self._ended(start, done, total)
            done += n

    def _ended(self, start: int, done: int, size: int) -> ConsistencyError:
        return ConsistencyError(
            f"{self.url}: file ended at byte {start + done} while reading "
            f"[{start}, {start + size}); it is shorter than when it was opened"
        )


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
