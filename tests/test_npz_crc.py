"""CRC-32 of ``.npz`` members: every read that covers a whole member checks it.

Crafted archives (``numpy.savez`` / ``savez_compressed`` in ``tmp_path``, then a flipped CRC
in the central directory and the local header, or a flipped data byte of a stored member)
must fail through every reader that reads the whole member: dask computes with any chunking,
``NpzFile.load``, the Zarr store, the xarray engine, ``convert`` (also resumed) and
``npz://`` files. Oracle: ``numpy.load`` raises ``zipfile.BadZipFile`` on the same file.
A partial read cannot know and returns the bytes as they are.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
import zipfile
import zlib
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import xarray as xr
import zarr

import npystore
from npystore import FormatError
from npystore.read import inflate
from npystore.read.crccheck import MAX_SPANS, TAIL_READ, CrcLedger, crc32_combine
from npystore.tools import cli, convert

RNG = np.random.default_rng(14)
CRC_MESSAGE = r"CRC-32 of the .* is [0-9a-f]{8}, the ZIP directory says [0-9a-f]{8}"
METHODS = {"stored": np.savez, "deflated": np.savez_compressed}


def _entries(raw: bytes | bytearray) -> dict[str, tuple[int, int]]:
    """Member name -> (central directory entry offset, local header offset)."""
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as zf:
        locals_ = {i.filename: i.header_offset for i in zf.infolist()}
    out = {}
    pos = 0
    while (cd := raw.find(b"PK\x01\x02", pos)) >= 0:
        (name_len,) = struct.unpack_from("<H", raw, cd + 28)
        name = bytes(raw[cd + 46 : cd + 46 + name_len]).decode()
        out[name] = (cd, locals_[name])
        pos = cd + 4
    return out


def flip_crc(path: Path, member: str) -> None:
    """Change the member's recorded CRC-32 (central directory and local header): its data
    still inflates, to bytes that do not match."""
    raw = bytearray(path.read_bytes())
    cd, local = _entries(raw)[member]
    for at in (cd + 16, local + 14):
        (crc,) = struct.unpack_from("<I", raw, at)
        struct.pack_into("<I", raw, at, crc ^ 0x5A5A)
    path.write_bytes(bytes(raw))


def flip_data_byte(path: Path, member: str, at: int) -> None:
    """Change byte ``at`` of a stored member's data (counted from the member's start)."""
    raw = bytearray(path.read_bytes())
    _, local = _entries(raw)[member]
    name_len, extra_len = struct.unpack_from("<HH", raw, local + 26)
    raw[local + 30 + name_len + extra_len + at] ^= 0xFF
    path.write_bytes(bytes(raw))


def assert_numpy_refuses(path: Path, key: str) -> None:
    with pytest.raises(zipfile.BadZipFile, match="CRC"), np.load(path) as z:
        z[key]


def corrupt_archive(tmp_path: Path, method: str, arr: Any, name: str = "c.npz") -> Path:
    path = tmp_path / name
    METHODS[method](path, a=arr, ok=np.arange(7))
    flip_crc(path, "a.npy")
    assert_numpy_refuses(path, "a")
    return path


# -------------------------------------------------------------------- dask and NpzFile


CHUNKINGS = {"one": -1, "many": 1000, "unaligned": 7919, "blocks": {0: 37, 1: 64}}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("chunks", CHUNKINGS)
def test_full_compute_checks_the_crc(tmp_path: Path, method: str, chunks: str) -> None:
    arr = np.round(RNG.standard_normal((300, 200)), 2)
    path = corrupt_archive(tmp_path, method, arr)
    z = npystore.open_npz(str(path), chunks=CHUNKINGS[chunks])
    with pytest.raises(FormatError, match=CRC_MESSAGE) as info:
        z["a"].compute()
    assert "c.npz:a.npy" in str(info.value)
    # a second full compute checks (and fails) again; the good member reads
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        z["a"].compute()
    np.testing.assert_array_equal(z["ok"].compute(), np.arange(7))


@pytest.mark.parametrize("method", METHODS)
def test_load_and_mapping_reads_check_the_crc(tmp_path: Path, method: str) -> None:
    arr = np.arange(50_000, dtype="<i4")
    path = corrupt_archive(tmp_path, method, arr)
    z = npystore.open_npz(str(path))
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        z.load("a")
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        np.asarray(z.array("a"))
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        z.array("a")[...]  # one selection of everything


@pytest.mark.parametrize("method", METHODS)
def test_a_partial_read_cannot_know(tmp_path: Path, method: str) -> None:
    """Slices that do not reach the whole member return the bytes as they are (only the
    recorded CRC is wrong here, so they equal the original data)."""
    arr = np.arange(100_000, dtype="<f8")
    path = corrupt_archive(tmp_path, method, arr)
    z = npystore.open_npz(str(path), chunks=10_000)
    np.testing.assert_array_equal(z["a"][:25_000].compute(), arr[:25_000])
    np.testing.assert_array_equal(z["a"][40_000:41_000].compute(), arr[40_000:41_000])
    np.testing.assert_array_equal(z.array("a")[5:9], arr[5:9])


def test_stored_member_with_a_changed_data_byte(tmp_path: Path) -> None:
    """The realistic corruption: a data byte flipped, the CRC left as written."""
    arr = np.arange(20_000, dtype="<i8")
    path = tmp_path / "d.npz"
    np.savez(path, a=arr)
    flip_data_byte(path, "a.npy", 128 + 8 * 12_345)
    assert_numpy_refuses(path, "a")
    z = npystore.open_npz(str(path), chunks=3000)
    np.testing.assert_array_equal(z["a"][:12_000].compute(), arr[:12_000])  # cannot know
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        z["a"].compute()
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        npystore.open_npz(str(path)).load("a")


def test_stored_member_header_byte_changed(tmp_path: Path) -> None:
    """A change in the npy header's padding (never part of an array read) is still found:
    the header's CRC is summed when the header is read."""
    path = tmp_path / "h.npz"
    np.savez(path, a=np.arange(1000))
    raw = bytearray(path.read_bytes())
    pad = raw.index(b"), }") + 5  # inside the header's space padding
    raw[pad] = ord("\t")
    path.write_bytes(bytes(raw))
    assert_numpy_refuses(path, "a")
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        npystore.open_npz(str(path), chunks=100)["a"].compute()


@pytest.mark.parametrize("mode", ["indexed", "no-builder"])
def test_large_member_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Members above SMALL_MEMBER: the index pass checks the CRC (and says which CRC it
    computed); without an index builder, the chunk that reaches the end does."""
    monkeypatch.setattr(inflate, "SMALL_MEMBER", 0)
    monkeypatch.setattr(inflate, "INDEX_SPACING", 64 * 2**10)
    if mode == "no-builder":
        monkeypatch.setattr(inflate, "index_builder_name", lambda: None)
    arr = np.round(RNG.standard_normal(400_000), 3)
    path = corrupt_archive(tmp_path, "deflated", arr)
    for chunks in (-1, 50_000, 33_331):
        z = npystore.open_npz(str(path), chunks=chunks)
        with pytest.raises(FormatError, match=CRC_MESSAGE):
            z["a"].compute()
    z = npystore.open_npz(str(path))
    if mode == "indexed":
        with pytest.raises(FormatError, match=CRC_MESSAGE):
            z.build_index("a")
    np.testing.assert_array_equal(z["a"][:1000].compute(), arr[:1000])  # head: no index


def test_member_with_trailing_bytes(tmp_path: Path) -> None:
    """Bytes after the array data (never part of an array read): a few KiB are read to
    finish the check, for stored and deflated members."""
    arr = np.arange(3000, dtype="<i2")
    blob = io.BytesIO()
    np.save(blob, arr)
    payload = blob.getvalue() + b"\x00trailing" * 100
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        path = tmp_path / f"t{method}.npz"
        with zipfile.ZipFile(path, "w", compression=method) as zf:
            zf.writestr("a.npy", payload)
        z = npystore.open_npz(str(path), chunks=700)
        np.testing.assert_array_equal(z["a"].compute(), arr)  # a good CRC passes
        flip_crc(path, "a.npy")
        z = npystore.open_npz(str(path), chunks=700)
        with pytest.raises(FormatError, match=CRC_MESSAGE):
            z["a"].compute()


def test_empty_array_and_non_npy_members(tmp_path: Path) -> None:
    blob = io.BytesIO()
    np.save(blob, np.zeros((0, 3)))
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        path = tmp_path / f"e_{method}.npz"
        with zipfile.ZipFile(path, "w", compression=method) as zf:
            zf.writestr("e.npy", blob.getvalue())
            zf.writestr("blob.bin", b"not an npy file " * 20)
        flip_crc(path, "e.npy")
        flip_crc(path, "blob.bin")
        assert_numpy_refuses(path, "e")
        assert_numpy_refuses(path, "blob.bin")
        z = npystore.open_npz(str(path))
        with pytest.raises(FormatError, match=CRC_MESSAGE):
            z["e"].compute()
        with pytest.raises(FormatError, match=CRC_MESSAGE):
            z["blob.bin"]


def test_pickled_stored_member(tmp_path: Path) -> None:
    path = tmp_path / "p.npz"
    np.savez(path, o=np.array([{"a": 1}, None], dtype=object))
    flip_crc(path, "o.npy")
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        npystore.open_npz(str(path), allow_pickle=True)["o"].compute()


def test_a_checked_member_is_not_summed_again(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    arr = np.arange(10_000.0)
    np.savez(path, a=arr)
    z = npystore.open_npz(str(path), chunks=999)
    ledger = z.array("a").layout.storage.crc
    assert ledger is not None
    assert ledger.state == "tracking"
    np.testing.assert_array_equal(z["a"].compute(), arr)
    assert ledger.state == "verified"
    assert pickle.loads(pickle.dumps(ledger)).state == "verified"
    # the dask name does not depend on the ledger
    assert npystore.open_npz(str(path), chunks=999)["a"].name == z["a"].name


# -------------------------------------------------------------------- the other readers


@pytest.mark.parametrize("method", METHODS)
def test_zarr_store_and_xarray(tmp_path: Path, method: str) -> None:
    arr = np.arange(60_000.0).reshape(600, 100)
    path = corrupt_archive(tmp_path, method, arr)
    group = zarr.open_group(npystore.open_store(str(path)), mode="r")
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        group["a"][...]
    ds = xr.open_dataset(path, engine="npystore")
    np.testing.assert_array_equal(ds["a"][:10].values, arr[:10])  # a part cannot know
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        _ = ds["a"].values
    with pytest.raises(FormatError, match=CRC_MESSAGE):
        _ = xr.open_dataset(path, engine="npystore", chunks={})["a"].values


@pytest.mark.parametrize("method", METHODS)
def test_convert_fails_and_stays_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], method: str
) -> None:
    path = corrupt_archive(tmp_path, method, np.arange(50_000.0))
    out = tmp_path / "o.zarr"
    argv = ["convert", str(path), str(out), "--chunks", "1000", "--no-progress"]
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "c.npz:a.npy" in err
    assert "ZIP directory says" in err
    # a rerun does not write the missing chunks of the corrupt member
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "ZIP directory says" in err
    assert "earlier run" in err
    assert cli.main([*argv, "--overwrite"]) != 0  # reads it again, and fails again
    assert "ZIP directory says" in capsys.readouterr().err


def test_convert_checks_a_member_read_across_a_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stored member read partly by an interrupted run and partly by the resumed one is
    still checked: the CRC-32s of the ranges read are kept in the manifest."""
    path = corrupt_archive(tmp_path, "stored", np.arange(30_000.0))
    out = tmp_path / "o.zarr"
    env = dict(os.environ, **{convert.STOP_AFTER_ENV: "5"})
    done = subprocess.run(
        [sys.executable, "-m", "npystore", "convert", str(path), str(out), "--chunks", "100",
         "--workers", "1", "--checkpoint-interval", "0"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    manifest = json.loads((out / convert.MANIFEST_KEY).read_text())
    assert manifest["crc"]["a"]["spans"]  # what the first run read
    code = cli.main(["convert", str(path), str(out), "--chunks", "100", "--no-progress"])
    assert code != 0
    assert "ZIP directory says" in capsys.readouterr().err


def test_convert_of_a_good_archive_records_the_check(tmp_path: Path) -> None:
    path = tmp_path / "good.npz"
    np.savez(path, a=np.arange(5000.0))
    out = tmp_path / "o.zarr"
    convert.convert(str(path), str(out), chunks=(100,))
    manifest = json.loads((out / convert.MANIFEST_KEY).read_text())
    assert manifest["crc"] == {"a": {"verified": True}}
    np.testing.assert_array_equal(zarr.open_group(out, mode="r")["a"][...], np.arange(5000.0))


@pytest.mark.parametrize("method", METHODS)
def test_npz_files_read_to_the_end(tmp_path: Path, method: str) -> None:
    path = corrupt_archive(tmp_path, method, np.arange(40_000.0))
    for cache in ("none", None):
        opts = {"npz": {"default_cache_type": cache, "skip_instance_cache": True}}
        with fsspec.open(f"npz://a.npy::{path}", **opts) as f:
            assert len(f.read(64)) == 64  # a part is not checked
            with pytest.raises(FormatError, match=CRC_MESSAGE):
                f.read()
    with fsspec.open(f"npz://ok.npy::{path}", npz={"skip_instance_cache": True}) as f:
        np.testing.assert_array_equal(np.load(f), np.arange(7))


# -------------------------------------------------------------------- the ledger itself


def test_crc32_combine_equals_zlib() -> None:
    data = RNG.integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    for cut in (0, 1, 7, 4096, 65_537, 99_999, 100_000):
        a, b = data[:cut], data[cut:]
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(data)


def _ledger(data: bytes, head: int = 0, expected: int | None = None) -> CrcLedger:
    crc = zlib.crc32(data) if expected is None else expected
    return CrcLedger(
        "mem:m.npy", 1000, len(data), crc, head, zlib.crc32(data[:head]), len(data) - head
    )


def test_ledger_any_order_overlaps_and_threads() -> None:
    data = RNG.integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    cuts = sorted({0, len(data), *(int(x) for x in RNG.integers(100, len(data), 60))})
    pieces = list(itertools.pairwise(cuts))
    RNG.shuffle(pieces)
    ledger = _ledger(data, head=100)
    for a, b in pieces[:-1]:
        lo = max(100, a - 50)  # overlapping what neighbours recorded
        ledger.record(1000 + lo, data[lo:b])
        assert ledger.state == "tracking"
    a, b = pieces[-1]
    ledger.record(1000 + a, data[a:b])
    assert ledger.state == "verified"

    bad = _ledger(data, head=100, expected=zlib.crc32(data) ^ 1)
    errors: list[BaseException] = []

    def read(k: int) -> None:
        for a, b in pieces[k::4]:
            try:
                bad.record(1000 + a, data[a:b])
            except FormatError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 1
    assert "mem:m.npy: CRC-32 of the member's data" in str(errors[0])


def test_ledger_export_restore_and_limits() -> None:
    data = bytes(range(256)) * 100
    first = _ledger(data, head=10)
    first.record(1000 + 10, data[10:9000])
    state = first.export()
    assert state is not None
    second = _ledger(data, head=10)
    second.restore(json.loads(json.dumps(state)), where="manifest")
    second.record(1000 + 9000, data[9000:])
    assert second.state == "verified"
    with pytest.raises(FormatError, match="manifest: CRC span"):
        _ledger(data).restore({"spans": [[0, 5, 1]]}, where="manifest")
    # reads scattered over more than MAX_SPANS ranges stop the bookkeeping
    wide = bytes(4 * (MAX_SPANS + 2))
    scattered = _ledger(wide)
    for i in range(MAX_SPANS + 2):
        scattered.record(1000 + 4 * i, b"\0\0")
    assert scattered.state == "abandoned"
    assert scattered.export() is None
    # more trailing bytes than TAIL_READ: never checked
    assert CrcLedger("m", 0, TAIL_READ + 10, 0, 0, 0, 5).state == "abandoned"
