"""The VirtualiZarr parser (``npystore.virtualizarr.NpystoreParser``).

Oracles: numpy and ``npystore.open_mat`` for the values; VirtualiZarr's own machinery reads
them: its ``ManifestStore`` under zarr/xarray, and its kerchunk writer
(``vds.vz.to_kerchunk``) reopened with ``engine="kerchunk"``; chunks are read through
obstore (LocalStore, and S3Store against the local S3 server).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("virtualizarr")
xr = pytest.importorskip("xarray")
obstore_store = pytest.importorskip("obstore.store")

from obspec_utils.registry import ObjectStoreRegistry  # noqa: E402
from virtualizarr import open_virtual_dataset  # noqa: E402

from npystore.errors import UnsupportedError  # noqa: E402
from npystore.faces.refs import plan  # noqa: E402
from npystore.virtualizarr import NpystoreParser  # noqa: E402
from test_refs_mat import write_v73  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning")


@pytest.fixture
def local() -> ObjectStoreRegistry:
    return ObjectStoreRegistry({"file://": obstore_store.LocalStore()})


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from npystore.faces.tree import nodes

    monkeypatch.setattr(nodes, "CHUNK_TARGET", 4096)
    monkeypatch.setattr(plan, "MIN_DIVISOR_CHUNK", 1024)


def through_manifest(url: str, registry: Any, parser: NpystoreParser) -> Any:
    """The ManifestStore read as a Zarr v3 store (chunks fetched by VirtualiZarr)."""
    return xr.open_zarr(parser(url, registry), consolidated=False, zarr_format=3)


def through_kerchunk_writer(vds: Any) -> Any:
    """VirtualiZarr's kerchunk writer, reopened with kerchunk's engine."""
    refs = vds.vz.to_kerchunk(format="dict")
    return xr.open_dataset(refs, engine="kerchunk", mask_and_scale=False)


NPY = {  # with 4096-byte chunk targets: how many chunks references alone allow
    "prime_rows": (lambda: np.arange(1009 * 3, dtype="<f8").reshape(1009, 3), 1),  # whole
    "divisor": (lambda: np.arange(1200 * 3, dtype="<f8").reshape(1200, 3), 8),  # 150 rows
    "big_endian": (lambda: np.arange(2 * 1024, dtype=">i4").reshape(1024, 2), 2),
    "bool": (lambda: np.arange(30000) % 7 == 0, 8),  # 3750 divides 30000
}


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("case", sorted(NPY))
def test_npy_virtual_dataset_written_to_kerchunk(tmp_path: Path, local: Any, case: str) -> None:
    make, count = NPY[case]
    want = make()
    path = tmp_path / f"{case}.npy"
    np.save(path, want)
    url = path.as_uri()
    vds = open_virtual_dataset(url, registry=local, parser=NpystoreParser())
    marr = vds["data"].data
    assert type(marr).__name__ == "ManifestArray"
    assert vds["data"].dims == tuple(f"dim_{i}" for i in range(want.ndim))
    assert want.shape[0] % marr.chunks[0] == 0  # references only: chunks divide the rows
    assert len(marr.manifest.dict()) == count
    np.testing.assert_array_equal(through_kerchunk_writer(vds)["data"].values, want)
    np.testing.assert_array_equal(
        through_manifest(url, local, NpystoreParser())["data"].values, want
    )


@pytest.mark.parametrize(
    "want",
    [
        np.asfortranarray(np.arange(4 * 997, dtype=">f4").reshape(4, 997)),
        np.array(2.5, dtype=">f8"),
        np.zeros((0, 5), dtype="<i2"),
    ],
    ids=["fortran", "zero_d", "empty"],
)
def test_awkward_npy_through_the_manifest_store(tmp_path: Path, local: Any, want: Any) -> None:
    # VirtualiZarr 2.5's kerchunk writer cannot write these (a transpose codec, a 0-d chunk
    # key, an empty chunk grid): the manifest itself reads them exactly
    path = tmp_path / "a.npy"
    np.save(path, want)
    got = through_manifest(path.as_uri(), local, NpystoreParser())["data"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.values, want)


def test_npz_stored_members_and_deflated_refusal(tmp_path: Path, local: Any) -> None:
    members = {"x": np.arange(1000, dtype="<i2"), "y": np.eye(4, dtype=">f8")}
    np.savez(tmp_path / "s.npz", **members)
    url = (tmp_path / "s.npz").as_uri()
    vds = open_virtual_dataset(url, registry=local, parser=NpystoreParser())
    assert set(vds.data_vars) == {"x", "y"}
    assert vds["y"].dims == ("y_dim_0", "y_dim_1")
    ds = through_kerchunk_writer(vds)
    for key, want in members.items():
        np.testing.assert_array_equal(ds[key].values, want)
    np.savez(tmp_path / "m.npz", x=members["x"])
    with open(tmp_path / "m.npz", "rb") as f:
        stored = f.read()
    np.savez_compressed(tmp_path / "d.npz", **members)
    with pytest.raises(
        UnsupportedError, match=r"d\.npz:x\.npy: a deflated member.*npystore convert"
    ):
        NpystoreParser()((tmp_path / "d.npz").as_uri(), local)
    assert stored  # the stored archive above opened; the deflated one is refused
    only = NpystoreParser(skip_variables=["x", "y"])((tmp_path / "d.npz").as_uri(), local)
    assert not only._group.arrays


def test_mat_v73_variables(tmp_path: Path, local: Any) -> None:
    rng = np.random.default_rng(1)
    variables = {
        "a": np.round(rng.standard_normal((300, 70)), 3),
        "v": np.arange(5000.0)[:, None],  # a column vector: no transpose codec needed
        "z": rng.standard_normal((20, 9)) * (1 + 1j),
        "k": rng.standard_normal((33, 17)) > 0,
    }
    path = tmp_path / "m.mat"
    write_v73(path, variables)
    with __import__("h5py").File(path, "r+") as f:
        f.create_dataset("t", data=np.array([[104, 105]], dtype="<u2").T)
        f["t"].attrs["MATLAB_class"] = np.bytes_("char")
    import npystore

    m = npystore.open_mat(str(path))
    with pytest.warns(UserWarning, match="left out of the virtual dataset.*t"):
        ds = through_manifest(path.as_uri(), local, NpystoreParser())
    for name in variables:
        np.testing.assert_array_equal(ds[name].values, m.load(name))
        assert ds[name].dims == (f"{name}_dim_0", f"{name}_dim_1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        vds = open_virtual_dataset(
            path.as_uri(), registry=local, parser=NpystoreParser(), loadable_variables=[]
        )
    written = through_kerchunk_writer(vds[["v"]])
    np.testing.assert_array_equal(written["v"].values, variables["v"])


def test_s3_with_obstore(tmp_path: Path, s3: Any, small_chunks: None) -> None:
    want = np.arange(1013 * 2, dtype="<f4").reshape(1013, 2)
    np.save(tmp_path / "r.npy", want)
    url = s3.put_file(tmp_path / "r.npy", "r.npy")
    so = s3.storage_options
    store = obstore_store.S3Store(
        s3.bucket,
        endpoint=so["client_kwargs"]["endpoint_url"],
        access_key_id=so["key"],
        secret_access_key=so["secret"],
        region=so["client_kwargs"]["region_name"],
        client_options={"allow_http": True},
    )
    registry = ObjectStoreRegistry({f"s3://{s3.bucket}": store})
    parser = NpystoreParser(storage_options=so)
    vds = open_virtual_dataset(url, registry=registry, parser=parser)
    assert all(e["path"] == url for e in vds["data"].data.manifest.dict().values())
    np.testing.assert_array_equal(through_manifest(url, registry, parser)["data"].values, want)
    refs = vds.vz.to_kerchunk(format="dict")
    ds = xr.open_dataset(
        refs,
        engine="kerchunk",
        mask_and_scale=False,
        storage_options={"remote_protocol": "s3", "remote_options": so},
    )
    np.testing.assert_array_equal(ds["data"].values, want)
