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
import dataclasses
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
    "URL_EXPIRES",
    "URL_REUSE",
    "DirectUnusable",
    "QuerySigner",
    "PreconditionFailed",
    "RetryableStatus",
    "SignedUrl",
    "direct_connections",
    "direct_enabled",
    "direct_get",
    "direct_list",
    "direct_urls",
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


async def slots(signed: SignedUrl) -> asyncio.Semaphore | None:
    """The semaphore of the session ``signed``'s GETs go over, one permit per connection
    (see :func:`npystore.fetch.remote.slots`). Call it on the loop."""
    return remote.slots(await _session(signed), signed.connections)


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
            signed.url,
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
    import aiohttp  # noqa: PLC0415 - aiobotocore's dependency, present with s3fs

    loop = asyncio.get_running_loop()
    key = (signed.ca_bundle, signed.connections)
    with _sessions_lock:
        session = _sessions.setdefault(loop, {}).get(key)
    if session is not None and not session.closed:
        return session
    # reading the certificates is file IO: off the loop, as aiobotocore does
    context = await asyncio.to_thread(ssl.create_default_context, cafile=signed.ca_bundle)
    with _sessions_lock:
        by_key = _sessions.setdefault(loop, {})
        session = by_key.get(key)
        if session is None or session.closed:
            connect, read = signed.timeouts
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=signed.connections, ssl=context),
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


async def direct_urls(fs: Any, bucket: str, keys: list[str]) -> list[SignedUrl] | None:
    """Presigned URLs of many objects of one bucket (latest versions), for the opening GETs
    of a dataset of many files (:mod:`npystore.fetch.many`).

    The first key is presigned by :func:`direct_url` (botocore builds its URL: endpoint,
    addressing style); the others reuse that URL with their own key in its path (quoted as
    botocore quotes keys) and their own SigV4 query signature, so a thousand objects cost a
    thousand signatures, not a thousand botocore requests. None when the direct path does not
    apply (see :func:`direct_url`) or the key's place in the URL cannot be found.
    """
    from botocore import UNSIGNED  # noqa: PLC0415 - s3fs's own dependency

    if not keys:
        return []
    first = await direct_url(fs, bucket, keys[0], None)
    if first is None:
        return None
    parts = urlsplit(first.url)
    quoted = quote(keys[0], safe="/~")
    if not parts.path.endswith(quoted):
        return None
    base = parts.path[: len(parts.path) - len(quoted)]
    query = urlencode(
        [
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k not in _AUTH_PARAMS
        ],
        quote_via=quote,
    )
    client = await fs.get_s3(bucket)
    signer = None
    if client.meta.config.signature_version is not UNSIGNED:
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        if credentials is None:
            return None
        frozen = await credentials.get_frozen_credentials()
        signer = QuerySigner(frozen, client.meta.region_name, URL_EXPIRES)
    out = [first]
    for key in keys[1:]:
        path = base + quote(key, safe="/~")
        if signer is None:
            url = urlunsplit(parts._replace(path=path, query=query))
        else:
            url = signer.sign(parts.scheme, parts.netloc, path, query)
        out.append(dataclasses.replace(first, url=url))
    return out


class QuerySigner:
    """SigV4 query signatures (presigned GETs, only ``host`` signed) of many URLs made at
    one time with one set of credentials: what botocore's ``S3SigV4QueryAuth.add_auth``
    computes for such a URL, with the signing key derived once (botocore derives it and
    parses the URL again for every URL: 1 ms each, most of opening a thousand objects).

    Parameters
    ----------
    credentials : botocore ReadOnlyCredentials
        ``access_key``, ``secret_key``, ``token``.
    region : str
        The bucket's region.
    expires : int
        Seconds the URLs are valid.
    now : datetime, optional
        The signing time (default: now, UTC).
    """

    def __init__(self, credentials: Any, region: str, expires: int, now: Any = None) -> None:
        import datetime  # noqa: PLC0415
        import hmac  # noqa: PLC0415

        moment = now or datetime.datetime.now(datetime.UTC)
        self.amz_date = moment.strftime("%Y%m%dT%H%M%SZ")
        day = moment.strftime("%Y%m%d")
        self.scope = f"{day}/{region}/s3/aws4_request"
        key = f"AWS4{credentials.secret_key}".encode()
        for part in (day, region, "s3", "aws4_request"):
            key = hmac.digest(key, part.encode(), "sha256")
        self._key = key
        params = [
            ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
            ("X-Amz-Credential", f"{credentials.access_key}/{self.scope}"),
            ("X-Amz-Date", self.amz_date),
            ("X-Amz-Expires", str(expires)),
            ("X-Amz-SignedHeaders", "host"),
        ]
        if credentials.token is not None:
            params.append(("X-Amz-Security-Token", credentials.token))
        self._auth_query = "&".join(f"{_encode(k)}={_encode(v)}" for k, v in params)

    def sign(self, scheme: str, netloc: str, path: str, query: str = "") -> str:
        """The presigned URL of ``scheme://netloc/path?query`` (``path`` and ``query``
        percent-encoded already, as in a URL)."""
        import hashlib  # noqa: PLC0415
        import hmac  # noqa: PLC0415

        full = f"{query}&{self._auth_query}" if query else self._auth_query
        pairs = sorted(tuple(p.split("=", 1)) if "=" in p else (p, "") for p in full.split("&"))
        canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
        host = netloc
        if (scheme, netloc.rpartition(":")[2]) in (("http", "80"), ("https", "443")):
            host = netloc.rpartition(":")[0]
        canonical = f"GET\n{path}\n{canonical_query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD"
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        to_sign = f"AWS4-HMAC-SHA256\n{self.amz_date}\n{self.scope}\n{digest}"
        signature = hmac.new(self._key, to_sign.encode(), "sha256").hexdigest()
        return f"{scheme}://{netloc}{path}?{full}&X-Amz-Signature={signature}"


def _encode(text: str) -> str:
    """Percent-encoding of SigV4 query parameters (botocore's ``percent_encode``)."""
    return quote(text, safe="-_.~")


#: The S3 API's XML namespace.
_S3_NS: Final = "{http://s3.amazonaws.com/doc/2006-03-01/}"


async def direct_list(fs: Any, bucket: str, prefix: str) -> list[tuple[str, int]] | None:
    """``(key, size)`` of every object of ``bucket`` whose key starts with ``prefix``:
    presigned ``ListObjectsV2`` GETs (1,000 keys a page) on the direct session, their XML
    parsed by ElementTree. botocore's parse of a page costs ~0.25 s of CPU (a date parsed for
    every key); this one ~10 ms. None when the direct path does not apply or a page is not
    answered with data (the caller lists through s3fs).
    """
    from urllib.parse import unquote_plus  # noqa: PLC0415
    from xml.etree import ElementTree  # noqa: PLC0415

    from botocore import UNSIGNED  # noqa: PLC0415 - s3fs's own dependency
    from botocore.awsrequest import AWSRequest  # noqa: PLC0415 - s3fs's own dependency

    signed = await direct_url(fs, bucket, prefix or "_", None)  # the session's settings
    if signed is None:
        return None
    client = await fs.get_s3(bucket)
    signer = None
    if client.meta.config.signature_version is not UNSIGNED:
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        if credentials is None:
            return None
        frozen = await credentials.get_frozen_credentials()
        signer = QuerySigner(frozen, client.meta.region_name, URL_EXPIRES)
    session = await _session(signed)
    out: list[tuple[str, int]] = []
    token: str | None = None
    while True:
        params = {"Bucket": bucket, "Prefix": prefix, "EncodingType": "url"}
        if token:
            params["ContinuationToken"] = token
        made = await client.generate_presigned_url(
            "list_objects_v2", Params=params, ExpiresIn=URL_EXPIRES
        )
        # botocore's endpoint and parameters, signed again with SigV4 (its presigned URL
        # may be SigV2), every value encoded as SigV4 wants it ('/' too)
        parts = urlsplit(made)
        query = "&".join(
            f"{_encode(k)}={_encode(v)}"
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k not in _AUTH_PARAMS
        )
        if signer is None:
            url = urlunsplit(parts._replace(query=query))
        else:
            url = signer.sign(parts.scheme, parts.netloc, parts.path, query)
        request = AWSRequest(method="GET", url=url)
        answers = await signed.events.emit("before-send.s3.ListObjectsV2", request=request)
        if any(answer is not None for _, answer in answers):
            return None  # a stub or a mock answers S3 requests: botocore's business
        connect, read = signed.timeouts
        try:
            async with session.get(
                url,
                timeout=_client_timeout(connect, read),
                proxy=signed.proxy,
                proxy_auth=signed.proxy_auth,
            ) as resp:
                status = resp.status
                body = await resp.read()
        except Exception as exc:
            await _emit_received(signed, "ListObjectsV2", None, exc)
            raise
        await _emit_received(
            signed, "ListObjectsV2", {"status_code": status, "headers": {}, "body": b""}, None
        )
        if status != 200:
            return None
        root = ElementTree.fromstring(body)
        encoded = (root.findtext(f"{_S3_NS}EncodingType") or "").lower() == "url"
        for item in root.iter(f"{_S3_NS}Contents"):
            key = item.findtext(f"{_S3_NS}Key")
            size = item.findtext(f"{_S3_NS}Size")
            if key is None or size is None:
                return None
            out.append((unquote_plus(key) if encoded else key, int(size)))
        if (root.findtext(f"{_S3_NS}IsTruncated") or "").lower() != "true":
            return out
        token = root.findtext(f"{_S3_NS}NextContinuationToken")
        if not token:
            return None


async def _emit_received(
    signed: SignedUrl, operation: str, response: dict[str, Any] | None, exc: BaseException | None
) -> None:
    """Emit ``response-received.s3.<operation>`` as botocore does after each attempt."""
    await signed.events.emit(
        f"response-received.s3.{operation}",
        response_dict=response,
        parsed_response=None,
        context={},
        exception=exc,
    )


def _client_timeout(connect: float, read: float) -> Any:
    import aiohttp  # noqa: PLC0415 - aiobotocore's dependency, present with s3fs

    return aiohttp.ClientTimeout(sock_connect=connect, sock_read=read)
