"""savez and savez_compressed: numpy.load and zipfile read every archive (testzip clean,
ZIP64 when forced), each member's bytes are numpy.save's, compressed members stay near
numpy's size and carry a block index the reader slices with (one range read once the blocks
before have been checked, in this process or an earlier one through the index cache), and a
lying block index never returns wrong data."""

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


def _typical(n: int) -> dict[str, np.ndarray]:
    """``n`` bytes each of the kinds of data the default level is held to: the benchmark's
    (a rounded random walk), periodic values, rounded normals, random ints, text."""
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"])
    return {
        "walk": np.round(np.cumsum(rng.standard_normal(n // 8)), 1),
        "sine": np.sin(2 * np.pi * np.arange(n // 8) / 100),
        "tiled": np.tile(np.arange(100, dtype="<i8"), n // 800),
        "normals": np.round(rng.standard_normal(n // 8), 2),
        "ints": rng.integers(0, 1000, n // 4).astype("<i4"),
        "text": words[rng.integers(0, 6, n // 32)].astype("<U8"),
    }


@pytest.mark.parametrize("backend", ["installed", "zlib"])
def test_default_level_stays_within_1_2x_of_numpys_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Sizes are deterministic; 128 KiB blocks over 512 KiB of each kind, so that every
    member is several independent blocks (each starts afresh: the cost 1 MiB blocks pay)."""
    from npystore.formats import deflate_write

    monkeypatch.setattr(write_npz, "deflate_block_size", lambda usize: 2**17)
    if backend == "zlib":  # without zlib-ng (the fast extra)
        monkeypatch.setattr(deflate_write, "_zlib_compressor", lambda: zlib)
    arrays = _typical(2**19)
    np.savez_compressed(tmp_path / "np.npz", **arrays)
    npystore.savez_compressed(str(tmp_path / "ns.npz"), **arrays)
    with zipfile.ZipFile(tmp_path / "np.npz") as ref, zipfile.ZipFile(tmp_path / "ns.npz") as got:
        for key in arrays:
            name = f"{key}.npy"
            assert len(_blocks_of(tmp_path / "ns.npz", name).csizes) >= 4
            ratio = got.getinfo(name).compress_size / ref.getinfo(name).compress_size
            assert ratio <= 1.2, (key, ratio)  # ISA-L level 2, the old default: up to 4.4x
            assert got.read(name) == ref.read(name)


def test_compresslevel_levels_and_refusals(tmp_path: Path) -> None:
    a = _typical(2**18)["text"]  # where ISA-L's levels (1-3) and zlib's (4-9) differ most
    sizes = {}
    for level in range(1, 10):
        path = tmp_path / f"l{level}.npz"
        npystore.savez_compressed(str(path), a=a, compresslevel=level)
        with np.load(path) as z:
            np.testing.assert_array_equal(z["a"], a)
        sizes[level] = zipfile.ZipFile(path).getinfo("a.npy").compress_size
    assert sizes[6] < sizes[2]  # the ISA-L levels are faster, not smaller
    for bad in (0, 10, -1, 2.5, True, "6"):
        with pytest.raises(ValueError, match="compresslevel"):
            npystore.savez_compressed(str(tmp_path / "bad.npz"), a=a, compresslevel=bad)
    assert not (tmp_path / "bad.npz").exists()


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
    """The first slice of a member checks the blocks before it once (their end states: the
    chain that makes blocks read alone equal to the one stream); later slices in the same
    process, and in later processes through the index cache, read one range."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1000, 4_000_000).astype("<i8")  # 32 MB, ~8 MB deflated
    path = tmp_path / "big.npz"
    npystore.savez_compressed(str(path), a=a)
    url = s3.put_file(path, "big.npz")
    csize = zipfile.ZipFile(path).getinfo("a.npy").compress_size
    memo.forget()
    z = npystore.open_npz(url, storage_options=s3.storage_options)
    with s3.counter.measure() as first:
        np.testing.assert_array_equal(z["a"][-10:].compute(), a[-10:])
    assert first.bytes < 1.1 * csize  # every block read once: checked, then trusted
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z["a"][3_900_000:3_900_004].compute(), a[3_900_000:3_900_004])
        np.testing.assert_array_equal(z["a"][100:104].compute(), a[100:104])
    assert m.bytes < csize / 10, (m.bytes, csize)
    memo.forget()  # as a later process: the checked blocks are in the index cache
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
    # block 5 does not end where the stream has a block boundary: the index is given up
    # and the member read as one stream (numpy's bytes, not an error on a valid member)
    np.testing.assert_array_equal(z["a"][out : out + 10].compute(), a[out : out + 10])
    np.testing.assert_array_equal(
        z["a"][out - 1000 : out - 990].compute(), a[out - 1000 : out - 990]
    )
    np.testing.assert_array_equal(z["a"][-5:].compute(), a[-5:])
    np.testing.assert_array_equal(z["a"].compute(), a)


def _solve_crc(diff: Any, nbits: int) -> int:
    """``x`` (``nbits`` bits) with ``diff(x) == 0`` for an affine ``diff`` into GF(2)^32."""
    base = diff(0)
    rows = []  # Gaussian elimination on the columns diff(e_i) ^ diff(0)
    for i in range(nbits):
        rows.append((diff(1 << i) ^ base, 1 << i))
    pivots: list[tuple[int, int]] = []
    for column, bits in rows:
        col, x = column, bits
        for pcol, px in pivots:
            if col ^ pcol < col:
                col, x = col ^ pcol, x ^ px
        if col:
            pivots.append((col, x))
            pivots.sort(reverse=True)
    target, x = base, 0
    for pcol, px in pivots:
        if target ^ pcol < target:
            target, x = target ^ pcol, x ^ px
    assert target == 0, "no solution: pick other free bytes"
    return x


def _forged_block_index_archive(path: Path) -> np.ndarray[Any, Any]:
    """An archive whose block index passes every structural and CRC-32 check while its
    second block, inflated alone, is not what the one stream gives (issue 24 item 3).

    One stream (what numpy reads): a stored block holding the npy header and ``X``, an
    empty stored block ``P``, a final stored block holding ``D``. The index cuts it after
    the header, inside the first stored block: the second piece ``X + P + stored(D)``
    inflated alone reads ``X``'s first 5 bytes as a stored block header covering the rest
    of ``X`` and ``P``. Eight bytes of ``X`` make the two views' CRC-32s equal.
    """
    rng = np.random.default_rng(24)
    w, d = 1000, 2000
    t = 5 + w
    head = _npy(np.zeros(t + d, np.uint8))[:128]
    assert head.endswith(b"\n")
    assert len(head) == 128

    def stored(content_len: int, final: bool) -> bytes:
        return bytes([int(final)]) + struct.pack("<HH", content_len, content_len ^ 0xFFFF)

    h = stored(t, False)  # X's first 5 bytes: a stored header, seen alone
    fixed_w = bytearray(rng.integers(0, 256, w, dtype=np.uint8).tobytes())
    tail = rng.integers(0, 256, d, dtype=np.uint8).tobytes()
    p = stored(0, False)

    def with_free(x: int) -> bytes:
        fixed_w[:8] = x.to_bytes(8, "little")
        return bytes(fixed_w)

    def diff(x: int) -> int:
        ww = with_free(x)
        return zlib.crc32(h + ww + tail) ^ zlib.crc32(ww + p + tail)

    ww = with_free(_solve_crc(diff, 64))
    one_stream = head + h + ww + tail
    alone = head + ww + p + tail
    assert one_stream != alone
    assert zlib.crc32(one_stream) == zlib.crc32(alone)
    piece0 = stored(128 + t, False) + head  # stops 128 bytes into a stored block
    piece1 = h + ww + p + stored(d, True) + tail
    raw = piece0 + piece1
    assert zlib.decompress(raw, -15) == one_stream
    d0, d1 = zlib.decompressobj(-15), zlib.decompressobj(-15)
    assert d0.decompress(piece0) + d1.decompress(piece1) == alone
    assert d1.eof
    index = zipdir.BlockIndex(
        (len(piece0), len(piece1)),
        (128, t + d),
        (zlib.crc32(head), zlib.crc32(ww + p + tail)),
    )
    extra = zipdir.blocks_extra(index)
    name = b"a.npy"
    crc = zlib.crc32(one_stream)
    sizes = (crc, len(raw), len(one_stream), len(name))
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, *sizes, 0) + name
    central = (
        struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, *sizes,
                    len(extra), 0, 0, 0, 0, 0)
        + name
        + extra
    )  # fmt: skip
    at = len(local) + len(raw)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), at, 0)
    path.write_bytes(local + raw + central + end)
    return np.frombuffer(one_stream[128:], np.uint8)


def test_a_forged_block_index_cannot_change_what_is_read(tmp_path: Path) -> None:
    """A block index whose blocks inflate alone, to their sizes and CRC-32s, into other
    bytes than the one stream gives at that place: slices, a full compute, Zarr reads and
    ``load`` give numpy's bytes (they gave the forged block's before)."""
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "forged.npz"
    truth = _forged_block_index_archive(path)
    with np.load(path) as z:
        np.testing.assert_array_equal(z["a"], truth)
    z = npystore.open_npz(str(path), index_cache=False)
    assert z.archive.entries["a.npy"].blocks is not None  # the index passes as consistent
    np.testing.assert_array_equal(z["a"][:10].compute(), truth[:10])
    z = npystore.open_npz(str(path), index_cache=False, chunks=(700,))
    np.testing.assert_array_equal(z["a"].compute(), truth)
    np.testing.assert_array_equal(z["a"][2000:2010].compute(), truth[2000:2010])
    group = zarr.open_group(npystore.open_store(str(path)), mode="r")
    np.testing.assert_array_equal(group["a"][:], truth)
    np.testing.assert_array_equal(npystore.load(str(path))["a"], truth)


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


@pytest.mark.parametrize("key", ["../evil", "a/../../b", "/abs", "back\\slash", "nul\x00"])
def test_member_names_npystore_cannot_read_back_are_refused(tmp_path: Path, key: str) -> None:
    """numpy.savez writes them; open_npz (and unzip) refuse the archive whole, so npystore
    refuses to write it (documented in docs/howto-write.md)."""
    path = tmp_path / "n.npz"
    for write in (npystore.savez, npystore.savez_compressed):
        with pytest.raises(npystore.UnsupportedError, match="choose another key"):
            write(str(path), ok=np.arange(3), **{key: np.arange(3)})
    assert list(tmp_path.iterdir()) == []
    npystore.savez(str(path), **{"dir/sub": np.arange(3), "..x": np.arange(2)})  # fine
    with np.load(path) as z:
        assert sorted(z.files) == ["..x", "dir/sub"]


def test_a_name_longer_than_zip_allows_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(struct.error):  # numpy's own failure
        np.savez(tmp_path / "np.npz", **{"k" * 70_000: np.arange(3)})
    with pytest.raises(npystore.UnsupportedError, match="at most 65,535 bytes"):
        npystore.savez(str(tmp_path / "ns.npz"), **{"k" * 70_000: np.arange(3)})
    assert not (tmp_path / "ns.npz").exists()
    npystore.savez(str(tmp_path / "ns.npz"), **{"k" * 65_531: np.arange(3)})  # + ".npy": 65,535
    assert np.load(tmp_path / "ns.npz").files == ["k" * 65_531]


def test_masked_arrays_are_refused_not_written_without_their_mask(tmp_path: Path) -> None:
    m = np.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0])
    with pytest.raises(NotImplementedError):  # numpy.save to a file
        np.save(tmp_path / "np.npy", m)
    dm = da.ma.masked_greater(da.arange(10, chunks=5), 5)
    for arr in (m, dm):
        with pytest.raises(NotImplementedError, match="mask would be dropped"):
            npystore.save(str(tmp_path / "m.npy"), arr)
        for write in (npystore.savez, npystore.savez_compressed):
            with pytest.raises(npystore.UnsupportedError, match="masked array"):
                write(str(tmp_path / "m.npz"), a=np.arange(3), m=arr)
    # a dask array whose blocks turn out masked (its meta says otherwise)
    sneaky = da.arange(10, chunks=5).map_blocks(
        lambda b: np.ma.masked_less(b, 3), dtype=int, meta=np.empty(0, int)
    )
    with pytest.raises(WriteError, match="mask"):
        npystore.save(str(tmp_path / "s.npy"), sneaky)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["np.npy"]  # numpy's partial file
