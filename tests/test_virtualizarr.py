"""The VirtualiZarr parser (``npystore.virtualizarr.NpystoreParser``), VirtualiZarr 2.5 to 2.8.

Oracles: numpy and ``npystore.open_mat`` for the values; VirtualiZarr's own machinery reads
them: its ``ManifestStore`` under zarr/xarray, and its writers (``vds.vz.to_kerchunk`` as a
dict, a JSON file and parquet, reopened with ``engine="kerchunk"``; ``vds.vz.to_icechunk``
into a local Icechunk repository, reopened with ``xarray.open_zarr``); chunks are read
through obstore (LocalStore, and S3Store against the local S3 server).

Icechunk needs Python >= 3.12: its tests skip where it is not installed, except where
``NPYSTORE_TEST_REQUIRE`` names it (CI's newest leg).
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from packaging.version import Version

pytest.importorskip("virtualizarr")
xr = pytest.importorskip("xarray")
obstore_store = pytest.importorskip("obstore.store")

from obspec_utils.registry import ObjectStoreRegistry  # noqa: E402
from virtualizarr import open_virtual_dataset  # noqa: E402

import npystore  # noqa: E402
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


#: VirtualiZarr's kerchunk writer writes arrays without chunks (shape (0, 5)) from 2.7.3 on
VZ_WRITES_EMPTY = Version(version("virtualizarr")) >= Version("2.7.3")


def require(module: str) -> Any:
    """``module``, or a skip where it is not installed (a failure where
    ``NPYSTORE_TEST_REQUIRE`` names it)."""
    if module in os.environ.get("NPYSTORE_TEST_REQUIRE", "").split(","):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed")


def kerchunk_json(vds: Any, tmp: Path) -> Any:
    vds.vz.to_kerchunk(str(tmp / "refs.json"), format="json")
    return xr.open_dataset(str(tmp / "refs.json"), engine="kerchunk", mask_and_scale=False)


def kerchunk_parquet(vds: Any, tmp: Path) -> Any:
    require("fastparquet")  # kerchunk's parquet references
    vds.vz.to_kerchunk(str(tmp / "refs.parq"), format="parquet")
    return xr.open_dataset(str(tmp / "refs.parq"), engine="kerchunk", mask_and_scale=False)


def icechunk_repository(vds: Any, tmp: Path, root: Path) -> Any:
    """A local Icechunk repository with the references (chunks under ``root``)."""
    icechunk = require("icechunk")
    prefix = root.as_uri() + "/"
    config = icechunk.RepositoryConfig.default()
    container = icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(str(root)))
    config.set_virtual_chunk_container(container)
    repo = icechunk.Repository.create(
        icechunk.local_filesystem_storage(str(tmp / "repo")),
        config,
        authorize_virtual_chunk_access={prefix: None},
    )
    session = repo.writable_session("main")
    vds.vz.to_icechunk(session.store)
    session.commit("npystore's references")
    store = repo.readonly_session("main").store
    return xr.open_zarr(store, consolidated=False, zarr_format=3, mask_and_scale=False)


WRITERS: dict[str, Callable[[Any, Path, Path], Any]] = {
    "kerchunk_dict": lambda vds, tmp, root: through_kerchunk_writer(vds),
    "kerchunk_json": lambda vds, tmp, root: kerchunk_json(vds, tmp),
    "kerchunk_parquet": lambda vds, tmp, root: kerchunk_parquet(vds, tmp),
    "icechunk": icechunk_repository,
}


def as_numpy(var: Any, want: Any) -> Any:
    """numpy's array from a variable in the parser's default form: dimensions ``..._dim_i``
    back in order (Fortran-order arrays come in storage order, names reversed), a 0-d array
    from its one element."""
    if want.ndim == 0:
        assert var.shape == (1,)
        return var.values.reshape(())
    order = sorted(var.dims, key=lambda d: int(str(d).rsplit("_", 1)[1]))
    return var.transpose(*order).values


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
    assert want.shape[0] % marr.metadata.chunks[0] == 0  # references only: chunks divide rows
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
    # numpy's form (a transpose codec, a 0-d array) and the writable form both read exactly
    path = tmp_path / "a.npy"
    np.save(path, want)
    got = through_manifest(path.as_uri(), local, NpystoreParser(form="numpy"))["data"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.values, want)
    writable = through_manifest(path.as_uri(), local, NpystoreParser())["data"]
    if want.ndim == 2 and want.flags.f_contiguous and not want.flags.c_contiguous:
        assert writable.dims == ("dim_1", "dim_0")  # storage order
        assert writable.shape == want.shape[::-1]
    np.testing.assert_array_equal(as_numpy(writable, want), want)
    with pytest.raises(ValueError, match="form must be"):
        NpystoreParser(form="fortran")  # type: ignore[arg-type]


def _files(root: Path) -> dict[str, dict[str, Any]]:
    """An .npy in Fortran order, a stored .npz with awkward members, a MAT v7.3 file, an
    archive of npystore.savez_compressed."""
    rng = np.random.default_rng(7)
    fortran = np.asfortranarray(np.arange(6 * 35, dtype=">f4").reshape(6, 35))
    np.save(root / "f.npy", fortran)
    members = {
        "c": np.arange(40.0).reshape(8, 5),
        "f": np.asfortranarray(rng.integers(-99, 99, (5, 7)).astype(">i8")),
        "scalar": np.array(2.5, dtype=">f8"),
        "flags": np.arange(30) % 7 == 0,
        "empty": np.zeros((0, 5), dtype="<i2"),
    }
    np.savez(root / "s.npz", **members)
    variables = {
        "a": np.round(rng.standard_normal((300, 70)), 3),  # chunked, deflated
        "v": np.arange(50.0)[:, None],
        "z": rng.standard_normal((20, 9)) * (1 + 1j),
        "k": rng.standard_normal((33, 17)) > 0,
    }
    write_v73(root / "m.mat", variables)
    deflated = {"c": members["c"], "f": members["f"]}  # one chunk per deflate block
    npystore.savez_compressed(str(root / "d.npz"), **deflated)
    return {"f.npy": {"data": fortran}, "s.npz": members, "m.mat": variables, "d.npz": deflated}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_array_through_every_writer(tmp_path: Path, local: Any, writer: str) -> None:
    """VirtualiZarr's own writers take every array npystore references, in the default
    form: Fortran order (MATLAB's matrices) as storage order with dimension names reversed,
    0-d arrays as one element; reopened, they equal numpy's arrays."""
    root = tmp_path / "files"
    root.mkdir()
    for name, written in _files(root).items():
        arrays = dict(written)
        vds = open_virtual_dataset(
            (root / name).as_uri(), registry=local, parser=NpystoreParser(), loadable_variables=[]
        )
        out = tmp_path / name
        out.mkdir()
        empty = [k for k, a in arrays.items() if a.size == 0]
        if writer.startswith("kerchunk") and empty and not VZ_WRITES_EMPTY:
            # VirtualiZarr < 2.7.3: its kerchunk writer fails on an array without chunks
            with pytest.raises(ValueError, match="zero-sized"):
                vds.vz.to_kerchunk(format="dict")
            vds = vds.drop_vars(empty)
            for key in empty:
                del arrays[key]
        ds = WRITERS[writer](vds, out, root)
        assert set(ds.data_vars) == set(arrays), name
        for key, want in arrays.items():
            np.testing.assert_array_equal(as_numpy(ds[key], want), want, err_msg=f"{name}:{key}")


def test_icechunk_recipe_in_the_docs_runs() -> None:
    """docs/howto-references.md's Icechunk recipe, as written there."""
    require("icechunk")
    text = (Path(__file__).parents[1] / "docs" / "howto-references.md").read_text("utf-8")
    block = re.search(r"### Write an Icechunk repository.*?```python\n(.*?)```", text, re.S)
    assert block is not None
    exec(compile(block.group(1), "howto-references.md", "exec"), {})


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
    for name in variables:  # MATLAB's column-major matrices in storage order
        assert ds[name].dims == (f"{name}_dim_1", f"{name}_dim_0")
        np.testing.assert_array_equal(ds[name].values, m.load(name).T)
    with pytest.warns(UserWarning, match="left out of the virtual dataset.*t"):
        ds = through_manifest(path.as_uri(), local, NpystoreParser(form="numpy"))
    for name in variables:
        assert ds[name].dims == (f"{name}_dim_0", f"{name}_dim_1")
        np.testing.assert_array_equal(ds[name].values, m.load(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        vds = open_virtual_dataset(
            path.as_uri(), registry=local, parser=NpystoreParser(), loadable_variables=[]
        )
    written = through_kerchunk_writer(vds[["v"]])
    np.testing.assert_array_equal(written["v"].values, variables["v"].T)


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
