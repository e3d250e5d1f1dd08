"""Issue 7: reads over a network that fails, and objects replaced under a reader.

A fault-injecting proxy (``faultproxy.py``) sits between s3fs and the moto server: 503
SlowDown answers, connections dropped mid-body (short bodies) and slow responses on >= 10%
of the data reads. Results must equal the data exactly; after the retry budget the error
names the URL and the range. An object replaced between open and compute must raise
ConsistencyError, never mix old and new bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import scipy.io as sio

import npystore
from faultproxy import FaultProxy
from npystore.errors import ConsistencyError, FetchError
from npystore.fetch import RangeReader, open_reader

pytestmark = pytest.mark.s3

RNG = np.random.default_rng(21)


@pytest.fixture
def faulty(s3: Any) -> Any:
    """(proxy, storage options through it): 15% of data reads fail or stall."""
    with FaultProxy(s3.server.endpoint_url, rate=0.15, seed=7) as proxy:
        opts = s3.server.storage_options(
            client_kwargs={"endpoint_url": proxy.url},
            config_kwargs={"retries": {"max_attempts": 1}},  # npystore's retries, not botocore's
        )
        yield proxy, opts


def fault_share(proxy: FaultProxy) -> float:
    faults = sum(v for k, v in proxy.counts.items() if k != "requests")
    return faults / max(1, proxy.counts["requests"])


def test_npy_compute_of_hundreds_of_chunks_survives_faults(s3: Any, faulty: Any) -> None:
    proxy, opts = faulty
    data = RNG.standard_normal((3000, 100))
    buf = io.BytesIO()
    np.save(buf, data)
    url = s3.put_bytes(buf.getvalue(), "faulty.npy")
    a = npystore.open_npy(url, chunks=(10, 100), storage_options=opts)
    assert a.numblocks[0] == 300
    np.testing.assert_array_equal(a.compute(), data)
    assert proxy.counts["requests"] >= 300
    assert fault_share(proxy) >= 0.10, proxy.counts
    assert {"503", "drop", "slow", "short"} <= set(proxy.counts), proxy.counts


def test_npz_stored_and_deflated_members_survive_faults(s3: Any, faulty: Any) -> None:
    proxy, opts = faulty
    stored = RNG.standard_normal((2000, 50))
    smooth = np.cumsum(RNG.standard_normal((2000, 50)), axis=0).round(2)
    raw, packed = io.BytesIO(), io.BytesIO()
    np.savez(raw, stored=stored)
    np.savez_compressed(packed, smooth=smooth)
    url_raw = s3.put_bytes(raw.getvalue(), "raw.npz")
    url_packed = s3.put_bytes(packed.getvalue(), "packed.npz")
    z = npystore.open_npz(url_raw, chunks=(10, 50), storage_options=opts)
    np.testing.assert_array_equal(z["stored"].compute(), stored)
    zc = npystore.open_npz(url_packed, storage_options=opts)
    np.testing.assert_array_equal(zc["smooth"].compute(), smooth)
    assert proxy.counts["requests"] >= 200
    assert fault_share(proxy) >= 0.10, proxy.counts


def test_mat_v5_and_v73_survive_faults(s3: Any, faulty: Any, tmp_path: Path) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    proxy, opts = faulty
    x = RNG.standard_normal((400, 300))
    v5, v73 = tmp_path / "a.mat", tmp_path / "b.mat"
    sio.savemat(v5, {"x": x})
    hdf5storage.savemat(str(v73), {"x": x}, format="7.3", matlab_compatible=True)
    for path in (v5, v73):
        url = s3.put_file(path, path.name)
        m = npystore.open_mat(url, storage_options=opts, chunks=(400, 2))
        np.testing.assert_array_equal(m["x"].compute(), x)
    assert proxy.counts["requests"] >= 150
    assert fault_share(proxy) >= 0.10, proxy.counts


def test_after_the_retry_budget_the_error_names_url_and_range(s3: Any) -> None:
    data = np.arange(1000.0)
    buf = io.BytesIO()
    np.save(buf, data)
    url = s3.put_bytes(buf.getvalue(), "always.npy")
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("drop",), seed=1) as proxy:
        opts = s3.server.storage_options(
            client_kwargs={"endpoint_url": proxy.url},
            config_kwargs={"retries": {"max_attempts": 1}},
        )
        with pytest.raises(FetchError, match=r"always\.npy.*bytes \[\d+, \d+\).*attempts"):
            npystore.open_npy(url, storage_options=opts)  # the header's ranged GET fails
    assert proxy.counts["drop"] >= 6


def test_a_short_but_complete_response_is_caught_by_the_length_check(s3: Any) -> None:
    """A server that sends half the bytes with a matching Content-Length: the HTTP client
    sees a complete response; npystore's length check retries it, then names the range."""
    data = np.arange(10_000.0)
    buf = io.BytesIO()
    np.save(buf, data)
    url = s3.put_bytes(buf.getvalue(), "short.npy")
    direct = open_reader(url, s3.storage_options)
    with FaultProxy(s3.server.endpoint_url, rate=1.0, faults=("short",), seed=2) as proxy:
        opts = s3.server.storage_options(
            client_kwargs={"endpoint_url": proxy.url},
            config_kwargs={"retries": {"max_attempts": 1}},
        )
        with pytest.raises(
            FetchError, match=r"short\.npy: reading bytes \[0, 128\) at open.*got 64"
        ):
            npystore.open_npy(url, storage_options=opts)  # the opening GET
        with pytest.raises(  # load's opening GET asks for 1 MiB: the whole (80,128 B) file,
            # whose checksum botocore validates too (the object's CRC comes with it)
            FetchError,
            match=r"short\.npy: reading bytes \[0, 1048576\) at open.*(got 40064|checksum)",
        ):
            npystore.load(url, storage_options=opts)
        fs, path = fsspec.core.url_to_fs(url, **opts)
        reader = RangeReader(fs, path, direct.identity)  # opened, then read through the proxy
        with pytest.raises(
            FetchError, match=r"short\.npy: reading bytes \[128, 80128\).*got 40000"
        ):
            reader.read(128, 80128)
    assert proxy.counts["short"] >= 12
    np.testing.assert_array_equal(direct.read(128, 80128), buf.getvalue()[128:])


@pytest.mark.parametrize("same_size", [True, False])
def test_replaced_object_raises_consistency_error(s3: Any, same_size: bool) -> None:
    old = np.arange(5000.0)
    new = old + 1 if same_size else np.arange(6000.0)
    buf = io.BytesIO()
    np.save(buf, old)
    url = s3.put_bytes(buf.getvalue(), "moving.npy")
    a = npystore.open_npy(url, storage_options=s3.storage_options, chunks=1000)
    np.testing.assert_array_equal(a[:10].compute(), old[:10])
    buf = io.BytesIO()
    np.save(buf, new)
    s3.put_bytes(buf.getvalue(), "moving.npy")
    with pytest.raises(ConsistencyError, match=r"moving\.npy.*(changed|bytes now)"):
        a.compute()


def test_deleted_object_raises_consistency_error(s3: Any) -> None:
    buf = io.BytesIO()
    np.save(buf, np.arange(100.0))
    url = s3.put_bytes(buf.getvalue(), "gone.npy")
    a = npystore.open_npy(url, storage_options=s3.storage_options)
    s3.fs.rm(url)
    with pytest.raises(ConsistencyError, match=r"gone\.npy"):
        a.compute()
