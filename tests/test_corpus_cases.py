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
