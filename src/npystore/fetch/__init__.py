"""The only IO in npystore: :class:`RangeReader`, byte ranges of one object on any fsspec URL.

A reader is bound to one object and to the identity it had when it was opened (size plus
mtime, ETag or version id). On S3 the identity comes from a ranged ``GetObject`` of the
object's first bytes (no ``HeadObject``), so opening and sniffing a file is one round trip.
It reads ranges four ways:

- local files (``LocalFileSystem``): ``os.preadv`` straight into the caller's buffers, large
  ranges split across a small thread pool (the GIL is released while the kernel copies);
- S3 (s3fs): one ``GetObject`` per range, all in flight at once on fsspec's event loop, each
  *pinned* to the object opened: ``VersionId`` when the store reported one, else
  ``If-Match: <ETag>``; a replaced object answers 412 and the read raises
  :class:`~npystore.errors.ConsistencyError` (old and new bytes never mix in one result).
  Servers that ignore the pin exist (rclone's ``serve s3`` answers ``If-Match`` with 200), so
  every response's ``ETag`` (and ``VersionId``, when both sides have one) is compared with the
  identity before its body is read, and its ``Content-Range`` total with the size at open;
- http(s): concurrent ranged GETs on fsspec's event loop and session, each with ``If-Match``
  and the strong ETag the server reported at open (a replaced object answers 412), and each
  response's ``ETag`` compared with it (a mismatch, or no ETag at all, is a
  :class:`~npystore.errors.ConsistencyError`); without a strong ETag at open, unpinned;
- other async filesystems (gcs, azure, ...): one ``_cat_file`` per range, concurrently;
- everything else: ``fs.cat_ranges``;
- an open binary file object instead of a URL: positional reads (see :mod:`npystore.fetch.fileobj`).

An http(s) server that ignores ``Range`` (``python -m http.server``) answers the first ranged
GET with ``200`` and the whole object: an object of at most :data:`IGNORED_RANGE_MAX` bytes is
kept from that answer and every later read of the reader is served from it (one GET in all);
a larger one raises :class:`~npystore.errors.UnsupportedError` at once, without reading the
body or retrying, saying to read it through ``simplecache::`` or a download.

Remote results are length-checked; a short body, a dropped connection or a server error is
retried with exponential backoff and jitter, up to :data:`REMOTE_ATTEMPTS` attempts and within
a time budget per range (see :mod:`npystore.fetch.remote`), before a
:class:`~npystore.errors.FetchError` names the URL, the range and the last problem.

Readers pickle as ``(filesystem, path, identity, budget)``: a dask worker rebuilds the
filesystem once (fsspec caches instances), never once per chunk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import fsspec
from fsspec.implementations.local import LocalFileSystem

from npystore.errors import ConsistencyError, FetchError, UnsupportedError
from npystore.fetch import opening, remote, s3direct
from npystore.fetch.fileobj import BinaryFile, FileSource, is_file_object
from npystore.fetch.remote import (
    BUDGET_ENV,
    BUDGET_OPTION,
    READ_BUDGET,
    REMOTE_ATTEMPTS,
    RETRY_DELAY,
    RETRY_DELAY_MAX,
)

__all__ = [
    "BUDGET_ENV",
    "BUDGET_OPTION",
    "READ_BUDGET",
    "REMOTE_ATTEMPTS",
    "RETRY_DELAY",
    "RETRY_DELAY_MAX",
    "IGNORED_RANGE_MAX",
    "ObjectIdentity",
    "RangeReader",
    "open_reader",
    "read_cache_file",
    "write_cache_file",
]

#: Remote ranges larger than this are split into parts fetched concurrently.
REMOTE_PART_SIZE: Final = 8 * 2**20
#: Local ranges larger than this are split across the thread pool (when asked to).
LOCAL_PART_SIZE: Final = 16 * 2**20
#: Bytes read together with the identity when an S3 object is opened (see :func:`open_reader`):
#: enough to recognise every format and to hold a typical .npy header, no array data.
OPEN_HEAD: Final = 128
#: Largest object an http(s) server that ignores ``Range`` may send whole: the reader keeps
#: it in memory and reads nothing more. Larger ones raise UnsupportedError (read them through
#: ``simplecache::`` or download them).
IGNORED_RANGE_MAX: Final = 8 * 2**20

_IDENTITY_KEYS: Final = (
    "ETag",
    "etag",
    "VersionId",
    "version_id",
    "LastModified",
    "last_modified",
    "mtime",
    "modified",
    "created",
    "ino",
    "generation",
    "md5Hash",
)

_log = logging.getLogger(__name__)

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


@dataclass(frozen=True, slots=True)
class ObjectIdentity:
    """Who an object was when it was opened.

    Attributes
    ----------
    url : str
        The protocol-qualified path, for messages and dask names.
    size : int
        Size in bytes.
    fields : tuple of (str, str)
        Version markers the filesystem reported (ETag, version id, mtime, inode, ...).
    """

    url: str
    size: int
    fields: tuple[tuple[str, str], ...]

    @classmethod
    def from_info(cls, url: str, info: Mapping[str, Any]) -> ObjectIdentity:
        """Build an identity from an fsspec ``info()`` dict."""
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise FetchError(f"{url}: the filesystem reports no valid size ({size!r})")
        if info.get("type") == "directory":
            raise IsADirectoryError(f"{url}: is a directory, expected a file")
        fields = tuple((key, str(info[key])) for key in _IDENTITY_KEYS if info.get(key))
        return cls(url=url, size=size, fields=fields)


class RangeReader:
    """Read byte ranges of one object, pinned to the identity it had at open.

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem
        The filesystem holding the object.
    path : str
        The object's path on ``fs``.
    identity : ObjectIdentity
        The object's identity captured at open.
    head, tail : bytes
        The object's first (last) bytes, read with the identity at open.
    budget : float, optional
        Seconds one remote range may take, all attempts included (see
        :func:`npystore.fetch.remote.budget_from`; default: ``NPYSTORE_READ_BUDGET`` or
        :data:`READ_BUDGET`).
    source : FileSource, optional
        An open file object to read instead of ``fs`` and ``path`` (both unused then).
    """

    #: Gap (bytes) below which neighbouring regions are read as one range.
    max_gap: int
    #: Largest temporary buffer for a merged, non-contiguous range.
    max_span: int

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        path: str,
        identity: ObjectIdentity,
        *,
        head: bytes = b"",
        tail: bytes = b"",
        budget: float | None = None,
        source: FileSource | None = None,
    ):
        self.fs = fs
        self.path = path
        self.identity = identity
        #: The file object read instead of a filesystem path, if any.
        self.source = source
        #: Seconds one remote range may take, all its attempts and waits included.
        self.budget = remote.budget_from(budget)
        self.local = source is None and isinstance(fs, LocalFileSystem)
        self._pinned_s3 = _is_s3(fs)
        self._http = _is_http(fs)
        #: Other async filesystems whose ``_cat_ranges`` is fsspec's (one ``_cat_file`` per
        #: range): their ranges run under the budget like S3's and http's.
        self._async_ranges = (
            not (self.local or self._pinned_s3 or self._http)
            and getattr(fs, "async_impl", False)
            and _default_cat_ranges(fs)
        )
        fields = dict(identity.fields)
        #: http(s): reads carry ``If-Match`` with the strong ETag seen at open (a weak one,
        #: ``W/"..."``, never matches a range request, so it cannot pin).
        self._http_etag = _strong_etag(identity) if self._http else None
        #: What every response must carry (S3 and http): the ETag and version id at open.
        self._want_etag = (
            (fields.get("ETag") or fields.get("etag")) if self._pinned_s3 else self._http_etag
        )
        self._want_version = (fields.get("VersionId") or fields.get("version_id")) or None
        #: S3: the presigned URL range reads go to (see :mod:`npystore.fetch.s3direct`), and
        #: whether that path is off for this reader (not applicable, or it failed once).
        self._signed: s3direct.SignedUrl | None = None
        self._direct_off = not self._pinned_s3
        self.max_gap = 32 * 2**10 if self.local else 512 * 2**10
        self.max_span = 64 * 2**20
        if max(len(head), len(tail)) > identity.size:
            raise FetchError(
                f"{identity.url}: {max(len(head), len(tail))} bytes read at open, more than "
                f"the object's {identity.size} bytes"
            )
        #: The object's first bytes, read together with its identity at open (remote only).
        #: :meth:`read` and :meth:`read_many` (headers, metadata) serve ranges inside it from
        #: memory; :meth:`readinto_many` (array data) always asks the object, so a compute
        #: after the object was replaced fails with ConsistencyError even for tiny files.
        self.head = head
        #: Whether :meth:`readinto_many` may serve data from :attr:`head` too. Off by
        #: default (see above); an eager whole-file read made right after open turns it on
        #: (``npystore.load``): bytes that came in the same response as the identity are
        #: exactly as current as the identity itself, and a small file costs one request.
        self.data_from_head = False
        #: The object's last bytes, when the opener asked for them instead (a ZIP archive's
        #: directory is at its end); served like :attr:`head`.
        self.tail = tail
        self._tail_start = identity.size - len(tail)
        #: http(s): the whole object, when its server ignored ``Range`` (see the module doc).
        self._whole: bytes | None = None

    def __reduce__(self) -> tuple[Callable[..., RangeReader], tuple[Any, ...]]:
        # the head stays behind: workers read what they need (it is pinned all the same)
        if self.source is not None:  # pickles by value (BytesIO) or refuses (a file handle)
            return (_restore_file, (self.source, self.identity))
        return (_restore, (self.fs, self.path, self.identity, self.budget))

    def __repr__(self) -> str:
        return f"RangeReader({self.identity.url!r}, size={self.identity.size})"

    @property
    def url(self) -> str:
        """The object's URL, for messages."""
        return self.identity.url

    @property
    def size(self) -> int:
        """The object's size in bytes at open."""
        return self.identity.size

    @property
    def token(self) -> tuple[Any, ...]:
        """A deterministic token of the object's identity (for dask names)."""
        return (self.identity.url, self.identity.size, self.identity.fields)

    # -- public reading API --------------------------------------------------------------

    def read(self, start: int, stop: int) -> bytes:
        """Read ``[start, stop)``; the whole range or an error."""
        self._check_range(start, stop)
        if stop == start:
            return b""
        if start < len(self.head):
            if stop <= len(self.head):
                return self.head[start:stop]
            return self.head[start:] + self._remote_read([(len(self.head), stop)])[0]
        if self.tail and start >= self._tail_start:
            return self.tail[start - self._tail_start : stop - self._tail_start]
        if self.local or self.source is not None:
            buf = bytearray(stop - start)
            self._local_readinto([(start, memoryview(buf))])
            return bytes(buf)
        return self._remote_read([(start, stop)])[0]

    def read_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Read several ``[start, stop)`` ranges, concurrently where the filesystem allows."""
        for start, stop in ranges:
            self._check_range(start, stop)
        if self.tail and all(start >= self._tail_start for start, _ in ranges):
            t = self._tail_start
            return [self.tail[start - t : stop - t] for start, stop in ranges]
        if self.head:
            n = len(self.head)
            rest = [(max(start, n), stop) for start, stop in ranges if stop > n]
            got = iter(self._remote_read(rest))
            return [
                self.head[start:stop] if stop <= n else self.head[start:n] + next(got)
                for start, stop in ranges
            ]
        if self.local or self.source is not None:
            bufs = [bytearray(stop - start) for start, stop in ranges]
            self._local_readinto(
                [(s, memoryview(b)) for (s, _), b in zip(ranges, bufs, strict=True)]
            )
            return [bytes(b) for b in bufs]
        return self._remote_read(list(ranges))

    def readinto_many(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> None:
        """Fill each writable byte view with the object's bytes starting at its offset.

        Parameters
        ----------
        requests : sequence of (int, memoryview)
            ``(offset, view)`` pairs; ``view`` is a writable, contiguous byte view.
        parallel : bool
            Split large local reads across threads (for one big eager read; dask tasks
            already run in parallel and leave this off).
        """
        for start, view in requests:
            self._check_range(start, start + view.nbytes)
        if self.data_from_head and self.head:
            requests = self._from_head(requests)
            if not requests:
                return
        if self.local or self.source is not None:
            if parallel:
                requests = _split(requests, LOCAL_PART_SIZE)
            self._local_readinto(requests, parallel=parallel)
            return
        split = _split(requests, REMOTE_PART_SIZE)
        ranges = [(s, s + v.nbytes) for s, v in split]
        if self._pinned_s3 or self._http:  # the body streams straight into the views
            self._remote_read(ranges, into=[v for _, v in split])
            return
        datas = self._remote_read(ranges)
        for (_, view), data in zip(split, datas, strict=True):
            view[:] = data

    def _from_head(
        self, requests: Sequence[tuple[int, memoryview]]
    ) -> list[tuple[int, memoryview]]:
        """Fill what :attr:`head` holds of each request; the parts still to read."""
        n = len(self.head)
        rest: list[tuple[int, memoryview]] = []
        for start, view in requests:
            k = max(0, min(n - start, view.nbytes))
            if k:
                view[:k] = self.head[start : start + k]
            if k < view.nbytes:
                rest.append((start + k, view[k:]))
        return rest

    # -- local ---------------------------------------------------------------------------

    def _local_readinto(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> None:
        if self.source is not None:
            self.source.readinto_many(requests)
            return
        fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            self._check_local_identity(fd)
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
        finally:
            os.close(fd)

    def _check_local_identity(self, fd: int) -> None:
        st = os.fstat(fd)
        fields = dict(self.identity.fields)
        mtime = fields.get("mtime")
        if st.st_size != self.identity.size or (mtime is not None and mtime != str(st.st_mtime)):
            raise ConsistencyError(
                f"{self.url}: the file changed since it was opened (size {self.identity.size}"
                f" -> {st.st_size}, mtime {mtime} -> {st.st_mtime}); reopen it"
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

    # -- remote --------------------------------------------------------------------------

    def _remote_read(
        self, ranges: list[tuple[int, int]], into: list[memoryview] | None = None
    ) -> list[bytes]:
        """Each range's bytes (or, with ``into``, each written into its view and ``b""``
        returned), retried per range within :attr:`budget`; S3 and http reads only may pass
        ``into``."""
        if not ranges:
            return []
        if self._whole is not None:  # an http server that ignores Range sent all of it
            return self._from_whole(ranges, into)
        if not (self._pinned_s3 or self._http or self._async_ranges):
            return self._sync_read(ranges)
        from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

        get_one: remote.GetOne
        if self._pinned_s3:
            get_one = self._s3_reads(into)
        elif self._http:
            get_one = self._http_reads(into)
        else:
            get_one = self._cat_file_reads()

        async def all_ranges() -> list[bytes | memoryview]:
            sem = await self._slots()
            return await remote.read_ranges(
                ranges, get_one, url=self.url, budget=self.budget, sem=sem
            )

        got: list[bytes | memoryview] = sync(self.fs.loop, all_ranges)
        if into is not None:
            return [b""] * len(got)
        return [bytes(data) for data in got]  # already bytes: no copy

    async def _slots(self) -> asyncio.Semaphore | None:
        """As many slots as the connection pool of this reader's requests has: a range's
        budget runs only while it holds one (see :func:`npystore.fetch.remote.slots`)."""
        fs: Any = self.fs
        if self._pinned_s3:
            await fs.set_session()
            bucket = fs.split_path(self.path)[0]
            client = await fs.get_s3(bucket)
            return remote.slots(client, int(client.meta.config.max_pool_connections or 10))
        if self._http:
            session = await fs.set_session()
            connector = getattr(session, "connector", None)
            return remote.slots(session, getattr(connector, "limit", None))
        from fsspec.asyn import _get_batch_size  # noqa: PLC0415 - what fsspec's gather uses

        return remote.slots(fs, getattr(fs, "batch_size", None) or _get_batch_size(nofiles=True))

    def _sync_read(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """``fs.cat_ranges`` in rounds: the ranges that failed are asked again after a backoff,
        until :data:`REMOTE_ATTEMPTS` rounds or :attr:`budget` (checked between rounds: a
        synchronous call cannot be cut) are used up."""
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

    def _from_whole(
        self, ranges: list[tuple[int, int]], into: list[memoryview] | None
    ) -> list[bytes]:
        whole = self._whole or b""
        if into is None:
            return [whole[start:stop] for start, stop in ranges]
        for (start, stop), view in zip(ranges, into, strict=True):
            view[:] = whole[start:stop]
        return [b""] * len(ranges)

    async def _ignored_range(self, resp: Any, start: int, stop: int) -> bytes:
        """A ``200`` answer to a ranged GET: the server ignores ``Range`` and sends the whole
        object. Kept (and the range cut from it) if small enough, else UnsupportedError."""
        size = self.identity.size
        length = resp.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) != size:
            raise ConsistencyError(
                f"{self.url}: the server ignored the range request and sent {length} bytes, "
                f"but the object had {size} bytes when it was opened; reopen it"
            )
        if size > IGNORED_RANGE_MAX:
            raise UnsupportedError(
                f"{self.url}: the server ignores Range requests (it answered a request for "
                f"bytes [{start}, {stop}) with status 200 and the whole object of {size} "
                f"bytes); npystore reads objects from such servers whole only up to "
                f"{IGNORED_RANGE_MAX} bytes. Read it through a local copy, e.g. "
                f"'simplecache::{self.url}', or download it first"
            )
        body: bytes = await resp.read()
        if len(body) != size:  # not kept; a body short of the range is retried
            return body[start:stop]
        _log.debug("%s: the server ignores Range; serving reads from its whole answer", self.url)
        self._whole = body
        return body[start:stop]

    def _cat_file_reads(self) -> remote.GetOne:
        fs: Any = self.fs

        async def one(k: int, start: int, stop: int) -> bytes:
            data: bytes = await fs._cat_file(self.path, start=start, end=stop)
            return data

        return one

    def _http_reads(self, into: list[memoryview] | None) -> remote.GetOne:
        """Ranged GETs over the filesystem's session (as its ``_cat_file``, plus
        ``If-Match`` and the response's ETag and ``Content-Range`` checked before the body)."""
        fs: Any = self.fs
        options = dict(fs.kwargs)
        base = dict(options.pop("headers", None) or {})
        etag = self._http_etag
        if etag is not None:
            base["If-Match"] = etag
        url = fs.encode_url(self.path)

        async def one(k: int, start: int, stop: int) -> bytes | memoryview:
            headers = {**base, "Range": f"bytes={start}-{stop - 1}"}
            session = await fs.set_session()
            async with session.get(url, headers=headers, **options) as resp:
                if resp.status == 412 and etag is not None:
                    raise self._changed({"ETag": etag}, start, stop)
                fs._raise_not_found_for_status(resp, self.path)
                self._check_answer(
                    start,
                    stop,
                    resp.headers.get("ETag"),
                    None,
                    resp.headers.get("Content-Range", ""),
                )
                if resp.status == 200 and (start, stop) != (0, self.identity.size):
                    whole = await self._ignored_range(resp, start, stop)
                    if into is None or len(whole) != stop - start:
                        return whole
                    into[k][:] = whole
                    return into[k]
                if into is None:
                    data: bytes = await resp.read()
                    return data
                return await s3direct.stream_into(resp.content, into[k])

        return one

    def _s3_reads(self, into: list[memoryview] | None) -> remote.GetOne:
        """Ranged ``GetObject``s pinned to the opened object (presigned and direct when
        possible, else through botocore)."""
        bucket, key, path_version = self.fs.split_path(self.path)
        version = self._want_version or path_version
        etag = self._want_etag
        pin = {"VersionId": version} if version else {"IfMatch": etag} if etag else {}

        async def one(k: int, start: int, stop: int) -> bytes | memoryview:
            view = None if into is None else into[k]
            signed = await self._direct_url(bucket, key, version)
            return await self._s3_get(bucket, key, pin, start, stop, view, signed)

        return one

    async def _direct_url(
        self, bucket: str, key: str, version: str | None
    ) -> s3direct.SignedUrl | None:
        """The presigned URL for direct GETs (signed again when stale), or None: botocore."""
        if self._direct_off:
            return None
        signed = self._signed
        if signed is None or not signed.fresh():
            try:
                signed = await s3direct.direct_url(self.fs, bucket, key, version)
            except Exception as exc:  # any failure to presign: botocore serves this reader
                _log.debug("%s: no presigned URL, reading through botocore: %r", self.url, exc)
                signed = None
            if signed is None:
                self._direct_off = True
            self._signed = signed
        return signed

    async def _s3_get(
        self,
        bucket: str,
        key: str,
        pin: dict[str, str],
        start: int,
        stop: int,
        into: memoryview | None = None,
        signed: s3direct.SignedUrl | None = None,
    ) -> bytes | memoryview:
        def check(etag: str | None, version: str | None, content_range: str) -> None:
            self._check_answer(start, stop, etag, version, content_range)

        if signed is not None and not self._direct_off:
            try:
                _, data = await s3direct.direct_get(
                    signed, start, stop, if_match=pin.get("IfMatch"), into=into, check=check
                )
            except s3direct.PreconditionFailed as exc:
                raise self._changed(pin, start, stop) from exc
            except s3direct.DirectUnusable as exc:  # botocore handles it from now on
                _log.debug("%s: direct GET refused (%s), reading through botocore", self.url, exc)
                self._direct_off = True
            else:
                return data
        try:
            _, data = await opening.get_object(
                self.fs, bucket, key, f"bytes={start}-{stop - 1}", pin, into, check=check
            )
        except OSError as exc:
            if opening.error_code(exc) in ("PreconditionFailed", "412"):
                raise self._changed(pin, start, stop) from exc
            raise
        return data

    def _changed(self, pin: Mapping[str, str], start: int, stop: int) -> ConsistencyError:
        return ConsistencyError(
            f"{self.url}: the object changed since it was opened "
            f"({', '.join(f'{k} {v}' for k, v in pin.items())} no longer matches bytes "
            f"[{start}, {stop})); reopen it"
        )

    def _check_answer(
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
        open. Checked before the body is read, whatever the server did with the pin."""
        want = self._want_etag
        if want is not None and not _same_etag(want, etag, strict=self._http):
            got = f"ETag {etag}" if etag else "no ETag"
            raise ConsistencyError(
                f"{self.url}: the answer for bytes [{start}, {stop}) came with {got}, but the "
                f"object was opened with ETag {want}: it changed since it was opened (and "
                f"the server ignored the pin); reopen it"
            )
        if self._want_version and version and version != self._want_version:
            raise ConsistencyError(
                f"{self.url}: the answer for bytes [{start}, {stop}) came from version "
                f"{version}, but version {self._want_version} was opened (the server ignored "
                f"the pin); reopen it"
            )
        match = opening.CONTENT_RANGE.fullmatch(content_range)
        if match and match.group(3) != "*" and int(match.group(3)) != self.identity.size:
            raise ConsistencyError(
                f"{self.url}: the object is {match.group(3)} bytes now, {self.identity.size} "
                f"when it was opened; reopen it"
            )

    def _check_range(self, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= self.identity.size:
            raise FetchError(
                f"{self.url}: byte range [{start}, {stop}) lies outside the object "
                f"of {self.identity.size} bytes"
            )


def _restore(fs: Any, path: str, identity: ObjectIdentity, budget: float) -> RangeReader:
    """Unpickle a :class:`RangeReader`."""
    return RangeReader(fs, path, identity, budget=budget)


def _restore_file(source: FileSource, identity: ObjectIdentity) -> RangeReader:
    """Unpickle a :class:`RangeReader` over a file object (an :class:`io.BytesIO`'s bytes)."""
    if source.size != identity.size:
        raise ConsistencyError(
            f"{identity.url}: {source.size} bytes arrived, the object had {identity.size}"
        )
    return RangeReader(None, "", identity, source=source)


def _same_etag(want: str, got: str | None, *, strict: bool) -> bool:
    """Whether a response's ETag is the one opened. S3 ETags are compared without their
    quotes (listings and some S3-compatible servers differ in quoting); http ones exactly."""
    if got is None:
        return False
    return got == want if strict else got.strip('"') == want.strip('"')


def _default_cat_ranges(fs: Any) -> bool:
    """Whether an async filesystem's ``_cat_ranges`` is fsspec's (one ``_cat_file`` per
    range, gathered): then reading the ranges one by one changes nothing but the budget."""
    from fsspec.asyn import AsyncFileSystem  # noqa: PLC0415

    cls = type(fs)
    return (
        getattr(cls, "_cat_ranges", None) is AsyncFileSystem._cat_ranges
        and getattr(cls, "cat_ranges", None) is fsspec.AbstractFileSystem.cat_ranges
        and getattr(cls, "_cat_file", None) is not AsyncFileSystem._cat_file
    )


def _is_http(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's HTTPFileSystem (http and https URLs)."""
    return any(
        cls.__module__ == "fsspec.implementations.http" and cls.__name__ == "HTTPFileSystem"
        for cls in type(fs).__mro__
    )


def _strong_etag(identity: ObjectIdentity) -> str | None:
    """The identity's ETag if it is a strong one (``"..."``, not ``W/"..."``)."""
    etag = dict(identity.fields).get("ETag")
    if etag and etag.startswith('"') and etag.endswith('"') and len(etag) >= 2:
        return etag
    return None


def _is_s3(fs: Any) -> bool:
    """Whether ``fs`` is an s3fs filesystem (checked without importing s3fs)."""
    return any(
        cls.__module__.split(".")[0] == "s3fs" and cls.__name__ == "S3FileSystem"
        for cls in type(fs).__mro__
    )


def _split(requests: Sequence[tuple[int, memoryview]], part: int) -> list[tuple[int, memoryview]]:
    out: list[tuple[int, memoryview]] = []
    for start, view in requests:
        n = view.nbytes
        if n <= part:
            out.append((start, view))
            continue
        for o in range(0, n, part):
            out.append((start + o, view[o : o + part]))
    return out


def read_cache_file(path: str) -> bytes | None:
    """The content of a local cache file, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_cache_file(path: str, data: bytes) -> None:
    """Write a local cache file atomically (write to a temporary name, then rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_object(url: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write ``data`` as the whole object at ``url`` (any fsspec URL; the package's tools'
    small outputs, e.g. ``npystore refs -o``)."""
    options = dict(storage_options or {})
    options.pop(BUDGET_OPTION, None)  # npystore's own, for reads
    with fsspec.open(url, "wb", **options) as f:
        f.write(data)


def open_reader(
    url: str | BinaryFile,
    storage_options: Mapping[str, Any] | None = None,
    *,
    head: int = OPEN_HEAD,
    tail: int = 0,
) -> RangeReader:
    """Open a reader on ``url`` (any fsspec URL, chained URLs included).

    One request captures the object's size and identity. On S3 that request is a ranged
    ``GetObject`` of the first ``head`` bytes (the magic bytes every format starts with; a
    format whose metadata sits at the start, like HDF5, asks for more, since a round trip
    costs about the same for 128 bytes or 64 KiB); elsewhere it is ``info`` and no data is
    read.

    Parameters
    ----------
    url : str or file object
        Local path or fsspec URL, e.g. ``"s3://bucket/a.npy"`` or ``"simplecache::s3://..."``;
        or an open, seekable binary file object, read from its current position to its end
        (see :mod:`npystore.fetch.fileobj`; no request, ``storage_options`` must be empty).
    storage_options : mapping, optional
        Keyword arguments for the filesystem (fsspec's ``storage_options``), plus npystore's
        own ``"npystore_read_budget"``: seconds one remote byte range (and the opening
        request) may take, all retries included (default: the environment variable
        ``NPYSTORE_READ_BUDGET``, else :data:`READ_BUDGET`, 300 s; ``inf`` for none). It is
        removed before the filesystem is made.
    head : int
        Bytes to read with the identity on S3 (0: a plain ``HeadObject``).
    tail : int
        If positive, read the object's last ``tail`` bytes with the identity instead (one
        suffix-range ``GetObject``), for formats whose index is at the end.

    Returns
    -------
    RangeReader

    Raises
    ------
    FetchError
        The opening request failed after its attempts or its time budget.
    FileNotFoundError, PermissionError
        The object does not exist, or may not be read (the message names the URL).
    UnsupportedError
        A protocol fsspec does not know; a file object that cannot seek.
    MissingDependencyError
        The protocol's filesystem package (s3fs, aiohttp, gcsfs, ...) is not installed (an
        :class:`UnsupportedError` and an :class:`ImportError`).
    ValueError
        ``npystore_read_budget`` (or ``NPYSTORE_READ_BUDGET``) is not a positive number.
    """
    if is_file_object(url):
        if storage_options:
            raise TypeError("storage_options apply to URLs, not to an open file object")
        source = FileSource(url)
        identity = ObjectIdentity(source.name, source.size, source.fields)
        return RangeReader(None, "", identity, source=source)
    if not isinstance(url, (str, os.PathLike)):
        raise TypeError(
            f"expected a path, a URL or a binary file object with read, seek and tell, "
            f"got {type(url).__name__}"
        )
    options = dict(storage_options or {})
    budget = remote.budget_from(options.pop(BUDGET_OPTION, None))
    fs, path = opening.filesystem(os.fspath(url), options)
    name = fs.unstrip_protocol(path) if not isinstance(fs, LocalFileSystem) else path
    if tail > 0 and _is_s3(fs):
        opened, last = opening.s3_open(fs, path, name, -tail, budget)
        return RangeReader(
            fs, path, ObjectIdentity.from_info(name, opened), tail=last, budget=budget
        )
    if head > 0 and _is_s3(fs):
        opened, first = opening.s3_open(fs, path, name, head, budget)
        return RangeReader(
            fs, path, ObjectIdentity.from_info(name, opened), head=first, budget=budget
        )
    info = opening.info_within(fs, path, name, budget)
    if isinstance(fs, LocalFileSystem):
        st = os.stat(path)
        info = {"size": st.st_size, "mtime": st.st_mtime, "ino": st.st_ino, "type": info["type"]}
    return RangeReader(fs, path, ObjectIdentity.from_info(name, info), budget=budget)
