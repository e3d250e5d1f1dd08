"""MAT-files at the edges, on every face (open_mat, MatFile.load, the Zarr store, xarray,
kerchunk references): structs with no fields, invalid UTF-8 chars, HDF5 files without a
MATLAB header. Oracles: scipy.io.loadmat, mat73, h5py.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io as sio

import npystore
from npystore import MatStruct

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
mat73 = pytest.importorskip("mat73")

V73_HEADER = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."


def stamp_v73(path: Path) -> None:
    """Write MATLAB's v7.3 header text into the file's 512-byte user block."""
    with path.open("r+b") as f:
        f.write(V73_HEADER.ljust(116) + b" " * 8 + b"\x00\x02IM")


# ------------------------------------------------------------ struct() with no fields


def empty_struct_files(tmp_path: Path) -> dict[str, tuple[Path, tuple[int, ...]]]:
    """``struct()`` (1x1) and a 2x3 struct array with no fields, as v5 and v7.3 files:
    name -> (path, MATLAB dims)."""
    v5 = tmp_path / "es5.mat"
    sio.savemat(v5, {"a": {}})  # scipy writes {} as MATLAB's struct(): 1x1, no fields
    data = bytearray(v5.read_bytes())
    dims = data.index(struct.pack("<IIii", 5, 8, 1, 1))  # the dimensions subelement
    data[dims + 8 : dims + 16] = struct.pack("<ii", 2, 3)
    v5_array = tmp_path / "es5_2x3.mat"
    v5_array.write_bytes(bytes(data))
    v73 = tmp_path / "es73.mat"
    with h5py.File(v73, "w", userblock_size=512) as f:
        f.create_group("a").attrs["MATLAB_class"] = np.bytes_("struct")
    stamp_v73(v73)
    v73_array = tmp_path / "es73_2x3.mat"
    with h5py.File(v73_array, "w", userblock_size=512) as f:
        d = f.create_dataset("a", data=np.array([2, 3], np.uint64))
        d.attrs["MATLAB_class"] = np.bytes_("struct")
        d.attrs["MATLAB_empty"] = np.uint8(1)
    stamp_v73(v73_array)
    return {
        "v5": (v5, (1, 1)),
        "v5 2x3": (v5_array, (2, 3)),
        "v7.3": (v73, (1, 1)),
        "v7.3 2x3": (v73_array, (2, 3)),
    }


def test_struct_with_no_fields_on_every_face(tmp_path: Path) -> None:
    """``struct()`` raised "range() arg 3 must not be zero" in v5 files, and the Zarr store
    and the references lost the whole file; it is a struct with no fields everywhere."""
    scipy_file = Path(sio.__file__).parent / "matlab" / "tests" / "data" / "test_empty_struct.mat"
    files = empty_struct_files(tmp_path)
    if scipy_file.is_file():
        files["scipy's test_empty_struct.mat"] = (scipy_file, (1, 1))
    for what, (path, dims) in files.items():
        if what.startswith("v7.3"):
            theirs = mat73.loadmat(str(path))["a"]
            # mat73: {} for struct(), nested lists of [] for the array (2x3x0)
            assert theirs == {} if dims == (1, 1) else np.shape(theirs)[:2] == dims, what
        else:
            theirs = sio.loadmat(path, struct_as_record=False)["a"]
            assert theirs.shape == dims, what
            assert theirs.flat[0]._fieldnames == [], what
        with npystore.open_mat(str(path)) as m:
            assert (m.variables["a"].matlab_class, m.variables["a"].dims) == ("struct", dims)
            value = m["a"]
            assert m.load("a") is not None
        if dims == (1, 1):
            assert isinstance(value, MatStruct), what
            assert len(value) == 0, what
        else:
            assert (value.shape, value.dtype) == (dims, object), what
            assert all(isinstance(v, MatStruct) and len(v) == 0 for v in value.flat), what
        group = zarr.open_group(npystore.open_store(str(path)), mode="r")
        attrs = dict(group["a"].attrs)
        assert (attrs["matlab_class"], attrs["matlab_fields"]) == ("struct", []), what
        assert list(group["a"].array_keys()) == [], what
        refs = npystore.to_kerchunk(str(path))["refs"]
        assert '"matlab_fields": []' in refs["a/.zattrs"], what
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = xr.open_datatree(str(path), engine="npystore")
        assert dims != (1, 1) or ("a" in tree.children and not tree["a"].data_vars), what


# ------------------------------------------------------- char_errors on every face


def test_char_errors_on_the_store_the_references_and_xarray(tmp_path: Path) -> None:
    """One char variable that is not UTF-8 made open_store and to_kerchunk refuse the whole
    file, and the message named an option they lacked: they (and the xarray engine, and
    the VirtualiZarr parser) take ``char_errors`` as open_mat does."""
    from npystore.errors import FormatError
    from npystore.virtualizarr import NpystoreParser

    path = tmp_path / "u8.mat"
    sio.savemat(path, {"s": "abcé", "ok": "fine"}, do_compression=False)
    path.write_bytes(path.read_bytes().replace("é".encode(), b"\xff\xa9"))  # invalid UTF-8
    oracle = sio.loadmat(path)["s"][0]
    assert oracle == "abc\ufffd"
    url = str(path)
    refused = r"u8\.mat:s: char variable 's': invalid UTF-8 .*char_errors='replace'"
    for strict in (
        lambda: npystore.open_store(url),
        lambda: npystore.to_kerchunk(url),
        lambda: xr.open_dataset(url, engine="npystore"),
    ):
        with pytest.raises(FormatError, match=refused):
            strict()
    group = zarr.open_group(npystore.open_store(url, char_errors="replace"), mode="r")
    assert group["s"].attrs["matlab_text"] == oracle
    assert group["s"][...].tolist() == [[ord(c) for c in oracle]]
    refs = npystore.to_kerchunk(url, char_errors="replace")["refs"]
    assert '"matlab_text": "abc\\ufffd"' in refs["s/.zattrs"]
    assert xr.open_dataset(url, engine="npystore", char_errors="replace")["s"].item() == oracle
    tree = xr.open_datatree(url, engine="npystore", char_errors="replace")
    assert tree["s"].item() == oracle
    obstore_store = pytest.importorskip("obstore.store")
    registry = pytest.importorskip("obspec_utils.registry")
    local = registry.ObjectStoreRegistry({"file://": obstore_store.LocalStore()})
    with pytest.raises(FormatError, match=refused):
        NpystoreParser()(path.as_uri(), local)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chars are values, not references: left out
        assert NpystoreParser(char_errors="replace")(path.as_uri(), local) is not None


# ------------------------------------------- HDF5 behind a user block that is not MATLAB's


@pytest.mark.parametrize("block", [b"", b"not a MAT-file header"])
@pytest.mark.parametrize("size", [512, 2048])
def test_hdf5_behind_a_foreign_user_block_is_refused_as_plain_hdf5(
    tmp_path: Path, size: int, block: bytes
) -> None:
    """A valid HDF5 file whose user block is zeros (h5py's ``userblock_size=512``) was
    taken for a v4 MAT-file ("v4 matrix at offset 500 ... imagf 1178880137"); it is HDF5
    without MATLAB's header, refused as plain HDF5 is, naming where HDF5 starts."""
    from npystore.errors import UnsupportedError
    from npystore.tools.cli import main

    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=size) as f:
        f["v"] = np.arange(3.0)
    with path.open("r+b") as out:
        out.write(block)
    with h5py.File(path, "r") as f:  # the oracle: a valid HDF5 file
        assert f["v"][:].tolist() == [0.0, 1.0, 2.0]
    expected = (
        rf"ub\.h5: a plain HDF5 file, not a MATLAB v7\.3 MAT-file: its HDF5 superblock is "
        rf"at byte {size}.*h5py"
    )
    for opener in (npystore.open_mat, npystore.open, npystore.open_store, npystore.to_kerchunk):
        with pytest.raises(UnsupportedError, match=expected):
            opener(str(path))
    with pytest.raises(UnsupportedError, match=expected):
        xr.open_dataset(path, engine="npystore")
    assert main(["info", str(path)]) != 0
