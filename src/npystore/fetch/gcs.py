"""Google Cloud Storage range reads (gcsfs), pinned to the object's generation (part of the
fetch layer).

A GCS object's data is identified by its *generation*: a number that changes whenever the
object is written, never when only its metadata changes. So:

- opening (:func:`gcs_open`) is one ranged media GET of the object's first bytes (or its
  last, a suffix range), whose answer carries the generation (``X-Goog-Generation``), the
  size (``Content-Range``) and the bytes; an empty object is asked with ``info``;
- every range (:class:`GcsRanges`) is read from that generation (``generation=`` in the
  URL: a replaced object's old generation is gone, 404, or is served as it was if the
  bucket keeps versions), and every answer's ``X-Goog-Generation`` must be the one opened,
  checked before the body is read, since an emulator or proxy may ignore the parameter
  (fake-gcs-server ignores ``ifGenerationMatch``, so that is not relied on). An answer
  without a generation is refused. A 404 is a :class:`~npystore.errors.ConsistencyError`.

The GETs go over gcsfs's own aiohttp session, with its credentials (``Authorization`` from
gcsfs's token, refreshed by gcsfs), user agent and requester-pays project; retries are
npystore's (:mod:`npystore.fetch.remote`), not gcsfs's. Bodies stream straight into the
caller's buffers. Buckets that gcsfs reads over gRPC (zonal buckets, with gcsfs's
experimental ``ExtendedGcsFileSystem``) are read through gcsfs's ``_cat_file`` instead,
unpinned. Objects stored with a ``Content-Encoding`` (GCS serves them decompressed, whole)
are refused with :class:`~npystore.errors.UnsupportedError`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

from npystore.errors import ConsistencyError, FetchError, UnsupportedError
from npystore.fetch import openget, opening, remote, s3direct
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.remote import READ_BUDGET
from npystore.fetch.transport import PinnedRanges

__all__ = ["GcsRanges", "gcs_open", "is_gcs"]

_log = logging.getLogger(__name__)

#: Statuses retried like a dropped connection.
_RETRYABLE: Final = frozenset({408, 429, 500, 502, 503, 504})


def is_gcs(fs: Any) -> bool:
    """Whether ``fs`` is a gcsfs filesystem (checked without importing gcsfs)."""
    return any(
        cls.__module__.split(".")[0] == "gcsfs" and cls.__name__ == "GCSFileSystem"
        for cls in type(fs).__mro__
    )


async def _zonal(fs: Any, bucket: str) -> bool:
    """Whether gcsfs reads ``bucket`` over gRPC (a zonal bucket; gcsfs caches the answer)."""
    check = getattr(fs, "_is_zonal_bucket", None)
    return bool(await check(bucket)) if check is not None else False


async def _get(
    fs: Any,
    url: str,
    range_header: str,
    *,
    into: memoryview | None = None,
    check: Any = None,
) -> tuple[Mapping[str, str], bytes | memoryview]:
    """One media GET over gcsfs's session: the answer's headers and body (streamed into
    ``into`` if given). ``check(headers)`` sees a data answer before its body is read.

    Raises
    ------
    FileNotFoundError, PermissionError
        404; 401 or 403.
    openget.RangeNotSatisfiable
        416.
    s3direct.RetryableStatus
        408, 429, 5xx.
    FetchError
        Any other status that is not data.
    """
    session = await fs._set_session()
    headers = fs._get_headers({"Range": range_header})
    params = fs._get_params({})
    async with session.get(url, headers=headers, params=params or None) as resp:
        status = resp.status
        if status in (200, 206):
            if check is not None:
                check(resp.headers)
            if into is None:
                data: bytes | memoryview = await resp.read()
            else:
                data = await s3direct.stream_into(resp.content, into)
            return resp.headers, data
        body = (await resp.read())[:300].decode("utf-8", "replace")
    if status == 404:
        raise FileNotFoundError(f"404 from GCS: {body}")
    if status in (401, 403):
        raise PermissionError(f"HTTP {status} from GCS: {body}")
    if status == 416:
        raise openget.RangeNotSatisfiable(body)
    if status in _RETRYABLE:
        raise s3direct.RetryableStatus(f"HTTP {status} from GCS: {body}")
    raise FetchError(f"HTTP {status} from GCS for {url}: {body}")


def _media_url(fs: Any, path: str, generation: str | None) -> str:
    """gcsfs's media URL of ``path`` (with the path's own generation, if any), pinned to
    ``generation`` (``url(path, generation=)`` is newer than npystore's oldest gcsfs)."""
    url: str = fs.url(path)
    if generation and "generation=" not in url:
        url += f"&generation={generation}"
    return url


def gcs_open(
    fs: Any, path: str, name: str, count: int, budget: float = READ_BUDGET
) -> tuple[Mapping[str, Any], bytes]:
    """Identity (an ``info`` dict with the generation) and the first ``count`` bytes (last
    ``-count`` if negative) of a GCS object, from one ranged GET retried within ``budget``
    (see :func:`npystore.fetch.openget.open_within`)."""
    from fsspec.asyn import sync  # noqa: PLC0415 - gcsfs is async

    got: tuple[Mapping[str, Any], bytes] = sync(
        fs.loop, _gcs_opening, fs, path, name, count, budget
    )
    return got


async def _gcs_opening(
    fs: Any, path: str, name: str, count: int, budget: float
) -> tuple[Mapping[str, Any], bytes]:
    bucket, _key, generation = fs.split_path(path)
    if await _zonal(fs, bucket):  # read over gRPC by gcsfs: its info, no bytes
        info: Mapping[str, Any] = await opening.info_attempts(fs, path, name, budget)
        return info, b""
    url = fs.url(path)

    async def attempt(wanted: str) -> openget.Opened:
        headers, data = await _get(fs, url, wanted)
        answered = headers.get("X-Goog-Generation")
        if generation and answered and answered != str(generation):
            raise ConsistencyError(
                f"{name}: asked for generation {generation}, the server answered with "
                f"generation {answered} (it ignored the generation asked for)"
            )
        encoding = headers.get("X-Goog-Stored-Content-Encoding", "identity")
        if encoding.lower() != "identity":
            raise UnsupportedError(
                f"{name}: the object is stored with Content-Encoding {encoding!r}, which GCS "
                f"serves decoded and whole (no byte ranges of the stored bytes); store it "
                f"without a Content-Encoding, or read it whole through a local copy "
                f"('simplecache::{name}')"
            )
        length = headers.get("Content-Length")
        fields = {
            "generation": answered,
            "metageneration": headers.get("X-Goog-Metageneration"),
            "ETag": headers.get("ETag"),
            "LastModified": headers.get("Last-Modified"),
        }
        return openget.Opened(
            headers.get("Content-Range", ""),
            int(length) if length and length.isdigit() else None,
            bytes(data),
            {k: v for k, v in fields.items() if v},
        )

    async def empty() -> Mapping[str, Any]:
        info: Mapping[str, Any] = await fs._info(path)
        return info

    return await openget.open_within(name, count, budget, attempt, empty)


class GcsRanges(PinnedRanges):
    """Ranged media GETs of one GCS object, each from the generation opened.

    Parameters
    ----------
    fs : gcsfs.GCSFileSystem
        The filesystem holding the object.
    path : str
        The object's path on ``fs`` (``bucket/key``, maybe with a generation).
    identity : ObjectIdentity
        The object's identity at open (its ``generation``).
    budget : float
        Seconds one range may take, all its attempts and waits included.
    """

    version_name: ClassVar[str] = "generation"
    version_required: ClassVar[bool] = True

    def __init__(self, fs: Any, path: str, identity: ObjectIdentity, budget: float):
        # ETags are not compared: GCS's change with the metadata, the generation does not
        super().__init__(fs, path, identity, budget, None)
        self._want_version = dict(identity.fields).get("generation") or None
        self._zonal: bool | None = None

    async def _is_zonal(self) -> bool:
        if self._zonal is None:
            self._zonal = await _zonal(self.fs, self.fs.split_path(self.path)[0])
        return self._zonal

    def get_one(self, into: list[memoryview] | None) -> remote.GetOne:
        """Media GETs of the generation opened, each answer's generation checked."""
        fs: Any = self.fs
        generation = self._want_version
        url = _media_url(fs, self.path, generation)

        async def one(k: int, start: int, stop: int) -> bytes | memoryview:
            if await self._is_zonal():
                data: bytes = await fs._cat_file(self.path, start=start, end=stop)
                if into is None or len(data) != stop - start:
                    return data  # (a short answer is retried by the caller)
                into[k][:] = data  # the caller reads the views, not what is returned
                return into[k]

            def check(headers: Mapping[str, str]) -> None:
                self.check_answer(
                    start,
                    stop,
                    None,
                    headers.get("X-Goog-Generation"),
                    headers.get("Content-Range", ""),
                )

            try:
                _, got = await _get(
                    fs,
                    url,
                    f"bytes={start}-{stop - 1}",
                    into=None if into is None else into[k],
                    check=check,
                )
            except FileNotFoundError as exc:
                if generation is None:
                    raise
                raise self.changed({"generation": generation}, start, stop) from exc
            return got

        return one

    async def slots(self) -> remote.Limiter | None:
        """As many as gcsfs's session has connections (aiohttp's limit)."""
        session = await self.fs._set_session()
        connector = getattr(session, "connector", None)
        advice = (
            "ask for fewer at once with storage_options={{'session_kwargs': {{'connector': "
            "aiohttp.TCPConnector(limit={n})}}}}"
        )
        server = urlsplit(self.fs._location).netloc
        return remote.slots(session, getattr(connector, "limit", None), advice, server)
