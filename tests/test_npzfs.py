"""``npz://``: archive members as fsspec files (issue 8), checked against zipfile's bytes."""

from __future__ import annotations

import importlib.metadata
import io
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.registry import known_implementations

from npystore.errors import FormatError
from npystore.faces.npzfs import (
    DeflatedMemberFile,
    NpzFileSystem,
    StoredMemberFile,
    register_protocol,
)
from npystore.read.inflate import index_builder_name

RNG = np.random.default_rng(8)

# offsets and lengths read after a seek: forwards, backwards, past the end, empty
SEEKS = [(0, 10), (1000, 777), (10, 5), (5000, 3000), (200, 1), (-20, 100), (3, 0), (10**9, 5)]


def _arrays() -> dict[str, np.ndarray]:
    return {
        "a": np.round(RNG.standard_normal((300, 200)), 2),
        "b": np.arange(10, dtype=">i4"),
        "f": np.asfortranarray(np.arange(24.0).reshape(4, 6)),
        "e": np.zeros((0, 3)),
    }


def _archive(path: Path, compress: bool) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        for key, arr in _arrays().items():
            buf = io.BytesIO()
            np.save(buf, arr)
            zf.writestr(f"{key}.npy", buf.getvalue(), compress_type=method)
        zf.writestr("notes.txt", b"line one\nline two\n" * 50, compress_type=method)
        zf.writestr("sub/c.npy", _npy_bytes(np.arange(7)), compress_type=method)
    return path


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _seek_reads(f: Any, data: bytes) -> None:
    for offset, length in SEEKS:
        pos = offset if offset >= 0 else max(0, len(data) + offset)
        f.seek(offset, 0 if offset >= 0 else 2)
        assert f.tell() == pos
        assert f.read(length) == data[pos : pos + length], (offset, length)
        assert f.tell() == min(len(data), pos + length) or pos > len(data)


@pytest.mark.parametrize("compress", [False, True], ids=["stored", "deflated"])
def test_members_read_whole_and_by_seek_equal_zipfile(tmp_path: Path, compress: bool) -> None:
    path = _archive(tmp_path / "m.npz", compress)
    kind = DeflatedMemberFile if compress else StoredMemberFile
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            data = zf.read(name)
            with fsspec.open(f"npz://{name}::{path}") as f:
                assert isinstance(f, kind)
                assert f.size == len(data)
                assert f.read() == data
                _seek_reads(f, data)
            with fsspec.open(f"npz://{name}::{path}") as f:
                parts = []
                while part := f.read(333):  # small sequential reads, as numpy.load makes
                    parts.append(part)
                assert b"".join(parts) == data


@pytest.mark.parametrize("compress", [False, True], ids=["stored", "deflated"])
def test_numpy_load_through_fsspec_open(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "n.npz"
    arrays = _arrays()
    (np.savez_compressed if compress else np.savez)(path, **arrays)
    for key, arr in arrays.items():
        with fsspec.open(f"npz://{key}.npy::{path}") as f:
            got = np.load(f)
        np.testing.assert_array_equal(got, arr)
        assert got.dtype == arr.dtype
        assert got.flags.f_contiguous == arr.flags.f_contiguous


def test_text_mode_and_readline(tmp_path: Path) -> None:
    path = _archive(tmp_path / "t.npz", compress=True)
    with fsspec.open(f"npz://notes.txt::{path}", "rt") as f:
        lines = f.readlines()
    assert lines == ["line one\n", "line two\n"] * 50


def test_deflated_member_streams_restarts_and_uses_an_index(tmp_path: Path) -> None:
    """A member larger than the first compressed pieces: forward reads continue one
    inflate pass, a backwards seek restarts it, and after build_index a seek restarts at
    the nearest checkpoint rather than at the start."""
    x = np.cumsum(RNG.standard_normal(2_500_000)).astype("<f4")  # 10 MB, about 9 MB deflated
    path = tmp_path / "big.npz"
    np.savez_compressed(path, x=x)
    data = zipfile.ZipFile(path).read("x.npy")
    fs = NpzFileSystem(str(path), skip_instance_cache=True)
    with fs.open("x.npy", cache_type="none") as f:
        assert f.read(1000) == data[:1000]
        f.seek(4_000_000)
        assert f.read(5000) == data[4_000_000:4_005_000]
        assert f.inflater.restarts == 1  # forwards: still the first pass
        f.seek(500)
        assert f.read(100) == data[500:600]
        assert f.inflater.restarts == 2  # backwards: a new pass from the start
    if index_builder_name() is None:
        pytest.skip("no deflate index builder installed")
    fs.build_index("x.npy")
    with fs.open("x.npy", cache_type="none") as f:
        f.seek(9_000_000)
        assert f.read(4000) == data[9_000_000:9_004_000]
        assert f.inflater.restarts == 2  # the initial point, then a checkpoint before 9 MB
        assert 4_000_000 < f.inflater.resumed_at <= 9_000_000
        f.seek(10)
        assert f.read(10) == data[10:20]
    # an index cache written by build_index serves a fresh filesystem
    cache = tmp_path / "idx"
    NpzFileSystem(str(path), index_cache=str(cache), skip_instance_cache=True).build_index()
    assert list(cache.iterdir())
    fresh = NpzFileSystem(str(path), index_cache=str(cache), skip_instance_cache=True)
    with fresh.open("x.npy", cache_type="none") as f:
        f.seek(-8, 2)
        assert f.read() == data[-8:]
        assert f.inflater.resumed_at > 4_000_000  # at a checkpoint of the cached index


def test_a_whole_pass_checks_the_crc(tmp_path: Path) -> None:
    path = tmp_path / "crc.npz"
    np.savez_compressed(path, x=np.arange(1000))
    raw = bytearray(path.read_bytes())
    cd = raw.rindex(b"PK\x01\x02")  # the central directory entry of the one member
    (crc,) = struct.unpack_from("<I", raw, cd + 16)
    struct.pack_into("<I", raw, cd + 16, crc ^ 1)
    path.write_bytes(bytes(raw))
    with fsspec.open(f"npz://x.npy::{path}", npz={"default_cache_type": "none"}) as f:
        assert len(f.read(100)) == 100  # a part is not checked
        with pytest.raises(FormatError, match=r"CRC-32 .* ZIP directory says"):
            f.read()
    with fsspec.open(f"npz://x.npy::{path}") as f, pytest.raises(FormatError, match="CRC-32"):
        f.read(100)  # the read-ahead reaches the end of this small member


def test_a_corrupt_stream_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.npz"
    np.savez_compressed(path, x=np.round(RNG.standard_normal(20_000), 1))
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 64] = bytes(64)  # zeros in the middle of the compressed data
    path.write_bytes(bytes(raw))
    with fsspec.open(f"npz://x.npy::{path}") as f, pytest.raises(FormatError, match=r"x\.npy"):
        f.read()


def test_ls_info_find_and_missing_members(tmp_path: Path) -> None:
    path = _archive(tmp_path / "l.npz", compress=True)
    fs = fsspec.filesystem("npz", fo=str(path))
    assert isinstance(fs, NpzFileSystem)
    assert fs.ls("", detail=False) == ["a.npy", "b.npy", "e.npy", "f.npy", "notes.txt", "sub"]
    assert fs.ls("sub", detail=False) == ["sub/c.npy"]
    assert fs.find("") == ["a.npy", "b.npy", "e.npy", "f.npy", "notes.txt", "sub/c.npy"]
    with zipfile.ZipFile(path) as zf:
        for zi in zf.infolist():
            info = fs.info(zi.filename)
            assert info["type"] == "file"
            assert info["size"] == zi.file_size
            assert info["compressed_size"] == zi.compress_size
            assert info["compression"] == "deflate"
            assert info["crc32"] == zi.CRC
            assert fs.cat(zi.filename) == zf.read(zi.filename)
    assert fs.info("sub")["type"] == "directory"
    assert fs.isdir("sub")
    assert fs.exists("a.npy")
    assert not fs.exists("a")
    with pytest.raises(FileNotFoundError, match=r"no member 'a'.*did you mean 'a\.npy'"):
        fs.open("a")
    with pytest.raises(FileNotFoundError):
        fs.info("zzz.npy")
    with pytest.raises(FileNotFoundError, match="zzz"):
        fsspec.open(f"npz://zzz.npy::{path}").open()
    with pytest.raises(IsADirectoryError, match="sub"):
        fs.open("sub")
    with pytest.raises(ValueError, match="read-only"):
        fs.open("a.npy", "wb")


def test_filesystem_pickles_and_is_cached_per_archive(tmp_path: Path) -> None:
    path = _archive(tmp_path / "p.npz", compress=False)
    fs = fsspec.filesystem("npz", fo=str(path))
    assert fsspec.filesystem("npz", fo=str(path)) is fs  # one directory read per archive
    again = pickle.loads(pickle.dumps(fs))
    assert again.cat("b.npy") == fs.cat("b.npy")


def test_bad_archives_and_arguments(tmp_path: Path) -> None:
    short = tmp_path / "short.npz"
    short.write_bytes(b"PK\x05\x06")
    with pytest.raises(FormatError, match="too short"):
        NpzFileSystem(str(short), skip_instance_cache=True)
    with pytest.raises(ValueError, match="needs the archive"):
        NpzFileSystem("", skip_instance_cache=True)
    with pytest.raises(TypeError, match="BytesIO"):
        NpzFileSystem(io.BytesIO(b""), skip_instance_cache=True)  # type: ignore[arg-type]
    path = _archive(tmp_path / "c.npz", compress=False)
    fs = NpzFileSystem(str(path), skip_instance_cache=True)
    with pytest.raises(ValueError, match="unknown cache_type 'nope'"):
        fs.open("a.npy", cache_type="nope")
    with fs.open("a.npy", cache_type="readahead", block_size=1000) as f:  # fsspec's own caches
        assert f.read() == zipfile.ZipFile(path).read("a.npy")


def test_registered_on_import_and_as_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    assert known_implementations["npz"]["class"] == "npystore.faces.npzfs.NpzFileSystem"
    assert fsspec.get_filesystem_class("npz") is NpzFileSystem
    points = importlib.metadata.entry_points(group="fsspec.specs")
    assert [p.value for p in points if p.name == "npz"] == ["npystore.faces.npzfs:NpzFileSystem"]
    # another package's npz:// is left alone
    monkeypatch.setitem(known_implementations, "npz", {"class": "other.Fs", "err": ""})
    register_protocol()
    assert known_implementations["npz"]["class"] == "other.Fs"
    monkeypatch.delitem(known_implementations, "npz")
    register_protocol()
    assert known_implementations["npz"]["class"] == "npystore.faces.npzfs.NpzFileSystem"
    # a process that never imports npystore gets npz:// from the entry point, and
    # `import npystore` itself imports no fsspec (it stays light)
    code = (
        "import sys\n"
        "import npystore\n"
        "assert 'fsspec' not in sys.modules, 'import npystore imported fsspec'\n"
        "from fsspec.registry import known_implementations as k\n"
        "print(k['npz']['class'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "npystore.faces.npzfs.NpzFileSystem"


# -- S3 ----------------------------------------------------------------------------------


def test_s3_chained_url_reads_only_the_bytes_asked_for(s3: Any, tmp_path: Path) -> None:
    """A stored member on S3: opening reads the archive's tail once and the member's local
    header; a read after a seek is one GET of exactly those bytes."""
    x = RNG.standard_normal((1000, 500))  # 4 MB member: its data is not in the tail
    path = tmp_path / "s.npz"
    np.savez(path, x=x, y=np.arange(100))
    url = s3.put_file(path, "s.npz")
    chained = f"npz://x.npy::{url}"
    with zipfile.ZipFile(path) as zf:
        data = zf.read("x.npy")
        data_offset = zf.getinfo("x.npy").header_offset + 30 + len("x.npy") + 20  # ZIP64 extra
    assert path.read_bytes()[data_offset : data_offset + 6] == b"\x93NUMPY"
    size = path.stat().st_size
    with s3.counter.measure() as opening:
        f = fsspec.open(chained, s3=s3.storage_options).open()
    # the object's identity (a HEAD, or a GET of its first bytes), the tail with the
    # directory, the member's local header; no byte of the member's data beyond that
    assert opening.requests == 3
    assert [r for r in opening.ranges if r[1] == size - 1] == [(size - 256 * 2**10, size - 1)]
    assert opening.bytes < 256 * 2**10 + 1000
    with s3.counter.measure() as m:
        f.seek(2_000_000)
        got = f.read(8000)
    assert got == data[2_000_000:2_008_000]
    assert m.gets == 1
    assert m.ranges == [(data_offset + 2_000_000, data_offset + 2_008_000 - 1)]
    assert m.bytes == 8000
    with s3.counter.measure() as m:
        f.seek(0)
        arr = np.load(f)
    np.testing.assert_array_equal(arr, x)
    assert m.bytes <= len(data) + 64 * 2**10
    f.close()
    # a second member of the same archive: the directory is not read again
    with s3.counter.measure() as m, fsspec.open(f"npz://y.npy::{url}", s3=s3.storage_options) as g:
        np.testing.assert_array_equal(np.load(g), np.arange(100))
    assert m.heads == 0
    assert all(start > 1000 for start, _ in m.ranges)  # no tail read: local header + data


def test_s3_deflated_member(s3: Any, tmp_path: Path) -> None:
    x = np.round(RNG.standard_normal((400, 300)), 3)
    path = tmp_path / "d.npz"
    np.savez_compressed(path, x=x)
    url = s3.put_file(path, "d.npz")
    data = zipfile.ZipFile(path).read("x.npy")
    with fsspec.open(f"npz://x.npy::{url}", s3=s3.storage_options) as f:
        assert f.read() == data
        _seek_reads(f, data)
        f.seek(0)
        np.testing.assert_array_equal(np.load(f), x)


def test_a_new_open_reads_the_archive_as_it_is_now(tmp_path: Path) -> None:
    """An archive rewritten between two ``fsspec.open`` calls: the second reads the new
    version (fsspec's instance cache used to hand back the first open's instance, pinned to
    the old version: a ConsistencyError on a fresh open). An instance kept open still
    refuses the new bytes."""
    import os

    from npystore.errors import ConsistencyError

    path = tmp_path / "a.npz"
    np.savez(path, x=np.arange(5))
    with fsspec.open(f"npz://x.npy::{path}") as f:
        np.testing.assert_array_equal(np.load(f), np.arange(5))
    kept = fsspec.filesystem("npz", fo=str(path))
    np.savez(path, x=np.arange(5) * 10)  # the same size, a new version
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with fsspec.open(f"npz://x.npy::{path}") as f:
        np.testing.assert_array_equal(np.load(f), np.arange(5) * 10)
    with pytest.raises(ConsistencyError, match="changed since it was opened"):
        kept.cat_file("x.npy")
