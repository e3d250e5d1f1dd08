"""Zarr face end to end: the dtype matrix through zarr, kerchunk references, xarray, and a
real on-disk Zarr copy reopened in a new process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import npystore

from npy_cases import DTYPES, ORDERS, SHAPES, make_array

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def assert_values(got: Any, expected: Any) -> None:
    """Equal values; the Zarr face may return native byte order for scalar dtypes, as Zarr
    does; structured dtypes come back exactly."""
    assert got.shape == expected.shape
    if expected.dtype.names is not None:
        assert got.dtype == expected.dtype
        for name in expected.dtype.names:
            assert_values(got[name], expected[name])
        return
    assert got.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
    native = expected.astype(expected.dtype.newbyteorder("="))
    if native.dtype.type in (np.longdouble, np.clongdouble):
        # x86 long doubles carry 6 padding bytes per value that are not data
        np.testing.assert_array_equal(got, native)
        return
    assert np.ascontiguousarray(got.astype(got.dtype.newbyteorder("="))).tobytes() == (
        np.ascontiguousarray(native).tobytes()
    )


def _npy_files(tmp_path: Path, names: list[str]) -> list[tuple[Path, Any]]:
    out = []
    for name in names:
        for shape in SHAPES:
            for order in ORDERS:
                arr = make_array(DTYPES[name], shape, order, seed=len(name) + len(shape))
                path = tmp_path / f"case{len(out):04d}.npy"
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    np.save(path, arr)
                out.append((path, arr))
    return out


@pytest.mark.parametrize("name", list(DTYPES))
def test_dtype_matrix_through_zarr_local(tmp_path: Path, name: str) -> None:
    for path, arr in _npy_files(tmp_path, [name]):
        z = zarr.open_array(npystore.open_store(str(path)), mode="r")
        assert_values(z[...], arr)


def test_dtype_matrix_through_zarr_s3(tmp_path: Path, s3: Any) -> None:
    files = _npy_files(tmp_path, list(DTYPES))
    for path, arr in files:
        url = s3.put_file(path, path.name)
        store = npystore.open_store(url, storage_options=s3.storage_options)
        assert_values(zarr.open_array(store, mode="r")[...], arr)


def test_npz_group_through_zarr_s3(tmp_path: Path, s3: Any) -> None:
    rng = np.random.default_rng(0)
    members = {
        "c": rng.standard_normal((300, 40)),
        "f": np.asfortranarray(rng.integers(0, 100, (50, 60)).astype(">i8")),
        "rec": np.zeros(7, dtype=DTYPES["struct_mixed_order"]),
    }
    for compressed in (False, True):
        path = tmp_path / f"g{int(compressed)}.npz"
        (np.savez_compressed if compressed else np.savez)(path, **members)
        url = s3.put_file(path, path.name)
        group = zarr.open_group(
            npystore.open_store(url, storage_options=s3.storage_options), mode="r"
        )
        for key, arr in members.items():
            assert_values(group[key][...], arr)


def _check_refs(refs: dict[str, Any], expected: Any, **fs_kw: Any) -> None:
    import json

    import fsspec
    from zarr.storage import FsspecStore

    json.dumps(refs)
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, **fs_kw)
    store = FsspecStore(fs=fs, read_only=True, path="")
    node = zarr.open(store, mode="r")
    if isinstance(expected, dict):
        for key, arr in expected.items():
            assert_values(node[key][...], arr)
    else:
        assert_values(node[...], expected)


def test_kerchunk_npy_and_npz_local(tmp_path: Path) -> None:
    from npystore.faces.tree import nodes as zarr_store

    arr = np.asfortranarray(np.arange(30_000, dtype=">f4").reshape(300, 100))
    np.save(tmp_path / "a.npy", arr)
    old = zarr_store.CHUNK_TARGET
    try:
        zarr_store.CHUNK_TARGET = 7 * 300 * 4  # uneven: 7 columns do not divide 100
        refs = npystore.to_kerchunk(str(tmp_path / "a.npy"), zarr_format=3)
    finally:
        zarr_store.CHUNK_TARGET = old
    ranges = [v for v in refs["refs"].values() if isinstance(v, list)]
    inlined = [k for k, v in refs["refs"].items() if isinstance(v, str) and v.startswith("base64:")]
    assert ranges
    assert not inlined  # chunks chosen so that references carry the data
    header = npystore.read_header(str(tmp_path / "a.npy"))
    assert min(off for _, off, _ in ranges) == header.data_offset  # offsets checked vs raw bytes
    raw = (tmp_path / "a.npy").read_bytes()
    _, off, length = ranges[0]
    assert raw[off : off + length] == arr.tobytes(order="F")[:length]
    _check_refs(refs, arr, remote_protocol="file")
    members = {"x": np.arange(1000, dtype="<i2"), "y": np.ones((3, 3), dtype="<c16")}
    np.savez(tmp_path / "b.npz", **members)
    refs3 = npystore.to_kerchunk(str(tmp_path / "b.npz"), zarr_format=3)
    _check_refs(refs3, members, remote_protocol="file")
    np.savez_compressed(tmp_path / "c.npz", **members)
    refs3 = npystore.to_kerchunk(str(tmp_path / "c.npz"), zarr_format=3)
    _check_refs(refs3, members, remote_protocol="file")


def test_kerchunk_s3(tmp_path: Path, s3: Any) -> None:
    members = {"x": np.arange(100_000, dtype="<f8"), "y": np.eye(5, dtype=">u4")}
    np.savez(tmp_path / "r.npz", **members)
    url = s3.put_file(tmp_path / "r.npz", "r.npz")
    refs = npystore.to_kerchunk(url, storage_options=s3.storage_options, zarr_format=3)
    assert any(isinstance(v, list) and v[0].startswith("s3://") for v in refs["refs"].values())
    remote = {**s3.storage_options, "asynchronous": True}
    _check_refs(refs, members, remote_protocol="s3", remote_options=remote)


def test_xarray_open_zarr(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    np.savez(tmp_path / "x.npz", temperature=np.arange(12.0).reshape(3, 4), t=np.arange(3))
    ds = xr.open_zarr(npystore.open_store(str(tmp_path / "x.npz")), consolidated=True)
    assert set(ds.data_vars) == {"temperature", "t"}
    np.testing.assert_array_equal(ds["temperature"].values, np.arange(12.0).reshape(3, 4))


def test_copy_custom_dtype_member_into_real_zarr_and_reopen_in_new_process(
    tmp_path: Path,
) -> None:
    dtype = DTYPES["struct_mixed_order"]
    rng = np.random.default_rng(5)
    data = np.zeros((40, 3), dtype=dtype)
    data["le"] = rng.standard_normal((40, 3))
    data["be"] = rng.standard_normal((40, 3))
    data["s"] = "ab"
    np.savez_compressed(tmp_path / "src.npz", rec=data)
    source = zarr.open_group(npystore.open_store(str(tmp_path / "src.npz")), mode="r")["rec"]
    target_path = tmp_path / "copy.zarr"
    target = zarr.create_array(
        store=str(target_path), shape=source.shape, chunks=(16, 3), dtype=source.dtype
    )
    target[...] = source[...]
    np.save(tmp_path / "expected.npy", data)
    # zarr >= 3.2 stores this record itself (exact values; reopened in native byte order),
    # zarr 3.1 cannot (byte-swapped values): there npystore's data type keeps the exact dtype
    exact = type(target.metadata.data_type).__module__.startswith("npystore.")
    assert exact is not hasattr(zarr.core.dtype, "Struct")
    code = textwrap.dedent(
        f"""
        import numpy as np, zarr, npystore
        got = zarr.open_array({str(target_path)!r}, mode="r")[...]
        want = np.load({str(tmp_path / "expected.npy")!r})
        if not {exact}:
            want = want.astype(want.dtype.newbyteorder("="))
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        for name in want.dtype.names:
            assert np.array_equal(got[name], want[name]), name
        print("ok", got.dtype)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")
