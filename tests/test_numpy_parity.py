"""Code written against numpy.load's behaviour keeps working with npystore's readers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import npystore
from npystore.errors import UnsupportedError


def _with_version(path: Path, major: int, minor: int) -> Path:
    np.save(path, np.arange(4))
    data = bytearray(path.read_bytes())
    data[6:8] = bytes((major, minor))
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(("major", "minor"), [(0, 0), (1, 1), (2, 2), (255, 255)])
def test_unsupported_format_version_is_a_value_error_as_in_numpy(
    tmp_path: Path, major: int, minor: int
) -> None:
    path = _with_version(tmp_path / "v.npy", major, minor)
    with pytest.raises(ValueError, match="version"):
        np.load(path)
    for call in (npystore.load, npystore.read_header, npystore.open_npy):
        with pytest.raises(ValueError, match=f"version {major}.{minor}") as info:
            call(str(path))
        assert isinstance(info.value, UnsupportedError)
        assert isinstance(info.value, NotImplementedError)  # as before


def test_refused_pickle_is_a_value_error_as_in_numpy(tmp_path: Path) -> None:
    path = tmp_path / "o.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="allow_pickle"):
        np.load(path)
    with pytest.raises(ValueError, match="allow_pickle") as info:
        npystore.load(str(path))
    assert isinstance(info.value, UnsupportedError)
    np.savez(tmp_path / "o.npz", o=np.array([1, "x"], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        npystore.open_npz(str(tmp_path / "o.npz")).load("o")
