"""The persisted deflate index: a second process slices an unchanged member without an
index pass; the cache directory is found, bounded, optional, and never fatal."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore
from npystore.errors import FormatError
from npystore.fetch import cache
from npystore.files.zip import deflated_member
from npystore.formats.deflate import Checkpoint, DeflateIndex
from npystore.read import index, inflate, memo

pytest.importorskip("indexed_gzip")


def _archive(tmp_path: Path, n: int = 1_500_000) -> tuple[Path, np.ndarray[Any, Any], int]:
    a = np.round(np.random.default_rng(9).standard_normal(n) * 4).astype("<f8")
    path = tmp_path / "big.npz"
    np.savez_compressed(path, a=a)
    return path, a, zipfile.ZipFile(path).getinfo("a.npy").compress_size


def test_the_cache_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.resolve_cache_dir(None) == str(tmp_path / "xdg" / "npystore" / "deflate-index")
    assert cache.resolve_cache_dir(True) == cache.resolve_cache_dir(None)
    assert cache.resolve_cache_dir(False) is None
    assert cache.resolve_cache_dir(tmp_path / "mine") == str(tmp_path / "mine")
    for off in ("off", "0", ""):
        monkeypatch.setenv(cache.CACHE_ENV, off)
        assert cache.resolve_cache_dir(None) is None
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "env"))
    assert cache.resolve_cache_dir(None) == str(tmp_path / "env")
    assert npystore.open_npz(str(_archive(tmp_path, 1000)[0])).archive.index_cache == str(
        tmp_path / "env"
    )


def _slice_in_another_process(url: str, options: dict[str, Any], cache_dir: Path) -> None:
    code = (
        "import json, sys, npystore\n"
        "import npystore.read.index as index, npystore.read.inflate as inflate\n"
        f"inflate.SMALL_MEMBER = {inflate.SMALL_MEMBER}  # as in the parent: this member is large\n"
        "index.INDEX_SPACING = 2**20  # checkpoints every MiB of output\n"
        "url, options = sys.argv[1], json.loads(sys.argv[2])\n"
        "z = npystore.open_npz(url, storage_options=options)\n"
        "print(float(z['a'][-5:].compute().sum()))\n"
    )
    env = dict(os.environ, NPYSTORE_INDEX_CACHE=str(cache_dir))
    subprocess.run(
        [sys.executable, "-c", code, url, json.dumps(options)], check=True, env=env, timeout=120
    )


def test_a_second_process_slices_without_an_index_pass(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inflate, "SMALL_MEMBER", 64 * 2**10)  # index it (not 8 MiB) here
    path, a, csize = _archive(tmp_path)
    url = s3.put_file(path, "big.npz")
    cache_dir = tmp_path / "shared-cache"
    _slice_in_another_process(url, s3.storage_options, cache_dir)  # builds and keeps it
    assert len(list(cache_dir.glob("*.dflidx"))) == 1
    monkeypatch.setenv(cache.CACHE_ENV, str(cache_dir))
    memo.forget()
    z = npystore.open_npz(url, storage_options=s3.storage_options)
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z["a"][-5:].compute(), a[-5:])
        np.testing.assert_array_equal(z["a"][700_000:700_010].compute(), a[700_000:700_010])
    assert m.bytes < csize / 3, (m.bytes, csize)  # two checkpoint ranges, no index pass
    # off: the same slices pay the index pass
    memo.forget()
    z = npystore.open_npz(url, storage_options=s3.storage_options, index_cache=False)
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z["a"][-5:].compute(), a[-5:])
    assert m.bytes >= csize


def test_a_changed_object_does_not_use_the_old_index(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inflate, "SMALL_MEMBER", 64 * 2**10)
    path, a, _ = _archive(tmp_path)
    url = s3.put_file(path, "big.npz")
    cache_dir = tmp_path / "c"
    monkeypatch.setenv(cache.CACHE_ENV, str(cache_dir))
    npystore.open_npz(url, storage_options=s3.storage_options)["a"][-5:].compute()
    b = a[::-1].copy()
    np.savez_compressed(path, a=b)
    s3.put_file(path, "big.npz")
    memo.forget()
    z = npystore.open_npz(url, storage_options=s3.storage_options)
    np.testing.assert_array_equal(z["a"][-5:].compute(), b[-5:])
    assert len(list(cache_dir.glob("*.dflidx"))) == 2  # one per identity


def test_the_directory_is_bounded(tmp_path: Path) -> None:
    d = tmp_path / "bounded"
    for i in range(6):
        cache.write_cache_file(str(d), str(i), bytes(1000), budget=3500)
        os.utime(d / cache.entry_name(str(i)), (i, i))  # i = how recently it was used
    cache.write_cache_file(str(d), "new", bytes(1000), budget=3500)
    kept = sorted(p.name for p in d.glob("*.dflidx"))
    assert kept == sorted(cache.entry_name(k) for k in ("4", "5", "new"))


def test_an_unwritable_cache_costs_only_its_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, a, _ = _archive(tmp_path, 300_000)
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"x")
    monkeypatch.setattr(inflate, "SMALL_MEMBER", 1024)
    z = npystore.open_npz(str(path), index_cache=str(blocker / "sub"))
    np.testing.assert_array_equal(z["a"][-5:].compute(), a[-5:])
    assert not (blocker.parent / "sub").exists()


# -- the cache directory as an attacker or an accident leaves it (issue 24, items 10-12) ----


def _indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any, Path, str]:
    """An archive whose member is indexed (its entry written to a fresh cache directory):
    (archive, values, cache directory, entry file name)."""
    _small_spacing(monkeypatch)
    path, a, _ = _archive(tmp_path, SMALL)
    cache_dir = tmp_path / "cache"
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    z.build_index("a")
    key = index.index_cache_key(z.archive.reader, _member(z))
    assert key is not None
    return path, a, cache_dir, cache.entry_name(key)


#: Elements of the archives below (2.4 MB, indexed every 256 KiB: nine checkpoints).
SMALL = 300_000


def _small_spacing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflate, "SMALL_MEMBER", 16 * 2**10)
    monkeypatch.setattr(index, "INDEX_SPACING", 256 * 2**10)


def _member(z: Any) -> Any:
    return deflated_member(z.archive.info("a.npy"))


def _slices(path: Path, cache_dir: Path, a: np.ndarray[Any, Any]) -> None:
    """Slices at every checkpoint of a new open equal numpy's."""
    memo.forget()
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    for start in (5, len(a) // 3, 2 * len(a) // 3, len(a) - 7):
        np.testing.assert_array_equal(z["a"][start : start + 5].compute(), a[start : start + 5])


def test_a_planted_link_at_the_temporary_name_is_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 10: the temporary name of a write was ``entry.<pid>.<thread>.tmp``, opened
    without O_EXCL: a symbolic link planted there had its target overwritten."""
    _small_spacing(monkeypatch)
    path, a, _ = _archive(tmp_path, SMALL)
    cache_dir = tmp_path / "cache"
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    key = index.index_cache_key(z.archive.reader, _member(z))
    assert key is not None
    entry = cache_dir / cache.entry_name(key)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    cache_dir.mkdir(mode=0o700)
    old_name = f"{entry}.{os.getpid()}.{threading.get_ident()}.tmp"
    os.symlink(victim, old_name)
    os.symlink(victim, entry)  # and at the entry's own name
    z.build_index("a")
    assert victim.read_bytes() == b"precious"
    assert entry.is_file()
    assert not entry.is_symlink()
    _slices(path, cache_dir, a)


def test_the_cache_directory_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Item 10: made with mode 0700; a directory that is a symbolic link, or writable by
    others, is not used (nothing read or written there, one warning)."""
    cache.write_cache_file(str(tmp_path / "made" / "here"), "k", b"data")
    assert stat.S_IMODE((tmp_path / "made" / "here").stat().st_mode) == 0o700
    assert cache.read_cache_file(str(tmp_path / "made" / "here"), "k", max_bytes=10) == b"data"
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, tmp_path / "link")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="npystore.fetch.cache"):
        for refused in (tmp_path / "link", shared):
            cache.write_cache_file(str(refused), "k", b"data")
            assert cache.read_cache_file(str(refused), "k", max_bytes=10) is None
    assert list(real.iterdir()) == []
    assert list(shared.iterdir()) == []
    assert "link" in caplog.text
    assert "writable by group or others" in caplog.text
    if os.geteuid() == 0:  # a directory of another user (only root can make one here)
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 12345, 12345)
        cache.write_cache_file(str(other), "k", b"data")
        assert list(other.iterdir()) == []


def test_an_entry_that_is_a_fifo_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 11: a FIFO at an entry's name hung the read forever; now it is removed (and the
    index rebuilt) without opening it for a blocking read."""
    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    (cache_dir / name).unlink()
    os.mkfifo(cache_dir / name)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(_slices(path, cache_dir, a)))
    thread.start()
    thread.join(60)
    if thread.is_alive():  # unblock it (a writer opens the FIFO), then fail
        os.close(os.open(cache_dir / name, os.O_WRONLY | os.O_NONBLOCK))
        thread.join()
        pytest.fail("reading a FIFO entry blocked")
    assert result == [None]
    assert (cache_dir / name).is_file()  # rebuilt


def test_an_entry_that_links_elsewhere_is_removed_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 11: an entry that is a symbolic link (to /dev/zero it ended in MemoryError; to
    a file, that file's mtime was changed) is removed without following it."""
    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    target = tmp_path / "target"
    target.write_bytes((cache_dir / name).read_bytes())
    os.utime(target, (1, 1))
    (cache_dir / name).unlink()
    os.symlink(target, cache_dir / name)
    _slices(path, cache_dir, a)
    assert target.stat().st_mtime == 1
    assert not (cache_dir / name).is_symlink()
    os.unlink(cache_dir / name)
    os.symlink("/dev/zero", cache_dir / name)
    _slices(path, cache_dir, a)
    assert not (cache_dir / name).is_symlink()


def test_an_oversized_entry_is_removed_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 11: a 100 MB entry took 31 s to read and was kept; an entry larger than any
    index of the member can be is removed without reading it."""
    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    with open(cache_dir / name, "r+b") as f:
        f.truncate(100 * 2**20)  # sparse
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    assert index.max_index_bytes(_member(z)) < 100 * 2**20
    assert index.load_cached_index(z.archive.reader, _member(z), str(cache_dir)) is None
    assert not (cache_dir / name).exists()  # removed (it was read, and kept)
    _slices(path, cache_dir, a)
    assert (cache_dir / name).stat().st_size < index.max_index_bytes(_member(z))


def _entry_payload(cache_dir: Path, name: str) -> bytes:
    data = (cache_dir / name).read_bytes()
    return data[cache._HEAD.size : -32]


def _forge(cache_dir: Path, name: str, key: str, payload: bytes) -> None:
    """Write ``payload`` as a well-formed entry for ``key`` (a correct checksum: what only
    someone writing as this user can do)."""
    (cache_dir / name).unlink()
    cache.write_cache_file(str(cache_dir), key, payload)


def _damaged_window(payload: bytes) -> bytes:
    """The index with the window of its second checkpoint overwritten."""
    idx = DeflateIndex.from_bytes(payload)
    assert len(idx.checkpoints) >= 3
    cps = list(idx.checkpoints)
    cp = cps[1]
    cps[1] = Checkpoint(cp.bit_offset, cp.out_offset, bytes(reversed(cp.window)))
    return DeflateIndex(idx.compressed_size, idx.uncompressed_size, tuple(cps)).to_bytes()


def test_a_damaged_entry_is_dropped_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 12: entries carried no checksum: a changed window gave wrong slices, in every
    later process. Now its checksum fails: removed, rebuilt, the slices right."""
    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    entry = cache_dir / name
    raw = bytearray(entry.read_bytes())
    payload = _entry_payload(cache_dir, name)
    damaged = _damaged_window(payload)
    assert len(damaged) == len(payload)
    start = raw.index(payload)
    raw[start : start + len(payload)] = damaged
    entry.write_bytes(bytes(raw))
    _slices(path, cache_dir, a)
    assert _entry_payload(cache_dir, name) == payload  # rewritten as built


def test_a_foreign_entry_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 12: the entry of another archive (member of the same sizes) under this
    member's name was used: wrong slices or a false FormatError. Its key says whose it is."""
    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    b = a.copy()
    b[: SMALL // 2] = np.roll(b[: SMALL // 2], 1)  # the same values in another order: other windows
    other = other_dir / "big.npz"
    np.savez_compressed(other, a=b)
    z = npystore.open_npz(str(other), index_cache=str(other_dir / "cache"))
    assert _member(z).compressed_size != 0
    z.build_index("a")
    key = index.index_cache_key(z.archive.reader, _member(z))
    assert key is not None
    foreign = (other_dir / "cache" / cache.entry_name(key)).read_bytes()
    (cache_dir / name).write_bytes(foreign)
    memo.forget()
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    assert index.load_cached_index(z.archive.reader, _member(z), str(cache_dir)) is None
    assert not (cache_dir / name).exists()
    _slices(path, cache_dir, a)


def test_a_forged_entry_cannot_blame_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 12: a well-formed entry whose checkpoints do not resume the stream (offsets
    moved by some bits) made every slice a FormatError blaming a valid archive, in every
    later process. Now a failed resume removes the entry and rebuilds the index."""
    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    key = index.index_cache_key(z.archive.reader, _member(z))
    assert key is not None
    payload = _entry_payload(cache_dir, name)
    idx = DeflateIndex.from_bytes(payload)
    moved = tuple(
        Checkpoint(cp.bit_offset + 3 * (i > 0), cp.out_offset, cp.window)
        for i, cp in enumerate(idx.checkpoints)
    )
    _forge(
        cache_dir,
        name,
        key,
        DeflateIndex(idx.compressed_size, idx.uncompressed_size, moved).to_bytes(),
    )
    _slices(path, cache_dir, a)
    assert _entry_payload(cache_dir, name) == payload  # rebuilt
    # a checkpoint at the member's end (none is made there), a window longer than the
    # output before its checkpoint: refused when loaded
    last = idx.checkpoints[-1]
    for bad in (
        Checkpoint(8 * idx.compressed_size, idx.uncompressed_size, last.window),
        Checkpoint(last.bit_offset, 100, last.window),
    ):
        cps = (*idx.checkpoints[:-1], bad) if bad.out_offset > 100 else (idx.checkpoints[0], bad)
        forged = DeflateIndex(idx.compressed_size, idx.uncompressed_size, cps).to_bytes()
        _forge(cache_dir, name, key, forged)
        assert index.load_cached_index(z.archive.reader, _member(z), str(cache_dir)) is None
        assert not (cache_dir / name).exists()
        cache.write_cache_file(str(cache_dir), key, payload)


def test_a_forged_window_is_caught_when_the_member_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 12: a well-formed entry with a wrong window (a correct checksum: written as
    this user) gives wrong bytes from that checkpoint, which a slice cannot know. A read of
    the whole member through it (a chunked compute) compares its output with the member's
    CRC-32: FormatError naming the entry (not the archive), the entry rebuilt, and the next
    compute right."""
    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    key = index.index_cache_key(z.archive.reader, _member(z))
    assert key is not None
    payload = _entry_payload(cache_dir, name)
    _forge(cache_dir, name, key, _damaged_window(payload))
    memo.forget()
    z = npystore.open_npz(str(path), index_cache=str(cache_dir), chunks=SMALL // 8)
    with pytest.raises(FormatError, match=r"index cache.*entry was wrong"):
        z["a"].compute()
    assert _entry_payload(cache_dir, name) == payload  # rebuilt
    np.testing.assert_array_equal(
        npystore.open_npz(str(path), index_cache=str(cache_dir), chunks=SMALL // 8)["a"].compute(),
        a,
    )


def test_npz_files_resume_from_a_forged_entry_without_blaming_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 12, through ``npz://`` file objects: a read resumed from a checkpoint of a
    forged entry that fails rebuilds the index and reads again."""
    from npystore.faces.npzfs import NpzFileSystem

    path, a, cache_dir, name = _indexed(tmp_path, monkeypatch)
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    key = index.index_cache_key(z.archive.reader, _member(z))
    assert key is not None
    payload = _entry_payload(cache_dir, name)
    idx = DeflateIndex.from_bytes(payload)
    moved = tuple(
        Checkpoint(cp.bit_offset + 3 * (i > 0), cp.out_offset, cp.window)
        for i, cp in enumerate(idx.checkpoints)
    )
    forged = DeflateIndex(idx.compressed_size, idx.uncompressed_size, moved).to_bytes()
    _forge(cache_dir, name, key, forged)
    memo.forget()
    raw = a.tobytes()
    fs = NpzFileSystem(str(path), index_cache=str(cache_dir), skip_instance_cache=True)
    with fs.open("a.npy", cache_type="none") as f:
        at = 128 + 2 * len(raw) // 3
        f.seek(at)
        assert f.read(4000) == raw[at - 128 : at - 128 + 4000]
        assert f.inflater.resumed_at > 0  # from a checkpoint of the rebuilt index
    assert _entry_payload(cache_dir, name) == payload


def test_the_record_of_checked_blocks_is_an_entry_like_any_other(
    tmp_path: Path, inflated_pieces: list[int]
) -> None:
    """The record of which pieces of a block-indexed member passed their check (beside its
    checkpoint index) is keyed, checksummed and bounded like an index: a later open trusts
    it, a damaged one is removed and the pieces checked again."""
    from npystore.formats import zblock
    from npystore.read.blockchain import BlockChain

    if not zblock.available():
        pytest.skip("zlib cannot be loaded")
    a = np.arange(1_000_000, dtype="<i8") % 9973  # 8 MB: 8 blocks
    path = tmp_path / "w.npz"
    npystore.savez_compressed(str(path), a=a)
    cache_dir = tmp_path / "cache"
    checks = inflated_pieces

    def chain_of_a_new_open() -> tuple[int, Any]:
        checks.clear()
        memo.forget()
        z = npystore.open_npz(str(path), index_cache=str(cache_dir), chunks=(100_000,))
        blocks = z.archive.entries["a.npy"].blocks
        assert blocks is not None
        np.testing.assert_array_equal(z["a"][-3:].compute(), a[-3:])
        slot = z.archive.index_slot("a.npy")
        assert slot is not None
        count = len(blocks.usizes)
        return count, slot.block_chain(lambda checked: BlockChain(count, checked))

    count, chain = chain_of_a_new_open()  # checks every piece, records them
    assert chain.checked == count
    assert len(checks) >= count
    (entry,) = cache_dir.glob("*.dflidx")
    assert entry.read_bytes().startswith(cache.ENTRY_MAGIC)
    count, chain = chain_of_a_new_open()
    assert chain.checked == count
    # every piece known from the record: none before the slice inflated; the slice's own
    # (the last) by the checker when that is the fastest inflater (zlib-ng), else ISA-L
    from npystore.read import blocks as read_blocks

    assert len(checks) == (1 if read_blocks._check_is_fast() else 0)
    raw = bytearray(entry.read_bytes())
    raw[-40] ^= 1
    entry.write_bytes(bytes(raw))
    z = npystore.open_npz(str(path), index_cache=str(cache_dir))
    key = index.index_cache_key(z.archive.reader, _member(z))
    assert key is not None
    assert cache.read_cache_file(str(cache_dir), f"blocks:{key}", max_bytes=10**6) is None
    assert not entry.exists()  # removed: the next read checks the pieces again
