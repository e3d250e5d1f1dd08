"""Ranged S3 GETs without botocore's per-request cost (part of the fetch layer).

botocore spends about 1.3 ms of CPU on every request (parameter validation, serialising,
signing, event hooks, parsing the response), which is most of what reading many small
ranges costs: the 72 nodes of a MATLAB file's chunk index took 0.11-0.14 CPU-s through
s3fs, 0.02 s this way. So, once the object is opened (through botocore, which also finds
its identity), a :class:`~npystore.fetch.RangeReader` reads its ranges over one
*presigned* URL per object version and a plain aiohttp session:

- the URL is the one botocore builds for ``GetObject`` (endpoint, addressing style,
  ``versionId``), signed with a SigV4 query signature (``X-Amz-Signature``) over the host
  only, so the same URL serves every ``Range`` (and ``If-Match``) header. It is used for at
  most :data:`URL_REUSE` seconds and signed for :data:`URL_EXPIRES`, so credentials that
  are refreshed mid-read are picked up;
- anonymous clients (``anon=True``) get the unsigned URL;
- each GET emits botocore's ``before-send.s3.GetObject`` and
  ``response-received.s3.GetObject`` events on the client's event system, so hooks that
  watch requests (metrics, logging, :class:`npystore.testing.RequestCounter`) see it; a
  ``before-send`` handler that answers the request itself (a stub or an in-process mock)
  turns the direct path off, since only botocore can use that answer;
- the URL is sent as botocore built and signed it (``yarl.URL(..., encoded=True)``): a key
  with ``.`` or ``..`` segments (``d/../x.npy`` is a key of its own on S3) is not resolved
  into another key's path, as a URL parsed as text would be;
- TLS is verified with the certificates botocore uses (its ``verify`` setting,
  ``AWS_CA_BUNDLE``, else certifi's bundle); a TLS failure hands the reader to botocore;
- the session does not decompress (``Content-Encoding`` bodies are returned as stored, as
  botocore does) and holds :data:`DIRECT_CONNECTIONS` connections (``max_pool_connections``
  when the filesystem's ``config_kwargs`` set it): botocore's default of 10 would send the 36
  chunk-index nodes of one B-tree level in four waves of round trips. :func:`slots` gives the
  semaphore a read holds one permit of per GET, as many as the session has connections;
- proxy environment variables (``HTTPS_PROXY``, ``NO_PROXY``, ...) are honoured as
  botocore honours them, looked up once per signed URL (:attr:`SignedUrl.proxy`), not per request:
  aiohttp's ``trust_env`` would look them up, and ``~/.netrc``, in a worker thread on every
  request (two thread hops, half the CPU of a small GET), and would add a netrc
  ``Authorization`` header, which botocore never sends.

The path is used only where it cannot change what a read returns: not for requester-pays
buckets, SSE-C, extra request parameters (``s3_additional_kwargs``), custom TLS
verification, proxies configured in the client, or a signer other than SigV4/unsigned
(:func:`direct_url` returns None and the reader keeps using botocore). Any answer other than
data, 404, 412 or a retryable server error (a redirect, 400, 403: a wrong region, an
expired token, a policy) raises :class:`DirectUnusable`, and the reader redoes the read
through botocore for the rest of its life, so errors and redirects are botocore's.
Set ``NPYSTORE_S3_DIRECT=0`` to always read through botocore.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import ssl
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from npystore.fetch import remote

__all__ = [
    "DIRECT_CONNECTIONS",
    "FEWER_REQUESTS",
    "URL_EXPIRES",
    "URL_REUSE",
    "DirectUnusable",
    "PreconditionFailed",
    "RetryableStatus",
    "SignedUrl",
    "direct_connections",
    "direct_enabled",
    "direct_get",
    "direct_session",
    "direct_url",
    "env_proxy",
    "slots",
    "stream_into",
]

#: Seconds a presigned URL is valid.
URL_EXPIRES: Final = 900
#: Seconds a presigned URL is used before a new one is signed (well inside its validity
#: and inside botocore's 10-minute refresh margin of temporary credentials).
URL_REUSE: Final = 300
#: Connections of the direct session when the filesystem does not set
#: ``max_pool_connections``: enough for every node of a chunk-index level and every range of
#: a large read to be in flight at once (a cloud store answers each after ~30 ms).
DIRECT_CONNECTIONS: Final = 64
#: Statuses retried like a dropped connection.
_RETRYABLE: Final = frozenset({429, 500, 502, 503, 504})
#: Query parameters of a botocore presigned URL that belong to its signature.
_AUTH_PARAMS: Final = frozenset(
    {
        "AWSAccessKeyId",
        "Signature",
        "Expires",
        "x-amz-security-token",
        "X-Amz-Security-Token",
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
    }
)
#: s3fs options that change what a request sends (SSE-C keys, requester pays, ...).
_CLIENT_OPTIONS_USED: Final = frozenset({"endpoint_url", "region_name", "use_ssl"})


class DirectUnusable(Exception):
    """The presigned path cannot serve this object; read through botocore instead."""


class PreconditionFailed(Exception):
    """412: the object no longer matches the ``If-Match`` ETag (it was replaced)."""


class RetryableStatus(OSError):
    """A server error (5xx, 429) on a direct GET: retried like a dropped connection."""


def direct_enabled() -> bool:
    """Whether direct GETs are allowed (``NPYSTORE_S3_DIRECT`` is not ``0``)."""
    return os.environ.get("NPYSTORE_S3_DIRECT", "1").strip().lower() not in ("0", "false", "no")


@dataclass(frozen=True, slots=True)
class SignedUrl:
    """A presigned ``GetObject`` URL of one object version.

    Attributes
    ----------
    url : str
        The URL (query signature included).
    signed_at : float
        ``time.monotonic()`` when it was signed.
    connections : int
        Most connections to keep open (:func:`direct_connections`).
    timeouts : tuple of float
        ``(connect, read)`` seconds, the client's.
    ca_bundle : str or None
        The certificates the client verifies TLS with (botocore's: ``AWS_CA_BUNDLE``, a
        ``verify`` path, or certifi's bundle); None for the system's.
    events : object
        The client's event emitter (``client.meta.events``).
    proxy : str or None
        The proxy for :attr:`url` from the environment (aiohttp's reading of
        ``HTTP(S)_PROXY``/``NO_PROXY``), None for none.
    proxy_auth : aiohttp.BasicAuth or None
        The proxy's credentials (from its URL or ``~/.netrc``).
    """

    url: str
    signed_at: float
    connections: int
    timeouts: tuple[float, float]
    ca_bundle: str | None
    events: Any = field(compare=False, repr=False)
    proxy: str | None = None
    proxy_auth: Any = field(default=None, compare=False, repr=False)

    def fresh(self) -> bool:
        """Whether it may still be used (signed less than :data:`URL_REUSE` seconds ago)."""
        return time.monotonic() - self.signed_at < URL_REUSE


def _eligible(fs: Any) -> bool:
    """Whether ``fs``'s options leave every GetObject a plain GET (see the module doc)."""
    if getattr(fs, "req_kw", None) or getattr(fs, "s3_additional_kwargs", None):
        return False
    client_kwargs = getattr(fs, "client_kwargs", None) or {}
    if set(client_kwargs) - _CLIENT_OPTIONS_USED:
        return False  # verify=..., proxies, custom credentials providers: keep botocore
    config = getattr(fs, "config_kwargs", None) or {}
    return not config.get("proxies")


async def direct_url(fs: Any, bucket: str, key: str, version: str | None) -> SignedUrl | None:
    """Presign ``GetObject`` of ``bucket/key`` (at ``version``) for the client of ``fs``.

    Returns None when the direct path does not apply to this filesystem (see the module
    doc), so the caller keeps using botocore.
    """
    from botocore import UNSIGNED  # noqa: PLC0415 - s3fs's own dependency
    from botocore.auth import S3SigV4QueryAuth  # noqa: PLC0415
    from botocore.awsrequest import AWSRequest  # noqa: PLC0415
    from botocore.httpsession import get_cert_path  # noqa: PLC0415

    if not direct_enabled() or not _eligible(fs):
        return None
    await fs.set_session()
    client = await fs.get_s3(bucket)
    config = client.meta.config
    if config.proxies or getattr(config, "client_cert", None):
        return None
    signature = config.signature_version
    if signature not in (None, UNSIGNED, "s3", "s3v4", "v4"):
        return None
    params = {"Bucket": bucket, "Key": key}
    if version:
        params["VersionId"] = version
    url: str = await client.generate_presigned_url(
        "get_object", Params=params, ExpiresIn=URL_EXPIRES
    )
    verify = getattr(
        getattr(getattr(client, "_endpoint", None), "http_session", None), "_verify", True
    )
    if verify is False:
        return None  # unverified TLS stays botocore's business
    ca_bundle = verify if isinstance(verify, str) else get_cert_path(True)
    connections = direct_connections(fs)
    timeouts = (float(config.connect_timeout or 60), float(config.read_timeout or 60))
    if signature is not UNSIGNED:
        signer = getattr(client, "_request_signer", None)
        credentials = getattr(signer, "_credentials", None)
        region = client.meta.region_name
        if credentials is None or not region:
            return None
        frozen = await credentials.get_frozen_credentials()
        if not frozen.access_key:
            return None
        parts = urlsplit(url)
        query = [
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k not in _AUTH_PARAMS
        ]
        bare = urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))
        request = AWSRequest(method="GET", url=bare)
        S3SigV4QueryAuth(frozen, "s3", region, expires=URL_EXPIRES).add_auth(request)
        url = request.url
    # file IO (it may read ~/.netrc): off the loop, as aiohttp does
    proxy, proxy_auth = await asyncio.to_thread(env_proxy, url)
    return SignedUrl(
        url,
        time.monotonic(),
        connections,
        timeouts,
        ca_bundle or None,
        client.meta.events,
        proxy,
        proxy_auth,
    )


def direct_connections(fs: Any) -> int:
    """Connections of the direct session for ``fs``: its ``config_kwargs``'
    ``max_pool_connections`` if set, else :data:`DIRECT_CONNECTIONS`."""
    config = getattr(fs, "config_kwargs", None) or {}
    explicit = config.get("max_pool_connections")
    return int(explicit) if explicit else DIRECT_CONNECTIONS


#: How to ask an S3 server for fewer requests at once (``{n}``: how many), for messages.
FEWER_REQUESTS: Final = (
    "ask for fewer at once with storage_options={{'config_kwargs': "
    "{{'max_pool_connections': {n}}}}}"
)


async def slots(signed: SignedUrl) -> remote.Limiter | None:
    """The limit of GETs in flight over the session ``signed``'s GETs go over, at most one
    per connection (see :func:`npystore.fetch.remote.slots`). Call it on the loop."""
    server = urlsplit(signed.url).netloc
    return remote.slots(await _session(signed), signed.connections, FEWER_REQUESTS, server)


def env_proxy(url: str) -> tuple[str | None, Any]:
    """The proxy (and its credentials) the environment sets for ``url``, as aiohttp's
    ``trust_env`` finds them; ``(None, None)`` for none."""
    from aiohttp.helpers import get_env_proxy_for_url  # noqa: PLC0415 - with s3fs
    from yarl import URL  # noqa: PLC0415 - aiohttp's dependency

    try:
        proxy, auth = get_env_proxy_for_url(URL(url, encoded=True))
    except LookupError:  # none set, or NO_PROXY covers the host
        return None, None
    return str(proxy), auth


async def direct_get(
    signed: SignedUrl,
    start: int,
    stop: int,
    *,
    if_match: str | None = None,
    into: memoryview | None = None,
    check: Callable[[str | None, str | None, str], None] | None = None,
) -> tuple[str, bytes | memoryview]:
    """GET bytes ``[start, stop)`` over ``signed``: ``(Content-Range, body)``.

    With ``into`` the body is copied into that view as it arrives and the part filled is
    returned; a body longer than the view returns ``len(into) + 1`` bytes, so the caller's
    length check fails. ``check(etag, version_id, content_range)`` sees a data answer's
    headers before its body is read, and may raise (the exception propagates).

    Raises
    ------
    FileNotFoundError
        404: the object (version) is gone.
    RetryableStatus
        429 or 5xx.
    PreconditionFailed
        412: the ``If-Match`` ETag no longer matches.
    DirectUnusable
        Any other status that is not data (a redirect, 400, 403, ...).
    aiohttp.ClientError, asyncio.TimeoutError
        The connection failed or dropped (retryable).
    """
    import aiohttp  # noqa: PLC0415 - aiobotocore's dependency, present with s3fs
    from botocore.awsrequest import AWSRequest  # noqa: PLC0415 - s3fs's own dependency
    from yarl import URL  # noqa: PLC0415 - aiohttp's dependency

    session = await _session(signed)
    headers = {"Range": f"bytes={start}-{stop - 1}"}
    if if_match:
        headers["If-Match"] = if_match
    request = AWSRequest(method="GET", url=signed.url, headers=headers)
    answers = await signed.events.emit("before-send.s3.GetObject", request=request)
    if any(answer is not None for _, answer in answers):
        raise DirectUnusable("a before-send handler answers S3 requests (a stub or a mock)")
    try:
        connect, read = signed.timeouts  # this client's (the session may be another's)
        timeout = aiohttp.ClientTimeout(sock_connect=connect, sock_read=read)
        async with session.get(
            # as signed: yarl would resolve '.' and '..' segments of the key (another key)
            URL(signed.url, encoded=True),
            headers=headers,
            timeout=timeout,
            proxy=signed.proxy,
            proxy_auth=signed.proxy_auth,
        ) as resp:
            status = resp.status
            response = {"status_code": status, "headers": resp.headers, "body": b""}
            if status in (200, 206):
                content_range = resp.headers.get("Content-Range", "")
                if check is not None:
                    check(
                        resp.headers.get("ETag"),
                        resp.headers.get("x-amz-version-id"),
                        content_range,
                    )
                data = await resp.read() if into is None else await stream_into(resp.content, into)
            else:
                body = (await resp.read())[:300].decode("utf-8", "replace")
    except Exception as exc:
        await _received(signed, None, exc)
        if isinstance(exc, (ssl.SSLError, aiohttp.ClientSSLError)):
            raise DirectUnusable(f"TLS failed on the direct path: {exc}") from exc
        raise
    await _received(signed, response, None)
    if status in (200, 206):
        return content_range, data
    if status == 404:
        raise FileNotFoundError(f"404 from S3: {body}")
    if status == 412:
        raise PreconditionFailed(f"412 from S3: {body}")
    if status in _RETRYABLE:
        raise RetryableStatus(f"HTTP {status} from S3: {body}")
    raise DirectUnusable(f"HTTP {status} from S3: {body}")


async def _received(
    signed: SignedUrl, response: dict[str, Any] | None, exc: BaseException | None
) -> None:
    """Emit ``response-received.s3.GetObject`` as botocore does after each attempt."""
    await signed.events.emit(
        "response-received.s3.GetObject",
        response_dict=response,
        parsed_response=None,
        context={},
        exception=exc,
    )


async def stream_into(content: Any, view: memoryview) -> memoryview:
    """Copy an aiohttp response body (``resp.content``) into ``view`` as it arrives; the part
    filled, or ``len(view) + 1`` bytes when the body is longer than the view."""
    filled = 0
    async for piece in content.iter_any():
        end = filled + len(piece)
        if end > view.nbytes:
            return memoryview(bytes(view.nbytes + 1))
        view[filled:end] = piece
        filled = end
    return view[:filled]


# -- one aiohttp session per event loop (fsspec runs one IO loop per process) -------------
# (per loop: one per certificate bundle and connection count)

_sessions: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str | None, int], Any]
] = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


async def _session(signed: SignedUrl) -> Any:
    """The session of the running loop for ``signed``'s TLS settings and connection count
    (made on first use)."""
    return await direct_session(signed.ca_bundle, signed.connections, signed.timeouts)


async def direct_session(
    ca_bundle: str | None, connections: int, timeouts: tuple[float, float]
) -> Any:
    """The bare aiohttp session of the running loop for a certificate bundle (None: the
    system's) and a connection count, made on first use (``timeouts``: its default
    ``(connect, read)`` seconds then): no decompression, no environment lookups, no
    automatic headers (see the module doc). The direct GETs of S3 and Azure share it."""
    import aiohttp  # noqa: PLC0415 - aiobotocore's dependency, present with s3fs

    loop = asyncio.get_running_loop()
    key = (ca_bundle, connections)
    with _sessions_lock:
        session = _sessions.setdefault(loop, {}).get(key)
    if session is not None and not session.closed:
        return session
    # reading the certificates is file IO: off the loop, as aiobotocore does
    context = await asyncio.to_thread(ssl.create_default_context, cafile=ca_bundle)
    with _sessions_lock:
        by_key = _sessions.setdefault(loop, {})
        session = by_key.get(key)
        if session is None or session.closed:
            connect, read = timeouts
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=connections, ssl=context),
                timeout=aiohttp.ClientTimeout(sock_connect=connect, sock_read=read),
                auto_decompress=False,
                trust_env=False,  # proxies: per signed URL (see the module doc)
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
            by_key[key] = session
    return session


@atexit.register
def _close_sessions() -> None:
    """Close the sessions whose loops still run (no "unclosed session" warnings at exit)."""
    with _sessions_lock:
        items = [(loop, session) for loop, d in _sessions.items() for session in d.values()]
        _sessions.clear()
    for loop, session in items:
        if loop.is_running() and not loop.is_closed() and not session.closed:
            future = asyncio.run_coroutine_threadsafe(session.close(), loop)
            try:
                future.result(timeout=2)
            except (TimeoutError, RuntimeError, OSError):  # the loop is going away
                continue
