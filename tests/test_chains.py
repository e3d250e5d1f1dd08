"""Options of chained URLs and other parties' filesystems (issue 26 items 15 and 16)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


@pytest.mark.s3
def test_flat_options_of_a_chain_go_to_the_inner_protocol_with_a_warning(
    s3: Any, tmp_path: Path
) -> None:
    """``simplecache::s3://`` with ``key``/``client_kwargs`` at the top: fsspec gives them to
    simplecache, and S3 tried real AWS for 40 s; now they reach S3, and a warning says how
    to write them."""
    a = np.arange(50.0)
    url = s3.put_bytes(_npy(a), "chained.npy")
    flat = {**s3.storage_options, "npystore_read_budget": 5}
    with pytest.warns(UserWarning, match=r"storage_options=\{'s3': \{\.\.\.\}\}") as info:
        got = npystore.load(f"simplecache::{url}", storage_options=flat)
    np.testing.assert_array_equal(got, a)
    message = str(info[0].message)
    assert "['client_kwargs', 'key', 'secret'] are options of 's3', not of 'simplecache'" in message
    # written as fsspec wants them: no warning, and the cache's own options stay its own
    nested = {"s3": s3.storage_options, "cache_storage": str(tmp_path / "cache")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = npystore.open_npy(f"simplecache::{url}", storage_options=nested)[10:20].compute()
    np.testing.assert_array_equal(got, a[10:20])


@pytest.mark.s3
def test_s3_opens_after_xarray_kerchunk_engine_with_the_same_options(s3: Any) -> None:
    """kerchunk's engine adds ``asynchronous=True`` to the options dict it is given, and
    fsspec's instance cache then hands out its asynchronous s3fs: every npystore S3 open
    raised "RuntimeError: Loop is not running"."""
    xr = pytest.importorskip("xarray")
    pytest.importorskip("kerchunk")
    a = np.arange(30.0)
    url = s3.put_bytes(_npy(a), "after-kerchunk.npy")
    opts = s3.storage_options
    refs = npystore.to_kerchunk(url, storage_options=opts)
    engine_options = {"remote_protocol": "s3", "remote_options": opts}
    ds = xr.open_dataset(refs, engine="kerchunk", storage_options=engine_options)
    np.testing.assert_array_equal(ds["data"].values, a)
    np.testing.assert_array_equal(npystore.load(url, storage_options=opts), a)
    np.testing.assert_array_equal(npystore.open_npy(url, storage_options=opts).compute(), a)
    # asked for outright, an asynchronous instance is not taken either
    explicit = {**s3.storage_options, "asynchronous": True}
    np.testing.assert_array_equal(npystore.load(url, storage_options=explicit), a)


@pytest.mark.s3
def test_block_cache_moves_only_the_blocks_a_slice_needs(s3: Any, tmp_path: Path) -> None:
    """``blockcache::s3://``: a slice moves the blocks it touches, and a block as large as
    s3fs's default (50 MiB: a 10-row slice moved a whole 49 MB file) gets a warning that
    names the option for smaller blocks (issue 26 item 17)."""
    import fsspec

    from npystore.testing import RequestCounter

    a = np.arange(400_000.0).reshape(-1, 10)  # 3.2 MB
    url = s3.put_bytes(_npy(a), "blocks.npy")
    s3_options = {**s3.storage_options, "default_block_size": 2**20}
    counter = RequestCounter.attach(fsspec.filesystem("s3", **s3_options))
    options = {"s3": s3_options, "blockcache": {"cache_storage": str(tmp_path / "c1")}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 1 MiB blocks: no warning
        with counter.measure() as m:
            arr = npystore.open_npy(f"blockcache::{url}", storage_options=options, chunks=1000)
            np.testing.assert_array_equal(arr[1000:1010].compute(), a[1000:1010])
            np.testing.assert_array_equal(arr[30_000:30_010].compute(), a[30_000:30_010])
            np.testing.assert_array_equal(arr[30_000:30_010].compute(), a[30_000:30_010])
    assert m.gets == 2  # block 0 (the header and the first slice) and the second slice's
    assert m.bytes == 2 * 2**20
    defaults = {"s3": s3.storage_options, "blockcache": {"cache_storage": str(tmp_path / "c2")}}
    with pytest.warns(UserWarning, match=r"blocks of 50 MiB .*'default_block_size'"):
        got = npystore.load(f"blockcache::{url}", storage_options=defaults)
    np.testing.assert_array_equal(got, a)
