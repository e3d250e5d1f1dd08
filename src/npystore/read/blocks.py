"""Reads through a member's block index, trusted only as far as it has been checked.

A block index (npystore's writer, :mod:`npystore.formats.zipdir._blocks`) says where a
member's independent deflate blocks start. Inflating block ``k`` on its own gives the bytes
numpy reads (the member inflated as one stream) only if the one stream, at that block's
first byte, stands where a fresh stream starts: between two deflate blocks, byte-aligned,
no final block seen. Nothing within the block or the one before it can show that: any
region of a stream may lie inside a stored block, or be read as literals by a Huffman block
that began earlier, while the same bytes inflated alone are a valid stream of their own
(with a CRC-32 collision, 8 bytes, the index's checksums agree too).

So it is shown piece by piece from the member's start. Piece 0 starts the stream. Each
piece inflated alone (zlib with ``Z_BLOCK``, :mod:`npystore.formats.zblock`) must consume
exactly its compressed bytes, produce exactly its stated size and CRC-32, and end between
two blocks, byte-aligned, no final block seen (the last piece: at the stream's end). If
pieces ``0 .. k-1`` passed, the one stream at piece ``k``'s start is in a fresh stream's
state, so piece ``k`` inflates alone exactly as within the stream (a back-reference before
its start fails alone), and piece ``k``'s own check carries the state to piece ``k + 1``.

:class:`~npystore.read.blockchain.BlockChain` records, per member and process, which pieces
passed. A read of blocks ``[i, j)`` needs pieces ``0 .. i-1`` passed: the pieces no read has
checked yet are checked first (their compressed bytes read in groups, inflated in bounded
steps, the output only summed); pieces another read is checking are waited for. Its own
pieces are checked while they are read, or, once checked, inflated with the fastest
inflater. A piece that fails breaks the chain: every read of the member then goes through
the one-stream path (checkpoint index or a pass from the start), which gives numpy's bytes
or a :class:`~npystore.FormatError` (a lying index costs passes, never wrong data).

Every inflate here runs in steps of at most :data:`STEP` output bytes: what a block declares
is never allocated, and only the bytes a read asks for are kept.
"""

from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.fetch.cache import drop_cache_file, read_cache_file, write_cache_file
from npystore.formats import deflate, zblock
from npystore.formats.deflate import Checkpoint, DeflateIndex
from npystore.formats.zblock import PieceEnd
from npystore.read import memo
from npystore.read.blockchain import BlockChain
from npystore.read.index import index_cache_key
from npystore.read.layout import DeflatedMember
from npystore.read.memo import compressed_range
from npystore.read.slot import IndexSlot

if TYPE_CHECKING:
    from npystore.formats.zipdir import BlockIndex  # zipdir loads only for archives

__all__ = ["CHECK_READ", "STEP", "read_blocks", "read_blocks_array"]

#: Most output bytes one inflate call produces.
STEP: Final = zblock.STEP
#: Most compressed bytes read at once when checking the pieces before a read's blocks.
CHECK_READ: Final = 8 * 2**20


def read_blocks_array(
    reader: RangeReader,
    member: DeflatedMember,
    slot: IndexSlot,
    start: int,
    nbytes: int,
    *,
    keep: bool = False,
) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
    """Output ``[start, start + nbytes)`` through the block index, as a new array: the
    buffer another read checked these pieces into, when one did (no copy), else a new one
    (see :func:`read_blocks`); None when the block index cannot be used."""
    return _read(reader, member, slot, start, nbytes, None, keep=keep)


def read_blocks(
    reader: RangeReader,
    member: DeflatedMember,
    slot: IndexSlot,
    start: int,
    out: memoryview,
    *,
    keep: bool = False,
) -> bool:
    """Fill ``out`` with output ``[start, start + len(out))`` through the block index.

    Returns False (``out`` then holds nothing meaningful) when the index cannot be used:
    a piece failed its check, now or in an earlier read, or zlib cannot be loaded; the
    caller reads the member as one stream.

    The read's own pieces come first (each inflated once, its check included, straight
    into ``out``); then the pieces before them that no other read has taken meanwhile are
    checked (their compressed bytes fetched in the background from the start, the pieces
    checked on all cores), and those other reads are checking are waited for. With
    ``keep`` (the read is a chunk of a compute: the reads of the rest of the member are to
    come, in whatever order the scheduler picks), all the member's compressed bytes are
    fetched in the background, and within the keep budget
    (:func:`npystore.read.memo.reserve`, the whole member reserved once), the pieces
    checked here are inflated into buffers cut like the reads (of the largest size seen,
    ending at ``start``), kept for the reads of those ranges (:func:`read_blocks_array`; a read
    whose pieces are all being checked by another read waits for them): each piece is
    inflated once.

    How many pieces passed is kept in the slot (it travels with pickled graphs) and, with
    an index cache directory, in a file beside the member's checkpoint index (the block
    starts of the pieces that passed, as a :class:`~npystore.formats.deflate.DeflateIndex`):
    a later process that reads the same unchanged member trusts those and checks no piece
    twice.

    Raises
    ------
    FetchError
        The compressed bytes could not be read.
    """
    got = _read(reader, member, slot, start, out.nbytes, out, keep=keep)
    if got is None:
        return False
    if got.ctypes.data != np.frombuffer(out, np.uint8).ctypes.data:
        out[:] = got.data  # a kept buffer
    return True


def _read(
    reader: RangeReader,
    member: DeflatedMember,
    slot: IndexSlot,
    start: int,
    nbytes: int,
    out: memoryview | None,
    *,
    keep: bool,
) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
    """:func:`read_blocks` into ``out`` (or a new buffer); the bytes, or None."""
    blocks = member.blocks
    if blocks is None or not zblock.available():
        return None
    chain = slot.block_chain(lambda checked: _chain(reader, member, blocks, slot, checked))
    if chain.broken:
        return None
    stop = start + nbytes
    i, j = blocks.span(start, stop)
    chain.unit = max(chain.unit, nbytes)
    kept = _take(chain, start, nbytes, i)
    if kept is not None:
        return kept
    checked = chain.checked
    if keep:  # a chunk of a compute: the reads of all the rest are to come
        memo.prefetch(reader, member, 0, member.compressed_size)
    elif checked < i:  # bytes of the pieces to check (or of those another read checks)
        coff = blocks.coffsets
        memo.prefetch(reader, member, coff[checked], coff[i])
    own = chain.claim(i, j)
    if not own and chain.keeping and chain.settle_wait(i, j):
        kept = _take(chain, start, nbytes, i)  # another read checked them: kept for us?
        if kept is not None:
            return kept
    buf = np.empty(nbytes, np.uint8) if out is None else np.frombuffer(out, np.uint8)
    before: list[int] = []
    checked_before = False
    try:
        if not _read_own(reader, member, blocks, chain, own, i, j, start, memoryview(buf.data)):
            return None
        chain.served(start, stop)
        while True:
            # the pieces before that no read took meanwhile (an earlier chunk's read, come
            # later, would inflate them with its data): checked here
            before = chain.claim(0, i)
            checked_before = checked_before or bool(before)
            cut = None
            if before and keep and _keeping(member, slot, chain):
                cut = (start, chain.unit)  # (the largest read: the last chunk is smaller)
            if before and not _check(reader, member, blocks, chain, before, cut):
                return None
            settled = chain.wait(i)  # (None: a read checking some of them gave up)
            if settled is not None:
                break
    except BaseException:
        chain.abandon(before + own)
        raise
    if settled and (checked_before or chain.checked == len(blocks.usizes)):
        _persist(reader, member, blocks, slot, chain)
    return buf if settled else None


def _take(
    chain: BlockChain, start: int, nbytes: int, first: int
) -> np.ndarray[Any, np.dtype[np.uint8]] | None:
    """The kept output ``[start, start + nbytes)``, once every piece before its first
    (``first``) passed; None when none is kept, or when not all of those passed (it is
    then read again)."""
    kept = chain.take(start, nbytes)
    if kept is None or not chain.wait(first):
        return None
    return kept


def _keeping(member: DeflatedMember, slot: IndexSlot, chain: BlockChain) -> bool:
    """Whether checked output of this member may be kept: decided once, by reserving the
    whole member in the keep budget."""
    with chain.deciding:
        if chain.keeping is None:
            size = member.uncompressed_size
            chain.keeping = memo.reserve(slot, size)
            if chain.keeping:
                memo.held(slot, size)
        return chain.keeping


def _cache_key(reader: RangeReader, member: DeflatedMember) -> str | None:
    """The index cache key of the record of which pieces of the member passed (beside its
    checkpoint index's; None for an object whose identity is weak: nothing is recorded)."""
    key = index_cache_key(reader, member)
    return None if key is None else f"blocks:{key}"


def _record_bytes(blocks: BlockIndex) -> int:
    """The most bytes a record of ``blocks`` takes (one windowless checkpoint per piece)."""
    return 36 + 20 * len(blocks.usizes)


def _chain(
    reader: RangeReader, member: DeflatedMember, blocks: BlockIndex, slot: IndexSlot, checked: int
) -> BlockChain:
    """The member's chain: ``checked`` pieces passed (a pickled slot says so), or as many
    as the cache directory records for this object and member."""
    count = len(blocks.usizes)
    key = None if slot.cache_dir is None else _cache_key(reader, member)
    if checked == 0 and slot.cache_dir is not None and key is not None:
        data = read_cache_file(slot.cache_dir, key, max_bytes=_record_bytes(blocks))
        if data is not None:
            checked = _recorded(data, member, blocks)
            if checked == 0:
                drop_cache_file(slot.cache_dir, key, "not a record of this member's blocks")
    return BlockChain(count, checked)


def _recorded(data: bytes, member: DeflatedMember, blocks: BlockIndex) -> int:
    """How many leading pieces a cache file records as passed (0 for a foreign or damaged
    file)."""
    try:
        record = DeflateIndex.from_bytes(data)
    except FormatError:
        return 0
    if (record.compressed_size, record.uncompressed_size) != (
        member.compressed_size,
        member.uncompressed_size,
    ):
        return 0
    coff, uoff = blocks.coffsets, blocks.uoffsets
    n = 0
    for k, cp in enumerate(record.checkpoints):
        if k >= len(blocks.usizes) or cp != Checkpoint(8 * coff[k], uoff[k], b""):
            return 0
        n += 1
    return n


def _persist(
    reader: RangeReader,
    member: DeflatedMember,
    blocks: BlockIndex,
    slot: IndexSlot,
    chain: BlockChain,
) -> None:
    """Record the pieces that passed in the cache directory (when it has fewer)."""
    checked = chain.checked
    key = _cache_key(reader, member)
    if slot.cache_dir is None or key is None or checked <= chain.persisted:
        return
    chain.persisted = checked
    coff, uoff = blocks.coffsets, blocks.uoffsets
    record = DeflateIndex(
        member.compressed_size,
        member.uncompressed_size,
        tuple(Checkpoint(8 * coff[k], uoff[k], b"") for k in range(checked)),
    )
    write_cache_file(slot.cache_dir, key, record.to_bytes())


def _groups(blocks: BlockIndex, pieces: list[int], cap: int) -> list[list[int]]:
    """Runs of consecutive pieces, each of at most ``cap`` compressed bytes (or one
    piece)."""
    groups: list[list[int]] = []
    size = 0
    for k in pieces:
        csize = blocks.csizes[k]
        if groups and groups[-1][-1] == k - 1 and size + csize <= cap:
            groups[-1].append(k)
            size += csize
        else:
            groups.append([k])
            size = csize
    return groups


_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _checkers() -> ThreadPoolExecutor:
    """The process-wide threads that check pieces (one per core; made again after a fork)."""
    global _pool, _pool_pid  # noqa: PLW0603 - made on first use
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(os.cpu_count() or 2, thread_name_prefix="npystore-check")
            _pool_pid = os.getpid()
        return _pool


def _cut(
    blocks: BlockIndex, pieces: list[int], anchor: int, unit: int
) -> dict[int, tuple[int, int]]:
    """Piece -> ``(lo, hi)``: the output ranges ``[anchor - (m + 1) * unit, anchor - m *
    unit)`` that whole pieces of ``pieces`` tile exactly, and their pieces."""
    uoff = blocks.uoffsets
    at = {u: k for k, u in enumerate(uoff)}
    mine = set(pieces)
    lowest = uoff[min(pieces)]
    spans: dict[int, tuple[int, int]] = {}
    hi = anchor
    while hi - unit >= lowest:
        lo = hi - unit
        a, b = at.get(lo), at.get(hi)
        if a is not None and b is not None and all(k in mine for k in range(a, b)):
            for k in range(a, b):
                spans[k] = (lo, hi)
        hi = lo
    return spans


def _check(
    reader: RangeReader,
    member: DeflatedMember,
    blocks: BlockIndex,
    chain: BlockChain,
    pieces: list[int],
    cut: tuple[int, int] | None = None,
) -> bool:
    """Check the claimed ``pieces``; False when one fails. Their output is only summed,
    except, with ``cut`` (``(anchor, unit)``), that of the pieces tiling the ranges of
    ``unit`` bytes ending at ``anchor``: inflated into a buffer per range, kept in the
    chain once all its pieces passed (:meth:`BlockChain.keep`).

    The pieces go in groups of consecutive ones (at most :data:`CHECK_READ` compressed
    bytes, and enough groups for every core), each group's bytes read and its pieces
    checked by one of the checking threads, this one taking the first group; zlib runs
    without the interpreter lock, so the groups are checked in parallel.
    """
    coff, uoff = blocks.coffsets, blocks.uoffsets
    total = sum(blocks.csizes[k] for k in pieces)
    cores = os.cpu_count() or 2
    groups = _groups(blocks, pieces, min(CHECK_READ, max(1, -(-total // (2 * cores)))))
    failed = threading.Event()
    spans = {} if cut is None else _cut(blocks, pieces, *cut)
    buffers = {lo: np.empty(hi - lo, np.uint8) for lo, hi in set(spans.values())}
    left = dict.fromkeys(buffers, 0)
    for lo, _ in spans.values():
        left[lo] += 1
    left_lock = threading.Lock()

    def run(group: list[int]) -> None:
        if failed.is_set():
            return
        lo, hi = group[0], group[-1] + 1
        data = memoryview(compressed_range(reader, member, coff[lo], coff[hi]))
        for k in group:
            if failed.is_set():
                return
            piece = data[coff[k] - coff[lo] : coff[k + 1] - coff[lo]]
            span = spans.get(k)
            if span is None:
                passed = _inflate_checked(blocks, k, piece, None, 0, 0)
            else:
                view = memoryview(buffers[span[0]].data)
                target = view[uoff[k] - span[0] : uoff[k + 1] - span[0]]
                passed = _inflate_checked(blocks, k, piece, target, 0, blocks.usizes[k])
            if passed and span is not None:
                with left_lock:
                    left[span[0]] -= 1
                    done = left[span[0]] == 0
                if done:  # (kept before its last piece settles: its read waits for that)
                    chain.keep(span[0], buffers[span[0]])
            chain.settle(k, passed=passed)
            if not passed:
                failed.set()
                return

    try:
        futures = [_checkers().submit(run, g) for g in groups[1:]]
        try:
            run(groups[0])
        finally:
            wait(futures)
        for f in futures:
            f.result()  # a fetch's error
    finally:
        chain.abandon(pieces)  # those not settled (a failure stopped the others)
    return not failed.is_set()


def _read_own(
    reader: RangeReader,
    member: DeflatedMember,
    blocks: BlockIndex,
    chain: BlockChain,
    claimed: list[int],
    i: int,
    j: int,
    start: int,
    out: memoryview,
) -> bool:
    """Inflate pieces ``[i, j)`` (one range read) into ``out``, checking the unchecked ones
    (settling those this read claimed); False when one fails."""
    coff, uoff = blocks.coffsets, blocks.uoffsets
    stop = start + out.nbytes
    data = memoryview(compressed_range(reader, member, coff[i], coff[j]))
    mine = set(claimed)
    for k in range(i, j):
        piece = data[coff[k] - coff[i] : coff[k + 1] - coff[i]]
        lo, hi = max(start, uoff[k]), min(stop, uoff[k + 1])
        target = out[lo - start : hi - start]
        if chain.is_checked(k) and not _check_is_fast():
            passed = _inflate_fast(blocks, k, piece, target, lo - uoff[k])
        else:
            passed = _inflate_checked(blocks, k, piece, target, lo - uoff[k], hi - uoff[k])
            if k in mine:
                chain.settle(k, passed=passed)
                mine.discard(k)
            elif not passed:
                chain.settle(k, passed=False)
        if not passed:
            chain.abandon(sorted(mine))
            return False
    return True


@functools.cache
def _check_is_fast() -> bool:
    """Whether checking a piece costs what inflating it with the fastest inflater does
    (zlib-ng: checked pieces are checked again when read; else ISA-L inflates them)."""
    name = zblock.library()
    return name is not None and name.startswith("zlib-ng")


def _inflate_checked(
    blocks: BlockIndex,
    k: int,
    piece: memoryview,
    target: memoryview | None,
    lo: int,
    hi: int,
) -> bool:
    """Inflate piece ``k`` alone (:func:`npystore.formats.zblock.inflate_piece`), its
    output ``[lo, hi)`` into ``target`` (straight into it when that is the whole output);
    whether it passes: size, CRC-32, every byte consumed, and its end between blocks (the
    last piece: the stream's end)."""
    usize = blocks.usizes[k]
    crc = 0
    at = 0
    whole = target is not None and lo == 0 and hi == usize

    def take(chunk: memoryview) -> None:
        nonlocal crc, at
        crc = deflate.crc32(chunk, crc)
        if target is not None and not whole:
            a, b = max(lo, at), min(hi, at + chunk.nbytes)
            if b > a:
                target[a - lo : b - lo] = chunk[a - at : b - at]
        at += chunk.nbytes

    result = zblock.inflate_piece(piece, usize, take, into=target if whole else None)
    want = PieceEnd.END if k == len(blocks.usizes) - 1 else PieceEnd.BOUNDARY
    return (
        result.error is None
        and result.end is want
        and result.produced == usize
        and crc == blocks.crcs[k]
    )


def _inflate_fast(
    blocks: BlockIndex, k: int, piece: memoryview, target: memoryview, lo: int
) -> bool:
    """Inflate piece ``k``, which passed its check, with the fastest inflater in steps of
    :data:`STEP`, copying its output from ``lo`` into ``target``; the size and CRC-32 are
    checked again (the bytes are the pinned object's; a changed one raised on fetch)."""
    usize = blocks.usizes[k]
    last = k == len(blocks.usizes) - 1
    hi = lo + target.nbytes
    d = deflate.raw_decompressobj()
    crc = 0
    at = 0
    pending: bytes | memoryview = piece
    try:
        while not d.eof:
            chunk = d.decompress(pending, STEP)  # (b"": what a full step held back)
            pending = d.unconsumed_tail
            if not chunk:
                break  # every byte consumed and nothing held back, or no progress
            crc = deflate.crc32(chunk, crc)
            a, b = max(lo, at), min(hi, at + len(chunk))
            if b > a:
                target[a - lo : b - lo] = memoryview(chunk)[a - at : b - at]
            at += len(chunk)
            if at > usize:
                return False
    except deflate.INFLATE_ERRORS:
        return False
    return (
        at == usize
        and crc == blocks.crcs[k]
        and not pending
        and not d.unused_data
        and d.eof == last
    )
