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
  Each response's ``Content-Range`` total is checked against the size at open too;
- http(s): concurrent ranged GETs on fsspec's event loop, each with ``If-Match`` and the
  strong ETag the server reported at open (a replaced object answers 412:
  :class:`~npystore.errors.ConsistencyError`); without a strong ETag, as below;
- everything else: ``fs.cat_ranges``, many ranges in flight at once (async filesystems run
  them concurrently on fsspec's event loop).

Remote results are length-checked; a short body, a dropped connection or a server error is
retried with exponential backoff and jitter, up to :data:`REMOTE_ATTEMPTS` attempts, before a
:class:`~npystore.errors.FetchError` names the URL, the range and the last problem.

Readers pickle as ``(filesystem, path, identity)``: a dask worker rebuilds the filesystem once
(fsspec caches instances), never once per chunk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import fsspec
from fsspec.implementations.local import LocalFileSystem

from npystore import s3direct
from npystore.errors import ConsistencyError, FetchError

__all__ = ["ObjectIdentity", "RangeReader", "open_reader", "read_cache_file", "write_cache_file"]

#: Remote ranges larger than this are split into parts fetched concurrently.
REMOTE_PART_SIZE: Final = 8 * 2**20
#: Local ranges larger than this are split across the thread pool (when asked to).
LOCAL_PART_SIZE: Final = 16 * 2**20
#: Attempts for a remote range (short body, dropped connection, server error) before giving up.
REMOTE_ATTEMPTS: Final = 6
#: First retry delay in seconds; it doubles per attempt (plus up to 50% jitter), capped.
RETRY_DELAY: Final = 0.05
RETRY_DELAY_MAX: Final = 2.0
#: Most bytes taken from a response stream at a time when it is copied into a buffer.
_STREAM_PIECE: Final = 2**20
#: Bytes read together with the identity when an S3 object is opened (see :func:`open_reader`):
#: enough to recognise every format and to hold a typical .npy header, no array data.
OPEN_HEAD: Final = 128
_CONTENT_RANGE: Final = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")

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
    ):
        self.fs = fs
        self.path = path
        self.identity = identity
        self.local = isinstance(fs, LocalFileSystem)
        self._pinned_s3 = _is_s3(fs)
        #: http(s): reads carry ``If-Match`` with the strong ETag seen at open (a weak one,
        #: ``W/"..."``, never matches a range request, so it cannot pin).
        self._http_etag = _strong_etag(identity) if _is_http(fs) else None
        #: S3: the presigned URL range reads go to (see :mod:`npystore.s3direct`), and
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

    def __reduce__(self) -> tuple[Callable[..., RangeReader], tuple[Any, ...]]:
        # the head stays behind: workers read what they need (it is pinned all the same)
        return (RangeReader, (self.fs, self.path, self.identity))

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
        if self.local:
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
        if self.local:
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
        if self.local:
            if parallel:
                requests = _split(requests, LOCAL_PART_SIZE)
            self._local_readinto(requests, parallel=parallel)
            return
        split = _split(requests, REMOTE_PART_SIZE)
        ranges = [(s, s + v.nbytes) for s, v in split]
        if self._pinned_s3:  # the body streams straight into the views: no extra copy
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
        returned), retried per range; pinned S3 reads only may pass ``into``."""
        if not ranges:
            return []
        results: list[bytes | None] = [None] * len(ranges)
        todo = list(range(len(ranges)))
        for attempt in range(REMOTE_ATTEMPTS):
            wanted = [ranges[i] for i in todo]
            if self._pinned_s3:
                views = None if into is None else [into[i] for i in todo]
                got = self._s3_get_many(wanted, views)
            elif self._http_etag is not None:
                got = self._http_get_many(wanted, self._http_etag)
            else:
                got = self._cat_ranges(wanted)
            retry = []
            last_problem: BaseException | str | None = None
            for i, data in zip(todo, got, strict=True):
                want = ranges[i][1] - ranges[i][0]
                if isinstance(data, ConsistencyError):
                    raise data
                if isinstance(data, FileNotFoundError):
                    raise ConsistencyError(
                        f"{self.url}: the object disappeared since it was opened ({data})"
                    )
                if isinstance(data, BaseException):
                    last_problem = data
                    retry.append(i)
                elif len(data) != want:
                    last_problem = f"got {len(data)} bytes, expected {want}"
                    retry.append(i)
                else:
                    results[i] = b"" if into is not None else bytes(data)
            if not retry:
                break
            todo = retry
            if attempt == REMOTE_ATTEMPTS - 1:
                start, stop = ranges[retry[0]]
                raise FetchError(
                    f"{self.url}: reading bytes [{start}, {stop}) failed after "
                    f"{REMOTE_ATTEMPTS} attempts: {last_problem}"
                )
            _backoff(attempt)
        return [r if r is not None else b"" for r in results]

    def _cat_ranges(self, ranges: list[tuple[int, int]]) -> list[Any]:
        got: list[Any] = self.fs.cat_ranges(
            [self.path] * len(ranges),
            [a for a, _ in ranges],
            [b for _, b in ranges],
            on_error="return",
        )
        return got

    def _http_get_many(self, ranges: list[tuple[int, int]], etag: str) -> list[Any]:
        """Each range as bytes or the exception it raised, with ``If-Match: etag``; a 412
        (the object changed) becomes :class:`~npystore.errors.ConsistencyError`."""
        from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

        fs: Any = self.fs
        headers = {**dict(fs.kwargs.get("headers") or {}), "If-Match": etag}

        async def one(start: int, stop: int) -> bytes:
            try:
                data: bytes = await fs._cat_file(self.path, start=start, end=stop, headers=headers)
            except Exception as exc:
                if getattr(exc, "status", None) == 412:
                    raise ConsistencyError(
                        f"{self.url}: the object changed since it was opened (ETag {etag} no "
                        f"longer matches); reopen it"
                    ) from exc
                raise
            return data

        async def all_ranges() -> list[Any]:
            return await asyncio.gather(*(one(a, b) for a, b in ranges), return_exceptions=True)

        got: list[Any] = sync(fs.loop, all_ranges)
        return got

    def _s3_get_many(
        self, ranges: list[tuple[int, int]], into: list[memoryview] | None = None
    ) -> list[Any]:
        """Each range as bytes (or the part of its ``into`` view filled) or the exception it
        raised, pinned to the opened object."""
        from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

        bucket, key, path_version = self.fs.split_path(self.path)
        fields = dict(self.identity.fields)
        version = fields.get("VersionId") or fields.get("version_id") or path_version
        etag = fields.get("ETag") or fields.get("etag")
        pin = {"VersionId": version} if version else {"IfMatch": etag} if etag else {}

        async def all_ranges() -> list[Any]:
            signed = await self._direct_url(bucket, key, version)
            return await asyncio.gather(
                *(
                    self._s3_get(bucket, key, pin, a, b, None if into is None else into[k], signed)
                    for k, (a, b) in enumerate(ranges)
                ),
                return_exceptions=True,
            )

        got: list[Any] = sync(self.fs.loop, all_ranges)
        return got

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
        if signed is not None and not self._direct_off:
            try:
                content_range, data = await s3direct.direct_get(
                    signed, start, stop, if_match=pin.get("IfMatch"), into=into
                )
            except s3direct.PreconditionFailed as exc:
                raise self._changed(pin) from exc
            except s3direct.DirectUnusable as exc:  # botocore handles it from now on
                _log.debug("%s: direct GET refused (%s), reading through botocore", self.url, exc)
                self._direct_off = True
            else:
                self._check_total(content_range)
                return data
        try:
            resp, data = await _get_object(
                self.fs, bucket, key, f"bytes={start}-{stop - 1}", pin, into
            )
        except OSError as exc:
            if _error_code(exc) in ("PreconditionFailed", "412"):
                raise self._changed(pin) from exc
            raise
        self._check_total(str(resp.get("ContentRange") or ""))
        return data

    def _changed(self, pin: Mapping[str, str]) -> ConsistencyError:
        return ConsistencyError(
            f"{self.url}: the object changed since it was opened "
            f"({', '.join(f'{k} {v}' for k, v in pin.items())} no longer matches); reopen it"
        )

    def _check_total(self, content_range: str) -> None:
        """A response's ``Content-Range`` total must be the size seen at open."""
        match = _CONTENT_RANGE.fullmatch(content_range)
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


async def _get_object(
    fs: Any,
    bucket: str,
    key: str,
    byte_range: str,
    pin: Mapping[str, str],
    into: memoryview | None = None,
) -> tuple[dict[str, Any], bytes | memoryview]:
    """One ranged ``GetObject``: the response and its body (streamed into ``into`` if given,
    see :func:`_stream_into`); the body is always closed."""
    resp: dict[str, Any] = await fs._call_s3(
        "get_object", Bucket=bucket, Key=key, Range=byte_range, **pin
    )
    body = resp["Body"]
    try:
        data = await body.read() if into is None else await _stream_into(body, into)
    finally:
        body.close()
    return resp, data


def _backoff(attempt: int) -> None:
    """Sleep before retry ``attempt + 1``: :data:`RETRY_DELAY` doubling per attempt, capped
    at :data:`RETRY_DELAY_MAX`, plus up to 50% jitter."""
    delay = min(RETRY_DELAY_MAX, RETRY_DELAY * 2**attempt)
    time.sleep(delay * (1 + random.random() / 2))


async def _stream_into(body: Any, view: memoryview) -> memoryview:
    """Copy a response body into ``view`` as it arrives (``read(amt)`` of aiobotocore's
    ``StreamingBody``); the part filled. A body longer than the view reports one byte more
    than the view holds, so the caller's length check fails."""
    filled = 0
    while True:
        piece = await body.read(min(_STREAM_PIECE, view.nbytes - filled + 1))
        if not piece:
            return view[:filled]
        end = filled + len(piece)
        if end > view.nbytes:
            return memoryview(bytes(view.nbytes + 1))
        view[filled:end] = piece
        filled = end


def _opening_bytes(resp: Mapping[str, Any], data: bytes, count: int) -> tuple[int, bytes] | str:
    """``(size, bytes)`` from the answer to the opening GET, or what is wrong with it.

    ``count > 0`` asked for the first ``count`` bytes, ``count < 0`` for the last ``-count``.
    A server that ignores the range sends the whole object (no ``Content-Range``).
    """
    content_range = str(resp.get("ContentRange") or "")
    match = _CONTENT_RANGE.fullmatch(content_range)
    if match is None or match.group(3) == "*":
        if resp.get("ContentLength") != len(data):
            return f"no usable Content-Range ({content_range!r}) and a short body"
        size = len(data)
        want = min(abs(count), size)
        return size, data[:want] if count > 0 else data[size - want :]
    size = int(match.group(3))
    want = min(abs(count), size)
    first = 0 if count > 0 else size - want
    if int(match.group(1)) != first or len(data) != want:
        return f"got {len(data)} bytes as {content_range!r}, expected bytes {first}+{want}"
    return size, bytes(data)


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


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code behind an exception (s3fs wraps botocore's ClientError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, Mapping):
            error = response.get("Error")
            if isinstance(error, Mapping) and error.get("Code"):
                return str(error["Code"])
        current = current.__cause__ or current.__context__
    return None


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
    with fsspec.open(url, "wb", **dict(storage_options or {})) as f:
        f.write(data)


def open_reader(
    url: str,
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
    url : str
        Local path or fsspec URL, e.g. ``"s3://bucket/a.npy"`` or ``"simplecache::s3://..."``.
    storage_options : mapping, optional
        Keyword arguments for the filesystem (fsspec's ``storage_options``).
    head : int
        Bytes to read with the identity on S3 (0: a plain ``HeadObject``).
    tail : int
        If positive, read the object's last ``tail`` bytes with the identity instead (one
        suffix-range ``GetObject``), for formats whose index is at the end.

    Returns
    -------
    RangeReader
    """
    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    name = fs.unstrip_protocol(path) if not isinstance(fs, LocalFileSystem) else path
    if tail > 0 and _is_s3(fs):
        identity, last = _s3_open(fs, path, name, -tail)
        return RangeReader(fs, path, identity, tail=last)
    if head > 0 and _is_s3(fs):
        identity, first = _s3_open(fs, path, name, head)
        return RangeReader(fs, path, identity, head=first)
    info = fs.info(path)
    if isinstance(fs, LocalFileSystem):
        st = os.stat(path)
        info = {"size": st.st_size, "mtime": st.st_mtime, "ino": st.st_ino, "type": info["type"]}
    return RangeReader(fs, path, ObjectIdentity.from_info(name, info))


def _s3_open(fs: Any, path: str, name: str, count: int) -> tuple[ObjectIdentity, bytes]:
    """Identity and the first ``count`` bytes (last ``-count`` if negative) of an S3 object,
    from one ranged ``GetObject``.

    The response carries what ``HeadObject`` would (ETag, LastModified, VersionId) and the
    total size in ``Content-Range``, so opening costs one round trip instead of two. An empty
    object (no range can be satisfied) falls back to ``info``.
    """
    from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

    bucket, key, version = fs.split_path(path)
    pin = {"VersionId": version} if version else {}
    asked = count  # > 0: a prefix of that many bytes, < 0: a suffix
    span = f"[0, {count})" if count > 0 else f"the last {-count}"

    async def get() -> tuple[dict[str, Any], bytes]:
        wanted = f"bytes=0-{asked - 1}" if asked > 0 else f"bytes={asked}"
        resp, data = await _get_object(fs, bucket, key, wanted, pin)
        return resp, bytes(data)  # already bytes (no ``into``): no copy

    problem: BaseException | str | None = None
    for attempt in range(REMOTE_ATTEMPTS):
        try:
            resp, data = sync(fs.loop, get)
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as exc:  # retried like any range read; FetchError after the budget
            code = _error_code(exc)
            if code in ("InvalidRange", "416") and asked < 0:
                # S3 answers a suffix longer than the object with all of it; some servers
                # (rclone, ...) refuse it instead. Ask for a prefix of the same length: all
                # of a smaller object (the tail wanted), else only a bounded prefix
                asked = -count
                continue
            if code in ("InvalidRange", "416"):  # an empty object: no range is satisfiable
                return ObjectIdentity.from_info(name, fs.info(path)), b""
            if code in ("AccessDenied", "403", "NoSuchBucket", "NoSuchKey", "404"):
                raise
            problem = exc
        else:
            got = _opening_bytes(resp, data, asked)
            if isinstance(got, str):
                problem = got
            else:
                size, part = got
                if asked != count and len(part) < size:  # a prefix, not the tail: no tail
                    part = b""
                info = {
                    "size": size,
                    "ETag": resp.get("ETag"),
                    "LastModified": resp.get("LastModified"),
                    "VersionId": resp.get("VersionId"),
                }
                return ObjectIdentity.from_info(name, info), part
        if attempt < REMOTE_ATTEMPTS - 1:
            _backoff(attempt)
    raise FetchError(
        f"{name}: reading bytes {span} at open failed after {REMOTE_ATTEMPTS} attempts: {problem}"
    )
