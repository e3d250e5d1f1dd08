"""The one pass over a deflated member with no index that the chunk reads of a first compute
share (:mod:`npystore.read.firstpass`): each chunk inflated once, in any order, straight
into the buffer that becomes its result, the checkpoint index built on the way."""

from __future__ import annotations

import random
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore
from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.formats import deflate, zblock
from npystore.read import firstpass, inflate, memo
from npystore.read.layout import DeflatedExtent, DeflatedMember
from npystore.read.slot import IndexSlot

pytestmark = pytest.mark.skipif(not zblock.available(), reason="zlib cannot be loaded")

ROWS = 400_000


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    memo.forget()
    yield
    memo.forget()


def _values(n: int = ROWS) -> np.ndarray[Any, Any]:
    return np.round(np.random.default_rng(3).standard_normal(n) * 4).astype("<f8")


def _open(
    path: Path, a: np.ndarray[Any, Any]
) -> tuple[RangeReader, DeflatedMember, IndexSlot, int]:
    np.savez_compressed(path, a=a)
    array = npystore.open_npz(str(path), index_cache=False).array("a")
    storage = array.layout.storage
    assert isinstance(storage, DeflatedExtent)
    return array.reader, storage.member, storage.index, storage.data_start


def test_reads_in_any_order_share_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk reads on four threads in a shuffled order: one inflater for all of them, every
    chunk exact and writable, the index built by the pass, nothing kept after."""
    made: list[int] = []
    real = zblock.Inflater

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            made.append(1)
            super().__init__()

    monkeypatch.setattr(zblock, "Inflater", Counted)
    monkeypatch.setattr(firstpass, "INDEX_SPACING", 256 * 2**10)
    a = _values()
    reader, member, slot, at = _open(tmp_path / "a.npz", a)
    step = 25_000
    starts = list(range(0, ROWS, step))
    random.Random(7).shuffle(starts)

    def read(s: int) -> np.ndarray[Any, Any]:
        return inflate.inflate_range_array(reader, member, slot, at + 8 * s, 8 * step)

    with ThreadPoolExecutor(4) as pool:
        got = dict(zip(starts, pool.map(read, starts), strict=True))
    for s, buf in got.items():
        np.testing.assert_array_equal(buf.view("<f8"), a[s : s + step])
        assert buf.flags.writeable
    assert made == [1]
    index = slot.get()
    assert index is not None  # the read of the last chunk took the stream to its end
    assert not slot.holds()
    assert memo.kept_bytes() == 0
    # every checkpoint of the pass's index resumes exactly (bit offsets, windows)
    assert len(index.checkpoints) >= 4  # (at the first block boundary past each spacing)
    path = tmp_path / "a.npz"
    data = path.read_bytes()[member.offset : member.offset + member.compressed_size]
    raw = zipfile.ZipFile(path).read("a.npy")
    for cp in index.checkpoints:
        got_bytes = deflate.inflate_from(cp, data[cp.bit_offset // 8 :], 0, 4096)
        assert got_bytes == raw[cp.out_offset : cp.out_offset + 4096]


def test_reads_of_other_shapes_get_copies(tmp_path: Path) -> None:
    """Pieces are cut to the size of the reads seen; a read of another size or position
    gets a copy of the pieces covering it, and the rest goes through the index."""
    a = _values()
    reader, member, slot, at = _open(tmp_path / "a.npz", a)
    step = 8 * 100_000
    last = inflate.inflate_range_array(reader, member, slot, at + 3 * step, step)  # drives
    first = slot.first_pass()
    assert first is not None
    pieces = dict(first._pieces)  # chunks 0, 1, 2 and the npy header, inflated ahead
    assert {at, at + step, at + 2 * step} <= set(pieces)
    part = inflate.inflate_range_array(reader, member, slot, at + step // 2, step // 4)
    np.testing.assert_array_equal(part.view("<f8"), a[50_000:75_000])  # a copy of a part
    across = bytearray(step)  # over two pieces, into the caller's buffer
    inflate.inflate_range_into(reader, member, slot, at + step // 2 + step, memoryview(across))
    np.testing.assert_array_equal(np.frombuffer(across, "<f8"), a[150_000:250_000])
    for k in (1, 2):  # the chunks themselves: the kept buffers, as they are
        got = inflate.inflate_range_array(reader, member, slot, at + k * step, step)
        assert got is pieces[at + k * step][0]
        np.testing.assert_array_equal(got.view("<f8"), a[k * 100_000 : (k + 1) * 100_000])
        assert got.flags.writeable
    np.testing.assert_array_equal(last.view("<f8"), a[300_000:])
    assert slot.get() is not None  # the read of the last chunk ended the pass
    assert slot.holds()  # three quarters of chunk 0 are not read yet
    for lo, hi in ((0, step // 2), (step // 2 + step // 4, step)):
        rest = inflate.inflate_range_array(reader, member, slot, at + lo, hi - lo)
        np.testing.assert_array_equal(rest.view("<f8"), a[lo // 8 : hi // 8])
    assert not slot.holds()  # every byte but the npy header was read: nothing kept


def test_a_corrupt_stream_fails_every_read(tmp_path: Path) -> None:
    """Bytes changed mid-stream: the compute raises a FormatError (here, or in the read
    that drove the stream), as numpy does; no read returns other bytes than numpy's."""
    a = _values()
    path = tmp_path / "c.npz"
    _, member, _, _ = _open(path, a)
    raw = bytearray(path.read_bytes())
    raw[member.offset + member.compressed_size // 2] ^= 0x55
    path.write_bytes(bytes(raw))
    with pytest.raises(Exception), np.load(path) as z:  # noqa: B017, PT011 - zlib's or zipfile's
        z["a"]
    x = npystore.open_npz(str(path), chunks=50_000, index_cache=False)["a"]
    with pytest.raises(FormatError, match=r"c\.npz:a\.npy"):
        x.compute()
    with pytest.raises(FormatError):  # the pass remembers: no second pass
        x.compute()


def test_a_pass_dropped_by_the_budget_gives_way_to_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keep budget drops a pass midway (another member needed the room): its kept
    pieces go, and the reads still to come read through the index instead."""
    pytest.importorskip("indexed_gzip")
    monkeypatch.setattr(inflate, "SMALL_MEMBER", 16 * 2**10)  # large: indexed, not streamed
    a = _values()
    reader, member, slot, at = _open(tmp_path / "a.npz", a)
    step = 8 * 100_000
    mid = inflate.inflate_range_array(reader, member, slot, at + 2 * step, step)
    assert slot.holds()
    memo.forget()  # (what reserve() does to the least recently kept member)
    assert not slot.holds()
    for k in (0, 1, 3):
        got = inflate.inflate_range_array(reader, member, slot, at + k * step, step)
        np.testing.assert_array_equal(got.view("<f8"), a[k * 100_000 : (k + 1) * 100_000])
    np.testing.assert_array_equal(mid.view("<f8"), a[200_000:300_000])
    assert slot.get() is not None  # built by the index builder


def test_a_read_waits_only_for_the_parts_of_its_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compressed bytes go out in parts with a future each: a pass starts inflating
    when its first part arrived (the read waited for the whole batch before)."""
    monkeypatch.setattr(memo, "PART", 64 * 2**10)
    a = _values()
    reader, member, slot, at = _open(tmp_path / "a.npz", a)
    release = threading.Event()
    real = RangeReader.start_readinto

    def held_back(self: RangeReader, requests: Any, **kw: Any) -> Future[None]:
        if requests[0][0] == member.offset:  # the first part: at once
            return real(self, requests, **kw)
        done: Future[None] = Future()

        def later() -> None:
            release.wait(30)
            self.readinto_many(requests)
            done.set_result(None)

        threading.Thread(target=later, daemon=True).start()
        return done

    monkeypatch.setattr(RangeReader, "start_readinto", held_back)
    first = memo.compressed_range(reader, member, 0, 1000, ahead=member.compressed_size)
    assert not release.is_set()  # returned while the other parts are still held back
    assert bytes(first) == (tmp_path / "a.npz").read_bytes()[member.offset : member.offset + 1000]
    release.set()
    got = inflate.inflate_range_array(reader, member, slot, at, 8 * ROWS)
    np.testing.assert_array_equal(got.view("<f8"), a)
