"""A deflated member's compressed bytes move once per process, whatever the chunking.

Counted through the local S3 server: a dask compute of a ``savez_compressed`` member in
``k`` chunks, inflated from the start per chunk (small members) or through a checkpoint
index built first (larger ones), moved up to 40x (64 chunks) and 2-3.7x the compressed
size before :mod:`npystore.read.memo`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest

import npystore
from npystore.read import index, inflate, memo


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    memo.forget()
    yield
    memo.forget()


def _member(s3: Any, tmp_path: Path, n: int = 700_000) -> tuple[str, np.ndarray[Any, Any], int]:
    a = np.round(np.random.default_rng(3).standard_normal(n) * 4).astype("<f8")
    path = tmp_path / "d.npz"
    np.savez_compressed(path, a=a)
    csize = zipfile.ZipFile(path).getinfo("a.npy").compress_size
    return s3.put_file(path, "d.npz"), a, csize


@pytest.mark.parametrize("indexed", [False, True], ids=["from-start", "indexed"])
@pytest.mark.parametrize("k", [1, 2, 5, 16, 64])
def test_dask_compute_moves_the_compressed_bytes_once(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int, indexed: bool
) -> None:
    if indexed:  # the member counts as large: an index pass, then chunks from checkpoints
        pytest.importorskip("indexed_gzip")
        monkeypatch.setattr(inflate, "SMALL_MEMBER", 16 * 2**10)
        monkeypatch.setattr(inflate, "HEAD_FRACTION", 10**9)
    url, a, csize = _member(s3, tmp_path)
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(-(-a.size // k),))
    x = z["a"]
    with s3.counter.measure() as m:
        got = x.compute()
    np.testing.assert_array_equal(got, a)
    assert m.bytes <= 1.2 * csize, (m.bytes / csize, m.gets)
    if indexed:
        inflate.wait_for_background()  # inflated whole for the compute, indexed after
        assert z.archive.index_slot("a.npy") is not None
        assert z.archive.index_slot("a.npy").get() is not None  # type: ignore[union-attr]


def test_load_of_a_member_and_slices_after_it(s3: Any, tmp_path: Path) -> None:
    url, a, csize = _member(s3, tmp_path)
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(100_000,))
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z.load("a"), a)
        np.testing.assert_array_equal(z["a"][650_000:].compute(), a[650_000:])
        np.testing.assert_array_equal(z["a"].compute(), a)
    assert m.bytes <= 1.2 * csize


def test_a_slice_near_the_start_fetches_only_its_prefix(s3: Any, tmp_path: Path) -> None:
    url, a, csize = _member(s3, tmp_path, 2_000_000)
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(100_000,))
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z["a"][:1000].compute(), a[:1000])
    assert m.bytes < csize / 4


def test_members_above_the_limit_are_not_kept(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memo, "MEMO_MEMBER", 1024)
    url, a, csize = _member(s3, tmp_path)
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(100_000,))
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z["a"].compute(), a)
    assert m.bytes > 2 * csize  # each chunk inflates from the start again: nothing kept
    assert not memo._registry


def test_the_kept_bytes_are_bounded(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, a, csize = _member(s3, tmp_path)
    monkeypatch.setattr(memo, "MEMO_BUDGET", csize + 1)
    arrays = {f"m{i}": a[i * 1000 :] for i in range(3)}
    path = tmp_path / "many.npz"
    np.savez_compressed(path, **arrays)
    many = s3.put_file(path, "many.npz")
    z = npystore.open_npz(many, storage_options=s3.storage_options)
    for key, want in arrays.items():
        np.testing.assert_array_equal(z[key].compute(), want)
    assert len(memo._registry) == 1  # the least recently used prefixes were dropped
    assert sum(p.buf.nbytes for p in memo._registry.values()) <= csize + 1


def test_a_changed_object_is_not_served_from_kept_bytes(s3: Any, tmp_path: Path) -> None:
    url, a, _ = _member(s3, tmp_path)
    np.testing.assert_array_equal(
        npystore.open_npz(url, storage_options=s3.storage_options)["a"].compute(), a
    )
    b = a[::-1].copy()
    np.savez_compressed(tmp_path / "d.npz", a=b)
    s3.put_file(tmp_path / "d.npz", "d.npz")
    np.testing.assert_array_equal(
        npystore.open_npz(url, storage_options=s3.storage_options)["a"].compute(), b
    )


# -- one pass for a first compute; read-ahead for a compute through a known index -----------


def _large(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test member counts as large: chunk reads need its index."""
    pytest.importorskip("indexed_gzip")
    monkeypatch.setattr(inflate, "SMALL_MEMBER", 16 * 2**10)
    monkeypatch.setattr(inflate, "HEAD_FRACTION", 10**9)


def test_a_first_compute_inflates_the_member_once(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No index yet: the first chunk read inflates the member whole (one pass, checked),
    the other chunks copy from it, the kept bytes go once every byte was read, and the
    index is built in the background for later processes."""
    _large(monkeypatch)
    passes: list[str] = []
    whole, build, resume = (
        inflate.inflate_into,
        inflate.build_index,
        inflate.deflate.inflate_from_into,
    )
    monkeypatch.setattr(inflate, "inflate_into", lambda *a: passes.append("whole") or whole(*a))
    monkeypatch.setattr(
        index, "build_index", lambda *a, **k: passes.append("index") or build(*a, **k)
    )
    monkeypatch.setattr(
        inflate.deflate,
        "inflate_from_into",
        lambda *a, **k: passes.append("resume") or resume(*a, **k),
    )
    url, a, csize = _member(s3, tmp_path)
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(50_000,))
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z["a"].compute(), a)
    inflate.wait_for_background()
    assert passes == ["whole", "index"]  # no chunk inflated from a checkpoint
    assert m.bytes <= 1.2 * csize
    slot = z.archive.index_slot("a.npy")
    assert slot is not None
    assert slot.get() is not None
    assert slot.inflated() is None  # every byte was read once: released


def test_a_chunk_that_waited_is_served_from_the_kept_member(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving the CI run hit: a chunk finds nothing kept, waits for the slot while
    another chunk inflates the whole member and the background thread indexes it; it then
    holds an index *and* kept bytes, and copies from the kept bytes, not from a checkpoint."""
    _large(monkeypatch)
    url, a, _ = _member(s3, tmp_path)
    z2 = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(50_000,))
    slot = z2.archive.index_slot("a.npy")
    assert slot is not None
    np.testing.assert_array_equal(z2["a"][:50_000].compute(), a[:50_000])  # kept whole
    inflate.wait_for_background()
    kept, built = slot.inflated(), slot.get()
    assert kept is not None
    assert built is not None
    slot.drop()  # as the waiting chunk saw it: nothing kept yet

    def other_threads_meanwhile(build: Any) -> Any:
        slot.keep(kept, until_read=True)
        return built

    resumed: list[int] = []
    resume = inflate.deflate.inflate_from_into
    monkeypatch.setattr(slot, "ensure", other_threads_meanwhile)
    monkeypatch.setattr(
        inflate.deflate,
        "inflate_from_into",
        lambda *a, **k: resumed.append(1) or resume(*a, **k),
    )
    np.testing.assert_array_equal(z2["a"][600_000:650_000].compute(), a[600_000:650_000])
    assert resumed == []


def test_kept_members_are_bounded(s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _large(monkeypatch)
    url, a, _ = _member(s3, tmp_path)
    monkeypatch.setattr(memo, "KEEP_BUDGET", a.nbytes - 1)  # too big to keep: index first
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(50_000,))
    np.testing.assert_array_equal(z["a"][-10:].compute(), a[-10:])
    slot = z.archive.index_slot("a.npy")
    assert slot is not None
    assert slot.inflated() is None
    assert slot.get() is not None
    monkeypatch.setattr(memo, "KEEP_BUDGET", 2 * a.nbytes)  # room for one member
    kept = []
    for name in ("b.npz", "c.npz"):
        path = tmp_path / name
        np.savez_compressed(path, a=a)
        url2 = s3.put_file(path, name)
        z2 = npystore.open_npz(url2, storage_options=s3.storage_options, chunks=(50_000,))
        half = a.size // 2  # chunks of a compute, not all read: kept
        np.testing.assert_array_equal(z2["a"][:half].compute(), a[:half])
        kept.append(z2.archive.index_slot("a.npy"))
    assert kept[0].inflated() is None  # dropped for the second: the budget holds one
    assert kept[1].inflated() is not None
    assert memo.kept_bytes() <= memo.KEEP_BUDGET
    # a small slice of a member with no index keeps nothing (issue 24 item 7): it builds
    # the index instead of holding the whole member after returning ten values
    path = tmp_path / "d.npz"
    np.savez_compressed(path, a=a)
    z3 = npystore.open_npz(s3.put_file(path, "d.npz"), storage_options=s3.storage_options)
    np.testing.assert_array_equal(z3["a"][1000:1010].compute(), a[1000:1010])
    slot = z3.archive.index_slot("a.npy")
    assert slot is not None
    assert slot.inflated() is None
    assert slot.get() is not None
    inflate.wait_for_background()


def test_a_compute_through_a_known_index_keeps_ranges_in_flight(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two scheduler threads would fetch two chunks' ranges at a time (one round trip
    each); the read-ahead of a scan keeps more in flight, and moves each byte once."""
    _large(monkeypatch)
    monkeypatch.setattr(memo, "PART", 64 * 2**10)
    monkeypatch.setattr(memo, "AHEAD_MIN", 256 * 2**10)
    url, a, csize = _member(s3, tmp_path, 2_000_000)
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(125_000,))
    z.build_index("a")
    memo.forget()  # as a later process with the persisted index: nothing kept
    with dask.config.set(scheduler="threads", num_workers=2), s3.counter.measure() as m:
        np.testing.assert_array_equal(z["a"].compute(), a)
    assert m.bytes <= 1.2 * csize, m.bytes / csize
    assert m.max_in_flight > 2, m
    memo.forget()
    with s3.counter.measure() as m:  # one slice reads its checkpoint range, nothing more
        np.testing.assert_array_equal(z["a"][1_000_000:1_000_100].compute(), a[1_000_000:1_000_100])
    slot = z.archive.index_slot("a.npy")
    assert slot is not None
    built = slot.get()
    assert built is not None
    at = z.info("a").data_offset + 8 * 1_000_000
    _, start, stop = built.locate(at, at + 800)
    assert m.bytes <= stop - start + 2 * memo.GRAIN, (m.bytes, stop - start)


def test_a_fetch_that_is_done_at_once_settles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport may finish a read before ``start_readinto`` returns (the future is done
    when the memo registers its callback, which then runs in the reading thread)."""
    from concurrent.futures import Future

    from npystore.fetch import RangeReader

    def at_once(self: RangeReader, requests: Any, **kw: Any) -> Future[None]:
        self.readinto_many(requests)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    monkeypatch.setattr(RangeReader, "start_readinto", at_once)
    a = np.arange(300_000, dtype="<f8") % 7
    path = tmp_path / "d.npz"
    np.savez_compressed(path, a=a)
    z = npystore.open_npz(str(path), chunks=(50_000,))
    np.testing.assert_array_equal(z["a"].compute(), a)
    np.testing.assert_array_equal(z["a"][-10:].compute(), a[-10:])
