"""Azure Blob range reads (adlfs), pinned by ETag (part of the fetch layer).

- Opening (:func:`azure_open`) is one ranged GET of the blob's first bytes, whose answer
  carries the ETag, the version id (on accounts that keep versions), the size
  (``Content-Range``) and the bytes; an empty blob is asked with ``info``. Azure has no
  suffix ranges, so an archive's tail is read after the opening.
- Every range (:class:`AzureRanges`) is a GET with ``If-Match: <ETag>`` (and the version
  id in the URL when the blob was opened by version): a replaced blob answers 412 and the
  read raises :class:`~npystore.errors.ConsistencyError`. Every answer's ``ETag``, version
  id and ``Content-Range`` total are checked before its body is read, whatever the server
  did with the condition.

The GETs take the cheapest path that sends the same request (measured on Azurite: adlfs's
``_cat_file`` costs 4-5 ms of CPU per small range, the SDK's ``download_blob`` 4 ms, a
bare aiohttp GET 1 ms):

- *direct*: a bare aiohttp session (:func:`npystore.fetch.s3direct.direct_session`) and a
  URL that carries its own authorization: a read-only service SAS for this blob signed
  with the account key the filesystem holds (valid :data:`SAS_EXPIRES` s, signed again
  after :data:`SAS_REUSE` s), the filesystem's own SAS token, or no signature for
  anonymous access. Proxies from the environment are honoured as in
  :mod:`npystore.fetch.s3direct`.
- *SDK*: for credentials that only the SDK can apply (Azure AD tokens and the like),
  when ``NPYSTORE_AZURE_DIRECT=0``, and for the rest of a reader's life once a direct
  GET is refused (401, 403, a redirect, TLS): the blob client's ``download_blob`` with
  the ETag condition, its retries off (npystore's are the only ones).

Retries and the time budget are npystore's (:mod:`npystore.fetch.remote`); bodies of the
direct path stream straight into the caller's buffers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import urlsplit

from npystore.errors import FetchError
from npystore.fetch import openget, remote, s3direct
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.remote import READ_BUDGET
from npystore.fetch.transport import PinnedRanges

__all__ = [
    "DIRECT_ENV",
    "SAS_EXPIRES",
    "SAS_REUSE",
    "AzureRanges",
    "BlobTarget",
    "azure_open",
    "is_azure",
]

_log = logging.getLogger(__name__)

#: Seconds a SAS npystore signs is valid, and seconds it is used before a new one is signed.
SAS_EXPIRES: Final = 900
SAS_REUSE: Final = 300
#: Set to ``0`` to read through the SDK only.
DIRECT_ENV: Final = "NPYSTORE_AZURE_DIRECT"
#: Statuses retried like a dropped connection.
_RETRYABLE: Final = frozenset({408, 429, 500, 502, 503, 504})


def is_azure(fs: Any) -> bool:
    """Whether ``fs`` is adlfs's blob filesystem (``az://``, ``abfs://``; checked without
    importing adlfs)."""
    return any(
        cls.__module__.split(".")[0] == "adlfs" and cls.__name__ == "AzureBlobFileSystem"
        for cls in type(fs).__mro__
    )


def _direct_enabled() -> bool:
    return os.environ.get(DIRECT_ENV, "1").strip().lower() not in ("0", "false", "no")


@dataclass(frozen=True, slots=True)
class _Direct:
    """A URL that authorizes itself, and how to reach it."""

    url: str
    signed_at: float
    api_version: str
    proxy: str | None = None
    proxy_auth: Any = field(default=None, compare=False, repr=False)

    def fresh(self) -> bool:
        return time.monotonic() - self.signed_at < SAS_REUSE


class _Unusable(Exception):
    """The direct path cannot serve this blob; the SDK reads it from now on."""


class BlobTarget:
    """One blob of an adlfs filesystem and the GETs that read it (direct or through the
    SDK, see the module doc); shared by the opening and the reader's ranges.

    Parameters
    ----------
    fs : adlfs.AzureBlobFileSystem
        The filesystem.
    path : str
        ``container/blob`` (maybe with ``?versionid=``, on a version-aware filesystem).
    version : str, optional
        The version to read (the one opened), else the path's.
    """

    def __init__(self, fs: Any, path: str, version: str | None = None):
        self.fs = fs
        self.container, self.blob, path_version = fs.split_path(path)
        self.version: str | None = version or path_version or None
        self._direct: _Direct | None = None
        self._direct_off = not _direct_enabled()
        connect = fs._timeout_kwargs.get("connection_timeout") if fs._timeout_kwargs else None
        read = fs._timeout_kwargs.get("read_timeout") if fs._timeout_kwargs else None
        self.timeouts = (float(connect or 60), float(read or 60))

    def client(self) -> Any:
        """The SDK's async client of this blob (and version)."""
        return self.fs.service_client.get_blob_client(
            self.container, self.blob, version_id=self.version
        )

    async def direct(self) -> _Direct | None:
        """The self-authorizing URL (signed again when stale), or None: the SDK's path."""
        if self._direct_off:
            return None
        current = self._direct
        if current is None or not current.fresh():
            try:
                current = await self._sign()
            except Exception as exc:  # any failure to sign: the SDK serves this blob
                _log.debug("%s: no direct URL, reading through the SDK: %r", self.blob, exc)
                current = None
            if current is None:
                self._direct_off = True
            self._direct = current
        return current

    async def _sign(self) -> _Direct | None:
        bc = self.client()
        credential = bc.credential
        url: str = bc.url
        if credential is None or "sig=" in url:  # anonymous, or a SAS already in the URL
            pass
        elif hasattr(credential, "account_key") and hasattr(credential, "account_name"):
            from azure.storage.blob import (  # noqa: PLC0415 - adlfs's dependency
                BlobSasPermissions,
                generate_blob_sas,
            )

            sas = generate_blob_sas(
                credential.account_name,
                self.container,
                self.blob,
                account_key=credential.account_key,
                permission=BlobSasPermissions(read=True),
                expiry=datetime.now(UTC) + timedelta(seconds=SAS_EXPIRES),
                version_id=self.version,
            )
            url += ("&" if "?" in url else "?") + sas
        else:  # an Azure AD token or another credential only the SDK applies
            return None
        proxy, proxy_auth = await asyncio.to_thread(s3direct.env_proxy, url)
        return _Direct(url, time.monotonic(), str(bc.api_version), proxy, proxy_auth)

    async def session(self) -> Any:
        """The direct path's session (see :func:`npystore.fetch.s3direct.direct_session`)."""
        return await s3direct.direct_session(None, s3direct.DIRECT_CONNECTIONS, self.timeouts)

    async def get(
        self,
        start: int,
        stop: int,
        *,
        if_match: str | None = None,
        into: memoryview | None = None,
        check: Any = None,
    ) -> tuple[dict[str, str | None], bytes | memoryview]:
        """GET bytes ``[start, stop)`` (fewer at the blob's end): the identity headers
        (``ETag``, ``VersionId``, ``Content-Range``, ``Content-Length``,
        ``Last-Modified``) and the body. ``check(headers)`` sees a data answer's identity
        headers before its body is read.

        Raises
        ------
        FileNotFoundError, PermissionError
            404; 401 or 403 on the SDK's path.
        s3direct.PreconditionFailed
            412: the ETag no longer matches.
        openget.RangeNotSatisfiable
            416 (an empty blob).
        s3direct.RetryableStatus
            408, 429, 5xx.
        """
        direct = await self.direct()
        if direct is not None:
            try:
                return await self._direct_get(direct, start, stop, if_match, into, check)
            except _Unusable as exc:
                _log.debug("%s: direct GET refused (%s), reading through the SDK", self.blob, exc)
                self._direct_off = True
        return await self._sdk_get(start, stop, if_match, into, check)

    async def _direct_get(
        self,
        direct: _Direct,
        start: int,
        stop: int,
        if_match: str | None,
        into: memoryview | None,
        check: Any,
    ) -> tuple[dict[str, str | None], bytes | memoryview]:
        import aiohttp  # noqa: PLC0415 - azure-storage-blob's async transport needs it

        session = await self.session()
        headers = {"Range": f"bytes={start}-{stop - 1}"}
        headers["x-ms-version"] = direct.api_version
        if if_match:
            headers["If-Match"] = if_match
        try:
            async with session.get(
                direct.url,
                headers=headers,
                proxy=direct.proxy,
                proxy_auth=direct.proxy_auth,
                allow_redirects=False,
            ) as resp:
                status = resp.status
                if status in (200, 206):
                    found = _identity(resp.headers)
                    if check is not None:
                        check(found)
                    if into is None:
                        data: bytes | memoryview = await resp.read()
                    else:
                        data = await s3direct.stream_into(resp.content, into)
                    return found, data
                body = (await resp.read())[:300].decode("utf-8", "replace")
        except aiohttp.ClientSSLError as exc:
            raise _Unusable(f"TLS failed on the direct path: {exc}") from exc
        if status == 404:
            raise FileNotFoundError(f"404 from Azure: {body}")
        if status == 412:
            raise s3direct.PreconditionFailed(f"412 from Azure: {body}")
        if status == 416:
            raise openget.RangeNotSatisfiable(body)
        if status in _RETRYABLE:
            raise s3direct.RetryableStatus(f"HTTP {status} from Azure: {body}")
        raise _Unusable(f"HTTP {status} from Azure: {body}")

    async def _sdk_get(
        self,
        start: int,
        stop: int,
        if_match: str | None,
        into: memoryview | None,
        check: Any,
    ) -> tuple[dict[str, str | None], bytes | memoryview]:
        from azure.core import MatchConditions  # noqa: PLC0415 - adlfs's dependency
        from azure.core.exceptions import (  # noqa: PLC0415
            ClientAuthenticationError,
            HttpResponseError,
            ResourceModifiedError,
            ResourceNotFoundError,
        )

        pin: dict[str, Any] = {}
        if if_match:
            pin = {"etag": if_match, "match_condition": MatchConditions.IfNotModified}
        try:
            async with self.client() as bc:
                downloader = await bc.download_blob(
                    offset=start,
                    length=stop - start,
                    max_concurrency=1,
                    retry_total=0,  # npystore retries
                    **pin,
                )
                props = downloader.properties
                found: dict[str, str | None] = {
                    "ETag": props.etag,
                    "VersionId": props.version_id,
                    "Content-Range": props.content_range or "",
                    "Content-Length": str(downloader.size),
                    "Last-Modified": str(props.last_modified or "") or None,
                }
                if check is not None:
                    check(found)
                data = await downloader.readall()
        except ResourceModifiedError as exc:
            raise s3direct.PreconditionFailed(str(exc)) from exc
        except ResourceNotFoundError as exc:
            raise FileNotFoundError(f"404 from Azure: {exc.message}") from exc
        except ClientAuthenticationError as exc:
            raise PermissionError(f"Azure refused the credentials: {exc.message}") from exc
        except HttpResponseError as exc:
            code = exc.status_code
            if code == 416:
                raise openget.RangeNotSatisfiable(str(exc)) from exc
            if code in _RETRYABLE:
                raise s3direct.RetryableStatus(f"HTTP {code} from Azure: {exc.message}") from exc
            raise FetchError(f"HTTP {code} from Azure for {self.blob}: {exc.message}") from exc
        if into is None:
            return found, data
        if len(data) > into.nbytes:
            return found, memoryview(bytes(into.nbytes + 1))  # the length check fails
        into[: len(data)] = data
        return found, into[: len(data)]


def _identity(headers: Mapping[str, str]) -> dict[str, str | None]:
    return {
        "ETag": headers.get("ETag"),
        "VersionId": headers.get("x-ms-version-id"),
        "Content-Range": headers.get("Content-Range", ""),
        "Content-Length": headers.get("Content-Length"),
        "Last-Modified": headers.get("Last-Modified"),
    }


def azure_open(
    fs: Any, path: str, name: str, count: int, budget: float = READ_BUDGET
) -> tuple[Mapping[str, Any], bytes]:
    """Identity (an ``info`` dict with the ETag) and the first ``count`` (> 0) bytes of a
    blob, from one ranged GET retried within ``budget`` (see
    :func:`npystore.fetch.openget.open_within`)."""
    from fsspec.asyn import sync  # noqa: PLC0415 - adlfs is async

    got: tuple[Mapping[str, Any], bytes] = sync(
        fs.loop, _azure_opening, fs, path, name, count, budget
    )
    return got


async def _azure_opening(
    fs: Any, path: str, name: str, count: int, budget: float
) -> tuple[Mapping[str, Any], bytes]:
    target = BlobTarget(fs, path)

    async def attempt(wanted: str) -> openget.Opened:
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        headers, data = await target.get(int(first), int(last) + 1)
        length = headers.get("Content-Length")
        fields = {
            "ETag": headers.get("ETag"),
            "VersionId": headers.get("VersionId"),
            "LastModified": headers.get("Last-Modified"),
        }
        return openget.Opened(
            headers.get("Content-Range") or "",
            int(length) if length and length.isdigit() else None,
            bytes(data),
            {k: v for k, v in fields.items() if v},
        )

    async def empty() -> Mapping[str, Any]:
        info: Mapping[str, Any] = await fs._info(path)
        return info

    return await openget.open_within(name, count, budget, attempt, empty)


class AzureRanges(PinnedRanges):
    """Ranged GETs of one blob with ``If-Match`` and its ETag at open (and its version).

    Parameters
    ----------
    fs : adlfs.AzureBlobFileSystem
        The filesystem holding the blob.
    path : str
        The blob's path on ``fs`` (``container/blob``).
    identity : ObjectIdentity
        The blob's identity at open.
    budget : float
        Seconds one range may take, all its attempts and waits included.
    """

    def __init__(self, fs: Any, path: str, identity: ObjectIdentity, budget: float):
        fields = dict(identity.fields)
        super().__init__(fs, path, identity, budget, fields.get("ETag") or fields.get("etag"))
        self.target = BlobTarget(fs, path, self._want_version)

    def get_one(self, into: list[memoryview] | None) -> remote.GetOne:
        """Ranged GETs pinned by ``If-Match`` (see :meth:`BlobTarget.get`)."""
        etag = self._want_etag

        async def one(k: int, start: int, stop: int) -> bytes | memoryview:
            def check(headers: Mapping[str, str | None]) -> None:
                self.check_answer(
                    start,
                    stop,
                    headers.get("ETag"),
                    headers.get("VersionId"),
                    headers.get("Content-Range") or "",
                )

            try:
                _, data = await self.target.get(
                    start, stop, if_match=etag, into=None if into is None else into[k], check=check
                )
            except s3direct.PreconditionFailed as exc:
                raise self.changed({"ETag": etag or ""}, start, stop) from exc
            return data

        return one

    async def slots(self) -> remote.Limiter | None:
        """The direct session's connections while this reader uses it, else the SDK's
        (aiohttp's default of 100: no bound of npystore's)."""
        direct = await self.target.direct()
        if direct is None:
            return None
        server = urlsplit(direct.url).netloc  # the session serves every host
        return remote.slots(await self.target.session(), s3direct.DIRECT_CONNECTIONS, "", server)
