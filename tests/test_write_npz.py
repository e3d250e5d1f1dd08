"""savez and savez_compressed: numpy.load and zipfile read every archive (testzip clean,
ZIP64 when forced), each member's bytes are numpy.save's, compressed members stay near
numpy's size and carry a block index the reader slices with (one range read, no index
pass, even in a fresh process), and a lying block index never returns wrong data."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest

import npystore
from npystore.fetch import cache
from npystore.formats import zipdir
from npystore.read import memo
from npystore.write import WriteError
from npystore.write import npz as write_npz

from npy_cases import DTYPES


def _npy(a: Any) -> bytes:
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def _arrays() -> dict[str, Any]:
    rng = np.random.default_rng(3)
    out: dict[str, Any] = {
        "f8": rng.standard_normal((300, 70)),
        "fortran_be": np.asfortranarray(rng.integers(-100, 100, (40, 30))).astype(">i4"),
        "empty": np.zeros((0, 4), "<U3"),
        "scalar": np.float16(1.5),
        "dask": da.from_array(np.arange(12_000, dtype="<i8").reshape(120, 100), chunks=(17, 40)),
    }
    for name in ("struct_nested", "struct_subarray", "<M8[ns]", "S5", "bool", ">c16"):
        out[name.strip("<>[]")] = np.zeros((7, 3), DTYPES[name])
    return out


def _check_archive(path: Path, arrays: dict[str, Any], positional: list[Any]) -> None:
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        for key, a in [*arrays.items(), *((f"arr_{i}", p) for i, p in enumerate(positional))]:
            assert f"{key}.npy" in names
            assert zf.read(f"{key}.npy") == _npy(np.asarray(a)), key
    with np.load(path) as z:
        for key, a in arrays.items():
            np.testing.assert_array_equal(z[key], np.asarray(a))


@pytest.mark.parametrize("compressed", [False, True])
def test_archives_hold_numpy_save_bytes(tmp_path: Path, compressed: bool) -> None:
    arrays = _arrays()
    positional = [np.arange(5), np.eye(3, dtype=">f4")]
    path = tmp_path / "a.npz"
    write = npystore.savez_compressed if compressed else npystore.savez
    write(str(path), *positional, **arrays)
    _check_archive(path, arrays, positional)
    z = npystore.open_npz(str(path))
    for key, a in arrays.items():
        np.testing.assert_array_equal(z[key].compute(), np.asarray(a))
    with pytest.raises(ValueError, match="arr_0"):
        write(str(tmp_path / "b.npz"), np.arange(2), arr_0=np.arange(3))
    write(str(tmp_path / "none.npz"))
    assert np.load(tmp_path / "none.npz").files == []


@pytest.mark.parametrize("compressed", [False, True])
def test_zip64_forced(tmp_path: Path, compressed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_npz, "ZIP64_FROM", 0)
    arrays = {"a": np.arange(3000.0), "b": da.ones((50, 20), chunks=7)}
    path = tmp_path / "z64.npz"
    (npystore.savez_compressed if compressed else npystore.savez)(str(path), **arrays)
    data = path.read_bytes()
    assert b"PK\x06\x06" in data
    assert b"PK\x06\x07" in data
    _check_archive(path, arrays, [])
    z = npystore.open_npz(str(path))
    np.testing.assert_array_equal(z["a"][-3:].compute(), np.arange(3000.0)[-3:])


def test_compressed_size_near_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = np.round(np.cumsum(rng.standard_normal(2_000_000)), 1)
    b = rng.integers(0, 50, 3_000_000).astype("<i8")
    np.savez_compressed(tmp_path / "np.npz", a=a, b=b)
    npystore.savez_compressed(str(tmp_path / "ns.npz"), a=a, b=b)
    with zipfile.ZipFile(tmp_path / "np.npz") as ref, zipfile.ZipFile(tmp_path / "ns.npz") as got:
        for name in ("a.npy", "b.npy"):
            ratio = got.getinfo(name).compress_size / ref.getinfo(name).compress_size
            assert ratio < 1.5, (name, ratio)


def _blocks_of(path: Path, name: str) -> zipdir.BlockIndex:
    entry = npystore.open_npz(str(path)).archive.entries[name]
    assert entry.blocks is not None
    return entry.blocks


def test_block_index_is_embedded_and_consistent(tmp_path: Path) -> None:
    a = np.arange(3_000_000, dtype="<i8") % 1000  # 24 MB: 23 blocks of 1 MiB
    path = tmp_path / "c.npz"
    npystore.savez_compressed(str(path), a=da.from_array(a, chunks=700_000))
    blocks = _blocks_of(path, "a.npy")
    info = zipfile.ZipFile(path).getinfo("a.npy")
    assert sum(blocks.csizes) == info.compress_size
    assert sum(blocks.usizes) == info.file_size
    assert len(blocks.csizes) >= 23
    raw = path.read_bytes()
    n, m = struct.unpack_from("<HH", raw, info.header_offset + 26)  # the local header's
    start = info.header_offset + 30 + n + m
    stream = raw[start : start + info.compress_size]
    for k in (0, 5, len(blocks.csizes) - 1):  # every block inflates on its own
        c0, u0 = blocks.coffsets[k], blocks.uoffsets[k]
        piece = stream[c0 : c0 + blocks.csizes[k]]
        out = zlib.decompressobj(-15).decompress(piece)
        assert out == _npy(a)[u0 : u0 + blocks.usizes[k]]


def test_fresh_open_over_s3_slices_near_the_end_cheaply(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1000, 4_000_000).astype("<i8")  # 32 MB, ~8 MB deflated
    path = tmp_path / "big.npz"
    npystore.savez_compressed(str(path), a=a)
    url = s3.put_file(path, "big.npz")
    csize = zipfile.ZipFile(path).getinfo("a.npy").compress_size
    memo.forget()
    with s3.counter.measure() as m:
        z = npystore.open_npz(url, storage_options=s3.storage_options)
        np.testing.assert_array_equal(z["a"][-10:].compute(), a[-10:])
        np.testing.assert_array_equal(z["a"][3_900_000:3_900_004].compute(), a[3_900_000:3_900_004])
    assert m.bytes < csize / 10, (m.bytes, csize)
    # written straight to S3 too
    npystore.savez_compressed(s3.url("direct.npz"), a=a, storage_options=s3.storage_options)
    with np.load(io.BytesIO(s3.fs.cat(s3.url("direct.npz")))) as zz:
        np.testing.assert_array_equal(zz["a"], a)


def _patch_block_crc(path: Path, block: int, delta: int) -> None:
    """Change one CRC-32 of the block index in the central directory (as a liar would)."""
    data = bytearray(path.read_bytes())
    tag = struct.pack("<H", zipdir.BLOCKS_EXTRA_ID)
    at = data.rindex(tag)
    first = at + 4 + 6 + 12 * block + 8
    (crc,) = struct.unpack_from("<I", data, first)
    struct.pack_into("<I", data, first, crc ^ delta)
    path.write_bytes(bytes(data))


def test_a_lying_block_index_never_returns_wrong_data(tmp_path: Path) -> None:
    a = np.arange(1_500_000, dtype="<i8") % 777
    path = tmp_path / "liar.npz"
    npystore.savez_compressed(str(path), a=a)
    # a single wrong block CRC: the CRCs no longer combine to the member's, the index is
    # ignored and the member is read as any other
    _patch_block_crc(path, 3, 1)
    z = npystore.open_npz(str(path), index_cache=False)
    np.testing.assert_array_equal(z["a"][-5:].compute(), a[-5:])
    # compensating lies in the compressed sizes (which the CRC-32s do not cover): the index
    # passes the structural and CRC checks, and the block check refuses the data
    _patch_block_crc(path, 3, 1)  # undo
    raw = bytearray(path.read_bytes())
    at = raw.rindex(struct.pack("<H", zipdir.BLOCKS_EXTRA_ID)) + 4 + 6
    c5, c6 = at + 12 * 5, at + 12 * 6  # block 6 now starts a byte early
    struct.pack_into("<I", raw, c5, struct.unpack_from("<I", raw, c5)[0] - 1)
    struct.pack_into("<I", raw, c6, struct.unpack_from("<I", raw, c6)[0] + 1)
    path.write_bytes(bytes(raw))
    with np.load(path) as ok:  # numpy ignores the index
        np.testing.assert_array_equal(ok["a"], a)
    z = npystore.open_npz(str(path), index_cache=False)
    assert z.archive.entries["a.npy"].blocks is not None
    out = 5 * 2**20 // 8 + 100  # an element in block 6 (block 0 is the .npy header)
    with pytest.raises(npystore.FormatError, match="block 6"):
        z["a"][out : out + 10].compute()
    # block 5 lost the last byte of its closing marker: its data still inflates and checks
    np.testing.assert_array_equal(
        z["a"][out - 1000 : out - 990].compute(), a[out - 1000 : out - 990]
    )
    np.testing.assert_array_equal(z["a"][-5:].compute(), a[-5:])


def test_failing_member_leaves_previous_archive(tmp_path: Path) -> None:
    path = tmp_path / "keep.npz"
    npystore.savez(str(path), a=np.arange(3))
    before = path.read_bytes()

    def boom(block: np.ndarray) -> np.ndarray:
        raise RuntimeError("no data today")

    x = da.ones(100, chunks=10).map_blocks(boom, dtype=float)
    for write in (npystore.savez, npystore.savez_compressed):
        with pytest.raises(WriteError, match="no data today"):
            write(str(path), a=np.arange(5), b=x)
        assert path.read_bytes() == before
        assert [p.name for p in tmp_path.iterdir()] == ["keep.npz"]


def test_convert_writes_npy_and_npz_by_extension(tmp_path: Path) -> None:
    from npystore.tools.cli import main

    a = np.asfortranarray(np.arange(600, dtype=">i2").reshape(20, 30))
    np.savez(tmp_path / "in.npz", a=a, b=np.ones(7))
    np.save(tmp_path / "one.npy", a)
    assert (
        main(["convert", str(tmp_path / "in.npz"), str(tmp_path / "out.npz"), "--no-progress"]) == 0
    )
    with np.load(tmp_path / "out.npz") as z:
        assert sorted(z.files) == ["a", "b"]
        np.testing.assert_array_equal(z["a"], a)
        assert zipfile.ZipFile(tmp_path / "out.npz").getinfo("a.npy").compress_type == 8
    assert main(["convert", str(tmp_path / "in.npz"), str(tmp_path / "b.npy"), "--name", "b"]) == 0
    assert (tmp_path / "b.npy").read_bytes() == _npy(np.ones(7))
    assert (
        main(
            ["convert", str(tmp_path / "one.npy"), str(tmp_path / "s.npz"), "--compressor", "none"]
        )
        == 0
    )
    with zipfile.ZipFile(tmp_path / "s.npz") as zf:
        assert zf.namelist() == ["one.npy"]
        assert zf.read("one.npy") == _npy(np.ascontiguousarray(a))  # dask sources: C order
    assert main(["convert", str(tmp_path / "in.npz"), str(tmp_path / "two.npy")]) != 0
    assert not (tmp_path / "two.npy").exists()
