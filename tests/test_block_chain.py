"""Where a piece of a deflate stream ends (zlib's Z_BLOCK), and the chain of checked blocks
that lets npystore read a block index's blocks alone (issue 24 item 3)."""

from __future__ import annotations

import pickle
import zlib
from pathlib import Path

import dask
import numpy as np
import pytest

import npystore
from npystore.formats import deflate_write, zblock
from npystore.formats.zblock import PieceEnd
from npystore.read import blocks as read_blocks
from npystore.read import memo
from npystore.read.blockchain import BlockChain
from npystore.read.slot import IndexSlot

pytestmark = pytest.mark.skipif(not zblock.available(), reason="zlib cannot be loaded")


def _data(n: int = 300_000) -> bytes:
    rng = np.random.default_rng(5)
    return np.round(np.cumsum(rng.standard_normal(n)), 1).tobytes()


def _end(piece: bytes, limit: int = 10**8) -> tuple[int, PieceEnd, str | None]:
    got = zblock.inflate_piece(piece, limit)
    return got.produced, got.end, got.error


def test_where_a_piece_ends() -> None:
    data = _data()
    block = deflate_write.deflate_block(data, final=False)  # ends with a full flush
    last = deflate_write.deflate_block(data, final=True)
    n = len(data)
    assert _end(block) == (n, PieceEnd.BOUNDARY, None)
    assert _end(last) == (n, PieceEnd.END, None)
    assert _end(block + last) == (2 * n, PieceEnd.END, None)
    assert _end(block[:-1])[1] is PieceEnd.INSIDE  # inside the flush's stored block
    assert _end(block[: len(block) // 2])[1] is PieceEnd.INSIDE  # inside a Huffman block
    assert _end(last + b"x")[1] is PieceEnd.INSIDE  # bytes after the stream's end
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    assert _end(c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH))[1] is PieceEnd.BOUNDARY
    # a fixed-Huffman block ending mid-byte, then nothing: between blocks, not aligned
    assert _end(b"\x02\x00")[1] is PieceEnd.INSIDE
    assert _end(b"\x00\x01\x00\xfe\xffA") == (1, PieceEnd.BOUNDARY, None)
    assert _end(b"\x01\x01\x00\xfe\xffA") == (1, PieceEnd.END, None)
    produced, end, error = _end(b"\xff\xff")
    assert (produced, end) == (0, PieceEnd.INSIDE)
    assert error is not None


def test_output_comes_in_bounded_steps() -> None:
    data = bytes(5 * zblock.STEP + 7)
    piece = deflate_write.deflate_block(data, final=True)
    sizes: list[int] = []
    got = zblock.inflate_piece(piece, len(data), lambda chunk: sizes.append(chunk.nbytes))
    assert (got.produced, got.end) == (len(data), PieceEnd.END)
    assert max(sizes) <= zblock.STEP
    assert sum(sizes) == len(data)
    over = zblock.inflate_piece(piece, 2 * zblock.STEP)  # stops past the limit
    assert over.produced <= 3 * zblock.STEP
    assert over.end is PieceEnd.INSIDE


def test_a_compute_on_threads_checks_each_block_and_records_the_chain(
    tmp_path: Path, inflated_pieces: list[int]
) -> None:
    calls = inflated_pieces
    a = np.arange(1_000_000, dtype="<i8") % 9973  # 8 MB: 8 blocks
    path = tmp_path / "w.npz"
    npystore.savez_compressed(str(path), a=a)
    z = npystore.open_npz(str(path), index_cache=False, chunks=(100_000,))
    entry_blocks = z.archive.entries["a.npy"].blocks
    assert entry_blocks is not None
    count = len(entry_blocks.usizes)
    with dask.config.set(scheduler="threads", num_workers=4):
        np.testing.assert_array_equal(z["a"].compute(), a)
    slot = z.archive.index_slot("a.npy")
    assert slot is not None
    chain = slot.block_chain(lambda checked: BlockChain(count, checked))
    assert chain.checked == count
    assert not chain.broken
    if read_blocks._check_is_fast():  # every read inflates its blocks with the checker
        at = z.info("a").data_offset
        spans = [entry_blocks.span(at + 8 * s, at + 8 * min(a.size, s + 100_000)) for s in
                 range(0, a.size, 100_000)]  # fmt: skip
        reads = sum(j - i for i, j in spans)
        # and a block no read had taken when a later read needed it checked is checked
        # there too (its output only summed): at most once more each
        assert reads <= len(calls) <= reads + count
    else:  # each block checked about once (two reads sharing a block may both inflate it)
        assert count <= len(calls) <= count + 9
    calls.clear()
    np.testing.assert_array_equal(z["a"][-3:].compute(), a[-3:])
    # no block before the slice is inflated again; its own block (the last) is inflated by
    # the checker when that is the fastest inflater (zlib-ng), else by ISA-L
    assert calls == ([entry_blocks.usizes[-1]] if read_blocks._check_is_fast() else [])
    # the chain travels with a pickled slot (a dask graph to a worker)
    copy = pickle.loads(pickle.dumps(slot))
    assert copy.block_chain(lambda checked: BlockChain(count, checked)).checked == count


def test_a_compute_inflates_each_block_once_in_any_order(
    tmp_path: Path, inflated_pieces: list[int]
) -> None:
    """Chunks aligned to the blocks, in the scheduler's order (dask starts in the middle
    and goes backwards): a read that checks the blocks before it keeps their output for
    the reads of those chunks (handed over as they are), so no block is inflated twice;
    nothing is kept after."""
    calls = inflated_pieces
    a = np.arange(1_200_000, dtype="<i8") % 9973
    path = tmp_path / "w.npz"
    npystore.savez_compressed(str(path), a=a)
    z = npystore.open_npz(str(path), index_cache=False, chunks=(2**17,))  # a block each
    entry_blocks = z.archive.entries["a.npy"].blocks
    assert entry_blocks is not None
    assert set(entry_blocks.usizes[1:-1]) == {2**20}  # (block 0: the npy header alone)
    with dask.config.set(scheduler="threads", num_workers=2):
        got = z["a"].compute()
    np.testing.assert_array_equal(got, a)
    assert len(calls) == len(entry_blocks.usizes)
    slot = z.archive.index_slot("a.npy")
    assert slot is not None
    assert not slot.holds()
    assert memo.kept_bytes() == 0


def test_a_slice_waits_for_the_blocks_another_read_is_checking() -> None:
    chain = BlockChain(4)
    assert chain.claim(0, 2) == [0, 1]
    assert chain.claim(0, 3) == [2]  # 0 and 1 are being checked by the first reader
    chain.settle(0, passed=True)
    chain.abandon([1])  # the first reader failed (a fetch error): piece 1 is free again
    assert chain.wait(2) is None  # the waiter checks it itself
    assert chain.claim(0, 2) == [1]
    chain.settle(1, passed=True)
    assert chain.wait(2) is True
    assert chain.checked == 2
    chain.settle(2, passed=False)
    assert chain.broken
    assert chain.wait(4) is False
    assert IndexSlot(blocks_checked=3).block_chain(lambda c: BlockChain(4, c)).checked == 3


def test_without_zlib_the_block_index_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read_blocks.zblock, "available", lambda: False)
    a = np.arange(300_000, dtype="<i8")
    path = tmp_path / "n.npz"
    npystore.savez_compressed(str(path), a=a)
    z = npystore.open_npz(str(path), index_cache=False)
    np.testing.assert_array_equal(z["a"][-5:].compute(), a[-5:])
    np.testing.assert_array_equal(z["a"].compute(), a)
