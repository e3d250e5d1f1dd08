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


# -- object arrays (pickles) ------------------------------------------------------------------

ZERO_D = [{"a": 1, "b": [2, 3]}, [1, "x", None], "text", None, 7, np.arange(3)]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert type(got) is np.ndarray
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    for g, w in zip(got.ravel(), want.ravel(), strict=True):
        if isinstance(w, np.ndarray):
            np.testing.assert_array_equal(g, w)
        else:
            assert g == w


@pytest.mark.parametrize("value", ZERO_D, ids=lambda v: type(v).__name__)
def test_zero_d_object_arrays_compute_as_numpy_loads_them(tmp_path: Path, value: object) -> None:
    path = tmp_path / "o.npy"
    held = np.empty((), dtype=object)  # what np.save(path, a_dict) writes, for any object
    held[()] = value
    np.save(path, held, allow_pickle=True)
    want = np.load(path, allow_pickle=True)
    assert want.shape == ()
    _same(npystore.open_npy(str(path), allow_pickle=True).compute(), want)
    _same(npystore.load(str(path), allow_pickle=True), want)
    np.savez_compressed(tmp_path / "o.npz", v=held)
    z = npystore.open_npz(str(tmp_path / "o.npz"), allow_pickle=True)
    _same(z["v"].compute(), np.load(tmp_path / "o.npz", allow_pickle=True)["v"])


def test_pickled_sparse_matrix_member_computes(tmp_path: Path) -> None:
    import scipy.sparse

    coo = scipy.sparse.coo_matrix(np.eye(3))
    np.savez(tmp_path / "s.npz", m=coo)  # a 0-d object array holding the matrix
    got = npystore.open_npz(str(tmp_path / "s.npz"), allow_pickle=True)["m"].compute()
    assert got.shape == ()
    np.testing.assert_array_equal(got.item().toarray(), np.eye(3))


def _py2_pickle_npy(path: Path) -> None:
    """An object array pickled as Python 2 does: its str is a byte string (SHORT_BINSTRING)
    holding a latin-1 byte, which only ``encoding="latin1"`` (or "bytes") can load."""
    np.save(path, np.array(["caf\u00e9"], dtype=object), allow_pickle=True)
    data = path.read_bytes()
    utf8 = "caf\u00e9".encode()
    old = b"\x8c" + bytes([len(utf8)]) + utf8  # SHORT_BINUNICODE
    new = b"U" + bytes([5]) + b"caf\xe9!"  # SHORT_BINSTRING, same length (pickle frames)
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, new))


def test_python2_pickles_need_encoding_latin1_as_in_numpy(tmp_path: Path) -> None:
    path = tmp_path / "py2.npy"
    _py2_pickle_npy(path)
    with pytest.raises(UnicodeError):
        np.load(path, allow_pickle=True)
    with pytest.raises(ValueError, match="could not be unpickled"):
        npystore.load(str(path), allow_pickle=True)
    want = np.load(path, allow_pickle=True, encoding="latin1")
    _same(npystore.load(str(path), allow_pickle=True, encoding="latin1"), want)
    got = npystore.open_npy(str(path), allow_pickle=True, encoding="latin1").compute()
    _same(got, want)
    # the encoding is part of the dask name: a different decoding is a different array
    a = npystore.open_npy(str(path), allow_pickle=True, encoding="latin1")
    b = npystore.open_npy(str(path), allow_pickle=True, encoding="bytes")
    assert a.name != b.name
    assert b.compute()[0] == b"caf\xe9!"
    np.savez(tmp_path / "py2.npz", v=np.array([0]))  # an archive takes the options too
    z = npystore.open_npz(str(tmp_path / "py2.npz"), encoding="latin1", fix_imports=False)
    assert int(z["v"].compute()[0]) == 0


# -- numpy.load's other behaviours ---------------------------------------------------------


def test_mmap_mode_maps_local_files_as_numpy(tmp_path: Path) -> None:
    path = tmp_path / "m.npy"
    np.save(path, np.asfortranarray(np.arange(12, dtype=">i4").reshape(3, 4)))
    want = np.load(path, mmap_mode="r")
    got = npystore.load(str(path), mmap_mode="r")
    assert isinstance(got, np.memmap)
    assert got.dtype == want.dtype
    assert got.flags.f_contiguous
    np.testing.assert_array_equal(got, want)
    rw = npystore.load(str(path), mmap_mode="r+")
    rw[0, 0] = 99
    rw.flush()
    del rw
    assert np.load(path)[0, 0] == 99
    np.save(tmp_path / "e.npy", np.zeros((0, 3)))
    assert npystore.load(str(tmp_path / "e.npy"), mmap_mode="r").shape == (0, 3)


def test_mmap_mode_refusals(tmp_path: Path) -> None:
    import fsspec

    np.save(tmp_path / "o.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="memory-mapped"):
        npystore.load(str(tmp_path / "o.npy"), mmap_mode="r", allow_pickle=True)
    with fsspec.open("memory://parity/m.npy", "wb") as f:
        np.save(f, np.arange(3))
    with pytest.raises(ValueError, match="local files only"):
        npystore.load("memory://parity/m.npy", mmap_mode="r")
    np.save(tmp_path / "w.npy", np.arange(3))
    with pytest.raises(ValueError, match=r"numpy\.load empties the file") as info:
        npystore.load(str(tmp_path / "w.npy"), mmap_mode="w+")
    assert "numpy.load refuses" not in str(info.value)  # it does not: it truncates
    np.testing.assert_array_equal(np.load(tmp_path / "w.npy"), np.arange(3))
    with pytest.raises(TypeError):  # numpy: the file is emptied first
        np.load(tmp_path / "w.npy", mmap_mode="w+")
    assert (tmp_path / "w.npy").stat().st_size == 0


@pytest.mark.parametrize("mode", ["r", "r+", "c"])
def test_mmap_mode_is_ignored_for_archives_as_in_numpy(tmp_path: Path, mode: str) -> None:
    np.savez(tmp_path / "a.npz", x=np.arange(3), y=np.eye(2))
    with (
        np.load(tmp_path / "a.npz", mmap_mode=mode) as want,
        npystore.load(str(tmp_path / "a.npz"), mmap_mode=mode) as got,
    ):
        assert got.files == want.files
        for key in want.files:
            np.testing.assert_array_equal(got[key], want[key])


def test_a_plain_pickle_loads_with_allow_pickle_as_in_numpy(tmp_path: Path) -> None:
    import io
    import pickle

    path = tmp_path / "p.pkl"
    value = {"a": [1, 2], "b": np.arange(3)}
    path.write_bytes(pickle.dumps(value))
    want = np.load(path, allow_pickle=True)
    got = npystore.load(str(path), allow_pickle=True)
    assert got.keys() == want.keys()
    np.testing.assert_array_equal(got["b"], want["b"])
    assert got["a"] == [1, 2]
    with pytest.raises(ValueError, match="pickled"):
        np.load(path)
    with pytest.raises(ValueError, match="allow_pickle=True") as info:
        npystore.load(str(path))
    assert isinstance(info.value, npystore.FormatError)
    # a file object: read from its position, left where the pickle ends, as numpy leaves it
    f = io.BytesIO(b"junk" + pickle.dumps([1, 2]) + b"tail")
    f.seek(4)
    assert npystore.load(f, allow_pickle=True) == [1, 2]
    assert f.read() == b"tail"
    # and a file that is no pickle either: a FormatError naming it
    path.write_bytes(b"\x00garbage that is not a pickle")
    with pytest.raises(npystore.FormatError, match=r"p\.pkl: not an \.npy or \.npz file"):
        npystore.load(str(path), allow_pickle=True)


def test_encodings_numpy_refuses_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(3))
    np.savez(tmp_path / "a.npz", x=np.arange(3))
    with pytest.raises(ValueError, match="encoding must be"):
        np.load(tmp_path / "a.npy", encoding="utf-16")
    for call, name in (
        (npystore.load, "a.npy"),
        (npystore.load, "a.npz"),
        (npystore.open_npy, "a.npy"),
        (npystore.open_npz, "a.npz"),
    ):
        with pytest.raises(ValueError, match="encoding must be 'ASCII', 'latin1', or 'bytes'"):
            call(str(tmp_path / name), encoding="utf-16")
    for ok in ("ASCII", "latin1", "bytes"):
        np.testing.assert_array_equal(
            npystore.load(str(tmp_path / "a.npy"), encoding=ok), [0, 1, 2]
        )


def test_load_of_an_npz_is_numpys_mapping(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "a.npz"
    np.savez_compressed(path, x=np.arange(5), y=np.eye(2))
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("notes.txt", b"hello")
    want = np.load(path)
    with npystore.load(str(path)) as got:
        assert got.files == want.files
        assert sorted(got) == sorted(want)
        for key in ("x", "y"):
            value = got[key]
            assert type(value) is np.ndarray
            np.testing.assert_array_equal(value, want[key])
        np.testing.assert_array_equal(got.f.y, want.f.y)
        assert got["notes.txt"] == want["notes.txt"] == b"hello"
        assert "x" in got
        with pytest.raises(KeyError):
            got["nope"]
        with pytest.raises(AttributeError):
            _ = got.f.nope


def test_npzfile_members_as_attributes(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", x=np.arange(5))
    z = npystore.open_npz(str(tmp_path / "a.npz"))
    np.testing.assert_array_equal(z.f.x.compute(), np.arange(5))
    assert "x" in dir(z.f)
    with pytest.raises(AttributeError, match="no member 'nope'"):
        _ = z.f.nope


def test_open_npy_name_and_inline_array_as_dask(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(100))
    assert npystore.open_npy(str(path), chunks=10, name="mine").name == "mine"
    auto = npystore.open_npy(str(path), chunks=10)
    assert auto.name == npystore.open_npy(str(path), chunks=10).name  # deterministic
    r1 = npystore.open_npy(str(path), chunks=10, name=False)
    r2 = npystore.open_npy(str(path), chunks=10, name=False)
    assert r1.name != r2.name
    assert r1.name.startswith("npy-")
    inline = npystore.open_npy(str(path), chunks=10, inline_array=True)
    # inline: no separate graph key holds the array; every task carries it
    assert len(dict(inline.__dask_graph__())) == 10
    assert len(dict(auto.__dask_graph__())) == 11
    np.testing.assert_array_equal(inline.compute(), np.arange(100))
    with pytest.raises(TypeError, match="name must be"):
        npystore.open_npy(str(path), name=3)  # type: ignore[arg-type]
