"""Deflated members read through the fetch layer: whole, or a range of their output.

- :func:`inflate_into` inflates a whole member in one sequential pass (ISA-L when
  installed) straight into a caller's buffer, checking the CRC-32.
- :func:`inflate_range_into` / :func:`inflate_range` / :func:`inflate_range_array` give
  output ``[start, stop)``: from the archive's own block index when it has one and every
  block up to the range passes its check (:mod:`npystore.read.blocks`); else from the
  member's checkpoint index (:mod:`npystore.read.index`: one range read and a short
  inflate from the nearest checkpoint); for the chunks of a first compute of a member with
  no index, from the one pass over the member they share (:mod:`npystore.read.firstpass`,
  which builds the index as it goes); else a sequential pass from the start that stops at
  ``stop``.

All bytes are read through :class:`~npystore.fetch.RangeReader`.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import numpy as np

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.fetch.cache import entry_name
from npystore.formats import deflate, zblock
from npystore.formats.deflate import DeflateIndex
from npystore.read import memo
from npystore.read.blocks import read_blocks, read_blocks_array
from npystore.read.crccheck import CrcLedger
from npystore.read.firstpass import FirstPass
from npystore.read.index import (
    INDEX_SPACING,
    CachedIndex,
    MemberGzipFile,
    build_index,
    build_or_load_index,
    index_builder_name,
    index_cache_path,
    load_cached_index,
    rebuild_index,
)
from npystore.read.layout import DeflatedMember
from npystore.read.memo import compressed_range
from npystore.read.sequential import STREAM_BLOCK, TAIL, check_full_pass, stream
from npystore.read.slot import IndexSlot

__all__ = [
    # re-exported from npystore.read.index (their home since it was split from here)
    "INDEX_SPACING",
    "MemberGzipFile",
    "build_index",
    "build_or_load_index",
    "index_builder_name",
    "index_cache_path",
    "load_cached_index",
    # re-exported from npystore.read.sequential
    "TAIL",
    # this module's
    "inflate_into",
    "inflate_range",
    "inflate_range_array",
    "inflate_range_into",
]

#: Ranges ending in the first 1/HEAD_FRACTION of an unindexed member are inflated from the
#: start instead of building the index first.
HEAD_FRACTION: Final = 8
#: Members with at most this many compressed bytes are inflated from their start (one read,
#: a few milliseconds) rather than indexed.
SMALL_MEMBER: Final = STREAM_BLOCK
#: Members inflating to at most this many bytes are read through a first pass when a chunk
#: read of a compute finds no index (see :func:`_first_pass`).
KEEP_MEMBER: Final = 256 * 2**20
#: A read counts as a chunk of a compute of the whole member (which shares a first pass
#: over it) when it asks for at least 1/KEEP_SHARE of it; a smaller slice builds the index.
KEEP_SHARE: Final = 64


def inflate_into(reader: RangeReader, member: DeflatedMember, out: memoryview) -> None:
    """Inflate the whole member into ``out`` (its uncompressed size) and check its CRC-32
    (a whole stream already in memory goes to :func:`npystore.formats.zlib_whole.inflate_zlib`
    instead)."""
    if out.nbytes != member.uncompressed_size:
        raise ValueError(f"buffer of {out.nbytes} bytes for {member.uncompressed_size}")
    sums = stream(reader, member, out, 0)
    crc, adler = sums if sums is not None else (0, 1)
    check_full_pass(f"{reader.url}:{member.name}", member, member.uncompressed_size, crc, adler)


def _compute_chunk(member: DeflatedMember, want: int) -> bool:
    """Whether a read of ``want`` bytes looks like a chunk of a compute of the whole member
    (at least 1/:data:`KEEP_SHARE` of a member of at most :data:`KEEP_MEMBER` bytes): the
    reads of the rest are to come, and what is inflated ahead of them may be kept."""
    size = member.uncompressed_size
    return size <= KEEP_MEMBER and want * KEEP_SHARE >= size


def _first_pass(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, want: int
) -> FirstPass | None:
    """The first pass the chunk reads of a compute of a member with no index share
    (:class:`~npystore.read.firstpass.FirstPass`), or ``None``: the member has an index
    (in the slot, or in the index cache: then it goes into the slot), the read asks for
    less than 1/:data:`KEEP_SHARE` of the member (a slice: the pass could keep the rest of
    the member after returning a few bytes), the member inflates to more than
    :data:`KEEP_MEMBER` bytes or its compressed bytes are not kept
    (:data:`~npystore.read.memo.MEMO_MEMBER`), zlib cannot be loaded, or the keep budget
    has no room for the whole member (:func:`npystore.read.memo.reserve`, counting the
    passes of other members). A member has at most one first pass; once made, every read
    of the member tries it first.
    """
    made = slot.first_pass()  # (it may hold pieces after installing the index)
    if made is not None or slot.get() is not None:
        return made
    size = member.uncompressed_size
    if (
        not _compute_chunk(member, want)
        or member.compressed_size > memo.MEMO_MEMBER
        or not zblock.available()
    ):
        return None

    def make() -> FirstPass | None:
        # an index from the cache goes into the slot only if it holds none: a second
        # load would replace the index earlier chunks read through (and their CRC ledger)
        cached = functools.partial(load_cached_index, reader, member, slot.cache_dir)
        if slot.ensure(cached) is not None:
            return None
        if not memo.reserve(slot, size):
            return None
        made = FirstPass(reader, member, slot)
        memo.held(slot, size)
        return made

    return slot.first_pass(make)


def inflate_range_array(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, start: int, nbytes: int
) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """Uncompressed bytes ``[start, start + nbytes)`` of a member as a new, writable array
    (the same ways as :func:`inflate_range_into`): a range of a block-indexed member, or a
    chunk of a first compute, comes as the buffer it was inflated into, without a copy."""
    _check_range(member, start, start + nbytes)
    buf = np.empty(nbytes, np.uint8)  # not zero-filled: all is written
    out = memoryview(buf.data)
    if not nbytes or slot.serve(start, out):
        return buf
    if member.blocks is not None:
        keep = _compute_chunk(member, nbytes)
        got = read_blocks_array(reader, member, slot, start, nbytes, keep=keep)
        if got is not None:
            return got
    first = _first_pass(reader, member, slot, nbytes)
    if first is not None:
        got = first.read(start, nbytes)
        if got is not None:
            return got
    _through_index(reader, member, slot, start, out)
    return buf


def _check_range(member: DeflatedMember, start: int, stop: int) -> None:
    if not 0 <= start <= stop <= member.uncompressed_size:
        raise ValueError(f"range [{start}, {stop}) outside {member.uncompressed_size} bytes")


def inflate_range_into(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, start: int, out: memoryview
) -> None:
    """Fill ``out`` with uncompressed bytes ``[start, start + len(out))`` of a member.

    Uses the member's block index, as far as its blocks pass their check; else its
    checkpoint index, from the slot or the cache; else, for a chunk of a compute (at least
    1/:data:`KEEP_SHARE` of a member of at most :data:`KEEP_MEMBER` bytes), within the keep
    budget, the first pass the chunk reads share (it builds the index as it goes); else
    the index is built first (once per process) if an index builder is installed; without
    one, for a small member (:data:`SMALL_MEMBER`), or for a range in the first
    ``1 / HEAD_FRACTION`` of a member not indexed yet, inflates sequentially from the
    start.

    Every pass over the whole member checks its CRC-32 (ZIP) or Adler-32 (zlib): building
    the index, and a sequential pass whose range ends within :data:`TAIL` bytes of the
    member's end (it goes on to the end). So reading every chunk of a member checks it at
    least once, whatever the chunks; a range read from a checkpoint, or a sequential pass
    that stops earlier, cannot check it.

    Raises
    ------
    FormatError
        Corrupt deflate data, a wrong size or a checksum mismatch.
    """
    stop = start + out.nbytes
    _check_range(member, start, stop)
    if start == stop or slot.serve(start, out):
        return
    if member.blocks is not None and read_blocks(
        reader, member, slot, start, out, keep=_compute_chunk(member, out.nbytes)
    ):
        return
    first = _first_pass(reader, member, slot, out.nbytes)
    if first is not None:
        got = first.read(start, out.nbytes)
        if got is not None:
            out[:] = got.data
            return
    _through_index(reader, member, slot, start, out)


def _through_index(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, start: int, out: memoryview
) -> None:
    """Output ``[start, start + len(out))`` through the member's checkpoint index (built
    first if needed), or from the member's start (see :func:`inflate_range_into`): the way
    left once the kept member, the block index and the first pass gave nothing."""
    stop = start + out.nbytes
    if member.compressed_size <= SMALL_MEMBER or (
        slot.get() is None and stop <= member.uncompressed_size // HEAD_FRACTION
    ):
        # small members, and ranges near the start of an unindexed one, are cheaper to
        # inflate from the start than to index first (an index is a whole pass)
        index = slot.get()
    else:
        index = slot.ensure(functools.partial(build_or_load_index, reader, member, slot.cache_dir))
    if index is None:
        _from_start(reader, member, start, out)
        return
    if isinstance(index, CachedIndex):
        _from_cached_index(reader, member, slot, index, start, out)
    else:
        _from_checkpoint(reader, member, index, start, out)


def _from_start(reader: RangeReader, member: DeflatedMember, start: int, out: memoryview) -> None:
    """Output ``[start, start + len(out))`` from a pass from the member's start; a pass that
    ends near the member's end goes on to it, and checks the checksum."""
    stop = start + out.nbytes
    sums = stream(reader, member, out, start, to_end=member.uncompressed_size - stop <= TAIL)
    if sums is not None:
        crc, adler = sums
        check_full_pass(f"{reader.url}:{member.name}", member, member.uncompressed_size, crc, adler)


def _from_checkpoint(
    reader: RangeReader, member: DeflatedMember, index: DeflateIndex, start: int, out: memoryview
) -> None:
    """Output ``[start, start + len(out))`` inflated from the index's checkpoint before it."""
    checkpoint, byte_start, byte_stop = index.locate(start, start + out.nbytes)
    compressed = compressed_range(reader, member, byte_start, byte_stop, read_ahead=True)
    deflate.inflate_from_into(
        checkpoint,
        compressed,
        start - checkpoint.out_offset,
        out,
        source=f"{reader.url}:{member.name}",
    )


def _from_cached_index(
    reader: RangeReader,
    member: DeflatedMember,
    slot: IndexSlot,
    index: CachedIndex,
    start: int,
    out: memoryview,
) -> None:
    """:func:`_from_checkpoint` through an index read from the index cache, which is
    trusted only as far as it is checked (see :class:`~npystore.read.index.CachedIndex`):

    - a resume that fails (corrupt deflate data, a wrong size) is the entry's fault until
      proven otherwise: the entry is removed and the index rebuilt in one checked pass
      (which raises the member's own error if the member is corrupt), then the range is read
      again through the new index;
    - the output is recorded in a CRC-32 ledger of the member's output (the npy header,
      which no array read covers, is inflated from the member's start once everything
      else is recorded): a read that completes the member compares it with the member's
      CRC-32. A mismatch means earlier reads may have returned wrong bytes: the entry is
      removed, the index rebuilt, and :class:`~npystore.errors.FormatError` names the
      entry (never the archive, when its rebuild passes).
    """
    source = f"{reader.url}:{member.name}"
    try:
        _from_checkpoint(reader, member, index, start, out)
    except FormatError as exc:
        fresh = rebuild_index(reader, member, slot, index, f"resuming from it failed: {exc}")
        if fresh is None:  # no index builder: from the member's start
            _from_start(reader, member, start, out)
        elif isinstance(fresh, CachedIndex):  # another process cached it meanwhile
            _from_cached_index(reader, member, slot, fresh, start, out)
        else:
            _from_checkpoint(reader, member, fresh, start, out)
        return
    if member.crc32 is None:
        return

    def make() -> CrcLedger:
        size = member.uncompressed_size
        return CrcLedger(source, 0, size, member.crc32 or 0, 0, 0, size)

    def head(lo: int, hi: int) -> bytes:
        buf = bytearray(hi - lo)
        _from_checkpoint(reader, member, index, lo, memoryview(buf))
        return bytes(buf)

    ledger = slot.ledger(index, make)
    if ledger is None:  # replaced meanwhile: the read that found it wrong raises
        return
    try:
        ledger.record(start, out, head)
    except FormatError as exc:
        fresh = rebuild_index(reader, member, slot, index, f"the output read through it: {exc}")
        if fresh is None:  # no index builder checked the member: one pass does
            _from_start(reader, member, member.uncompressed_size, memoryview(b""))
        raise FormatError(
            f"{source}: the bytes read through the checkpoint index from the index cache "
            f"(entry {entry_name(index.key)} in {index.cache_dir}) do not make the member's "
            f"CRC-32, while the member itself is valid: the entry was wrong (damaged or "
            f"planted despite its checksum), so arrays read through it may be wrong too; it "
            f"was removed and the index rebuilt: read them again"
        ) from None


def inflate_range(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, start: int, stop: int
) -> bytes:
    """Uncompressed bytes ``[start, stop)`` of a member (see :func:`inflate_range_into`)."""
    buf = bytearray(max(0, stop - start))
    inflate_range_into(reader, member, slot, start, memoryview(buf))
    return bytes(buf)
