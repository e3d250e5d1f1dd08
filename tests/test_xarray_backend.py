"""``xarray.open_dataset(url, engine="npystore")`` (issue 8): values against numpy, scipy and
hdf5storage, laziness measured in S3 requests and bytes."""

from __future__ import annotations

import importlib.metadata
import io
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp
import xarray as xr

import npystore
from npystore.faces.xarray import NpystoreBackendEntrypoint, SkippedVariableWarning

ENGINE = "npystore"
RNG = np.random.default_rng(12)


def _open(path: Any, **kwargs: Any) -> Any:
    return xr.open_dataset(path, engine=ENGINE, **kwargs)


def test_engine_is_discovered_through_its_entry_point() -> None:
    assert isinstance(xr.backends.list_engines()[ENGINE], NpystoreBackendEntrypoint)
    points = importlib.metadata.entry_points(group="xarray.backends")
    assert [p.value for p in points if p.name == ENGINE] == [
        "npystore.faces.xarray:NpystoreBackendEntrypoint"
    ]


# -- .npy -------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["<f8", ">f8", ">i4", "<u2", "u1", "?", "<c8", ">c16"])
def test_npy_values_dtypes_and_slices(tmp_path: Path, order: str, dtype: str) -> None:
    arr = np.array(np.arange(60).reshape(3, 4, 5) % 7, dtype=dtype, order=order)  # type: ignore[call-overload]
    path = tmp_path / "a.npy"
    np.save(path, arr)
    v = _open(path)["data"]
    assert v.dims == ("dim_0", "dim_1", "dim_2")
    assert v.dtype == arr.dtype  # byte order included, as numpy.load gives it
    assert v.attrs == {"fortran_order": order == "F"}
    np.testing.assert_array_equal(v[1:, ::2, -1].values, arr[1:, ::2, -1])
    np.testing.assert_array_equal(v.isel(dim_2=[4, 0, 2], dim_0=1).values, arr[1][:, [4, 0, 2]])
    assert v[2, 3, 4].values == arr[2, 3, 4]
    np.testing.assert_array_equal(v.values, np.load(path))


@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 0, 3)])
def test_npy_shapes(tmp_path: Path, shape: tuple[int, ...]) -> None:
    arr = np.arange(int(np.prod(shape)), dtype="<i8").reshape(shape)
    path = tmp_path / "s.npy"
    np.save(path, arr)
    ds = _open(path)
    assert ds["data"].dims == tuple(f"dim_{i}" for i in range(len(shape)))
    np.testing.assert_array_equal(ds["data"].values, arr)
    assert ds["data"].shape == shape


def test_npy_chunks_use_npystores_chunking(tmp_path: Path) -> None:
    arr = RNG.standard_normal((400, 1000))
    path = tmp_path / "c.npy"
    np.save(path, arr)
    with dask.config.set({"array.chunk-size": "256KiB"}):
        ds = _open(path, chunks={})
        expected = npystore.open_npy(str(path)).chunks
    assert ds["data"].chunks == expected  # contiguous row blocks of about 256 KiB
    assert len(expected[0]) > 1
    assert ds["data"].encoding["preferred_chunks"] == {"dim_0": expected[0][0], "dim_1": 1000}
    np.testing.assert_array_equal(ds["data"][100:130, 5].compute(), arr[100:130, 5])
    np.testing.assert_array_equal(ds["data"].values, arr)
    # xarray's hint for chunks that split the preferred ones (harmless for raw storage)
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        ds = _open(path, chunks={"dim_0": 100})
    assert ds["data"].chunks == ((100,) * 4, (1000,))
    assert float(ds["data"].sum()) == pytest.approx(arr.sum())


def test_local_files_are_guessed_without_engine(tmp_path: Path) -> None:
    entry = NpystoreBackendEntrypoint()
    plain = tmp_path / "noext"
    np.save(plain.with_suffix(".npy"), np.arange(3))
    plain.with_suffix(".npy").rename(plain)
    zipped = tmp_path / "archive.zip"
    np.savez(zipped, a=np.arange(3))
    hdf5 = tmp_path / "data.h5"
    hdf5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(600))
    mat = tmp_path / "matnoext"
    sio.savemat(mat.with_suffix(".mat"), {"x": np.eye(2)})
    mat.with_suffix(".mat").rename(mat)
    assert entry.guess_can_open(plain)  # by the .npy magic
    assert entry.guess_can_open(str(mat))  # by the MATLAB 5.0 header text
    assert not entry.guess_can_open(zipped)  # a ZIP file is an .npz only by name
    assert not entry.guess_can_open(hdf5)  # HDF5 without the MATLAB text: netCDF's
    assert not entry.guess_can_open(io.BytesIO(b"\x93NUMPY"))
    for name in ("s3://b/x.npy", "x.NPZ", "simplecache::s3://b/y.mat", "npz://a.npy::s3://b/c.npz"):
        assert entry.guess_can_open(name), name
    assert not entry.guess_can_open("s3://b/x.nc")
    np.testing.assert_array_equal(xr.open_dataset(plain)["data"].values, np.arange(3))


def test_decoding_options_are_accepted_and_ignored(tmp_path: Path) -> None:
    path = tmp_path / "d.npy"
    np.save(path, np.array([1.5, np.nan]))
    for kwargs in ({"decode_cf": False}, {"mask_and_scale": True, "decode_times": True}):
        ds = _open(path, **kwargs)
        np.testing.assert_array_equal(ds["data"].values, [1.5, np.nan])


def test_bad_inputs(tmp_path: Path) -> None:
    text = tmp_path / "t.npy"
    text.write_bytes(b"just some text, long enough to be sniffed" * 4)
    with pytest.raises(npystore.FormatError, match=r"t\.npy: not a \.npy, \.npz or MAT-file"):
        _open(text)
    with pytest.raises(TypeError, match="BytesIO"):
        _open(io.BytesIO(b"x"))
    np.save(tmp_path / "g.npy", np.arange(3))
    with pytest.raises(ValueError, match=r"group='g': an \.npy file has no groups"):
        _open(tmp_path / "g.npy", group="g")


# -- .npz -------------------------------------------------------------------------------


def _npz_arrays() -> dict[str, np.ndarray]:
    return {
        "a": np.round(RNG.standard_normal((50, 40)), 3),
        "b": np.arange(17, dtype=">i2"),
        "f": np.asfortranarray(np.arange(24.0, dtype="<f4").reshape(2, 3, 4)),
        "z": np.array(3.5),
    }


@pytest.mark.parametrize("compress", [False, True], ids=["stored", "deflated"])
def test_npz_members_of_different_shapes(tmp_path: Path, compress: bool) -> None:
    arrays = _npz_arrays()
    path = tmp_path / "m.npz"
    (np.savez_compressed if compress else np.savez)(path, **arrays)
    ds = _open(path)
    assert list(ds.data_vars) == list(arrays)
    for key, arr in arrays.items():
        v = ds[key]
        assert v.dims == tuple(f"{key}_dim_{i}" for i in range(arr.ndim))
        assert v.dtype == arr.dtype
        assert v.attrs == {"fortran_order": bool(arr.flags.f_contiguous and arr.ndim > 1)}
        np.testing.assert_array_equal(v.values, arr)
    np.testing.assert_array_equal(ds["a"][10:20, 3].values, arrays["a"][10:20, 3])
    np.testing.assert_array_equal(ds["f"][1, :, ::-1].values, arrays["f"][1, :, ::-1])
    chunked = _open(path, chunks={})
    assert chunked["a"].chunks is not None
    np.testing.assert_array_equal(chunked["a"].values, arrays["a"])
    dropped = _open(path, drop_variables=["a", "z"])
    assert list(dropped.data_vars) == ["b", "f"]


def test_npz_dims_override(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez(path, t=np.arange(5.0), v=np.ones((5, 2)))
    ds = _open(path, dims={"t": ("time",), "v": ("time", "channel")})
    assert ds["v"].dims == ("time", "channel")
    assert ds.sizes == {"time": 5, "channel": 2}
    assert _open(path, drop_variables="t", dims={"t": ("time",)})["v"].dims == (
        "v_dim_0",
        "v_dim_1",
    )
    with pytest.raises(ValueError, match=r"dims\['v'\] has 1 names .* 2 dimensions"):
        _open(path, dims={"v": ("time",)})
    with pytest.raises(ValueError, match=r"dims names 'w', which is not a variable"):
        _open(path, dims={"w": ("x",)})
    with pytest.raises(ValueError, match="is the string 'time'"):
        _open(path, dims={"t": "time"})


def test_npz_leaves_out_what_is_not_an_array(tmp_path: Path) -> None:
    path = tmp_path / "o.npz"
    objects = np.array([{"k": 1}, [2, 3]], dtype=object)
    with zipfile.ZipFile(path, "w") as zf:
        for name, arr in (("a.npy", np.arange(3)), ("obj.npy", objects)):
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=True)
            zf.writestr(name, buf.getvalue())
        zf.writestr("notes.txt", b"not an array")
    pattern = r"left out 'obj' \(an object array: pass allow_pickle=True.*'notes.txt' \(not an"
    with pytest.warns(SkippedVariableWarning, match=pattern):
        ds = _open(path)
    assert list(ds.data_vars) == ["a"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = _open(path, allow_pickle=True, drop_variables=["notes.txt"])
    assert ds["obj"].values.tolist() == objects.tolist()


def test_npz_member_directories_are_groups(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    members = {"top": np.arange(3), "run1/x": np.ones((2, 2)), "run1/deep/y": np.arange(4.0)}
    np.savez(path, **members)
    flat = _open(path)
    assert list(flat.data_vars) == list(members)
    assert flat["run1/x"].dims == ("run1/x_dim_0", "run1/x_dim_1")
    run1 = _open(path, group="run1")
    assert list(run1.data_vars) == ["x", "deep/y"]
    np.testing.assert_array_equal(run1["deep/y"].values, members["run1/deep/y"])
    with pytest.raises(ValueError, match="no member name starts with 'run2/'"):
        _open(path, group="run2")
    tree = xr.open_datatree(path, engine=ENGINE)
    assert set(tree.groups) == {"/", "/run1", "/run1/deep"}
    assert list(tree["run1"].data_vars) == ["x"]
    np.testing.assert_array_equal(tree["run1/deep/y"].values, members["run1/deep/y"])
    np.testing.assert_array_equal(tree["top"].values, members["top"])


# -- .mat -------------------------------------------------------------------------------


def _mat_data() -> dict[str, Any]:
    return {
        "x": RNG.standard_normal((30, 20)),
        "i": np.arange(6, dtype=np.int16).reshape(2, 3),
        "z": RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3)),
        "flags": np.array([[True, False, True]]),
        "v": np.arange(5.0),
        "label": "trial",
        "rows": np.array(["ab", "cd"]),
        "s": {"a": np.eye(2), "t": "txt", "u": {"q": np.arange(3.0)}},
        "c": np.array([[np.arange(3.0), "text"]], dtype=object),
        "sp": sp.csc_matrix(np.eye(3)),
        "sa": np.array([[(1.0, "x"), (2.0, "yy")]], dtype=[("p", object), ("w", object)]),
    }


@pytest.mark.parametrize("compress", [False, True], ids=["v6", "v7"])
def test_mat_v5_mapping(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "m.mat"
    sio.savemat(path, _mat_data(), do_compression=compress)
    expected = sio.loadmat(path)  # MATLAB shapes: at least 2-D
    with pytest.warns(SkippedVariableWarning) as caught:
        ds = _open(path)
    message = str(caught[0].message)
    for part in (
        "'s' (a struct: open it with group='s' or xarray.open_datatree)",
        "'c' (a cell array",
        "'sp' (a sparse matrix",
        "'sa' (a struct array",
    ):
        assert part in message
    assert list(ds.data_vars) == ["x", "i", "z", "flags", "v", "label", "rows"]
    classes = {"x": "double", "i": "int16", "z": "double", "flags": "logical", "v": "double"}
    for name, matlab_class in classes.items():
        v = ds[name]
        assert v.attrs == {"matlab_class": matlab_class}
        assert v.dims == (f"{name}_dim_0", f"{name}_dim_1")
        assert v.dtype == (bool if name == "flags" else expected[name].dtype.newbyteorder("="))
        np.testing.assert_array_equal(v.values, expected[name])
    np.testing.assert_array_equal(ds["x"][3:7, ::3].values, expected["x"][3:7, ::3])
    np.testing.assert_array_equal(ds["z"][:, 1].values, expected["z"][:, 1])
    assert ds["label"].dims == ()
    assert ds["label"].values[()] == "trial"
    assert ds["rows"].values.tolist() == ["ab", "cd"]
    assert ds["rows"].attrs == {"matlab_class": "char"}
    assert ds.attrs["matlab_version"] == "5"
    assert ds.attrs["matlab_header"].startswith("MATLAB 5.0 MAT-file")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedVariableWarning)
        squeezed = _open(path, squeeze=True, drop_variables=["x"])
    assert "x" not in squeezed
    assert squeezed["v"].dims == ("v_dim_0",)
    np.testing.assert_array_equal(squeezed["v"].values, np.arange(5.0))
    np.testing.assert_array_equal(squeezed["v"][1:3].values, [1.0, 2.0])
    assert squeezed["i"].shape == (2, 3)


def test_mat_v4(tmp_path: Path) -> None:
    path = tmp_path / "v4.mat"
    a = RNG.standard_normal((4, 3))
    sio.savemat(path, {"a": a, "t": "text"}, format="4")
    ds = _open(path)
    assert ds.attrs["matlab_version"] == "4"
    np.testing.assert_array_equal(ds["a"][1:3].values, a[1:3])
    assert ds["t"].values[()] == "text"


def test_mat_struct_groups_and_datatree(tmp_path: Path) -> None:
    path = tmp_path / "g.mat"
    sio.savemat(path, _mat_data(), do_compression=True)
    with pytest.warns(SkippedVariableWarning, match=r"left out 'u' \(a struct: .*group='s/u'"):
        s = _open(path, group="s")
    assert list(s.data_vars) == ["a", "t"]
    np.testing.assert_array_equal(s["a"].values, np.eye(2))
    assert s["t"].values[()] == "txt"
    assert "matlab_version" not in s.attrs
    u = _open(path, group="s/u", squeeze=True)
    np.testing.assert_array_equal(u["q"].values, np.arange(3.0))
    with pytest.raises(ValueError, match="group 'x' is a 30x20 double, expected a scalar"):
        _open(path, group="x")
    with pytest.raises(ValueError, match="'nope' is not a variable"):
        _open(path, group="nope")
    with pytest.raises(ValueError, match="the struct 's' has no field 'w'"):
        _open(path, group="s/w")
    with pytest.raises(ValueError, match="'x' is a 30x20 double, not a scalar"):
        _open(path, group="x/a")
    with pytest.warns(SkippedVariableWarning, match="'c' .*'sp' .*'sa'"):
        tree = xr.open_datatree(path, engine=ENGINE)
    assert set(tree.groups) == {"/", "/s", "/s/u"}
    np.testing.assert_array_equal(tree["s/u/q"].values, [[0.0, 1.0, 2.0]])
    np.testing.assert_array_equal(tree["x"].values, sio.loadmat(path)["x"])


def test_mat_v73(tmp_path: Path) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    data = {
        "x": RNG.standard_normal((40, 30)),
        "k": np.arange(12, dtype=np.uint32).reshape(3, 4),
        "z": (RNG.standard_normal((2, 5)) + 1j).astype(np.complex64),
        "name": "v73",
        "s": {"a": np.ones((2, 2))},
    }
    path = tmp_path / "h.mat"
    hdf5storage.savemat(str(path), data, format="7.3", matlab_compatible=True)
    with pytest.warns(SkippedVariableWarning, match="'s' .*group='s'"):
        ds = _open(path)
    assert ds.attrs["matlab_version"] == "7.3"
    for name in ("x", "k", "z"):
        assert ds[name].dtype == data[name].dtype
        np.testing.assert_array_equal(ds[name].values, data[name])
    np.testing.assert_array_equal(ds["x"][5:9, [2, 7]].values, data["x"][5:9, [2, 7]])
    assert ds["name"].values[()] == "v73"
    np.testing.assert_array_equal(_open(path, group="s")["a"].values, np.ones((2, 2)))
    with pytest.warns(SkippedVariableWarning):
        chunked = _open(path, chunks={})
    np.testing.assert_array_equal(chunked["x"].compute().values, data["x"])


def test_lazy_arrays_pickle_without_the_open_file(tmp_path: Path) -> None:
    path = tmp_path / "p.mat"
    x = RNG.standard_normal((6, 4))
    sio.savemat(path, {"x": x}, do_compression=True)
    ds = _open(path)  # a v5 variable, parsed only on first read
    again = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(again["x"][1:3].values, x[1:3])
    chunked = _open(path, chunks={})
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(chunked))["x"].values, x)


# -- S3: laziness in requests and bytes ------------------------------------------------


def test_s3_npy_open_reads_the_header_only_and_a_slice_its_bytes(s3: Any, tmp_path: Path) -> None:
    arr = RNG.standard_normal((2000, 500))
    path = tmp_path / "a.npy"
    np.save(path, arr)
    url = s3.put_file(path, "a.npy")
    offset = npystore.read_header(str(path)).data_offset
    kwargs = {"backend_kwargs": {"storage_options": s3.storage_options}}
    with s3.counter.measure() as m:
        ds = _open(url, **kwargs)
    assert m.requests == 1
    assert m.bytes == 128  # the header; not one byte of data
    with s3.counter.measure() as m:
        got = ds["data"][1000:1010].values
    np.testing.assert_array_equal(got, arr[1000:1010])
    assert m.ranges == [(offset + 1000 * 4000, offset + 1010 * 4000 - 1)]
    assert m.bytes == 10 * 4000
    with dask.config.set({"array.chunk-size": "1MiB"}):
        chunked = _open(url, chunks={}, **kwargs)
    with s3.counter.measure() as m:
        got = chunked["data"][1000:1010].compute()
    np.testing.assert_array_equal(got, arr[1000:1010])
    assert m.bytes == 10 * 4000  # dask's slice fusion reaches the range reads


def test_s3_npz_open_reads_directory_and_headers(s3: Any, tmp_path: Path) -> None:
    x = RNG.standard_normal((1000, 500))
    path = tmp_path / "z.npz"
    np.savez(path, x=x, y=x[:300])
    url = s3.put_file(path, "z.npz")
    with s3.counter.measure() as m:
        ds = _open(url, storage_options=s3.storage_options)
    # identity, the archive's tail (256 KiB), one concurrent batch of member headers
    assert m.requests == 4
    assert m.bytes < 256 * 2**10 + 2000
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(ds["x"][600:610].values, x[600:610])
    assert m.gets == 1
    assert m.bytes == 10 * 4000


def test_s3_mat_opens_without_reading_data(s3: Any, tmp_path: Path) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    h5py = pytest.importorskip("h5py")
    x = RNG.standard_normal((2000, 600))  # 9.6 MB: above what a v7.3 open reads whole
    v73 = tmp_path / "x73.mat"
    hdf5storage.savemat(str(v73), {"x": x}, matlab_compatible=True)  # chunked, deflated
    with h5py.File(v73) as f:  # the stored chunks holding MATLAB column 123 (an HDF5 row)
        dset = f["x"]
        rows = dset.chunks[0]
        sizes: list[int] = []
        dset.id.chunk_iter(
            lambda c: sizes.append(c.size) if c.chunk_offset[0] == 123 // rows * rows else None
        )
    column_bytes = {"x73.mat": sum(sizes), "x5.mat": 2000 * 8}  # v5: a contiguous column
    v5 = tmp_path / "x5.mat"
    sio.savemat(v5, {"x": x, "label": "big"})
    for path in (v73, v5):
        url = s3.put_file(path, path.name)
        size = path.stat().st_size
        with s3.counter.measure() as m:
            ds = _open(url, storage_options=s3.storage_options)
        assert m.bytes < 0.1 * size, (path.name, m)  # headers and metadata
        # the first read parses the variable (v5: its element)
        assert ds["x"][0, 0].values == x[0, 0]
        with s3.counter.measure() as m:
            column = ds["x"][:, 123].values
        np.testing.assert_array_equal(column, x[:, 123])
        assert m.gets == 1, (path.name, m)
        assert m.bytes == column_bytes[path.name], (path.name, m)
