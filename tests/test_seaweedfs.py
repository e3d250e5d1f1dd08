"""SeaweedFS, a real distributed object store, through its S3 gateway: pins (a wrong
``If-Match`` is answered 412), faults between it and the client, and writers (multipart
uploads whose parts arrive in any order). ``test_distributed.py`` has its dask.distributed
read and write; ``test_write_s3.py`` the ordered parts rclone needs.
"""

from __future__ import annotations

import io
from typing import Any

import dask.array as da
import numpy as np
import pytest

import npystore
from faultproxy import FaultProxy
from npystore.errors import ConsistencyError
from npystore.fetch import open_reader
from npystore.fetch import sink as sink_module
from npystore.write import npy as write_npy

RNG = np.random.default_rng(28)


def _npy(a: Any) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_a_replaced_object_answers_412(seaweed: Any) -> None:
    """SeaweedFS honours If-Match: the replaced object's ranges are refused by the server
    (412), not only by npystore's check of the answer."""
    old = np.arange(40_000.0)
    url = seaweed.put_bytes(_npy(old), "moving.npy")
    lazy = npystore.open_npy(url, storage_options=seaweed.storage_options, chunks=4000)
    np.testing.assert_array_equal(lazy[:4000].compute(), old[:4000])
    seaweed.put_bytes(_npy(old + 1), "moving.npy")
    with pytest.raises(ConsistencyError, match=r"moving\.npy: the object changed since it was"):
        lazy.compute()
    reader = open_reader(url, seaweed.storage_options)  # reopened: the new object
    assert reader.read(128, 136) == _npy(old + 1)[128:136]


def test_faults_between_seaweedfs_and_the_client(seaweed: Any) -> None:
    data = RNG.standard_normal((600, 40))
    url = seaweed.put_bytes(_npy(data), "faulty.npy")
    with FaultProxy(seaweed.server.endpoint_url, rate=0.25, seed=9) as proxy:
        opts = seaweed.server.storage_options(
            client_kwargs={"endpoint_url": proxy.url},
            config_kwargs={"retries": {"max_attempts": 1}},  # npystore's retries only
        )
        x = npystore.open_npy(url, chunks=(10, 40), storage_options=opts)
        np.testing.assert_array_equal(x.compute(), data)
    faults = {k for k, v in proxy.counts.items() if k != "requests" and v}
    assert {"503", "drop", "short"} <= faults, proxy.counts


def test_multipart_parts_in_any_order(seaweed: Any) -> None:
    """Parts uploaded last to first complete into the right object."""
    url = seaweed.url("reversed.bin")
    part = sink_module.S3_MIN_PART
    data = RNG.integers(0, 256, 3 * part + 1000, dtype=np.uint8).tobytes()
    sink = sink_module.open_sink(url, seaweed.storage_options)
    cuts = [(1, 0, part), (2, part, 2 * part), (3, 2 * part, len(data))]
    receipts = [sink.write(n, a, data[a:b]) for n, a, b in reversed(cuts)]
    sink.commit(receipts, len(data))
    assert seaweed.fs.cat_file(url) == data


def test_writers_round_trip(seaweed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_npy, "PART_SIZE", sink_module.S3_MIN_PART)
    opts = seaweed.storage_options
    x = da.from_array(RNG.standard_normal((1000, 1500)), chunks=(97, 1500))  # 12 MB: 3 parts
    npystore.save(seaweed.url("x.npy"), x, storage_options=opts)
    assert seaweed.fs.cat_file(seaweed.url("x.npy")) == _npy(np.asarray(x))
    arrays = {"a": np.arange(1000.0).round(1), "b": np.eye(50, dtype=">i4")}
    npystore.savez_compressed(seaweed.url("z.npz"), storage_options=opts, **arrays)
    with npystore.load(seaweed.url("z.npz"), storage_options=opts) as z:
        for key, want in arrays.items():
            np.testing.assert_array_equal(z[key], want)
