"""Direct S3 GETs (npystore.fetch.s3direct): presigned URLs over a bare aiohttp session.

Data reads after an S3 open skip botocore's per-request work but must stay exactly what
botocore reads: the same bytes, the same requests seen by botocore's event hooks, the same
pinning, and botocore itself wherever the direct path cannot be sure (requester pays, SSE
options, a stubbed client, a refusal).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

import npystore
from npystore.errors import ConsistencyError
from npystore.fetch import open_reader, s3direct


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _ranges(size: int, n: int = 20, length: int = 1000) -> list[tuple[int, int]]:
    starts = np.linspace(200, size - length, n).astype(int).tolist()
    return [(s, s + length) for s in starts]


def test_reads_go_direct_with_a_sigv4_url_and_equal_botocore(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _npy(np.arange(50_000.0))
    url = s3.put_bytes(data, "a.npy")
    reader = open_reader(url, s3.storage_options)
    ranges = _ranges(reader.size)
    with s3.counter.measure() as direct:
        got = reader.read_many(ranges)
    assert got == [data[a:b] for a, b in ranges]
    signed = reader.transport._signed
    assert signed is not None
    assert not reader.transport._direct_off
    query = parse_qs(urlsplit(signed.url).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-SignedHeaders"] == ["host"]  # one URL serves every Range
    assert query["X-Amz-Expires"] == [str(s3direct.URL_EXPIRES)]
    assert "Signature" not in query
    assert "AWSAccessKeyId" not in query
    # botocore's event hooks see the direct GETs like its own (the counter listens there)
    assert direct.gets == len(ranges)
    assert direct.requests == len(ranges)
    assert direct.bytes == sum(b - a for a, b in ranges)
    assert sorted(direct.ranges) == sorted((a, b - 1) for a, b in ranges)
    assert all("X-Amz-Signature=" in r.url for r in direct.records)

    monkeypatch.setenv("NPYSTORE_S3_DIRECT", "0")
    slow = open_reader(url, s3.storage_options)
    with s3.counter.measure() as boto:
        assert slow.read_many(ranges) == got
    assert slow.transport._direct_off
    assert slow.transport._signed is None
    assert (boto.gets, boto.bytes) == (direct.gets, direct.bytes)
    assert not any("X-Amz-Signature=" in r.url for r in boto.records)


def test_streamed_reads_into_buffers(s3: Any) -> None:
    data = np.random.default_rng(0).integers(0, 255, 3_000_000, dtype=np.uint8).tobytes()
    url = s3.put_bytes(data, "blob.bin")
    reader = open_reader(url, s3.storage_options)
    out = bytearray(len(data) - 100)
    reader.readinto_many([(100, memoryview(out))])
    assert out == data[100:]
    assert reader.transport._signed is not None


@pytest.mark.parametrize(
    "key", ["dir/with space.npy", "ünïcödé/ø.npy", "plus+and%25percent.npy", "tilde~(x).npy"]
)
def test_keys_that_need_quoting(s3: Any, key: str) -> None:
    arr = np.arange(1000, dtype=np.int32)
    url = s3.put_bytes(_npy(arr), key)
    np.testing.assert_array_equal(npystore.open_npy(url, storage_options=s3.storage_options), arr)
    reader = open_reader(url, s3.storage_options)
    assert reader.read_many([(128, 200)]) == [_npy(arr)[128:200]]
    assert reader.transport._signed is not None
    assert not reader.transport._direct_off


def test_replaced_object_is_refused_on_the_direct_path(s3: Any) -> None:
    url = s3.put_bytes(_npy(np.arange(5000.0)), "moving.npy")
    reader = open_reader(url, s3.storage_options)
    reader.read_many([(200, 300)])
    assert reader.transport._signed is not None
    s3.put_bytes(_npy(np.arange(5000.0) + 1), "moving.npy")
    with pytest.raises(ConsistencyError, match=r"moving\.npy: the object changed.*IfMatch"):
        reader.read_many([(200, 300)])
    assert not reader.transport._direct_off  # a 412 is an answer, not a reason to leave the path


def test_versioned_bucket_reads_the_version_opened(s3: Any, s3_server: Any) -> None:
    s3_server.client().put_bucket_versioning(
        Bucket=s3.bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    old = _npy(np.arange(5000.0))
    url = s3.put_bytes(old, "v.npy")
    reader = open_reader(url, s3.storage_options)
    version = dict(reader.identity.fields)["VersionId"]
    s3.put_bytes(_npy(np.arange(5000.0) * 2), "v.npy")
    assert reader.read_many([(128, 4128)]) == [old[128:4128]]  # the version opened
    assert reader.transport._signed is not None
    assert parse_qs(urlsplit(reader.transport._signed.url).query)["versionId"] == [version]
    client = s3_server.client()  # a versioned bucket is deleted only once every version is
    for v in client.list_object_versions(Bucket=s3.bucket).get("Versions", []):
        client.delete_object(Bucket=s3.bucket, Key=v["Key"], VersionId=v["VersionId"])


@pytest.mark.parametrize(
    "extra",
    [
        {"requester_pays": True},
        {"s3_additional_kwargs": {"ServerSideEncryption": "AES256"}},
        {"client_kwargs": {"verify": False}},
    ],
    ids=["requester-pays", "additional-kwargs", "verify"],
)
def test_options_that_change_requests_keep_botocore(
    s3: Any, s3_server: Any, extra: dict[str, Any]
) -> None:
    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "opt.npy")
    opts = s3_server.storage_options(**extra)
    reader = open_reader(url, opts)
    assert reader.read_many([(128, 1128)]) == [data[128:1128]]
    assert reader.transport._direct_off
    assert reader.transport._signed is None


def test_anonymous_clients_use_the_plain_url(s3: Any, s3_server: Any) -> None:
    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "anon.npy")
    s3_server.client().put_object_acl(Bucket=s3.bucket, Key="anon.npy", ACL="public-read")
    opts = {"anon": True, "client_kwargs": {"endpoint_url": s3_server.endpoint_url}}
    reader = open_reader(url, opts)
    assert reader.read_many([(128, 1128)]) == [data[128:1128]]
    assert reader.transport._signed is not None
    query = parse_qs(urlsplit(reader.transport._signed.url).query)
    assert not any(k.startswith("X-Amz-") or k == "Signature" for k in query)


def test_a_refusal_moves_the_reader_to_botocore(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "refused.npy")
    reader = open_reader(url, s3.storage_options)
    calls = []

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise s3direct.DirectUnusable("HTTP 403 from S3: <Error>AccessDenied</Error>")

    monkeypatch.setattr(s3direct, "direct_get", refuse)
    with s3.counter.measure() as m:
        assert reader.read_many([(128, 1128), (2000, 3000)]) == [data[128:1128], data[2000:3000]]
    assert calls
    assert reader.transport._direct_off
    assert m.gets == 2  # both ranges read again through botocore, nothing else
    calls.clear()
    assert reader.read(128, 200) == data[128:200]
    assert not calls  # off for the rest of the reader's life


def test_a_stubbed_client_is_left_to_botocore(s3: Any) -> None:
    """A before-send handler that answers requests (a stub, an in-process mock) only works
    through botocore: the direct path hands over to it."""
    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "stub.npy")
    reader = open_reader(url, s3.storage_options)
    answered = []

    def answer_direct(request: Any = None, **kwargs: Any) -> Any:
        if "X-Amz-Signature=" in str(getattr(request, "url", "")):
            answered.append(request.url)
            return object()  # would be the HTTP response; botocore's own sends get None
        return None

    events = s3.fs.s3.meta.events
    events.register("before-send.s3.GetObject", answer_direct, unique_id="stub-test")
    try:
        assert reader.read_many([(128, 1128)]) == [data[128:1128]]
    finally:
        events.unregister("before-send.s3.GetObject", unique_id="stub-test")
    assert answered
    assert reader.transport._direct_off


def test_presign_failure_keeps_botocore(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "nosign.npy")
    reader = open_reader(url, s3.storage_options)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no credentials today")

    monkeypatch.setattr(s3direct, "direct_url", broken)
    assert reader.read_many([(128, 1128)]) == [data[128:1128]]
    assert reader.transport._direct_off


def test_stale_urls_are_signed_again(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "stale.npy")
    reader = open_reader(url, s3.storage_options)
    reader.read_many([(128, 228)])
    first = reader.transport._signed
    assert first is not None
    assert first.fresh()
    monkeypatch.setattr(s3direct, "URL_REUSE", -1.0)
    assert not first.fresh()
    reader.read_many([(128, 228)])
    assert reader.transport._signed is not None
    assert reader.transport._signed is not first


def test_pickled_readers_sign_their_own_url(s3: Any, tmp_path: Path) -> None:
    import pickle

    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "pickled.npy")
    reader = open_reader(url, s3.storage_options)
    reader.read(128, 228)
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.transport._signed is None
    assert clone.read_many([(128, 1128)]) == [data[128:1128]]
    assert clone.transport._signed is not None


def test_tls_is_verified_with_botocores_certificates(
    s3: Any, s3_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.httpsession import get_cert_path

    data = _npy(np.arange(3000.0))
    url = s3.put_bytes(data, "tls.npy")
    reader = open_reader(url, s3.storage_options)
    reader.read_many([(128, 228)])
    assert reader.transport._signed is not None
    verify = s3.fs.s3._endpoint.http_session._verify  # what botocore verifies with
    expected = verify if isinstance(verify, str) else get_cert_path(True)
    assert reader.transport._signed.ca_bundle == (expected or None)

    import s3fs

    bundle = get_cert_path(True)
    if bundle is None:
        pytest.skip("no certificate bundle file to point AWS_CA_BUNDLE at")
    monkeypatch.setenv("AWS_CA_BUNDLE", bundle)
    s3fs.S3FileSystem.clear_instance_cache()
    other = open_reader(url, s3_server.storage_options(anon=False))
    other.read_many([(128, 228)])
    assert other.transport._signed is not None
    assert other.transport._signed.ca_bundle == bundle


def test_a_tls_failure_hands_over_to_botocore(s3: Any, s3_server: Any) -> None:
    """An https URL on a plain-http server fails the TLS handshake: DirectUnusable (the
    reader then uses botocore), never a retried FetchError."""
    import asyncio

    from fsspec.asyn import sync

    url = s3.put_bytes(b"x" * 1000, "plain.bin")
    reader = open_reader(url, s3.storage_options)
    reader.read_many([(100, 200)])
    signed = reader.transport._signed
    assert signed is not None
    https = signed.url.replace("http://", "https://", 1)
    broken = s3direct.SignedUrl(
        https, signed.signed_at, 4, (5.0, 5.0), signed.ca_bundle, signed.events
    )

    async def get() -> Any:
        return await asyncio.wait_for(s3direct.direct_get(broken, 0, 10), 30)

    with pytest.raises(s3direct.DirectUnusable, match="TLS"):
        sync(s3.fs.loop, get)


def test_the_direct_session_holds_more_connections_than_botocores_default() -> None:
    """64 connections (botocore's 10 send a chunk-index level in waves), unless the
    filesystem sets ``max_pool_connections`` (then that many, as botocore's pool)."""

    class Fs:
        def __init__(self, config: dict[str, Any]) -> None:
            self.config_kwargs = config

    assert s3direct.direct_connections(Fs({})) == s3direct.DIRECT_CONNECTIONS == 64
    assert s3direct.direct_connections(Fs({"max_pool_connections": 3})) == 3


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def test_proxy_environment_is_honoured_and_read_once_per_url(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY reaches the direct GETs (as botocore honours it), looked up when the URL
    is signed, not by aiohttp on every request (its ``trust_env`` costs two thread hops per
    GET and adds netrc credentials)."""
    from faultproxy import FaultProxy

    data = bytes(range(256)) * 400
    url = s3.put_bytes(data, "proxied.bin")
    reader = open_reader(url, s3.storage_options)
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with FaultProxy(s3.server.endpoint_url, rate=0.0) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        ranges = _ranges(reader.size)
        assert reader.read_many(ranges) == [data[a:b] for a, b in ranges]
        assert proxy.counts["requests"] == len(ranges)
    signed = reader.transport._signed
    assert signed is not None
    assert not reader.transport._direct_off
    assert signed.proxy is not None
    assert signed.proxy.rstrip("/") == proxy.url


def test_no_proxy_and_no_variables_mean_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    target = "http://127.0.0.1:9/bucket/key?X-Amz-Signature=abc"
    assert s3direct.env_proxy(target) == (None, None)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert s3direct.env_proxy(target)[0] == "http://proxy.invalid:3128"
    assert s3direct.env_proxy(target.replace("http:", "https:", 1)) == (None, None)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert s3direct.env_proxy(target) == (None, None)
