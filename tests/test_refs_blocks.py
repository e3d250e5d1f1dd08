"""References to ``npystore.savez_compressed`` archives: one chunk per deflate block.

The writer puts the ``.npy`` header alone in block 0 and whole chunks in every later block;
references point at each block's compressed bytes, decoded by the numcodecs codec
``npystore.raw_deflate`` (``npystore.codecs``). Oracles: ``numpy.load`` (the values),
zipfile and zlib (every block inflates alone), fsspec's reference file system under zarr
(Zarr v2 and v3), xarray's ``engine="kerchunk"``, VirtualiZarr's ManifestStore and its
kerchunk writer; numcodecs and zarr find the codec by id through entry points in a fresh
interpreter that never imports npystore.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tomllib
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any

import dask.array as da
import fsspec
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.storage import FsspecStore

import npystore
from npystore.codecs import RawDeflate
from npystore.errors import FormatError, UnsupportedError
from npystore.formats import zipdir
from npystore.tools import cli
from npystore.write import npz as npz_writer

pytest.importorskip("kerchunk")
xr = pytest.importorskip("xarray")

ROOT = Path(__file__).resolve().parents[1]

MEMBERS: dict[str, Any] = {
    "rows": np.arange(300_000, dtype="<f8").reshape(100_000, 3),  # 6 blocks, a short last one
    "images": np.arange(2 * 700 * 400, dtype="<f4").reshape(2, 700, 400),  # rows > 1 MiB
    "fortran": np.asfortranarray(np.arange(3 * 120_000, dtype=">i4").reshape(3, 120_000)),
    "scalar": np.array(2.5),
    "empty": np.zeros((0, 4), dtype="<u2"),
    "records": np.zeros(50_000, dtype=[("a", "<i4"), ("b", ">f8")]),
    "dask": da.from_array(np.arange(400_003, dtype="<i8") % 1000, chunks=77_777),
}


def open_refs(refs: dict[str, Any]) -> Any:
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, remote_protocol="file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(FsspecStore(fs=fs, read_only=True, path=""), mode="r")


def inlined(refs: dict[str, Any]) -> list[str]:
    return [k for k, v in refs["refs"].items() if isinstance(v, str) and v.startswith("base64:")]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("blocks") / "run.npz"
    npystore.savez_compressed(str(path), **MEMBERS)
    return path


def test_blocks_are_the_header_then_whole_chunks(archive: Path) -> None:
    raw = archive.read_bytes()
    z = npystore.open_npz(str(archive))
    with zipfile.ZipFile(archive) as zf:
        for key, value in MEMBERS.items():
            info = zf.getinfo(f"{key}.npy")
            member = zf.read(info)
            blocks = z.archive.entries[info.filename].blocks
            assert blocks is not None, key
            header = len(member) - np.asarray(value).nbytes
            assert blocks.usizes[0] == header, key  # the .npy header alone
            n, m = struct.unpack_from("<HH", raw, info.header_offset + 26)
            stream = raw[info.header_offset + 30 + n + m :][: info.compress_size]
            for k, (c, u) in enumerate(zip(blocks.coffsets, blocks.uoffsets, strict=False)):
                if k == len(blocks.csizes):
                    break
                out = zlib.decompressobj(-15).decompress(stream[c : c + blocks.csizes[k]])
                assert out == member[u : u + blocks.usizes[k]], (key, k)
            data = blocks.usizes[1:]
            assert len(set(data[:-1])) <= 1, key  # equal blocks, the last may be shorter
            assert not data or data[-1] <= data[0], key
            assert all(u <= npz_writer.deflate_block_size(len(member)) for u in data), key


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_references_point_at_blocks_and_read_exactly(archive: Path, zarr_format: int) -> None:
    refs = npystore.to_kerchunk(str(archive), zarr_format=zarr_format)  # type: ignore[arg-type]
    assert not inlined(refs)  # every value is a byte range of the archive
    assert len(json.dumps(refs)) < 64 * 2**10
    group = open_refs(refs)
    with np.load(archive) as z:
        for key in MEMBERS:
            got = group[key][...]
            want = z[key].dtype
            # v3 keeps byte order in the bytes codec: zarr returns native order
            assert got.dtype in ((want,) if zarr_format == 2 else (want, want.newbyteorder("="))), (
                key
            )
            assert got.shape == z[key].shape, key
            np.testing.assert_array_equal(got, z[key], err_msg=key)
    if zarr_format == 2:
        zarray = json.loads(refs["refs"]["rows/.zarray"])
        assert zarray["filters"] == [{"id": "npystore.raw_deflate", "size": 43690 * 24}]
        assert zarray["chunks"] == [43690, 3]
        ds = xr.open_dataset(refs, engine="kerchunk")
        np.testing.assert_array_equal(ds["images"].values, MEMBERS["images"])
        np.testing.assert_array_equal(ds["dask"][-5:].values, MEMBERS["dask"][-5:].compute())


def test_virtualizarr_manifest_arrays_with_the_codec(archive: Path) -> None:
    pytest.importorskip("virtualizarr")
    obstore_store = pytest.importorskip("obstore.store")
    from obspec_utils.registry import ObjectStoreRegistry
    from virtualizarr import open_virtual_dataset

    from npystore.virtualizarr import NpystoreParser

    registry = ObjectStoreRegistry({"file://": obstore_store.LocalStore()})
    url = archive.as_uri()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vds = open_virtual_dataset(url, registry=registry, parser=NpystoreParser())
        marr = vds["rows"].data
        assert type(marr).__name__ == "ManifestArray"
        names = [c.to_dict()["name"] for c in marr.metadata.codecs]
        assert names == ["bytes", "numcodecs.npystore.raw_deflate"]
        assert len(marr.manifest.dict()) == 3
        store = NpystoreParser()(url, registry)
        ds = xr.open_zarr(store, consolidated=False, zarr_format=3)
        records = zarr.open_group(store, mode="r", zarr_format=3)["records"][...]
        written = vds[["rows", "dask"]].vz.to_kerchunk(format="dict")
        back = xr.open_dataset(written, engine="kerchunk", mask_and_scale=False)
    with np.load(archive) as z:
        for key in ("rows", "images", "dask", "scalar"):
            np.testing.assert_array_equal(ds[key].values, z[key], err_msg=key)
        np.testing.assert_array_equal(records, z["records"])  # xarray takes no records
        np.testing.assert_array_equal(back["rows"].values, z["rows"])
        np.testing.assert_array_equal(back["dask"].values, z["dask"])


def test_numpy_archives_are_refused_with_the_way_out_which_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members = {"a": np.arange(300_000, dtype="<f8"), "b": np.eye(3)}
    np.savez_compressed(tmp_path / "x.npz", **members)
    with pytest.raises(
        UnsupportedError,
        match=r"x\.npz:a\.npy: 2400000 bytes, a deflated "
        r"member without a block index.*npystore convert IN\.npz OUT\.npz",
    ):
        npystore.to_kerchunk(str(tmp_path / "x.npz"), max_inline=2**20)
    assert cli.main(["refs", str(tmp_path / "x.npz"), "--max-inline", "1MiB"]) == 1
    assert "npystore convert IN.npz OUT.npz" in capsys.readouterr().err
    # the way out, as the message says: re-deflate with a block index, then references
    assert cli.main(["convert", str(tmp_path / "x.npz"), str(tmp_path / "y.npz")]) == 0
    assert cli.main(["refs", str(tmp_path / "y.npz"), "-o", str(tmp_path / "y.json")]) == 0
    refs = json.loads((tmp_path / "y.json").read_text())
    assert not inlined(refs)
    group = open_refs(refs)
    for key, want in members.items():
        np.testing.assert_array_equal(group[key][...], want)


def test_archives_of_older_writers_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # blocks of 1 MiB of the member's bytes, the header inside the first: not whole chunks
    monkeypatch.setattr(npz_writer, "aligned_block_size", lambda *_: None)
    a = np.arange(1_000_000, dtype="<f8")
    npystore.savez_compressed(str(tmp_path / "old.npz"), a=a)
    blocks = npystore.open_npz(str(tmp_path / "old.npz")).archive.entries["a.npy"].blocks
    assert blocks is not None
    assert blocks.usizes[0] == 2**20
    with pytest.raises(UnsupportedError, match=r"old\.npz:a\.npy: .*not whole chunks.*convert"):
        npystore.to_kerchunk(str(tmp_path / "old.npz"), max_inline=2**20)


def test_a_lying_block_index_fails_loudly_through_the_codec(tmp_path: Path) -> None:
    a = np.arange(1_000_000, dtype="<i8") % 777
    path = tmp_path / "liar.npz"
    npystore.savez_compressed(str(path), a=a)
    raw = bytearray(path.read_bytes())
    at = raw.rindex(struct.pack("<H", zipdir.BLOCKS_EXTRA_ID)) + 4 + 6
    c1, c2 = at + 12 * 1, at + 12 * 2  # block 2 starts a byte early
    struct.pack_into("<I", raw, c1, struct.unpack_from("<I", raw, c1)[0] - 1)
    struct.pack_into("<I", raw, c2, struct.unpack_from("<I", raw, c2)[0] + 1)
    path.write_bytes(bytes(raw))
    group = open_refs(npystore.to_kerchunk(str(path)))
    np.testing.assert_array_equal(group["a"][-3:], a[-3:])  # later blocks are intact
    with pytest.raises(FormatError, match=r"npystore\.raw_deflate"):
        group["a"][2**17 + 5]  # block 2: starts a byte early


def test_raw_deflate_codec_decodes_exactly_and_bounded() -> None:
    codec = numcodecs.get_codec({"id": "npystore.raw_deflate", "size": 12})
    assert isinstance(codec, RawDeflate)
    assert codec.get_config() == {"id": "npystore.raw_deflate", "size": 12}
    data = np.arange(3, dtype="<i4")
    assert codec.decode(codec.encode(data)) == data.tobytes()
    out = np.empty(3, dtype="<i4")
    codec.decode(codec.encode(data), out=out)
    np.testing.assert_array_equal(out, data)
    # the stream ends early: the array's last chunk, zero-padded to the chunk's size
    assert codec.decode(codec.encode(b"ab")) == b"ab" + bytes(10)
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb_bytes = bomb.compress(bytes(2**26)) + bomb.flush()
    with pytest.raises(FormatError, match="past 12 bytes"):
        codec.decode(bomb_bytes)  # inflates past the chunk: refused at 13 bytes
    flushed = zlib.compressobj(6, zlib.DEFLATED, -15)
    cut = flushed.compress(b"abcdef") + flushed.flush(zlib.Z_FULL_FLUSH)
    with pytest.raises(FormatError, match="not 12, and does not end"):
        codec.decode(cut)  # short and not the stream's end: a block cut short
    with pytest.raises(FormatError, match="ends before"):
        codec.decode(codec.encode(data) + b"junk")
    with pytest.raises(ValueError, match="size"):
        RawDeflate(size=-1)


def _entry_points_txt() -> str:
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert points["numcodecs.codecs"] == {"npystore.raw_deflate": "npystore.codecs:RawDeflate"}
    assert points["zarr.codecs"] == {
        "numcodecs.npystore.raw_deflate": "npystore.codecs:RawDeflateZarr3"
    }
    lines = []
    for group in ("numcodecs.codecs", "zarr.codecs"):
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {target}" for name, target in points[group].items())
    return "\n".join(lines) + "\n"


CHILD = r"""
import json, sys, warnings
import fsspec, numcodecs, numpy as np, zarr
from zarr.storage import FsspecStore
warnings.simplefilter("ignore")
assert "npystore" not in sys.modules
codec = numcodecs.get_codec({"id": "npystore.raw_deflate", "size": 4})
out = {"codec": type(codec).__module__}
for name in sys.argv[1:]:
    refs = json.load(open(name))
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, remote_protocol="file")
    group = zarr.open_group(FsspecStore(fs=fs, read_only=True, path=""), mode="r")
    out[name] = float(group["a"][...].sum())
print(json.dumps(out))
"""


@pytest.mark.slow  # a fresh interpreter importing zarr
def test_readers_find_the_codec_by_entry_point_without_importing_npystore(
    tmp_path: Path,
) -> None:
    # what `pip install npystore` declares (pyproject.toml), as an installed distribution
    info = tmp_path / "site" / "npystore_codec_probe-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: npystore-codec-probe\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(_entry_points_txt())
    a = np.arange(200_000, dtype="<f8")
    npystore.savez_compressed(str(tmp_path / "a.npz"), a=a)
    names = []
    for fmt in (2, 3):
        name = str(tmp_path / f"refs{fmt}.json")
        Path(name).write_text(json.dumps(npystore.to_kerchunk(str(tmp_path / "a.npz"),
                                                              zarr_format=fmt)))  # fmt: skip
        names.append(name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(tmp_path / "site")]))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *names],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["codec"] == "npystore.codecs"
    assert got[names[0]] == got[names[1]] == float(a.sum())


def test_s3_references_to_a_savez_compressed_archive(tmp_path: Path, s3: Any) -> None:
    # docs/howto-references.md: written to S3 by npystore.savez_compressed, then references
    temps = np.linspace(0, 1, 300_000)  # 3 blocks, the last one short
    url = s3.url("run.npz")
    npystore.savez_compressed(url, temps=temps, storage_options=s3.storage_options)
    refs = npystore.to_kerchunk(url, storage_options=s3.storage_options)
    assert not inlined(refs)
    fs = fsspec.filesystem(
        "reference", fo=refs, remote_protocol="s3",
        remote_options={**s3.storage_options, "asynchronous": True}, asynchronous=True,
    )  # fmt: skip
    group = zarr.open_group(FsspecStore(fs=fs, read_only=True, path=""), mode="r")
    np.testing.assert_array_equal(group["temps"][:10], temps[:10])
    np.testing.assert_array_equal(group["temps"][...], temps)


@pytest.mark.parametrize(
    ("shape", "itemsize", "size"),
    [
        ((100_000, 3), 8, 1048560),  # 43,690 rows a block, the last block shorter
        ((10, 3), 8, 240),  # one block holds every row
        ((5, 700, 1000), 4, 700_000),  # rows over 1 MiB: 175 of 700 (a divisor) per block
        ((3, 1_000_003), 4, None),  # a prime next axis: no block of whole chunks
        ((), 8, 8),  # 0-d: one element
        ((0, 4), 8, 2**20),  # no data
        ((1, 2**21), 1, 2**20),  # one row of 2 MiB: halves
    ],
)
def test_aligned_block_size(shape: tuple[int, ...], itemsize: int, size: int | None) -> None:
    assert npz_writer.aligned_block_size(shape, itemsize, 2**20) == size
