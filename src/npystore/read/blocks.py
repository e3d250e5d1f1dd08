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

:class:`BlockChain` records, per member and process, which pieces passed. A read of blocks
``[i, j)`` needs pieces ``0 .. i-1`` passed: the pieces no read has checked yet are checked
first (their compressed bytes read in groups, inflated in bounded steps, the output only
summed); pieces another read is checking are waited for. Its own pieces are checked while
they are read, or, once checked, inflated with the fastest inflater. A piece that fails
breaks the chain: every read of the member then goes through the one-stream path
(checkpoint index or a pass from the start), which gives numpy's bytes or a
:class:`~npystore.FormatError` (a lying index costs passes, never wrong data).

Every inflate here runs in steps of at most :data:`STEP` output bytes: what a block declares
is never allocated, and only the bytes a read asks for are kept.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.fetch.cache import drop_cache_file, read_cache_file, write_cache_file
from npystore.formats import deflate, zblock
from npystore.formats.deflate import Checkpoint, DeflateIndex
from npystore.formats.zblock import PieceEnd
from npystore.read.index import index_cache_key
from npystore.read.layout import DeflatedMember
from npystore.read.memo import compressed_range
from npystore.read.slot import IndexSlot

if TYPE_CHECKING:
    from npystore.formats.zipdir import BlockIndex  # zipdir loads only for archives

__all__ = ["CHECK_READ", "STEP", "BlockChain", "read_blocks"]

#: Most output bytes one inflate call produces.
STEP: Final = zblock.STEP
#: Most compressed bytes read at once when checking the pieces before a read's blocks.
CHECK_READ: Final = 8 * 2**20

_UNCHECKED, _CHECKING, _CHECKED = 0, 1, 2


class BlockChain:
    """Which pieces of a block-indexed member passed their check in this process.

    Attributes
    ----------
    broken : bool
        A piece failed: the block index is not used for this member any more.
    """

    def __init__(self, count: int, checked: int = 0) -> None:
        self._state = bytearray([_CHECKED]) * min(checked, count) + bytearray(
            max(0, count - checked)
        )
        self.broken = False
        self._cond = threading.Condition()
        #: Pieces recorded as checked in the index cache directory (see :func:`read_blocks`).
        self.persisted = checked

    @property
    def checked(self) -> int:
        """How many pieces from the member's start passed (travels with a pickled slot)."""
        with self._cond:
            n = 0
            for s in self._state:
                if s != _CHECKED:
                    break
                n += 1
            return n

    def is_checked(self, k: int) -> bool:
        """Whether piece ``k`` passed."""
        return self._state[k] == _CHECKED

    def claim(self, lo: int, hi: int) -> list[int]:
        """Mark the unchecked pieces of ``[lo, hi)`` as being checked by the caller."""
        with self._cond:
            mine = [k for k in range(lo, hi) if self._state[k] == _UNCHECKED]
            for k in mine:
                self._state[k] = _CHECKING
            return mine

    def settle(self, k: int, *, passed: bool) -> None:
        """Record the result of checking piece ``k``."""
        with self._cond:
            self._state[k] = _CHECKED if passed else _UNCHECKED
            if not passed:
                self.broken = True
            self._cond.notify_all()

    def abandon(self, pieces: list[int]) -> None:
        """Give back pieces the caller claimed and did not check (its read failed)."""
        with self._cond:
            for k in pieces:
                if self._state[k] == _CHECKING:
                    self._state[k] = _UNCHECKED
            self._cond.notify_all()

    def wait(self, hi: int) -> bool | None:
        """Wait until pieces ``[0, hi)`` passed (True), one failed (False), or one is
        unclaimed again (``None``: its reader gave up; the caller checks it)."""

        def settled() -> bool:
            if self.broken:
                return True
            return all(s != _CHECKING for s in self._state[:hi])

        with self._cond:
            self._cond.wait_for(settled)
            if self.broken:
                return False
            if all(s == _CHECKED for s in self._state[:hi]):
                return True
            return None


def read_blocks(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, start: int, out: memoryview
) -> bool:
    """Fill ``out`` with output ``[start, start + len(out))`` through the block index.

    Returns False (``out`` then holds nothing meaningful) when the index cannot be used:
    a piece failed its check, now or in an earlier read, or zlib cannot be loaded; the
    caller reads the member as one stream.

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
    blocks = member.blocks
    if blocks is None or not zblock.available():
        return False
    chain = slot.block_chain(lambda checked: _chain(reader, member, blocks, slot, checked))
    if chain.broken:
        return False
    stop = start + out.nbytes
    i, j = blocks.span(start, stop)
    before = chain.claim(0, i)
    own = chain.claim(i, j)
    checked_before = bool(before)
    try:
        if before and not _check(reader, member, blocks, chain, before):
            return False
        if not _read_own(reader, member, blocks, chain, own, i, j, start, out):
            return False
        while True:
            settled = chain.wait(i)
            if settled is not None:
                break
            before = chain.claim(0, i)  # a read that was checking them failed: check here
            checked_before = checked_before or bool(before)
            if before and not _check(reader, member, blocks, chain, before):
                return False
    except BaseException:
        chain.abandon(before + own)
        raise
    if settled and (checked_before or chain.checked == len(blocks.usizes)):
        _persist(reader, member, blocks, slot, chain)
    return settled


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


def _groups(blocks: BlockIndex, pieces: list[int]) -> list[list[int]]:
    """Runs of consecutive pieces, each of at most :data:`CHECK_READ` compressed bytes (or
    one piece)."""
    groups: list[list[int]] = []
    size = 0
    for k in pieces:
        csize = blocks.csizes[k]
        if groups and groups[-1][-1] == k - 1 and size + csize <= CHECK_READ:
            groups[-1].append(k)
            size += csize
        else:
            groups.append([k])
            size = csize
    return groups


def _check(
    reader: RangeReader,
    member: DeflatedMember,
    blocks: BlockIndex,
    chain: BlockChain,
    pieces: list[int],
) -> bool:
    """Check the claimed ``pieces`` (their output only summed); False when one fails."""
    coff = blocks.coffsets
    done: set[int] = set()
    try:
        for group in _groups(blocks, pieces):
            lo, hi = group[0], group[-1] + 1
            data = memoryview(compressed_range(reader, member, coff[lo], coff[hi]))
            for k in group:
                piece = data[coff[k] - coff[lo] : coff[k + 1] - coff[lo]]
                passed = _inflate_checked(blocks, k, piece, None, 0, 0)
                chain.settle(k, passed=passed)
                done.add(k)
                if not passed:
                    return False
    finally:
        chain.abandon([k for k in pieces if k not in done])
    return True


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
        if chain.is_checked(k):
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


def _inflate_checked(
    blocks: BlockIndex,
    k: int,
    piece: memoryview,
    target: memoryview | None,
    lo: int,
    hi: int,
) -> bool:
    """Inflate piece ``k`` alone with zlib (``Z_BLOCK``), copying its output ``[lo, hi)``
    into ``target``; whether it passes: size, CRC-32, every byte consumed, and its end
    between blocks (the last piece: the stream's end)."""
    usize = blocks.usizes[k]
    crc = 0
    at = 0

    def take(chunk: memoryview) -> None:
        nonlocal crc, at
        crc = deflate.crc32(chunk, crc)
        if target is not None:
            a, b = max(lo, at), min(hi, at + chunk.nbytes)
            if b > a:
                target[a - lo : b - lo] = chunk[a - at : b - at]
        at += chunk.nbytes

    result = zblock.inflate_piece(piece, usize, take)
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
