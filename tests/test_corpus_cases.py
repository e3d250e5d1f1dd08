"""Cases found by the foreign-file sweep (``benchmarks/corpus.py``, issue 26), each rebuilt
here in ``tmp_path`` without the foreign file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import npystore
from npystore.errors import UnsupportedError


def test_object_npy_has_no_zarr_form_and_the_message_says_what_reads_it(tmp_path: Path) -> None:
    """An object .npy through open_store / to_kerchunk: the refusal recommended
    ``allow_pickle=True``, an option none of them takes."""
    path = tmp_path / "obj.npy"
    np.save(path, np.array([1, "a", None], dtype=object), allow_pickle=True)
    calls = [
        lambda: npystore.open_store(str(path)),
        lambda: npystore.to_kerchunk(str(path)),
        lambda: npystore.to_kerchunk(str(path), zarr_format=3),
    ]
    for call in calls:
        with pytest.raises(UnsupportedError, match="no Zarr form") as info:
            call()
        assert "npystore.load(url, allow_pickle=True)" in str(info.value)
        assert str(path) in str(info.value)
    # an archive's object member is left out and named, the others served
    npz = tmp_path / "obj.npz"
    np.savez(npz, obj=np.array([{"k": 1}], dtype=object), num=np.arange(3))
    group = zarr.open_group(npystore.open_store(str(npz)), mode="r")
    assert list(group.array_keys()) == ["num"]
    assert "obj.npy" in group.attrs["npystore"]["skipped"]


def test_v2_references_carry_consolidated_metadata_so_struct_fields_are_found(
    tmp_path: Path,
) -> None:
    """zarr 3.1 over fsspec's reference file system lists nothing below the root (it asks
    for ``/s``): a MAT struct's fields were lost (``members()`` empty, ``open_zarr(...,
    group="s")`` an empty dataset) without ``.zmetadata``."""
    import fsspec
    import scipy.io as sio
    import xarray as xr
    from zarr.storage import FsspecStore

    path = tmp_path / "s.mat"
    sio.savemat(path, {"s": {"x": np.arange(3.0), "t": {"u": np.int16(7)}}, "top": 1.5})
    refs = npystore.to_kerchunk(str(path))
    assert ".zmetadata" in refs["refs"]
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, remote_protocol="file")
    store = FsspecStore(fs=fs, read_only=True, path="")
    group = zarr.open_group(store, mode="r", zarr_format=2)
    assert sorted(name for name, _ in group["s"].members()) == ["t", "x"]
    np.testing.assert_array_equal(group["s/t/u"][...], [[7]])
    ds = xr.open_zarr(store, group="s", consolidated=True, zarr_format=2)
    np.testing.assert_array_equal(ds["x"].values, [[0.0, 1.0, 2.0]])
