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
from npystore.read.layout import DeflatedExtent


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
    if indexed:  # the pass the chunk reads shared built the index
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
    """No index yet: the chunk reads share one pass over the member (each chunk inflated
    once, straight into the buffer that becomes its result), which builds the index as it
    goes; nothing is kept after, no index builder runs, no chunk is inflated from a
    checkpoint."""
    _large(monkeypatch)
    passes: list[str] = []
    build, resume = inflate.build_index, inflate.deflate.inflate_from_into
    monkeypatch.setattr(
        inflate, "build_index", lambda *a, **k: passes.append("index") or build(*a, **k)
    )
    monkeypatch.setattr(
        inflate.deflate,
        "inflate_from_into",
        lambda *a, **k: passes.append("resume") or resume(*a, **k),
    )
    url, a, csize = _member(s3, tmp_path)
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(50_000,))
    with dask.config.set(scheduler="threads", num_workers=4), s3.counter.measure() as m:
        got = z["a"].compute()
    np.testing.assert_array_equal(got, a)
    assert got.flags.writeable
    assert passes == []  # no index pass, no chunk inflated from a checkpoint
    assert m.bytes <= 1.2 * csize
    slot = z.archive.index_slot("a.npy")
    assert slot is not None
    built = slot.get()
    assert built is not None  # by the pass: a later read resumes from its checkpoints
    assert len(built.checkpoints) >= a.nbytes // index.INDEX_SPACING
    assert not slot.holds()  # every byte was read once: nothing kept
    assert memo.kept_bytes() == 0
    np.testing.assert_array_equal(z["a"][654_321:654_400].compute(), a[654_321:654_400])
    assert passes == ["resume"]


def test_a_chunk_of_a_first_compute_is_the_buffer_it_was_inflated_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks inflated ahead of their read (the scheduler's order) are handed over as they
    are: one buffer per chunk, no copy; reads of other shapes get copies of the pieces."""
    _large(monkeypatch)
    a = np.round(np.random.default_rng(3).standard_normal(400_000) * 4).astype("<f8")
    path = tmp_path / "d.npz"
    np.savez_compressed(path, a=a)
    z = npystore.open_npz(str(path), index_cache=False)
    array = z.array("a")
    storage = array.layout.storage
    assert isinstance(storage, DeflatedExtent)
    reader, member, slot, at = array.reader, storage.member, storage.index, storage.data_start
    step = 100_000 * 8
    last = inflate.inflate_range_array(reader, member, slot, at + 3 * step, step)  # drives
    first = slot.first_pass()
    assert first is not None
    kept = dict(first._pieces)  # chunks 0, 1, 2 (and the npy header), inflated ahead
    assert {at, at + step, at + 2 * step} <= set(kept)
    got = inflate.inflate_range_array(reader, member, slot, at + step, step)
    assert got is kept[at + step][0]  # the kept buffer itself
    mid = inflate.inflate_range_array(reader, member, slot, at + step // 2, step // 4)
    np.testing.assert_array_equal(mid.view("<f8"), a[50_000:75_000])  # a copy of a part
    for k, arr in ((1, got), (3, last)):
        np.testing.assert_array_equal(arr.view("<f8"), a[k * 100_000 : (k + 1) * 100_000])
        assert arr.flags.writeable
    assert slot.get() is not None  # the read of the last chunk ended the pass: indexed


def test_kept_members_are_bounded(s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _large(monkeypatch)
    url, a, _ = _member(s3, tmp_path)
    monkeypatch.setattr(memo, "KEEP_BUDGET", a.nbytes - 1)  # too big to keep: index first
    z = npystore.open_npz(url, storage_options=s3.storage_options, chunks=(50_000,))
    np.testing.assert_array_equal(z["a"][-10:].compute(), a[-10:])
    slot = z.archive.index_slot("a.npy")
    assert slot is not None
    assert not slot.holds()
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
    assert not kept[0].holds()  # dropped for the second: the budget holds one
    assert kept[1].holds()
    assert memo.kept_bytes() <= memo.KEEP_BUDGET
    # a small slice of a member with no index keeps nothing (issue 24 item 7): it builds
    # the index instead of holding the whole member after returning ten values
    path = tmp_path / "d.npz"
    np.savez_compressed(path, a=a)
    z3 = npystore.open_npz(s3.put_file(path, "d.npz"), storage_options=s3.storage_options)
    np.testing.assert_array_equal(z3["a"][1000:1010].compute(), a[1000:1010])
    slot = z3.archive.index_slot("a.npy")
    assert slot is not None
    assert not slot.holds()
    assert slot.get() is not None


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
