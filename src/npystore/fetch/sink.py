"""Sinks: one object being written by parts, made visible at its URL only by ``commit``.

A writer asks :func:`open_sink` for a sink, writes numbered parts at their byte offsets
(concurrently, from threads or from dask workers: sinks pickle), then commits; any failure
aborts, and nothing appears at the URL.

- local files (:class:`LocalSink`): a temporary file in the destination's directory (so the
  final rename stays on one filesystem), preallocated when the size is known, parts written
  with ``os.pwrite`` at their offsets; ``commit`` gives it the mode, owner and extended
  attributes of the file it replaces (a new file gets ``0o666 & ~umask``, as
  ``numpy.save``'s ``open``), then ``os.replace``\\ s it into place; with ``durable=True``
  the file is ``fsync``\\ ed before the rename and the directory after it. ``abort`` removes
  it: an existing destination keeps its previous content. The destination path is never
  normalised as text: the kernel resolves ``..`` and symlinks in the directory part, as it
  does for ``open``; a destination that is a symlink is followed (the link stays and its
  target gets the new content). Temporary files (:mod:`npystore.fetch.tempfiles`) have
  short names, are removed by a SIGTERM during a save, and are swept by a later save into
  the same directory when a killed process left them.
- an open file object, or a local file that is not a regular file (a FIFO, a device)
  (:class:`StreamSink`): parts are written in order, as they come, with ``write``; nothing
  can be undone (as with ``numpy.save``).
- S3 (:class:`S3Sink`): a multipart upload (``CreateMultipartUpload``); each part is one
  ``UploadPart`` (at least :data:`S3_MIN_PART` bytes except the last, at most
  :data:`S3_MAX_PARTS` parts); ``commit`` is ``CompleteMultipartUpload``; ``abort`` is
  ``AbortMultipartUpload``, so no pending upload (nor its storage) is left behind. Each
  request is retried by npystore alone (botocore's retries are off for it), up to
  :data:`~npystore.fetch.remote.REMOTE_ATTEMPTS` attempts with the reads' backoff, on a
  dropped connection or a server error (an unreachable endpoint fails in about 2 s, as a
  read does); every failure is a :class:`~npystore.errors.FetchError` naming the URL and the
  step. Every attempt has a deadline (:func:`s3_deadline`: :data:`S3_STALL` seconds plus
  one per :data:`S3_SLOWEST` bytes of body): a server or proxy that stops answering makes the
  write fail (and abort) instead of hanging.
- every other fsspec filesystem (:class:`SpoolSink`): parts are spooled into a local
  temporary file (as :class:`LocalSink` does), and ``commit`` uploads it with one
  ``put_file`` to a temporary name beside the destination and moves it into place
  (``fs.mv``). The spool is local to the machine that opened the sink: with dask workers on
  other machines, write to S3 or to a shared local path instead.

URLs naming a folder (ending in ``/``) and chained URLs (``simplecache::s3://...``) are
refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import stat
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fsspec.asyn import sync
from fsspec.implementations.local import LocalFileSystem

from npystore.errors import FetchError, UnsupportedError
from npystore.fetch import opening, remote
from npystore.fetch.remote import BUDGET_OPTION, REMOTE_ATTEMPTS
from npystore.fetch.s3 import is_s3
from npystore.fetch.tempfiles import Spool, sweep, temporary_name, untrack

__all__ = [
    "S3_MAX_PARTS",
    "S3_MIN_PART",
    "S3_SLOWEST",
    "S3_STALL",
    "LocalSink",
    "Receipt",
    "S3Sink",
    "Sink",
    "SpoolSink",
    "StreamSink",
    "is_local_path",
    "open_sink",
    "s3_deadline",
]

log = logging.getLogger(__name__)

#: S3's smallest part (every part but the last) and most parts of one multipart upload.
S3_MIN_PART: Final = 5 * 2**20
S3_MAX_PARTS: Final = 10_000
#: Seconds any S3 request of a write may take beyond its body's transfer (below) before the
#: write fails: a stalled server or proxy must not hang ``save`` forever (botocore's read
#: timeout does not cover a request whose body is never sent, e.g. an unanswered
#: ``Expect: 100-continue``).
S3_STALL: Final = 120.0
#: Slowest upload a deadline allows for, bytes per second (a 16 MiB part: 64 s more).
S3_SLOWEST: Final = 256 * 2**10
#: S3 error codes retried like a dropped connection (with 5xx and 429 answers).
_S3_RETRYABLE: Final = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "503", "500"}
)


def s3_deadline(nbytes: int) -> float:
    """Seconds an S3 request of a write carrying ``nbytes`` of body may take."""
    return S3_STALL + nbytes / S3_SLOWEST


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a written part returns: its number and, for S3, its ETag (small: under
    dask.distributed only receipts travel back to the client)."""

    number: int
    size: int
    etag: str | None = None


class Sink(ABC):
    """An object being written by numbered parts at byte offsets.

    Attributes
    ----------
    url : str
        The destination, for messages.
    min_part : int
        Smallest size of every part but the last (0: any).
    max_parts : int
        Most parts.
    concurrency : int
        Parts worth writing at once (uploads in flight).
    ordered : bool
        Whether parts are written in ascending order, at most :attr:`concurrency` ahead of
        the lowest one not yet written (S3: some servers take parts only in order).
    sequential : bool
        Parts must be written in order, one after the other (a file object).
    """

    url: str
    min_part: int = 0
    max_parts: int = 2**31
    concurrency: int = os.cpu_count() or 1
    ordered: bool = False
    sequential: bool = False

    @abstractmethod
    def write(self, number: int, offset: int, data: Any) -> Receipt:
        """Write part ``number`` (1-based), the bytes ``data`` at ``offset``."""

    @abstractmethod
    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        """Make the ``size`` bytes written visible at the URL, atomically."""

    @abstractmethod
    def abort(self) -> None:
        """Drop everything written; the URL is left as it was. Never raises."""


def _copy_metadata(fd: int, target: str) -> None:
    """Give the file ``fd`` the extended attributes, owner, group and mode of ``target``
    (what ``numpy.save``'s in-place write keeps), as far as this process may: attributes
    and an owner it cannot set are left out. setuid and setgid are dropped, as a write by a
    non-root process drops them."""
    try:
        st = os.stat(target)
    except OSError:
        return  # a new file: the mode it was created with (0o666 & ~umask)
    if hasattr(os, "listxattr"):
        try:
            names = os.listxattr(target)
        except OSError:
            names = []
        for name in names:
            try:
                os.setxattr(fd, name, os.getxattr(target, name))
            except OSError as exc:  # security.*, trusted.*: not ours to set
                log.debug("%s: extended attribute %s not kept: %s", target, name, exc)
    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except PermissionError:
            with contextlib.suppress(PermissionError):
                os.fchown(fd, -1, st.st_gid)  # a group this user belongs to
    os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))


def _fsync_directory(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:  # some filesystems cannot open directories
        log.debug("directory %s not synced: %s", directory, exc)
        return
    try:
        os.fsync(dfd)
    except OSError as exc:
        log.debug("directory %s not synced: %s", directory, exc)
    finally:
        os.close(dfd)


def _target(path: str, url: str) -> tuple[str, os.stat_result | None]:
    """The file a write to ``path`` replaces (a symlink's target, followed as ``open``
    follows it) and its ``stat`` (None when it does not exist yet).

    Raises
    ------
    IsADirectoryError, PermissionError, OSError
        As ``numpy.save``'s ``open(path, "wb")`` would: a directory, a file this process
        may not write, a symlink loop.
    """
    target = path
    if os.path.islink(path):
        # every component exists (lstat found the link): realpath resolves them in order,
        # each symlink before a following '..', as the kernel does
        target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        if os.path.islink(target):  # still a link: a loop, or a link realpath gave up on
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), url) from None
        return target, None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), url)
    if not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), url)
    return target, st


class LocalSink(Sink):
    """A local file: a preallocated temporary file in its directory, renamed into place.

    Parameters
    ----------
    path : str
        The destination, as given (relative paths, ``..`` and symlinks are resolved by the
        kernel, never as text).
    size : int, optional
        The final size when known (the temporary file is preallocated).
    durable : bool
        ``fsync`` the file before the rename and the directory after it.
    url : str, optional
        The destination as the caller named it, for messages (default: ``path``).
    """

    def __init__(
        self, path: str, size: int | None = None, *, durable: bool = False, url: str | None = None
    ) -> None:
        self.url = url or path
        self.durable = durable
        self.path, st = _target(path, self.url)
        self.directory = os.path.dirname(self.path) or "."
        # the temporary file is never readable by more than the file it replaces
        mode = 0o666 if st is None else stat.S_IMODE(st.st_mode) & 0o777
        sweep(self.directory)
        try:
            self.spool = Spool(self.directory, size, mode)
        except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            # as numpy's open(path, "wb") says it: naming the destination
            raise type(exc)(exc.errno, exc.strerror, self.url) from exc

    def write(self, number: int, offset: int, data: Any) -> Receipt:
        self.spool.write(offset, data)
        return Receipt(number, memoryview(data).nbytes)

    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        fd = self.spool.fd()
        os.ftruncate(fd, size)
        _copy_metadata(fd, self.path)
        if self.durable:
            os.fsync(fd)
        self.spool.close()
        os.replace(self.spool.tmp, self.path)
        untrack(self.spool.tmp)
        if self.durable:
            _fsync_directory(self.directory)

    def abort(self) -> None:
        self.spool.remove()


def _write_all(file: Any, data: Any) -> None:
    """``file.write`` until all of ``data`` is written (a raw stream may take part of it);
    a ``write`` that returns no count took everything, as numpy assumes."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        n = file.write(view)
        if not isinstance(n, int) or n >= view.nbytes:
            return
        if n <= 0:
            raise OSError(errno.EIO, f"write took {n} of {view.nbytes} bytes")
        view = view[n:]


class StreamSink(Sink):
    """An open binary file object (or a special file opened for it): parts written in order
    with ``write`` from its current position, as ``numpy.save`` writes; not atomic.

    Parameters
    ----------
    file : file object
        Open for writing in binary mode.
    url : str
        Its name for messages.
    owned : bool
        The sink opened ``file`` and closes it.
    """

    sequential = True
    concurrency = 1

    def __init__(self, file: Any, url: str, *, owned: bool = False) -> None:
        self.file = file
        self.url = url
        self.owned = owned
        self._at = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(f"{self.url}: a file object cannot be written from other processes")

    def write(self, number: int, offset: int, data: Any) -> Receipt:
        with self._lock:
            if offset != self._at:
                raise ValueError(
                    f"{self.url}: part {number} at offset {offset}, expected {self._at} (a file "
                    "object is written in order)"
                )
            _write_all(self.file, data)
            n = memoryview(data).nbytes
            self._at += n
        return Receipt(number, n)

    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        if self._at != size:
            raise ValueError(f"{self.url}: {self._at} bytes written, expected {size}")
        flush = getattr(self.file, "flush", None)  # numpy.save needs only write()
        if flush is not None:
            flush()
        if self.owned:
            self.file.close()

    def abort(self) -> None:
        if self.owned:
            with contextlib.suppress(OSError, ValueError):
                self.file.close()


class SpoolSink(Sink):
    """Any other fsspec filesystem: a local spool, uploaded and moved into place."""

    def __init__(self, fs: Any, path: str, size: int | None = None) -> None:
        self.fs = fs
        self.path = path
        self.url = fs.unstrip_protocol(path)
        spool_dir = tempfile.gettempdir()
        sweep(spool_dir)
        self.spool = Spool(spool_dir, size, 0o600)
        parent, _, _name = path.rpartition("/")
        self.remote_tmp = f"{parent}/{temporary_name()}" if parent else temporary_name()

    def write(self, number: int, offset: int, data: Any) -> Receipt:
        self.spool.write(offset, data)
        return Receipt(number, memoryview(data).nbytes)

    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        os.ftruncate(self.spool.fd(), size)
        self.spool.close()
        try:
            self.fs.put_file(self.spool.tmp, self.remote_tmp)
            self.fs.mv(self.remote_tmp, self.path)
        except BaseException:
            self._remove_remote()
            raise
        finally:
            self.spool.remove()

    def _remove_remote(self) -> None:
        try:
            if self.fs.exists(self.remote_tmp):
                self.fs.rm(self.remote_tmp)
        except Exception as exc:
            log.warning("temporary object %s not removed: %s", self.remote_tmp, exc)

    def abort(self) -> None:
        self.spool.remove()
        self._remove_remote()


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status of the S3 answer behind an exception (None: no answer)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, Mapping):
            meta = response.get("ResponseMetadata")
            if isinstance(meta, Mapping) and isinstance(meta.get("HTTPStatusCode"), int):
                return int(meta["HTTPStatusCode"])
        current = current.__cause__ or current.__context__
    return None


class S3Sink(Sink):
    """An S3 object written by a multipart upload."""

    min_part = S3_MIN_PART
    max_parts = S3_MAX_PARTS
    concurrency = 8
    ordered = True

    def __init__(self, fs: Any, path: str) -> None:
        self.fs = fs
        self.url = fs.unstrip_protocol(path)
        self.bucket, self.key, _version = fs.split_path(path)
        if not self.key:
            raise FetchError(f"{self.url}: an S3 URL to write needs a key, not only a bucket")
        answer = self._call(
            "create_multipart_upload", "starting the upload", Bucket=self.bucket, Key=self.key
        )
        self.upload_id: str = answer["UploadId"]

    def _call(self, method: str, doing: str, nbytes: int = 0, **params: Any) -> Any:
        return sync(self.fs.loop, self._attempts, method, doing, nbytes, params)

    async def _attempts(
        self, method: str, doing: str, nbytes: int, params: dict[str, Any]
    ) -> dict[str, Any]:
        """``method`` tried up to :data:`REMOTE_ATTEMPTS` times (a dropped connection, a
        server error), each attempt within :func:`s3_deadline`; a :class:`FetchError` naming
        the URL and the step when it fails for good."""
        deadline = s3_deadline(nbytes)
        problem: BaseException | None = None
        made = 0
        for attempt in range(REMOTE_ATTEMPTS):
            made += 1
            try:
                async with asyncio.timeout(deadline):
                    return await opening.call_s3(self.fs, method, **params)
            except TimeoutError as exc:
                raise FetchError(
                    f"{self.url}: {doing} failed: no answer within {deadline:.0f} s (the server "
                    "or a proxy stopped; the upload is aborted)"
                ) from exc
            except Exception as exc:
                if remote.is_fatal(exc):
                    raise
                status = _http_status(exc)
                code = opening.error_code(exc)
                answered = status is not None and status not in (429,) and status < 500
                if answered and code not in _S3_RETRYABLE:
                    raise FetchError(f"{self.url}: {doing} failed: {remote.describe(exc)}") from exc
                problem = exc
            if await remote.wait_to_retry(attempt, REMOTE_ATTEMPTS, 0.0, math.inf) is None:
                break
        raise FetchError(
            f"{self.url}: {doing} failed after {made} attempts: {remote.describe(problem)}"
        ) from problem

    def write(self, number: int, offset: int, data: Any) -> Receipt:
        if not 1 <= number <= self.max_parts:
            raise ValueError(f"{self.url}: part number {number} outside 1..{self.max_parts}")
        # botocore takes bytes or a bytearray as a body; anything else is copied once
        body = data if isinstance(data, (bytes, bytearray)) else bytes(data)
        answer = self._call(
            "upload_part",
            f"uploading part {number} (bytes {offset}..{offset + len(body)})",
            len(body),
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=body,
        )
        return Receipt(number, len(body), answer["ETag"])

    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        parts = [{"PartNumber": r.number, "ETag": r.etag} for r in sorted(receipts, key=_num)]
        total = sum(r.size for r in receipts)
        if total != size:
            raise FetchError(f"{self.url}: parts hold {total} bytes, expected {size}")
        self._call(
            "complete_multipart_upload",
            "completing the upload",
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": parts},
        )
        self.fs.invalidate_cache(f"{self.bucket}/{self.key}")

    def abort(self) -> None:
        try:
            self._call(
                "abort_multipart_upload",
                "aborting the upload",
                Bucket=self.bucket,
                Key=self.key,
                UploadId=self.upload_id,
            )
        except FetchError as exc:
            log.warning(
                "%s: the multipart upload %s was not aborted: %s", self.url, self.upload_id, exc
            )


def _num(receipt: Receipt) -> int:
    return receipt.number


def is_local_path(url: str) -> bool:
    """Whether ``url`` is a local path (no ``://`` protocol and no ``::`` chain)."""
    return "://" not in url and "::" not in url


def open_sink(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    size: int | None = None,
    *,
    durable: bool = False,
) -> Sink:
    """A sink for the object at ``url`` (any fsspec URL or local path).

    Parameters
    ----------
    url : str
        Destination.
    storage_options : mapping, optional
        fsspec's ``storage_options``.
    size : int, optional
        The final size when known (a local file is preallocated).
    durable : bool
        Local files: ``fsync`` the file and its directory (see :class:`LocalSink`).

    Raises
    ------
    FetchError
        A URL naming a folder (``s3://bucket/dir/``), an S3 failure.
    UnsupportedError
        A chained URL.
    """
    options = dict(storage_options or {})
    options.pop(BUDGET_OPTION, None)  # npystore's own, for reads
    if "::" in url:
        raise UnsupportedError(
            f"{url}: writing through a chained URL is not supported; write to the URL it "
            f"ends with ({url.rsplit('::', 1)[1]}) instead"
        )
    if not is_local_path(url) and url.endswith("/"):
        raise FetchError(
            f"{url}: the URL ends with '/' and names a folder, not an object; give the "
            "object's name (e.g. ...dir/x.npy)"
        )
    fs, path = opening.filesystem(url, options)
    if isinstance(fs, LocalFileSystem):
        try:
            special = not stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            special = False
        if special and not os.path.isdir(path):  # a FIFO, a device: written in place
            return StreamSink(open(path, "wb"), url, owned=True)
        return LocalSink(path, size, durable=durable, url=url)
    if is_s3(fs):
        return S3Sink(fs, path)
    return SpoolSink(fs, path, size)
