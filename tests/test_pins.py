"""Issue 14 item 3: S3-compatible servers that ignore the pin.

rclone's ``serve s3`` answers ``If-Match`` with 200 and the current bytes. A proxy in front
of moto (``faultproxy.FaultProxy(ignore_pins=True)``) strips ``If-Match`` and ``versionId``
from every request, so moto answers like such a server. An object replaced after open must
then still raise ConsistencyError (every response's ETag and VersionId are compared with
the identity), never return new bytes or old and new bytes mixed.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore
from faultproxy import FaultProxy
from npystore.errors import ConsistencyError
from npystore.fetch import open_reader, opening

pytestmark = pytest.mark.s3


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@pytest.fixture(params=["direct", "botocore"])
def liar(request: Any, s3: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Storage options through a proxy that ignores pins; range reads over the presigned
    direct path or through botocore."""
    if request.param == "botocore":
        monkeypatch.setenv("NPYSTORE_S3_DIRECT", "0")
    with FaultProxy(s3.server.endpoint_url, rate=0.0, ignore_pins=True) as proxy:
        yield s3.server.storage_options(client_kwargs={"endpoint_url": proxy.url})


def test_the_proxy_really_ignores_if_match(s3: Any, liar: dict[str, Any]) -> None:
    """The premise: through the proxy, a GET with a stale If-Match gets 200 and new bytes."""
    url = s3.put_bytes(b"a" * 100, "premise.bin")
    etag = s3.fs.info(url)["ETag"]
    s3.put_bytes(b"b" * 100, "premise.bin")
    import s3fs
    from fsspec.asyn import sync

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(**liar)
    bucket, key = url.removeprefix("s3://").split("/", 1)
    resp, body = sync(fs.loop, opening.get_object, fs, bucket, key, "bytes=0-9", {"IfMatch": etag})
    assert body == b"b" * 10
    assert resp["ETag"] != etag


def test_npy_chunks_after_a_same_size_replacement(s3: Any, liar: dict[str, Any]) -> None:
    old = np.arange(20_000.0)
    url = s3.put_bytes(_npy(old), "moving.npy")
    a = npystore.open_npy(url, storage_options=liar, chunks=1000)
    np.testing.assert_array_equal(a[:2000].compute(), old[:2000])  # pinned reads work
    s3.put_bytes(_npy(old + 1), "moving.npy")  # same size, other bytes
    with pytest.raises(
        ConsistencyError,
        match=r"moving\.npy: the answer for bytes \[\d+, \d+\) came with ETag .*opened with ETag",
    ):
        a.compute()  # 20 chunks: none may come back new, nor a mix
    with pytest.raises(ConsistencyError, match=r"moving\.npy"):
        a[5000:7000].compute()


def test_metadata_reads_after_a_replacement(s3: Any, liar: dict[str, Any]) -> None:
    """read()/read_many() (headers, indexes) beyond the opening bytes are checked too."""
    data = _npy(np.arange(5000.0))
    url = s3.put_bytes(data, "meta.npy")
    reader = open_reader(url, liar)
    assert reader.read_many([(200, 300)]) == [data[200:300]]
    s3.put_bytes(_npy(np.arange(5000.0) * 3), "meta.npy")
    with pytest.raises(ConsistencyError, match=r"meta\.npy: the answer for bytes \[200, 300\)"):
        reader.read_many([(200, 300)])
    with pytest.raises(ConsistencyError, match=r"meta\.npy.*\[1000, 4000\)"):
        reader.read(1000, 4000)


def test_npz_member_after_a_same_size_replacement(s3: Any, liar: dict[str, Any]) -> None:
    big = np.arange(100_000.0)  # 800 KB: outside the 256 KiB tail read at open
    raw = io.BytesIO()
    np.savez(raw, big=big, small=np.arange(3))
    url = s3.put_bytes(raw.getvalue(), "moving.npz")
    z = npystore.open_npz(url, storage_options=liar, chunks=10_000)
    np.testing.assert_array_equal(z["big"][:10].compute(), big[:10])
    other = io.BytesIO()
    np.savez(other, big=big[::-1].copy(), small=np.arange(3))
    assert len(other.getvalue()) == len(raw.getvalue())
    s3.put_bytes(other.getvalue(), "moving.npz")
    with pytest.raises(ConsistencyError, match=r"moving\.npz.*ETag"):
        z["big"].compute()


def test_mat_v73_chunked_variable_after_a_same_size_replacement(
    s3: Any, liar: dict[str, Any], tmp_path: Path
) -> None:
    h5py = pytest.importorskip("h5py")

    def write(path: Path, x: np.ndarray) -> bytes:
        with h5py.File(path, "w", userblock_size=512, track_times=False) as h:
            d = h.create_dataset("x", data=x, chunks=(50, 50))
            d.attrs["MATLAB_class"] = np.bytes_("double")
        with path.open("r+b") as f:
            f.write(b"MATLAB 7.3 MAT-file".ljust(116) + b"\0" * 8 + b"\x00\x02IM")
        return path.read_bytes()

    x = np.arange(40_000.0).reshape(200, 200)
    first = write(tmp_path / "a.mat", x)
    url = s3.put_bytes(first, "moving.mat")
    m = npystore.open_mat(url, storage_options=liar, chunks=(50, 200))
    np.testing.assert_array_equal(m["x"][:50].compute(), x.T[:50])  # MATLAB order
    second = write(tmp_path / "b.mat", x[::-1].copy())
    assert len(second) == len(first)
    assert second != first
    s3.put_bytes(second, "moving.mat")
    with pytest.raises(ConsistencyError, match=r"moving\.mat.*ETag"):
        m["x"].compute()


def test_a_response_from_another_version_is_refused(
    s3: Any, s3_server: Any, liar: dict[str, Any]
) -> None:
    """On a versioned bucket the reads are pinned by VersionId; a server that ignores it
    answers with the newest version. Here the new version holds the same bytes (the same
    ETag): only the VersionId the response carries tells the versions apart."""
    client = s3_server.client()
    client.put_bucket_versioning(Bucket=s3.bucket, VersioningConfiguration={"Status": "Enabled"})
    data = _npy(np.arange(5000.0))
    try:
        url = s3.put_bytes(data, "v.npy")
        reader = open_reader(url, liar)
        opened = dict(reader.identity.fields)["VersionId"]
        assert reader.read_many([(128, 4128)]) == [data[128:4128]]
        s3.put_bytes(data, "v.npy")  # a new version, same bytes, same ETag
        with pytest.raises(
            ConsistencyError,
            match=rf"v\.npy: the answer for bytes \[128, 4128\) came from version \S+, "
            rf"but version {opened} was opened",
        ):
            reader.read_many([(128, 4128)])
        # opening an explicit old version through such a server fails at once
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        aware = {**liar, "version_aware": True}
        with pytest.raises(ConsistencyError, match=rf"asked for version {opened}, the server"):
            open_reader(f"{url}?versionId={opened}", aware)
    finally:  # a versioned bucket is deleted only once every version is
        for v in client.list_object_versions(Bucket=s3.bucket).get("Versions", []):
            client.delete_object(Bucket=s3.bucket, Key=v["Key"], VersionId=v["VersionId"])


def test_pinned_reads_through_an_honest_server_are_unchanged(s3: Any) -> None:
    """The check costs no request: a compute is one GET per chunk, as before."""
    arr = np.arange(10_000.0)
    url = s3.put_bytes(_npy(arr), "honest.npy")
    a = npystore.open_npy(url, storage_options=s3.storage_options, chunks=1000)
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(a.compute(), arr)
    assert m.gets == 10
    assert m.bytes == arr.nbytes


def test_real_rclone_answers_the_stale_pin_and_the_answer_is_refused(rclone_strict: Any) -> None:
    """rclone's own ``serve s3`` (not the model above): a same-size replacement between
    open and compute is refused by the answer's ETag."""
    with rclone_strict.sandbox() as bucket:
        old = np.arange(20_000.0)
        url = bucket.put_bytes(_npy(old), "moving.npy")
        a = npystore.open_npy(url, storage_options=bucket.storage_options, chunks=2000)
        np.testing.assert_array_equal(a[:2000].compute(), old[:2000])
        bucket.put_bytes(_npy(old + 1), "moving.npy")
        with pytest.raises(ConsistencyError, match=r"moving\.npy: the answer for bytes .*ETag"):
            a.compute()
