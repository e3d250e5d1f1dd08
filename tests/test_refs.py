"""Kerchunk references of ``.npy`` and ``.npz`` files (``npystore.to_kerchunk``, ``refs``).

Oracles: numpy (the values), the file's raw bytes (every reference is checked against
them), kerchunk's own ``MultiZarrToZarr`` and xarray's ``engine="kerchunk"``, and zarr
reading the references through fsspec's asynchronous reference file system (the recipe of
docs/howto-zarr.md), locally and from S3.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import zarr
from zarr.storage import FsspecStore

import npystore
from npystore.errors import UnsupportedError
from npystore.faces.refs import plan

pytest.importorskip("kerchunk")


def open_refs(refs: dict[str, Any], **remote: Any) -> Any:
    """The docs' recipe: the asynchronous reference file system under zarr's FsspecStore."""
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, **remote)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's notes on v3 data types without a spec
        return zarr.open(FsspecStore(fs=fs, read_only=True, path=""), mode="r")


def ranges(refs: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: v for k, v in refs["refs"].items() if isinstance(v, list)}


def inlined(refs: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in refs["refs"].items() if isinstance(v, str) and v.startswith("base64:")}


def check_ranges_against_bytes(refs: dict[str, Any], raw: bytes, want: np.ndarray) -> None:
    """Every referenced chunk's bytes, read from the file, are the array's elements there."""
    zarray = json.loads(refs["refs"]["data/.zarray"])
    chunks = zarray["chunks"]
    order = zarray["order"]
    for key, (_, offset, length) in ranges(refs).items():
        index = [int(i) for i in key.split("/")[-1].split(".")] if chunks else []
        shape = want.shape
        region = tuple(
            slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, chunks, shape, strict=True)
        )
        part = want[region] if region else want  # want[()] would be a native scalar
        expect = np.ascontiguousarray(part) if order == "C" else part
        data = raw[offset : offset + expect.nbytes]
        assert data == expect.tobytes(order=order), key
        assert offset + length <= len(raw)


AWKWARD = {
    "prime_rows": lambda: np.arange(1009 * 3, dtype="<f8").reshape(1009, 3),
    "fortran": lambda: np.asfortranarray(np.arange(4 * 997, dtype="<i4").reshape(4, 997)),
    "big_endian": lambda: np.arange(2003, dtype=">u2"),
    "zero_d": lambda: np.array(2.5, dtype=">f4"),
    "empty": lambda: np.zeros((0, 5), dtype="<i2"),
    "bool_3d": lambda: (np.arange(7 * 6 * 5) % 3 == 0).reshape(7, 6, 5),
    "text": lambda: np.array(["ab", "cde", ""] * 5),
}


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk targets scaled down so that small files have several chunks and edges."""
    from npystore.faces.tree import nodes

    monkeypatch.setattr(nodes, "CHUNK_TARGET", 4096)
    monkeypatch.setattr(plan, "MIN_DIVISOR_CHUNK", 1024)
    monkeypatch.setattr(plan, "EDGE_CHUNK", 512)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("case", sorted(AWKWARD))
def test_awkward_npy_round_trips_v2_and_v3(tmp_path: Path, case: str) -> None:
    want = AWKWARD[case]()
    path = tmp_path / f"{case}.npy"
    np.save(path, want)
    refs = npystore.to_kerchunk(str(path))
    zarray = json.loads(refs["refs"]["data/.zarray"])
    assert zarray["fill_value"] is None
    assert zarray["order"] == ("F" if case == "fortran" else "C")
    assert json.loads(refs["refs"]["data/.zattrs"])["_ARRAY_DIMENSIONS"] == [
        f"dim_{i}" for i in range(want.ndim)
    ]
    assert json.loads(refs["refs"][".zgroup"]) == {"zarr_format": 2}
    got = open_refs(refs, remote_protocol="file")["data"]
    np.testing.assert_array_equal(got[...], want)
    assert got.shape == want.shape
    assert got.dtype == want.dtype  # v2 keeps the byte order
    check_ranges_against_bytes(refs, path.read_bytes(), want)
    if want.size:
        assert ranges(refs)  # the data is in references ...
    assert sum(len(v) for v in inlined(refs).values()) <= 4 * 512  # ... at most a small edge
    v3 = npystore.to_kerchunk(str(path), zarr_format=3)
    assert "zarr.json" in v3["refs"]
    node = open_refs(v3, remote_protocol="file")
    np.testing.assert_array_equal(node[...], want)


def test_rows_without_a_whole_chunk_multiple_use_a_divisor(
    tmp_path: Path, small_chunks: None
) -> None:
    # rows of 24 bytes: the 4096-byte target holds 170 rows, which do not divide 354 rows;
    # 118 does (354 = 2 * 3 * 59), and its chunks hold at least 1024 bytes: pure references
    want = np.arange(354 * 3, dtype="<f8").reshape(354, 3)
    path = tmp_path / "d.npy"
    np.save(path, want)
    refs = npystore.to_kerchunk(str(path))
    assert json.loads(refs["refs"]["data/.zarray"])["chunks"] == [118, 3]
    assert not inlined(refs)
    np.testing.assert_array_equal(open_refs(refs, remote_protocol="file")["data"][...], want)
    check_ranges_against_bytes(refs, path.read_bytes(), want)


def test_40_mb_npy_with_a_prime_number_of_rows_has_small_json(tmp_path: Path) -> None:
    rows = 1_000_003  # prime
    want = np.arange(rows * 5, dtype="<f8").reshape(rows, 5)
    path = tmp_path / "big.npy"
    np.save(path, want)
    refs = npystore.to_kerchunk(str(path))
    text = json.dumps(refs)
    assert len(text) < 2**20
    edge = inlined(refs)
    assert len(edge) == 1  # one small zero-padded edge chunk
    assert all(len(v) < 0.7 * 2**20 for v in edge.values())
    got = open_refs(refs, remote_protocol="file")["data"]
    np.testing.assert_array_equal(got[-3:], want[-3:])
    np.testing.assert_array_equal(got[...], want)
    check_ranges_against_bytes(refs, path.read_bytes(), want)


def test_npz_members_stored_and_deflated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = {
        "x": np.arange(1000, dtype="<i2"),
        "y": np.ones((3, 3), dtype="<c16"),
        "f": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "s": np.array(7, dtype=">i8"),
    }
    np.savez(tmp_path / "s.npz", **members)
    refs = npystore.to_kerchunk(str(tmp_path / "s.npz"))
    assert not inlined(refs)  # every stored member is references
    group = open_refs(refs, remote_protocol="file")
    for key, want in members.items():
        np.testing.assert_array_equal(group[key][...], want)
        dims = json.loads(refs["refs"][f"{key}/.zattrs"])["_ARRAY_DIMENSIONS"]
        assert dims == [f"{key}_dim_{i}" for i in range(want.ndim)]
    np.savez_compressed(tmp_path / "d.npz", **members)
    refs = npystore.to_kerchunk(str(tmp_path / "d.npz"))
    assert not ranges(refs)  # a deflate stream has no element ranges: small values inline
    group = open_refs(refs, remote_protocol="file")
    for key, want in members.items():
        np.testing.assert_array_equal(group[key][...], want)
    big = {"big": np.arange(1000.0)}
    np.savez_compressed(tmp_path / "big.npz", **big)
    with pytest.raises(
        UnsupportedError,
        match=r"big\.npy: 8000 bytes, a deflated member without a block index.*"
        r"npystore convert IN\.npz OUT\.npz",
    ):
        npystore.to_kerchunk(str(tmp_path / "big.npz"), max_inline=1000)


def test_an_edge_chunk_the_archive_covers_is_a_reference(
    tmp_path: Path, small_chunks: None
) -> None:
    # member "a" is followed by member "b": its padded last chunk lies inside the file
    members = {"a": np.arange(1009, dtype="<f8"), "b": np.zeros(2000, dtype="<u1")}
    np.savez(tmp_path / "e.npz", **members)
    refs = npystore.to_kerchunk(str(tmp_path / "e.npz"))
    chunks = json.loads(refs["refs"]["a/.zarray"])["chunks"]
    assert 1009 % chunks[0] != 0
    assert not any(k.startswith("a/") for k in inlined(refs))
    group = open_refs(refs, remote_protocol="file")
    np.testing.assert_array_equal(group["a"][...], members["a"])


def test_chunks_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = np.arange(100 * 30, dtype="<i4").reshape(100, 30)
    np.save(tmp_path / "a.npy", want)
    refs = npystore.to_kerchunk(str(tmp_path / "a.npy"), chunks=(25, -1))
    assert json.loads(refs["refs"]["data/.zarray"])["chunks"] == [25, 30]
    assert len(ranges(refs)) == 4
    assert not inlined(refs)
    refs = npystore.to_kerchunk(str(tmp_path / "a.npy"), chunks=(30, 30))  # a small edge
    assert set(inlined(refs)) == {"data/3.0"}
    np.testing.assert_array_equal(open_refs(refs, remote_protocol="file")["data"][...], want)
    refs = npystore.to_kerchunk(str(tmp_path / "a.npy"), chunks=(50, 10))  # not ranges
    assert len(inlined(refs)) == 6
    np.testing.assert_array_equal(open_refs(refs, remote_protocol="file")["data"][...], want)
    with pytest.raises(ValueError, match="Zarr needs equal chunks"):
        npystore.to_kerchunk(str(tmp_path / "a.npy"), chunks=((40, 60), -1))
    members = {"m": np.arange(40, dtype="<u2").reshape(20, 2), "n": np.arange(30)}
    np.savez(tmp_path / "c.npz", **members)
    refs = npystore.to_kerchunk(str(tmp_path / "c.npz"), chunks=10)  # every member, every axis
    assert json.loads(refs["refs"]["m/.zarray"])["chunks"] == [10, 2]
    assert json.loads(refs["refs"]["n/.zarray"])["chunks"] == [10]
    group = open_refs(refs, remote_protocol="file")
    for key, arr in members.items():
        np.testing.assert_array_equal(group[key][...], arr)
    with pytest.raises(UnsupportedError, match="not byte ranges of the file"):
        npystore.to_kerchunk(str(tmp_path / "a.npy"), chunks=(100, 1), max_inline=1000)


def test_zarr_format_is_checked(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(3))
    with pytest.raises(ValueError, match="zarr_format must be 2 or 3"):
        npystore.to_kerchunk(str(tmp_path / "a.npy"), zarr_format=4)  # type: ignore[arg-type]


def test_multizarrtozarr_combines_npy_files(tmp_path: Path, small_chunks: None) -> None:
    from kerchunk.combine import MultiZarrToZarr

    parts = [np.arange(7 * 4, dtype="<f4").reshape(7, 4) + 100 * i for i in range(3)]
    refs = []
    for i, part in enumerate(parts):
        np.save(tmp_path / f"p{i}.npy", part)
        refs.append(npystore.to_kerchunk(str(tmp_path / f"p{i}.npy")))
    rows = [np.arange(7 * i, 7 * i + 7) for i in range(3)]  # the coordinate of each input
    combined = MultiZarrToZarr(refs, concat_dims=["dim_0"], coo_map={"dim_0": rows}).translate()
    xr = pytest.importorskip("xarray")
    ds = xr.open_dataset(combined, engine="kerchunk")
    assert ds["data"].dims == ("dim_0", "dim_1")
    np.testing.assert_array_equal(ds["data"].values, np.concatenate(parts))
    # stacked along a new dimension instead
    stacked = MultiZarrToZarr(refs, concat_dims=["run"], coo_map={"run": "INDEX"}).translate()
    ds = xr.open_dataset(stacked, engine="kerchunk")
    np.testing.assert_array_equal(ds["data"].values, np.stack(parts))


def test_engine_kerchunk_opens_every_npz_member(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    members = {
        "temperature": np.arange(12.0).reshape(3, 4),
        "t": np.arange(3, dtype=">i4"),
        "flags": np.array([True, False]),
        "deflated_not": np.asfortranarray(np.arange(6, dtype="<u1").reshape(2, 3)),
    }
    np.savez(tmp_path / "x.npz", **members)
    refs = npystore.to_kerchunk(str(tmp_path / "x.npz"))
    ds = xr.open_dataset(refs, engine="kerchunk")
    assert set(ds.data_vars) == set(members)
    mine = xr.open_dataset(tmp_path / "x.npz", engine="npystore")
    for key, want in members.items():
        np.testing.assert_array_equal(ds[key].values, want)
        assert ds[key].dims == mine[key].dims  # the names npystore's engine gives
    np.savez_compressed(tmp_path / "z.npz", **members)
    ds = xr.open_dataset(npystore.to_kerchunk(str(tmp_path / "z.npz")), engine="kerchunk")
    for key, want in members.items():
        np.testing.assert_array_equal(ds[key].values, want)


def test_s3_references_with_the_documented_recipe(
    tmp_path: Path, s3: Any, small_chunks: None
) -> None:
    members = {"x": np.arange(1009, dtype="<f8"), "y": np.eye(5, dtype=">u4")}
    np.savez(tmp_path / "r.npz", **members)
    np.savez_compressed(tmp_path / "z.npz", **members)
    np.save(tmp_path / "p.npy", np.arange(1013 * 2, dtype="<i8").reshape(1013, 2))
    remote = {**s3.storage_options, "asynchronous": True}
    for name in ("r.npz", "z.npz", "p.npy"):
        url = s3.put_file(tmp_path / name, name)
        refs = npystore.to_kerchunk(url, storage_options=s3.storage_options)
        assert all(v[0] == url for v in ranges(refs).values())
        # the recipe of docs/howto-zarr.md (zarr 3.1.6)
        fs = fsspec.filesystem(
            "reference", fo=refs, remote_protocol="s3", remote_options=remote, asynchronous=True
        )
        group = zarr.open_group(FsspecStore(fs=fs, read_only=True, path=""), mode="r")
        if name == "p.npy":
            want = np.load(tmp_path / name)
            np.testing.assert_array_equal(group["data"][...], want)
            assert ranges(refs)
        else:
            for key, arr in members.items():
                np.testing.assert_array_equal(group[key][...], arr)
            assert bool(ranges(refs)) == (name == "r.npz")
    xr = pytest.importorskip("xarray")
    refs = npystore.to_kerchunk(s3.url("r.npz"), storage_options=s3.storage_options)
    ds = xr.open_dataset(
        refs,
        engine="kerchunk",
        storage_options={"remote_protocol": "s3", "remote_options": s3.storage_options},
    )
    np.testing.assert_array_equal(ds["x"].values, members["x"])


# ------------------------------------------------------------- one inline budget per call


def _precompressed_archive(path: Path, members: int, nbytes: int) -> None:
    """``members`` deflated members of ``nbytes`` zeros each (numpy's .npy bytes), the
    same compressed bytes written again and again: a small archive that inflates large."""
    from npystore.formats import zipdir

    buf = io.BytesIO()
    np.save(buf, np.zeros(nbytes, dtype=np.uint8))
    member = buf.getvalue()
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = c.compress(member) + c.flush()
    crc = zlib.crc32(member)
    out, records = bytearray(), []
    for i in range(members):
        name = f"m{i}.npy"
        records.append(
            zipdir.CentralRecord(name, 8, crc, len(data), len(member), len(out), False, 0)
        )
        out += zipdir.local_header(name, 8, False, 0) + data
        out += zipdir.data_descriptor(crc, len(data), len(member), False)
    cd = b"".join(zipdir.central_record(r) for r in records)
    path.write_bytes(bytes(out) + cd + zipdir.end_records(members, len(out), len(cd)))


def test_inline_budget_is_one_for_all_arrays(tmp_path: Path) -> None:
    path = tmp_path / "few.npz"
    _precompressed_archive(path, 5, 10_000)
    with np.load(path) as z:
        assert len(z.files) == 5
    refs = npystore.to_kerchunk(str(path), max_inline=50_000)  # 5 x 10,000 bytes: fits
    assert len(inlined(refs)) == 5
    with pytest.raises(UnsupportedError) as info:
        npystore.to_kerchunk(str(path), max_inline=25_000)  # two fit, three do not
    text = str(info.value)
    assert "max_inline=25000" in text
    assert "3 array(s) do not fit" in text
    assert all(f"m{i}.npy: 10000 bytes, a deflated member without a block index" in text
               for i in (2, 3, 4))  # fmt: skip
    assert "npystore convert IN.npz OUT.npz" in text


BOMB_CHILD = r"""
import json, sys
import npystore
from npystore.errors import UnsupportedError

def peak_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise SystemExit("no VmHWM")

npystore.to_kerchunk(sys.argv[2])  # imports and a first call on a small file
base = peak_kib()
try:
    npystore.to_kerchunk(sys.argv[1])
    refused = ""
except UnsupportedError as exc:
    refused = str(exc)
print(json.dumps({"peak_mib": (peak_kib() - base) / 1024, "refused": refused}))
"""


@pytest.mark.slow  # a fresh interpreter, 16 MiB inflated
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
def test_a_small_archive_that_inflates_large_costs_little_memory(tmp_path: Path) -> None:
    # issue 24: 150 deflated members of 4 MiB zeros (a 640 KB archive) gave 818 MB of JSON,
    # 26 s and 3.0 GiB; one budget per call refuses it after 16 MiB of values
    path = tmp_path / "bomb.npz"
    _precompressed_archive(path, 150, 4 * 2**20 - 16)
    assert path.stat().st_size < 2**20
    np.save(tmp_path / "small.npy", np.arange(3))
    proc = subprocess.run(
        [sys.executable, "-c", BOMB_CHILD, str(path), str(tmp_path / "small.npy")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "146 array(s) do not fit" in got["refused"]
    assert "and 136 more" in got["refused"]  # ten named, the rest counted
    assert got["peak_mib"] < 100, got  # 20 MiB measured


# ------------------------------------------------------------------ dtypes and Zarr v2

#: dtypes whose Zarr v2 form zarr-python reads back as another dtype, or not at all
V2_INEXACT = {
    "longdouble": lambda: (np.arange(5) / 3).astype(np.longdouble),
    "clongdouble": lambda: ((np.arange(5) + 1j) / 3).astype(np.clongdouble),
    "titles": lambda: np.zeros(
        3, np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f8"], "titles": ["A", "B"]})
    ),
    "subarray_field": lambda: np.zeros(3, [("a", "<i4", (2, 3)), ("b", "<f8")]),
    "nested": lambda: np.zeros(3, [("a", [("x", "<i2"), ("y", ">f4")]), ("b", "<f8")]),
    "aligned": lambda: np.zeros(3, np.dtype([("a", "u1"), ("b", "<f8")], align=True)),
    "no_fields": lambda: np.zeros(3, np.dtype({"names": [], "formats": [], "itemsize": 4})),
    "padding": lambda: np.zeros(
        3, np.dtype({"names": ["a"], "formats": ["<i4"], "offsets": [4], "itemsize": 8})
    ),
}
V2_EXACT = {
    "records": lambda: np.zeros(3, [("a", "<i4"), ("b", ">f8"), ("c", "S3"), ("d", "<M8[s]")]),
    "float16": lambda: np.arange(4, dtype="<f2"),
    "void": lambda: np.zeros(3, "V7"),
    "datetime": lambda: np.arange(3).astype(">m8[ms]"),
}


def _filled(make: Any) -> np.ndarray:
    a = make().copy()
    if a.dtype.names is not None or a.dtype.kind == "V":
        a.view(np.uint8)[...] = np.arange(a.nbytes) % 251  # every byte, padding too
    return a


@pytest.mark.parametrize("case", sorted(V2_INEXACT))
def test_dtypes_zarr_v2_cannot_hold_are_refused_and_v3_reads_them(
    tmp_path: Path, case: str
) -> None:
    want = _filled(V2_INEXACT[case])
    np.save(tmp_path / "a.npy", want)
    np.savez(tmp_path / "m.npz", ok=np.arange(3), odd=want)
    loaded = np.load(tmp_path / "a.npy")
    for name in ("a.npy", "m.npz"):
        with pytest.raises(UnsupportedError, match=r"dtype .* Zarr v2 .*zarr_format=3"):
            npystore.to_kerchunk(str(tmp_path / name))
    got = open_refs(npystore.to_kerchunk(str(tmp_path / "a.npy"), zarr_format=3),
                    remote_protocol="file")[...]  # fmt: skip
    assert got.dtype == loaded.dtype
    np.testing.assert_array_equal(got, loaded)  # values (zarr copies records field by field)
    group = open_refs(npystore.to_kerchunk(str(tmp_path / "m.npz"), zarr_format=3),
                      remote_protocol="file")  # fmt: skip
    np.testing.assert_array_equal(group["odd"][...], loaded)


@pytest.mark.parametrize("case", sorted(V2_EXACT))
def test_dtypes_zarr_v2_holds_read_exactly(tmp_path: Path, case: str) -> None:
    want = _filled(V2_EXACT[case])
    np.save(tmp_path / "a.npy", want)
    got = open_refs(npystore.to_kerchunk(str(tmp_path / "a.npy")), remote_protocol="file")
    data = got["data"][...]
    assert data.dtype == want.dtype
    assert data.tobytes() == np.load(tmp_path / "a.npy").tobytes()


def test_the_v2_rule_is_zarrs_own() -> None:
    from zarr.core.dtype import get_data_type_from_json

    from npystore.faces.refs.kerchunk import v2_dtype_problem

    dtypes = [make().dtype for make in [*V2_INEXACT.values(), *V2_EXACT.values()]]
    dtypes += [np.dtype(s) for s in ("<f4", ">f8", "<c8", ">c16", "|b1", "<i8", ">u2", "|S5",
                                     "<U3", ">U3", "<M8", "<M8[15ms]", "|i1")]  # fmt: skip
    dtypes += [np.dtype([("a", "<i4"), ("b", "?")]), np.dtype([("a", "<f16")])]
    for dtype in dtypes:
        spec = json.loads(json.dumps(dtype.descr if dtype.names is not None else dtype.str))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                back = get_data_type_from_json(
                    {"name": spec, "object_codec_id": None}, zarr_format=2
                ).to_native_dtype()
            exact = back == dtype and back.descr == dtype.descr and back.str == dtype.str
        except ValueError:
            exact = False
        problem = v2_dtype_problem(dtype)
        if problem is None:  # never a v2 form zarr reads back otherwise
            assert exact, dtype
        elif exact:
            # zarr >= 3.2 reads nested records back; the references must read back under
            # every zarr npystore supports, and zarr 3.1 turns them into other dtypes
            assert hasattr(zarr.core.dtype, "Struct"), dtype
            assert problem.startswith("a nested record"), (dtype, problem)


def test_scipys_long_double_archive(tmp_path: Path) -> None:
    scipy = pytest.importorskip("scipy")
    path = Path(scipy.__file__).parent / "fftpack" / "tests" / "fftw_longdouble_ref.npz"
    if not path.exists():
        pytest.skip("scipy's test data is not installed")
    with pytest.raises(UnsupportedError, match=r"dct_1_2\.npy: dtype .*float128.*zarr_format=3"):
        npystore.to_kerchunk(str(path))
    group = open_refs(npystore.to_kerchunk(str(path), zarr_format=3), remote_protocol="file")
    with np.load(path) as z:
        for key in ("sizes", "dct_1_2", "dct_4_8"):
            got = group[key][...]
            assert got.dtype == z[key].dtype
            np.testing.assert_array_equal(got, z[key])


# ------------------------------------------------------------ the command line's example


def test_the_documented_refs_command_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from npystore.tools import cli

    text = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    commands = [line.split() for line in text.splitlines() if line.startswith("npystore refs big")]
    assert commands, "docs/cli.md lost its big.npy example"
    want = np.arange(262_144 * 8, dtype="<f8").reshape(262_144, 8)  # as the docs describe
    np.save(tmp_path / "big.npy", want)
    monkeypatch.chdir(tmp_path)
    # the docs' command, and the one issue 26 found failing (an edge past the file's end)
    for argv in [
        *commands,
        ["npystore", "refs", "big.npy", "--chunks", "100000,-1", "-o", "x.json"],
    ]:
        assert cli.main(argv[1:]) == 0, argv
        out = argv[argv.index("-o") + 1]
        refs = json.loads((tmp_path / out).read_text())
        got = open_refs(refs, remote_protocol="file")["data"]
        np.testing.assert_array_equal(got[...], want)
        rows = json.loads(refs["refs"]["data/.zarray"])["chunks"][0]
        assert set(inlined(refs)) == ({"data/2.0"} if 262_144 % rows else set()), argv
