"""Many S3 objects at once over the direct path of :mod:`npystore.fetch.s3direct` (part of
the fetch layer): presigned URLs for the opening GETs of a dataset of many files
(:func:`direct_urls`), signed by :class:`QuerySigner`, and listings parsed by ElementTree
(:func:`direct_list`). Used by :mod:`npystore.fetch.many`; wherever the direct path does not
apply they return None and the caller goes through botocore.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from npystore.fetch.s3direct import (
    _AUTH_PARAMS,
    URL_EXPIRES,
    SignedUrl,
    _session,
    direct_url,
)

__all__ = ["QuerySigner", "direct_list", "direct_urls"]


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
