"""Sinks: one object being written by parts, made visible at its URL only by ``commit``.

A writer asks :func:`open_sink` for a sink, writes numbered parts at their byte offsets
(concurrently, from threads or from dask workers: sinks pickle), then commits; any failure
aborts, and nothing appears at the URL.

- local files (:class:`LocalSink`): a temporary file beside the destination (same directory,
  so the final rename stays on one filesystem), preallocated when the size is known, parts
  written with ``os.pwrite`` at their offsets; ``commit`` truncates to the final size,
  ``fsync``\\ s, and ``os.replace``\\ s it into place (then ``fsync``\\ s the directory).
  ``abort`` removes it: an existing destination keeps its previous content.
- S3 (:class:`S3Sink`): a multipart upload (``CreateMultipartUpload``); each part is one
  ``UploadPart`` (at least :data:`S3_MIN_PART` bytes except the last, at most
  :data:`S3_MAX_PARTS` parts); ``commit`` is ``CompleteMultipartUpload``; ``abort`` is
  ``AbortMultipartUpload``, so no pending upload (nor its storage) is left behind. Every
  request has a deadline (:func:`s3_deadline`: :data:`S3_STALL` seconds plus one per
  :data:`S3_SLOWEST` bytes of body): a server or proxy that stops answering makes the write
  fail (and abort) instead of hanging.
- every other fsspec filesystem (:class:`SpoolSink`): parts are spooled into a local
  temporary file (as :class:`LocalSink` does), and ``commit`` uploads it with one
  ``put_file`` to a temporary name beside the destination and moves it into place
  (``fs.mv``). The spool is local to the machine that opened the sink: with dask workers on
  other machines, write to S3 or to a shared local path instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fsspec.asyn import FSTimeoutError, sync
from fsspec.implementations.local import LocalFileSystem

from npystore.errors import FetchError
from npystore.fetch import opening
from npystore.fetch.remote import BUDGET_OPTION
from npystore.fetch.s3 import is_s3

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
    "open_sink",
    "s3_deadline",
]

log = logging.getLogger(__name__)

#: S3's smallest part (every part but the last) and most parts of one multipart upload.
S3_MIN_PART: Final = 5 * 2**20
S3_MAX_PARTS: Final = 10_000
#: Largest single ``pwrite`` (Linux writes at most about 2 GiB per call).
#: Seconds any S3 request of a write may take beyond its body's transfer (below) before the
#: write fails: a stalled server or proxy must not hang ``save`` forever (botocore's read
#: timeout does not cover a request whose body is never sent, e.g. an unanswered
#: ``Expect: 100-continue``).
S3_STALL: Final = 120.0
#: Slowest upload a deadline allows for, bytes per second (a 16 MiB part: 64 s more).
S3_SLOWEST: Final = 256 * 2**10

_PWRITE_MAX: Final = 2**30


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
    """

    url: str
    min_part: int = 0
    max_parts: int = 2**31
    concurrency: int = os.cpu_count() or 1
    ordered: bool = False

    @abstractmethod
    def write(self, number: int, offset: int, data: Any) -> Receipt:
        """Write part ``number`` (1-based), the bytes ``data`` at ``offset``."""

    @abstractmethod
    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        """Make the ``size`` bytes written visible at the URL, atomically."""

    @abstractmethod
    def abort(self) -> None:
        """Drop everything written; the URL is left as it was. Never raises."""


def _pwrite_all(fd: int, data: Any, offset: int) -> None:
    view = memoryview(data).cast("B")
    done = 0
    while done < view.nbytes:
        n = os.pwrite(fd, view[done : done + _PWRITE_MAX], offset + done)
        if n <= 0:
            raise OSError(f"pwrite wrote {n} bytes at offset {offset + done}")
        done += n


class _Spool:
    """A local temporary file written by parts (one descriptor per process)."""

    def __init__(self, tmp: str, size: int | None) -> None:
        self.tmp = tmp
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            if size:
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError:  # a filesystem without fallocate: sparse, then filled
                    os.ftruncate(fd, size)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        self._fd: int | None = fd
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"tmp": self.tmp}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.tmp = state["tmp"]
        self._fd = None
        self._pid = -1

    def fd(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CLOEXEC)
            self._pid = os.getpid()
        return self._fd

    def write(self, offset: int, data: Any) -> None:
        _pwrite_all(self.fd(), data, offset)

    def finish(self, size: int) -> None:
        fd = self.fd()
        os.ftruncate(fd, size)
        os.fsync(fd)
        self.close()

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None

    def remove(self) -> None:
        self.close()
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("temporary file %s not removed: %s", self.tmp, exc)


class LocalSink(Sink):
    """A local file: a preallocated temporary file beside it, renamed into place."""

    def __init__(self, path: str, size: int | None = None) -> None:
        self.url = path
        self.path = os.path.abspath(path)
        directory, name = os.path.split(self.path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.npystore-tmp")
        self.spool = _Spool(tmp, size)

    def write(self, number: int, offset: int, data: Any) -> Receipt:
        self.spool.write(offset, data)
        return Receipt(number, memoryview(data).nbytes)

    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        self.spool.finish(size)
        os.replace(self.spool.tmp, self.path)
        try:
            dfd = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:  # some filesystems cannot open directories
            log.debug("directory of %s not synced: %s", self.path, exc)
            return
        try:
            os.fsync(dfd)
        except OSError as exc:
            log.debug("directory of %s not synced: %s", self.path, exc)
        finally:
            os.close(dfd)

    def abort(self) -> None:
        self.spool.remove()


class SpoolSink(Sink):
    """Any other fsspec filesystem: a local spool, uploaded and moved into place."""

    def __init__(self, fs: Any, path: str, size: int | None = None) -> None:
        self.fs = fs
        self.path = path
        self.url = fs.unstrip_protocol(path)
        fd, tmp = tempfile.mkstemp(prefix="npystore-spool-")
        os.close(fd)
        os.unlink(tmp)  # _Spool creates it exclusively
        self.spool = _Spool(tmp, size)
        parent, name = path.rsplit("/", 1) if "/" in path else ("", path)
        self.remote_tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.npystore-tmp".lstrip("/")
        if path.startswith("/"):
            self.remote_tmp = "/" + self.remote_tmp

    def write(self, number: int, offset: int, data: Any) -> Receipt:
        self.spool.write(offset, data)
        return Receipt(number, memoryview(data).nbytes)

    def commit(self, receipts: Sequence[Receipt], size: int) -> None:
        self.spool.finish(size)
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
            raise ValueError(f"{self.url}: an S3 URL to write needs a key, not only a bucket")
        answer = self._call(
            "create_multipart_upload", "starting the upload", Bucket=self.bucket, Key=self.key
        )
        self.upload_id: str = answer["UploadId"]

    def _call(self, method: str, doing: str, nbytes: int = 0, **kwargs: Any) -> Any:
        deadline = s3_deadline(nbytes)
        try:
            return sync(self.fs.loop, self.fs._call_s3, method, timeout=deadline, **kwargs)
        except FSTimeoutError as exc:
            raise FetchError(
                f"{self.url}: {doing} failed: no answer within {deadline:.0f} s (the server "
                "or a proxy stopped; the upload is aborted)"
            ) from exc
        except (OSError, ValueError) as exc:
            raise FetchError(f"{self.url}: {doing} failed: {exc}") from exc

    def write(self, number: int, offset: int, data: Any) -> Receipt:
        if not 1 <= number <= self.max_parts:
            raise ValueError(f"{self.url}: part number {number} outside 1..{self.max_parts}")
        body = bytes(data) if not isinstance(data, bytes) else data
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


def open_sink(
    url: str, storage_options: Mapping[str, Any] | None = None, size: int | None = None
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
    """
    options = dict(storage_options or {})
    options.pop(BUDGET_OPTION, None)  # npystore's own, for reads
    fs, path = opening.filesystem(os.fspath(url), options)
    if isinstance(fs, LocalFileSystem):
        return LocalSink(path, size)
    if is_s3(fs):
        return S3Sink(fs, path)
    return SpoolSink(fs, path, size)
