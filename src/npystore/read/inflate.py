"""Deflated members through the fetch layer: streaming inflate and checkpoint indexes.

- :func:`inflate_into` inflates a whole member in one sequential pass (ISA-L when
  installed) straight into a caller's buffer, checking the CRC-32.
- :func:`inflate_range` returns output ``[start, stop)``: one range read and a short inflate
  from the nearest checkpoint when the member has an index, else a sequential pass from the
  start that stops at ``stop``.
- :func:`build_index` makes the index in one sequential pass with rapidgzip (parallel) or
  indexed_gzip over a gzip wrapper of the member; without either it returns ``None``.

All bytes are read through :class:`~npystore.fetch.RangeReader`.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, NoReturn

from npystore.errors import ConsistencyError, FetchError, FormatError
from npystore.fetch import RangeReader, read_cache_file, write_cache_file
from npystore.formats import deflate
from npystore.formats.deflate import DeflateIndex
from npystore.read import memo
from npystore.read.layout import DeflatedMember
from npystore.read.memo import MEMO_MEMBER, compressed_range
from npystore.read.slot import IndexSlot

if TYPE_CHECKING:
    from npystore.formats.zipdir import BlockIndex  # zipdir loads only for archives

__all__ = [
    "MemberGzipFile",
    "build_index",
    "build_or_load_index",
    "index_cache_path",
    "index_builder_name",
    "load_cached_index",
    "wait_for_background",
    "inflate_into",
    "inflate_range",
    "inflate_range_into",
]

#: Compressed bytes fetched per sequential read.
STREAM_BLOCK: Final = 8 * 2**20
#: Output spacing asked of index builders.
INDEX_SPACING: Final = 4 * 2**20
#: Ranges ending in the first 1/HEAD_FRACTION of an unindexed member are inflated from the
#: start instead of building the index first.
HEAD_FRACTION: Final = 8
#: Members with at most this many compressed bytes are inflated from their start (one read,
#: a few milliseconds) rather than indexed.
SMALL_MEMBER: Final = STREAM_BLOCK
#: Members inflating to at most this many bytes are inflated whole, and kept until read, when
#: a chunk read finds no index (see :func:`_index_or_whole`).
KEEP_MEMBER: Final = 256 * 2**20
#: A pass from the start that stops at most this many bytes before the member's end goes on
#: to the end, so that it checks the CRC-32 (bytes some writers leave after the array data).
TAIL: Final = 64 * 2**10


_log = logging.getLogger(__name__)
_BACKGROUND: ThreadPoolExecutor | None = None
_BACKGROUND_LOCK = threading.Lock()


class _CompressedBlocks:
    """A member's compressed bytes in blocks of :data:`STREAM_BLOCK`, fetched two at a time
    (the one asked for and the next, concurrently); older blocks are dropped."""

    def __init__(self, reader: RangeReader, member: DeflatedMember) -> None:
        self._reader = reader
        self._member = member
        self._blocks: dict[int, bytes | memoryview] = {}
        self._lock = threading.Lock()
        self.count = -(-member.compressed_size // STREAM_BLOCK)

    def get(self, k: int) -> bytes | memoryview:
        with self._lock:
            block = self._blocks.get(k)
            if block is not None:
                return block
            csize = self._member.compressed_size
            if csize <= MEMO_MEMBER:  # kept once per process; the next block comes along
                start, stop = k * STREAM_BLOCK, min(csize, (k + 1) * STREAM_BLOCK)
                block = compressed_range(
                    self._reader, self._member, start, stop, ahead=STREAM_BLOCK
                )
                self._blocks = {k: block}
                return block
            wanted = [j for j in (k, k + 1) if j < self.count and j not in self._blocks]
            ranges = [
                (
                    self._member.offset + j * STREAM_BLOCK,
                    self._member.offset + min(csize, (j + 1) * STREAM_BLOCK),
                )
                for j in wanted
            ]
            for j, data in zip(wanted, self._reader.read_many(ranges), strict=True):
                self._blocks[j] = data
            for old in [j for j in self._blocks if j < k - 1]:
                del self._blocks[old]
            return self._blocks[k]


class MemberGzipFile(io.RawIOBase):
    """A seekable, read-only gzip view of a raw deflate member, read through a reader.

    The bytes are a 10-byte gzip header, the member's compressed data (fetched in blocks of
    :data:`STREAM_BLOCK`, the next block prefetched concurrently) and the 8-byte trailer
    built from the ZIP directory's CRC-32 and size. ``fileno()`` is not supported, so
    index builders read through this object and never open the file themselves.
    """

    def __init__(self, reader: RangeReader, member: DeflatedMember) -> None:
        super().__init__()
        self._reader = reader
        self._member = member
        self._head = deflate.GZIP_HEADER
        # an unknown CRC (zlib streams) gets a zero placeholder: builders skip the check
        self._tail = deflate.gzip_trailer(member.crc32 or 0, member.uncompressed_size)
        self._size = len(self._head) + member.compressed_size + len(self._tail)
        self._pos = 0
        self._blocks = _CompressedBlocks(reader, member)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = 0
        head, tail = self._head, self._tail
        body_end = len(head) + self._member.compressed_size
        while n < view.nbytes and self._pos < self._size:
            pos = self._pos
            if pos < len(head):
                chunk: bytes | memoryview = head[pos:]
            elif pos < body_end:
                rel = pos - len(head)
                k, within = divmod(rel, STREAM_BLOCK)
                chunk = memoryview(self._blocks.get(k))[within:]
            else:
                chunk = tail[pos - body_end :]
            take = min(len(chunk), view.nbytes - n)
            view[n : n + take] = chunk[:take]
            n += take
            self._pos += take
        return n


def index_builder_name() -> str | None:
    """``"indexed_gzip"``, ``"rapidgzip"`` or ``None`` (no index builder installed).

    indexed_gzip comes first: it indexes a 1 GiB member in one zlib-speed pass with about
    100 MB of memory. rapidgzip read through a Python file object is no faster on two cores
    and holds several hundred MB of decoded chunks (measured: 1 GiB member, 2 cores:
    indexed_gzip 3.9 s / +107 MB; rapidgzip 1 thread 2.7 s / +300 MB, 2 threads 8 s /
    +600 MB).
    """
    for name in ("indexed_gzip", "rapidgzip"):
        try:
            __import__(name)
        except ImportError:
            continue
        return name
    return None


def build_index(
    reader: RangeReader, member: DeflatedMember, *, parallelization: int = 1
) -> DeflateIndex | None:
    """Index a deflated member in one sequential pass, checking its CRC-32.

    Parameters
    ----------
    reader : RangeReader
        Reader of the archive.
    member : DeflatedMember
        The member.
    parallelization : int
        Threads for rapidgzip (0: one per core); memory grows with it.

    Returns
    -------
    DeflateIndex or None
        ``None`` when neither rapidgzip nor indexed_gzip is installed.
    """
    builder = index_builder_name()
    if builder is None:
        return None
    source = f"{reader.url}:{member.name}"
    gz = MemberGzipFile(reader, member)
    exported = io.BytesIO()
    crc = 0
    total = 0
    buf = bytearray(STREAM_BLOCK)
    view = memoryview(buf)
    if builder == "rapidgzip" and member.crc32 is None:
        return None  # rapidgzip always checks the gzip trailer's CRC, which is unknown here
    if builder == "rapidgzip":
        import rapidgzip  # noqa: PLC0415

        threads = parallelization or (os.cpu_count() or 1)
        try:
            with rapidgzip.RapidgzipFile(gz, parallelization=threads) as f:
                while n := f.readinto(view):
                    crc = deflate.crc32(view[:n], crc)
                    total += n  # (only members with a known CRC get here)
                f.export_index(exported, rapidgzip.IndexFormat.INDEXED_GZIP)
        except (ValueError, RuntimeError, OSError) as exc:
            # rapidgzip reports corrupt streams and CRC mismatches as ValueError
            _explain_failure(reader, member, exc)
        _check_full_pass(source, member, total, crc)
    else:
        import indexed_gzip  # noqa: PLC0415

        try:
            with indexed_gzip.IndexedGzipFile(
                fileobj=gz,
                spacing=INDEX_SPACING,
                drop_handles=False,
                skip_crc_check=member.crc32 is None,
            ) as f:
                # one pass; zran checks the trailer's CRC-32 and size
                f.build_full_index()
                f.export_index(fileobj=exported)
        except (indexed_gzip.ZranError, ValueError, OSError) as exc:
            _explain_failure(reader, member, exc)

    return deflate.parse_gzidx(
        exported.getvalue(),
        header_size=len(deflate.GZIP_HEADER),
        compressed_size=member.compressed_size,
        source=source,
    )


def _explain_failure(reader: RangeReader, member: DeflatedMember, exc: BaseException) -> NoReturn:
    """Raise a precise FormatError for an index build that failed.

    The builders say only that something failed (``ZRAN_BUILD_INDEX_CRC_ERROR``): one more
    sequential pass (only on this error path) says what: corrupt deflate data, a wrong size,
    or the computed and the recorded CRC-32.
    """
    source = f"{reader.url}:{member.name}"
    if isinstance(exc, FetchError | ConsistencyError):
        raise exc
    sums = _stream(reader, member, memoryview(b""), 0, to_end=True)
    crc, adler = sums if sums is not None else (0, 1)
    _check_full_pass(source, member, member.uncompressed_size, crc, adler)
    raise FormatError(f"{source}: the deflate stream is corrupt: {exc}") from None


def index_cache_path(reader: RangeReader, member: DeflatedMember, cache_dir: str) -> str:
    """Where a member's index is cached: keyed by the object's identity and the member."""
    key = repr((reader.token, member.name, member.offset, member.compressed_size, member.crc32))
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return os.path.join(cache_dir, f"{digest}.dflidx")


def load_cached_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None
) -> DeflateIndex | None:
    """The member's index from the local cache, when there is one for this object."""
    if cache_dir is None:
        return None
    path = index_cache_path(reader, member, cache_dir)
    data = read_cache_file(path)
    if data is None:
        return None
    try:
        cached = DeflateIndex.from_bytes(data, source=path)
    except FormatError:
        return None  # a damaged cache entry: rebuilt by the caller
    if (cached.compressed_size, cached.uncompressed_size) != (
        member.compressed_size,
        member.uncompressed_size,
    ):
        return None
    return cached


def build_or_load_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None
) -> DeflateIndex | None:
    """The member's index from the local cache, else built (and then cached)."""
    cached = load_cached_index(reader, member, cache_dir)
    if cached is not None:
        return cached
    index = build_index(reader, member)
    if index is not None and cache_dir is not None:
        write_cache_file(index_cache_path(reader, member, cache_dir), index.to_bytes())
    return index


def _check_full_pass(
    source: str, member: DeflatedMember, total: int, crc: int, adler: int = 1
) -> None:
    if total != member.uncompressed_size:
        raise FormatError(
            f"{source}: inflated to {total} bytes, {member.sized_by} says "
            f"{member.uncompressed_size}"
        )
    if member.adler32 is not None and adler != member.adler32:
        raise FormatError(
            f"{source}: Adler-32 of the inflated data is {adler:08x}, the zlib trailer says "
            f"{member.adler32:08x}"
        )
    if member.crc32 is not None and crc != member.crc32:
        raise FormatError(
            f"{source}: CRC-32 of the inflated data is {crc:08x}, the ZIP directory says "
            f"{member.crc32:08x}"
        )


#: Most output produced by one decompress call (bounds memory on highly compressible data).
_OUTPUT_CAP: Final = 4 * 2**20
#: Compressed bytes given to one decompress call (here and in ``npz://`` files). Small slices
#: keep each call's output small (about 1 MiB for numpy data), so it comes from the heap and
#: is copied on while it is still in cache, and a call that stops at the output cap leaves
#: at most this much unconsumed input (which the decompressor copies).
INPUT_SLICE: Final = 256 * 2**10


def _compressed_pieces(
    reader: RangeReader, member: DeflatedMember, want: int | None
) -> Iterator[bytes | memoryview]:
    """The member's compressed bytes in order: blocks of :data:`STREAM_BLOCK` (next one
    prefetched) for a whole pass; for output up to ``want``, pieces that start near the
    compressed size ``want`` needs (estimated from the member's ratio) and double."""
    if want is None:
        blocks = _CompressedBlocks(reader, member)
        for k in range(blocks.count):
            yield blocks.get(k)
        return
    csize = member.compressed_size
    ratio = csize / max(1, member.uncompressed_size)
    piece = min(STREAM_BLOCK, max(64 * 2**10, int(want * ratio * 1.25) + 16 * 2**10))
    pos = 0
    while pos < csize:
        stop = min(csize, pos + piece)
        yield compressed_range(reader, member, pos, stop)
        pos = stop
        piece = min(STREAM_BLOCK, 2 * piece)


def _sliced(pieces: Iterator[bytes | memoryview]) -> Iterator[memoryview]:
    """The pieces cut into :data:`INPUT_SLICE` views (no copies)."""
    for piece in pieces:
        view = memoryview(piece)
        for at in range(0, len(view), INPUT_SLICE):
            yield view[at : at + INPUT_SLICE]


def _stream(
    reader: RangeReader,
    member: DeflatedMember,
    out: memoryview,
    skip: int,
    *,
    to_end: bool = False,
) -> tuple[int, int] | None:
    """Inflate from the start; write output bytes ``[skip, skip + len(out))`` into ``out``.

    With ``to_end`` (or when ``out`` reaches the member's end) the whole stream is inflated
    (output past ``out`` is discarded) and checked against the declared size, and the
    CRC-32 and Adler-32 of the whole output are returned; else ``None``. Each checksum is
    computed only when the member declares it (else 0 / 1).
    """
    source = f"{reader.url}:{member.name}"
    size = member.uncompressed_size
    want = skip + out.nbytes
    whole = to_end or want == size
    d = deflate.raw_decompressobj()
    produced = 0
    crc = 0
    adler = 1
    for piece in _sliced(_compressed_pieces(reader, member, None if whole else want)):
        data: bytes | memoryview = piece
        while data:
            # one byte more than the declared size reveals a stream that inflates to more
            limit = min(_OUTPUT_CAP, (size if whole else want) - produced + 1)
            try:
                chunk = d.decompress(data, limit)
            except deflate.INFLATE_ERRORS as exc:
                raise FormatError(f"{source}: corrupt deflate data: {exc}") from None
            data = d.unconsumed_tail
            if produced + len(chunk) > size:
                raise FormatError(
                    f"{source}: inflates to more than the {size} bytes {member.sized_by} says "
                    "(corrupt or mismatched deflate data)"
                )
            lo, hi = max(produced, skip), min(produced + len(chunk), want)
            if hi > lo:
                out[lo - skip : hi - skip] = memoryview(chunk)[lo - produced : hi - produced]
            if whole and member.crc32 is not None:
                crc = deflate.crc32(chunk, crc)
            if whole and member.adler32 is not None:
                adler = zlib.adler32(chunk, adler)
            produced += len(chunk)
            if not whole and produced >= want:
                return None
            if not chunk:
                break
    need = size if whole else want
    if produced < need:
        raise FormatError(f"{source}: deflate stream ended after {produced} bytes, expected {need}")
    return crc, adler


def inflate_into(reader: RangeReader, member: DeflatedMember, out: memoryview) -> None:
    """Inflate the whole member into ``out`` (its uncompressed size) and check its CRC-32."""
    if out.nbytes != member.uncompressed_size:
        raise ValueError(f"buffer of {out.nbytes} bytes for {member.uncompressed_size}")
    sums = _stream(reader, member, out, 0)
    crc, adler = sums if sums is not None else (0, 1)
    _check_full_pass(f"{reader.url}:{member.name}", member, member.uncompressed_size, crc, adler)


def _index_or_whole(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot
) -> DeflateIndex | None:
    """What a chunk read of a member with no index yet in this process uses: the index from
    the cache, else for a member of at most :data:`KEEP_MEMBER` bytes (whose compressed
    bytes :mod:`npystore.read.memo` keeps) the whole member inflated once and kept until
    its bytes have been read (``None``; the index is then built in the background and
    cached, for later processes), else the index built now.

    A dask compute of a member with no index would otherwise pass over it twice: once to
    build the index, once more, chunk by chunk, from its checkpoints.
    """
    if slot.inflated() is not None:  # another chunk's call kept it
        return None
    cached = load_cached_index(reader, member, slot.cache_dir)
    if cached is not None:
        return cached
    size = member.uncompressed_size
    if size > KEEP_MEMBER or member.compressed_size > MEMO_MEMBER or not memo.make_room(size):
        return build_or_load_index(reader, member, slot.cache_dir)
    whole = bytearray(size)
    inflate_into(reader, member, memoryview(whole))  # checks the CRC-32
    slot.keep(whole, until_read=True)
    memo.held(slot, size)
    if index_builder_name() is not None:
        _background().submit(_build_later, reader, member, slot)
    return None


def _background() -> ThreadPoolExecutor:
    """The one thread that builds indexes of members inflated whole (see
    :func:`_index_or_whole`)."""
    global _BACKGROUND  # noqa: PLW0603 - made on first use
    with _BACKGROUND_LOCK:
        if _BACKGROUND is None:
            _BACKGROUND = ThreadPoolExecutor(1, thread_name_prefix="npystore-index")
        return _BACKGROUND


def wait_for_background() -> None:
    """Wait until the indexes being built in the background are built (and cached)."""
    with _BACKGROUND_LOCK:
        pool = _BACKGROUND
    if pool is not None:
        pool.submit(lambda: None).result()  # one thread, in order: everything before is done


def _build_later(reader: RangeReader, member: DeflatedMember, slot: IndexSlot) -> None:
    try:
        slot.ensure(functools.partial(build_or_load_index, reader, member, slot.cache_dir))
    except (FormatError, FetchError, OSError) as exc:
        # the member was just inflated and checked whole, so this is the store or the
        # cache directory: the read that needs the index builds it again and raises then
        _log.warning(
            "%s:%s: building the checkpoint index failed: %s", reader.url, member.name, exc
        )


def inflate_range_into(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, start: int, out: memoryview
) -> None:
    """Fill ``out`` with uncompressed bytes ``[start, start + len(out))`` of a member.

    Uses the member's index: from the cache, else for a member of at most
    :data:`KEEP_MEMBER` bytes the member is inflated whole once and kept until read (the
    index built in the background, for later processes), else the index is built first
    (once per process) if an index builder is installed; without one, for a small member
    (:data:`SMALL_MEMBER`), or for a range in the first ``1 / HEAD_FRACTION`` of a member
    not indexed yet, inflates sequentially from the start.

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
    if not 0 <= start <= stop <= member.uncompressed_size:
        raise ValueError(f"range [{start}, {stop}) outside {member.uncompressed_size} bytes")
    if start == stop:
        return
    if slot.serve(start, out):
        return
    if member.blocks is not None:
        _inflate_blocks(reader, member, member.blocks, start, out)
        return
    if member.compressed_size <= SMALL_MEMBER or (
        slot.get() is None and stop <= member.uncompressed_size // HEAD_FRACTION
    ):
        # small members, and ranges near the start of an unindexed one, are cheaper to
        # inflate from the start than to index first (an index is a whole pass)
        index = slot.get()
    else:
        index = slot.ensure(functools.partial(_index_or_whole, reader, member, slot))
        if index is None and slot.serve(start, out):
            return
    if index is None:
        # a pass that ends near the member's end goes on to it, and checks the checksum
        sums = _stream(reader, member, out, start, to_end=member.uncompressed_size - stop <= TAIL)
        if sums is not None:
            crc, adler = sums
            _check_full_pass(
                f"{reader.url}:{member.name}", member, member.uncompressed_size, crc, adler
            )
        return
    checkpoint, byte_start, byte_stop = index.locate(start, stop)
    compressed = compressed_range(reader, member, byte_start, byte_stop, read_ahead=True)
    deflate.inflate_from_into(
        checkpoint,
        compressed,
        start - checkpoint.out_offset,
        out,
        source=f"{reader.url}:{member.name}",
    )


def _inflate_blocks(
    reader: RangeReader, member: DeflatedMember, blocks: BlockIndex, start: int, out: memoryview
) -> None:
    """Output ``[start, start + len(out))`` from the member's independent blocks: one range
    read of the blocks holding it, each inflated without a dictionary and checked against
    the block index (its size, its compressed bytes consumed exactly, its CRC-32): an index
    that does not describe the stream raises :class:`FormatError`, never returns other
    bytes."""
    source = f"{reader.url}:{member.name}"
    stop = start + out.nbytes
    i, j = blocks.span(start, stop)
    coff, uoff = blocks.coffsets, blocks.uoffsets
    compressed = memoryview(compressed_range(reader, member, coff[i], coff[j]))
    last = len(blocks.usizes) - 1
    for k in range(i, j):
        piece = compressed[coff[k] - coff[i] : coff[k + 1] - coff[i]]
        d = deflate.raw_decompressobj()
        try:
            data = d.decompress(piece, blocks.usizes[k] + 1)
        except deflate.INFLATE_ERRORS as exc:
            raise FormatError(
                f"{source}: deflate block {k} (compressed bytes {coff[k]}..{coff[k + 1]}) does "
                f"not inflate on its own as the archive's block index says: {exc}"
            ) from None
        consumed = not d.unconsumed_tail and not d.unused_data
        if len(data) != blocks.usizes[k] or not consumed or d.eof != (k == last):
            raise FormatError(
                f"{source}: deflate block {k} inflates to {len(data)} bytes (the block index "
                f"says {blocks.usizes[k]}) or does not end where the index says"
            )
        if deflate.crc32(data) != blocks.crcs[k]:
            raise FormatError(
                f"{source}: CRC-32 of deflate block {k} is {deflate.crc32(data):08x}, the "
                f"block index says {blocks.crcs[k]:08x}"
            )
        lo, hi = max(start, uoff[k]), min(stop, uoff[k + 1])
        out[lo - start : hi - start] = memoryview(data)[lo - uoff[k] : hi - uoff[k]]


def inflate_range(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, start: int, stop: int
) -> bytes:
    """Uncompressed bytes ``[start, stop)`` of a member (see :func:`inflate_range_into`)."""
    buf = bytearray(max(0, stop - start))
    inflate_range_into(reader, member, slot, start, memoryview(buf))
    return bytes(buf)
