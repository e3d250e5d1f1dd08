""":class:`RangeReader`: byte ranges of one object, pinned to its identity at open.

The reader checks every range against the object's size, serves what it holds in memory
(the first or last bytes read together with the identity at open) and hands everything else
to its backend, a :class:`~npystore.fetch.transport.Transport` chosen once, when the reader
is made, by :func:`transport_for`: local ``preadv``, an open file object, pinned S3 or http
GETs, or another fsspec filesystem's ``cat``.

Readers pickle as ``(filesystem, path, identity, budget)``: a dask worker rebuilds the
filesystem once (fsspec caches instances), never once per chunk.

A reader of a plain local path needs no fsspec: it is made without a filesystem
(``fs=None, local=True``), and :attr:`RangeReader.fs` makes fsspec's ``LocalFileSystem``
only when something asks for it. The remote backends (and asyncio, fsspec, aiohttp with
them) are imported only for a remote reader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from npystore.errors import ConsistencyError, FetchError
from npystore.fetch import budget as budgets
from npystore.fetch.fileobj import FileSource
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.local import FileRanges, LocalRanges
from npystore.fetch.transport import Transport

__all__ = ["RangeReader", "transport_for"]


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's ``LocalFileSystem`` (checked without importing fsspec)."""
    return any(
        cls.__module__ == "fsspec.implementations.local" and cls.__name__ == "LocalFileSystem"
        for cls in type(fs).__mro__
    )


def transport_for(
    fs: Any, path: str, identity: ObjectIdentity, budget: float, source: FileSource | None
) -> Transport:
    """The backend that reads the object's ranges: the file object if there is one, else by
    the kind of ``fs`` (local, S3, http, GCS, Azure, another async filesystem whose
    ``_cat_ranges`` is fsspec's, anything else); ``fs=None`` is a local path."""
    if source is not None:
        return FileRanges(source, identity)
    if fs is None or is_local(fs):
        return LocalRanges(path, identity)
    # the remote backends, imported for a remote object only (they bring asyncio and fsspec)
    from npystore.fetch.azure import AzureRanges, is_azure  # noqa: PLC0415
    from npystore.fetch.gcs import GcsRanges, is_gcs  # noqa: PLC0415
    from npystore.fetch.generic import (  # noqa: PLC0415
        BlockCacheRanges,
        CatFileRanges,
        CatRangesRounds,
        default_cat_ranges,
        is_block_cache,
    )
    from npystore.fetch.http import HttpRanges, is_http  # noqa: PLC0415
    from npystore.fetch.s3 import S3Ranges, is_s3  # noqa: PLC0415

    if is_s3(fs):
        return S3Ranges(fs, path, identity, budget)
    if is_http(fs):
        return HttpRanges(fs, path, identity, budget)
    if is_gcs(fs):
        return GcsRanges(fs, path, identity, budget)
    if is_azure(fs):
        return AzureRanges(fs, path, identity, budget)
    if is_block_cache(fs):
        return BlockCacheRanges(fs, path, identity, budget)
    if getattr(fs, "async_impl", False) and default_cat_ranges(fs):
        return CatFileRanges(fs, path, identity, budget)
    return CatRangesRounds(fs, path, identity, budget)


class RangeReader:
    """Read byte ranges of one object, pinned to the identity it had at open.

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem or None
        The filesystem holding the object; ``None`` for a local path (made on first use of
        :attr:`fs`) or a file object.
    path : str
        The object's path on ``fs``.
    identity : ObjectIdentity
        The object's identity captured at open.
    head, tail : bytes
        The object's first (last) bytes, read with the identity at open.
    budget : float, optional
        Seconds one remote range may take, all attempts included (see
        :func:`npystore.fetch.remote.budget_from`; default: ``NPYSTORE_READ_BUDGET`` or
        :data:`~npystore.fetch.remote.READ_BUDGET`).
    source : FileSource, optional
        An open file object to read instead of ``fs`` and ``path`` (both unused then).
    """

    #: Gap (bytes) below which neighbouring regions are read as one range.
    max_gap: int
    #: Largest temporary buffer for a merged, non-contiguous range.
    max_span: int

    def __init__(
        self,
        fs: Any,
        path: str,
        identity: ObjectIdentity,
        *,
        head: bytes = b"",
        tail: bytes = b"",
        budget: float | None = None,
        source: FileSource | None = None,
    ):
        self._fs = fs
        self.path = path
        self.identity = identity
        #: The file object read instead of a filesystem path, if any.
        self.source = source
        #: Seconds one remote range may take, all its attempts and waits included.
        self.budget = budgets.budget_from(budget)
        #: Whether the object is a local file (read with ``preadv``; ``mmap_mode`` works).
        self.local = source is None and (fs is None or is_local(fs))
        #: How the ranges not held in memory are read (see :func:`transport_for`).
        self.transport = transport_for(fs, path, identity, self.budget, source)
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
        if self.source is not None:  # pickles by value (BytesIO) or refuses (a file handle)
            return (_restore_file, (self.source, self.identity))
        return (_restore, (self._fs, self.path, self.identity, self.budget))

    @property
    def fs(self) -> Any:
        """The fsspec filesystem holding the object (``LocalFileSystem`` for a local path,
        made on first use; ``None`` for a file object)."""
        if self._fs is None and self.local:
            from fsspec.implementations.local import LocalFileSystem  # noqa: PLC0415

            self._fs = LocalFileSystem()
        return self._fs

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
            return self.head[start:] + self.transport.read([(len(self.head), stop)])[0]
        if self.tail and start >= self._tail_start:
            return self.tail[start - self._tail_start : stop - self._tail_start]
        return self.transport.read([(start, stop)])[0]

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
            got = iter(self.transport.read(rest))
            return [
                self.head[start:stop] if stop <= n else self.head[start:n] + next(got)
                for start, stop in ranges
            ]
        return self.transport.read(list(ranges))

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
        rest = self._to_read(requests)
        if rest is not None:
            self.transport.readinto(rest, parallel=parallel)

    def start_readinto(
        self, requests: Sequence[tuple[int, memoryview]], *, parallel: bool = False
    ) -> Future[None]:
        """:meth:`readinto_many` started in the background: returns at once.

        The returned future is done when every view is filled, or with the read's error. The
        views must stay untouched until then, and the caller must wait for it. Reads started
        one after the other are in flight together (remotely they go out on the event loop
        at once, with no thread each; see :meth:`~npystore.fetch.transport.Transport.start`).

        Raises
        ------
        FetchError
            A range lies outside the object (checked before anything starts).
        """
        rest = self._to_read(requests)
        if rest is None:
            done: Future[None] = Future()
            done.set_running_or_notify_cancel()
            done.set_result(None)
            return done
        return self.transport.start(rest, parallel=parallel)

    def _to_read(
        self, requests: Sequence[tuple[int, memoryview]]
    ) -> Sequence[tuple[int, memoryview]] | None:
        """The requests checked against the object's size, less what :attr:`head` serves
        (when :attr:`data_from_head` allows it); None when it serves them all."""
        for start, view in requests:
            self._check_range(start, start + view.nbytes)
        if self.data_from_head and self.head:
            return self._from_head(requests) or None
        return requests

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
