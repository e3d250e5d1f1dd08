"""Kerchunk references of MATLAB v7.3 files: the HDF5 chunks themselves, with numcodecs
filters, in MATLAB's shape.

Oracles: ``npystore.open_mat`` (MATLAB semantics), h5py (``read_direct_chunk``: the stored
bytes of each chunk), hdf5storage (shuffle + deflate + fletcher32, as it writes by default)
and MATLAB's own layout (deflate level 3, chunks of at most 64 KiB, a 512-byte userblock).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore
from npystore.errors import UnsupportedError

h5py = pytest.importorskip("h5py")
pytest.importorskip("kerchunk")

from test_refs import inlined, open_refs, ranges  # noqa: E402

HEADER = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Sun Nov 22 00:00:00 2026 HDF5"


def matlab_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """MATLAB's chunk shape: halve the largest dimension until a chunk fits 64 KiB."""
    chunk = list(shape)
    while math.prod(chunk) * itemsize > 64 * 2**10:
        k = max(range(len(chunk)), key=lambda i: chunk[i])
        chunk[k] = math.ceil(chunk[k] / 2)
    return tuple(chunk)


def write_v73(path: Path, variables: dict[str, np.ndarray], **options: Any) -> None:
    """Numeric, complex and logical variables as MATLAB's ``save -v7.3`` lays them out
    (``options`` replace MATLAB's deflate level 3 and 64 KiB chunks)."""
    with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
        for name, value in variables.items():
            data = value.T  # MATLAB (m, n) column-major == HDF5 (n, m) row-major
            cls = {"b": "logical", "c": "double", "f": "double", "i": "int32"}[value.dtype.kind]
            if value.dtype.kind == "c":
                pair = np.dtype([("real", "<f8"), ("imag", "<f8")])
                stored = np.empty(data.shape, pair)
                stored["real"], stored["imag"] = data.real, data.imag
                data = stored
            elif value.dtype.kind == "b":
                data = data.astype("u1")
            kw = {"chunks": matlab_chunks(data.shape, data.dtype.itemsize),
                  "compression": "gzip", "compression_opts": 3, **options}  # fmt: skip
            d = f.create_dataset(name, data=data, **kw)
            d.attrs["MATLAB_class"] = np.bytes_(cls)
            if cls == "logical":
                d.attrs["MATLAB_int_decode"] = np.int32(1)
    with open(path, "r+b") as fh:
        fh.write(HEADER.ljust(116) + b"\x00" * 8 + b"\x00\x02IM")


def check_chunks_against_h5py(refs: dict[str, Any], path: Path, name: str) -> None:
    """Each reference's bytes are the chunk h5py reads raw (``read_direct_chunk``)."""
    raw = path.read_bytes()
    with h5py.File(path, "r") as f:
        dset = f[name]
        chunk = dset.chunks
        for key, (_, offset, length) in ranges(refs).items():
            if not key.startswith(f"{name}/"):
                continue
            index = [int(i) for i in key.rsplit("/", 1)[1].split(".")]
            h5_index = index[::-1][: dset.ndim]  # MATLAB axes reversed
            origin = tuple(i * c for i, c in zip(h5_index, chunk, strict=True))
            _, data = dset.id.read_direct_chunk(origin)
            assert raw[offset : offset + length] == data, key


def test_32_mb_matlab_variable_is_references_to_its_chunks(tmp_path: Path) -> None:
    n = 2048  # 2048 x 2048 doubles: 32 MiB, 512 chunks of 64 KiB
    t = np.linspace(0, 20 * np.pi, n)
    x = np.round(np.sin(t)[:, None] * np.linspace(1, 2, n)[None, :], 3)
    x[5, 7] = -1.5
    path = tmp_path / "big.mat"
    write_v73(path, {"x": x})
    refs = npystore.to_kerchunk(str(path))
    assert len(json.dumps(refs)) < 200_000
    assert not inlined(refs)
    zarray = json.loads(refs["refs"]["x/.zarray"])
    assert zarray["shape"] == [n, n]
    assert zarray["order"] == "F"
    with h5py.File(path, "r") as f:
        assert zarray["chunks"] == list(f["x"].chunks[::-1])  # HDF5's, in MATLAB's axes
    assert zarray["filters"] == [{"id": "zlib", "level": 3}]
    assert len(ranges(refs)) == 512
    got = open_refs(refs, remote_protocol="file")["x"][...]
    np.testing.assert_array_equal(got, npystore.open_mat(str(path)).load("x"))
    np.testing.assert_array_equal(got, x)
    check_chunks_against_h5py(refs, path, "x")


def test_hdf5storage_shuffle_deflate_fletcher32_complex_logical_text(tmp_path: Path) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    rng = np.random.default_rng(3)
    data = {
        "a": rng.standard_normal((300, 70)),
        "z": rng.standard_normal((40, 9)) + 1j * rng.standard_normal((40, 9)),
        "k": rng.standard_normal((33, 17)) > 0,
        "i": np.arange(3 * 5 * 7, dtype=np.int32).reshape(3, 5, 7),
        "txt": "hello",
        "s": {"inner": np.arange(4.0)},
    }
    path = tmp_path / "h.mat"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hdf5storage.savemat(str(path), data, format="7.3", matlab_compatible=True)
    m = npystore.open_mat(str(path))
    refs = npystore.to_kerchunk(str(path))
    zarray = json.loads(refs["refs"]["a/.zarray"])
    assert [f["id"] for f in zarray["filters"]] == ["shuffle", "zlib", "fletcher32"]
    group = open_refs(refs, remote_protocol="file")
    for name in ("a", "z", "k", "i"):
        want = m.load(name)
        got = group[name][...]
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, np.asarray(data[name]).reshape(want.shape))
    np.testing.assert_array_equal(group["s/inner"][...], m.load("s")["inner"])
    assert group["txt"].attrs["matlab_text"] == "hello"
    check_chunks_against_h5py(refs, path, "a")
    v3 = open_refs(npystore.to_kerchunk(str(path), zarr_format=3), remote_protocol="file")
    for name in ("a", "z", "k", "i"):
        np.testing.assert_array_equal(v3[name][...], m.load(name))


def test_engine_kerchunk_names_dimensions_as_npystore(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    x = np.arange(60.0).reshape(6, 10)
    path = tmp_path / "d.mat"
    write_v73(path, {"x": x, "flag": x > 20}, chunks=(4, 3))
    ds = xr.open_dataset(npystore.to_kerchunk(str(path)), engine="kerchunk")
    mine = xr.open_dataset(path, engine="npystore")
    for name in ("x", "flag"):
        assert ds[name].dims == mine[name].dims == (f"{name}_dim_0", f"{name}_dim_1")
        np.testing.assert_array_equal(ds[name].values, mine[name].values)


def test_a_chunk_that_skipped_a_filter_is_inlined(tmp_path: Path) -> None:
    x = np.arange(40.0).reshape(8, 5)
    path = tmp_path / "mask.mat"
    write_v73(path, {"x": x}, chunks=(5, 4))  # HDF5 shape (5, 8): chunks (5, 4)
    plain = np.ascontiguousarray(x.T[:, 4:8]) + 1000  # chunk (0, 1) rewritten unfiltered
    with h5py.File(path, "r+") as f:
        f["x"].id.write_direct_chunk((0, 4), plain.tobytes(), filter_mask=1)
    want = x.copy()
    want[4:8, :] += 1000
    np.testing.assert_array_equal(npystore.open_mat(str(path)).load("x"), want)
    refs = npystore.to_kerchunk(str(path))
    assert set(inlined(refs)) == {"x/1.0"}  # MATLAB axes: rows 4..7
    np.testing.assert_array_equal(open_refs(refs, remote_protocol="file")["x"][...], want)


def test_filters_numcodecs_lacks_inline_small_refuse_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.arange(600.0).reshape(20, 30)
    path = tmp_path / "lzf.mat"
    write_v73(path, {"x": x}, compression="lzf", compression_opts=None)
    refs = npystore.to_kerchunk(str(path))
    assert set(inlined(refs)) == {"x/0.0"}  # the values, decoded by npystore, in one chunk
    np.testing.assert_array_equal(open_refs(refs, remote_protocol="file")["x"][...], x)
    with pytest.raises(
        UnsupportedError,
        match=r"lzf\.mat:x: 4800 bytes, HDF5 chunks filtered by lzf.*npystore convert",
    ):
        npystore.to_kerchunk(str(path), max_inline=1000)


def test_mat_references_from_s3(tmp_path: Path, s3: Any) -> None:
    x = np.arange(5000.0).reshape(100, 50)
    path = tmp_path / "r.mat"
    write_v73(path, {"x": x, "c": x[:3, :4] * (1 + 2j)})
    url = s3.put_file(path, "r.mat")
    refs = npystore.to_kerchunk(url, storage_options=s3.storage_options)
    assert all(v[0] == url for v in ranges(refs).values())
    remote = {
        "remote_protocol": "s3",
        "remote_options": {**s3.storage_options, "asynchronous": True},
    }
    group = open_refs(refs, **remote)
    np.testing.assert_array_equal(group["x"][...], x)
    np.testing.assert_array_equal(group["c"][...], x[:3, :4] * (1 + 2j))
