"""The persisted deflate index: a second process slices an unchanged member without an
index pass; the cache directory is found, bounded, optional, and never fatal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore
from npystore.fetch import cache
from npystore.read import inflate, memo

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
        cache.write_cache_file(str(d / f"{i}.dflidx"), bytes(1000), budget=3500)
        os.utime(d / f"{i}.dflidx", (i, i))  # i = how recently it was used
    cache.write_cache_file(str(d / "new.dflidx"), bytes(1000), budget=3500)
    kept = sorted(p.name for p in d.glob("*.dflidx"))
    assert kept == ["4.dflidx", "5.dflidx", "new.dflidx"]


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
