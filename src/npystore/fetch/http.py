"""http(s) range reads (fsspec's HTTPFileSystem), pinned by ETag (part of the fetch layer).

:class:`HttpRanges` sends concurrent ranged GETs on fsspec's event loop and session, each
with ``If-Match`` and the strong ETag the server reported at open (a replaced object answers
412), and compares each response's ``ETag`` with it (a mismatch, or no ETag at all, is a
:class:`~npystore.errors.ConsistencyError`); without a strong ETag at open, unpinned.

A server that ignores ``Range`` (``python -m http.server``) answers the first ranged GET
with ``200`` and the whole object: an object of at most :data:`IGNORED_RANGE_MAX` bytes is
kept from that answer and every later read of the reader is served from it (one GET in all);
a larger one raises :class:`~npystore.errors.UnsupportedError` at once, without reading the
body or retrying, saying to read it through ``simplecache::`` or a download.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

from npystore.errors import ConsistencyError, UnsupportedError
from npystore.fetch import remote, s3direct
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.transport import PinnedRanges

__all__ = ["IGNORED_RANGE_MAX", "HttpRanges", "is_http"]

#: Largest object an http(s) server that ignores ``Range`` may send whole: the reader keeps
#: it in memory and reads nothing more. Larger ones raise UnsupportedError (read them through
#: ``simplecache::`` or download them).
IGNORED_RANGE_MAX: Final = 8 * 2**20

_log = logging.getLogger(__name__)


def is_http(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's HTTPFileSystem (http and https URLs)."""
    return any(
        cls.__module__ == "fsspec.implementations.http" and cls.__name__ == "HTTPFileSystem"
        for cls in type(fs).__mro__
    )


def strong_etag(identity: ObjectIdentity) -> str | None:
    """The identity's ETag if it is a strong one (``"..."``, not ``W/"..."``)."""
    etag = dict(identity.fields).get("ETag")
    if etag and etag.startswith('"') and etag.endswith('"') and len(etag) >= 2:
        return etag
    return None


class HttpRanges(PinnedRanges):
    """Ranged GETs of one http(s) object, with ``If-Match`` and its strong ETag at open.

    Parameters
    ----------
    fs : fsspec.implementations.http.HTTPFileSystem
        The filesystem holding the object.
    path : str
        The object's URL.
    identity : ObjectIdentity
        The object's identity at open.
    budget : float
        Seconds one range may take, all its attempts and waits included.
    """

    strict_etag: ClassVar[bool] = True

    def __init__(self, fs: Any, path: str, identity: ObjectIdentity, budget: float):
        #: Reads carry ``If-Match`` with the strong ETag seen at open (a weak one,
        #: ``W/"..."``, never matches a range request, so it cannot pin).
        self._etag = strong_etag(identity)
        super().__init__(fs, path, identity, budget, self._etag)
        #: The whole object, when its server ignored ``Range`` (see the module doc).
        self._whole: bytes | None = None

    def get_one(self, into: list[memoryview] | None) -> remote.GetOne:
        """Ranged GETs over the filesystem's session (as its ``_cat_file``, plus
        ``If-Match`` and the response's ETag and ``Content-Range`` checked before the body)."""
        fs: Any = self.fs
        options = dict(fs.kwargs)
        base = dict(options.pop("headers", None) or {})
        etag = self._etag
        if etag is not None:
            base["If-Match"] = etag
        url = fs.encode_url(self.path)

        async def one(k: int, start: int, stop: int) -> bytes | memoryview:
            headers = {**base, "Range": f"bytes={start}-{stop - 1}"}
            session = await fs.set_session()
            async with session.get(url, headers=headers, **options) as resp:
                if resp.status == 412 and etag is not None:
                    raise self.changed({"ETag": etag}, start, stop)
                fs._raise_not_found_for_status(resp, self.path)
                self.check_answer(
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

    async def slots(self) -> remote.Limiter | None:
        session = await self.fs.set_session()
        connector = getattr(session, "connector", None)
        advice = (
            "ask for fewer at once with storage_options={{'client_kwargs': {{'connector': "
            "aiohttp.TCPConnector(limit={n})}}}}"
        )
        server = urlsplit(self.path).netloc  # one session serves every host
        return remote.slots(session, getattr(connector, "limit", None), advice, server)

    async def _gather(
        self, ranges: list[tuple[int, int]], into: list[memoryview] | None
    ) -> list[bytes | memoryview]:
        if ranges and self._whole is not None:  # the server ignores Range: it sent it all
            return self._from_whole(ranges, into)
        return await super()._gather(ranges, into)

    def _from_whole(
        self, ranges: list[tuple[int, int]], into: list[memoryview] | None
    ) -> list[bytes | memoryview]:
        whole = self._whole or b""
        if into is None:
            return [whole[start:stop] for start, stop in ranges]
        for (start, stop), view in zip(ranges, into, strict=True):
            view[:] = whole[start:stop]
        return list(into)

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
