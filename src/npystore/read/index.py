"""Checkpoint indexes of deflated members: built in one pass, cached on disk, checked as used.

- :func:`build_index` makes the index in one sequential pass with indexed_gzip (or
  rapidgzip) over :class:`MemberGzipFile`, a gzip view of the member; without either it
  returns ``None``;
- :func:`build_or_load_index` / :func:`load_cached_index`: the index cache directory
  (:func:`index_cache_key`: the object's strong identity and the member; an object whose
  identity is weak, see :mod:`npystore.fetch.identity`, is never cached); an index read
  from it is a :class:`CachedIndex`, checked as it is used (:func:`rebuild_index`);
  :func:`cache_index` writes one.

(A first compute of a member builds its index in the pass its chunk reads share:
:mod:`npystore.read.firstpass`.)
"""

from __future__ import annotations

import functools
import io
import logging
import os
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from npystore.errors import ConsistencyError, FetchError, FormatError
from npystore.fetch import RangeReader
from npystore.fetch.cache import (
    drop_cache_file,
    entry_name,
    read_cache_file,
    write_cache_file,
)
from npystore.formats import deflate
from npystore.formats.deflate import DeflateIndex
from npystore.read.layout import DeflatedMember
from npystore.read.sequential import STREAM_BLOCK, CompressedBlocks, check_full_pass, stream
from npystore.read.slot import IndexSlot

__all__ = [
    "INDEX_SPACING",
    "CachedIndex",
    "MemberGzipFile",
    "build_and_cache_index",
    "build_index",
    "build_or_load_index",
    "index_builder_name",
    "index_cache_key",
    "index_cache_path",
    "load_cached_index",
    "cache_index",
    "max_index_bytes",
    "rebuild_index",
]

#: Output spacing asked of index builders.
INDEX_SPACING: Final = 4 * 2**20

_log = logging.getLogger(__name__)


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
        self._blocks = CompressedBlocks(reader, member)

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
        check_full_pass(source, member, total, crc)
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
    sums = stream(reader, member, memoryview(b""), 0, to_end=True)
    crc, adler = sums if sums is not None else (0, 1)
    check_full_pass(source, member, member.uncompressed_size, crc, adler)
    raise FormatError(f"{source}: the deflate stream is corrupt: {exc}") from None


@dataclass(frozen=True, slots=True)
class CachedIndex(DeflateIndex):
    """A checkpoint index read from the index cache, not built in this process.

    An entry's checksum says it is the one written for this key, not that what it says is
    true: anyone who can write as this user can write an entry (see
    :mod:`npystore.fetch.cache`). So besides the checks of :func:`load_cached_index`, a read
    that resumes from such an index and fails is not blamed on the archive: the entry is
    removed and the index rebuilt (:func:`rebuild_index`), and the output read through it
    is summed per member and compared with the member's CRC-32 once it covers the member
    (:func:`npystore.read.inflate.inflate_range_into`).

    Attributes
    ----------
    cache_dir : str
        The cache directory it was read from.
    key : str
        Its key there (:func:`index_cache_key`).
    """

    cache_dir: str = ""
    key: str = ""


def index_cache_key(reader: RangeReader, member: DeflatedMember) -> str | None:
    """The key of a member's index in the index cache: the object's identity (URL, size and
    its strong version markers) and the member (name, offset, sizes, CRC-32); None when the
    identity is weak (nothing of such an object is kept between opens)."""
    if not reader.identity.strong:
        return None
    return repr(
        (
            "deflate-index",
            reader.token,
            member.name,
            member.offset,
            member.compressed_size,
            member.uncompressed_size,
            member.crc32,
        )
    )


def index_cache_path(reader: RangeReader, member: DeflatedMember, cache_dir: str) -> str | None:
    """Where a member's index is cached (None: an object whose identity is weak)."""
    key = index_cache_key(reader, member)
    return None if key is None else os.path.join(cache_dir, entry_name(key))


def max_index_bytes(member: DeflatedMember) -> int:
    """The most bytes an index of ``member`` written by :func:`build_index` can take: a
    checkpoint (its window included) per quarter of :data:`INDEX_SPACING` of output or
    input, which is more than the builders make. A larger cache entry is not read."""
    per_point = 20 + deflate.WINDOW_SIZE
    step = max(1, INDEX_SPACING // 4)
    points = (member.uncompressed_size + member.compressed_size) // step + 2
    return 36 + points * per_point


def load_cached_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None
) -> CachedIndex | None:
    """The member's index from the local cache, when there is a valid entry for this object
    and member; None otherwise (a damaged, foreign or implausible entry is removed: the
    caller rebuilds it).

    Besides the entry's checksum and key (:func:`npystore.fetch.cache.read_cache_file`),
    the index must match the member's sizes, its checkpoints must be strictly increasing
    and lie inside the member (the first at its start), and no window may hold more bytes
    than were produced before its checkpoint.
    """
    key = None if cache_dir is None else index_cache_key(reader, member)
    if cache_dir is None or key is None:
        return None
    data = read_cache_file(cache_dir, key, max_bytes=max_index_bytes(member))
    if data is None:
        return None
    try:
        cached = DeflateIndex.from_bytes(data, source=f"{cache_dir}/{entry_name(key)}")
    except FormatError as exc:
        drop_cache_file(cache_dir, key, str(exc))
        return None
    problem = _implausible(cached, member)
    if problem is not None:
        drop_cache_file(cache_dir, key, problem)
        return None
    return CachedIndex(
        cached.compressed_size,
        cached.uncompressed_size,
        cached.checkpoints,
        cache_dir=cache_dir,
        key=key,
    )


def _implausible(index: DeflateIndex, member: DeflatedMember) -> str | None:
    """What rules out ``index`` as an index of ``member`` (None: nothing)."""
    sizes = (index.compressed_size, index.uncompressed_size)
    if sizes != (member.compressed_size, member.uncompressed_size):
        return f"sizes {sizes}, the member's are {member.compressed_size, member.uncompressed_size}"
    for cp in index.checkpoints[1:]:
        if not (0 < cp.bit_offset < 8 * member.compressed_size):
            return f"a checkpoint at bit {cp.bit_offset} lies outside the member"
        if not (0 < cp.out_offset < member.uncompressed_size):
            return f"a checkpoint at output byte {cp.out_offset} lies outside the member"
        if len(cp.window) > cp.out_offset:
            return f"a window of {len(cp.window)} bytes at output byte {cp.out_offset}"
    return None


def build_or_load_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None
) -> DeflateIndex | None:
    """The member's index from the local cache, else built (and then cached)."""
    cached = load_cached_index(reader, member, cache_dir)
    if cached is not None:
        return cached
    return build_and_cache_index(reader, member, cache_dir)


def build_and_cache_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None
) -> DeflateIndex | None:
    """Build the member's index (:func:`build_index`) and write it to the cache directory
    (when the object's identity is strong and the index within :func:`max_index_bytes`)."""
    index = build_index(reader, member)
    if index is not None:
        cache_index(reader, member, cache_dir, index)
    return index


def cache_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None, index: DeflateIndex
) -> None:
    """Write the member's index to the cache directory (when there is one, the object's
    identity is strong and the index within :func:`max_index_bytes`)."""
    key = None if cache_dir is None else index_cache_key(reader, member)
    if cache_dir is not None and key is not None:
        data = index.to_bytes()
        if len(data) <= max_index_bytes(member):
            write_cache_file(cache_dir, key, data)


def rebuild_index(
    reader: RangeReader, member: DeflatedMember, slot: IndexSlot, bad: CachedIndex, why: str
) -> DeflateIndex | None:
    """Replace an index read from the cache that was found wrong (``why``): its entry is
    removed, and the index built anew in one checked pass (so a member that is really
    corrupt raises :class:`~npystore.errors.FormatError` here, naming its CRC-32) and cached
    again; the slot then holds it (one rebuild, whichever threads found the entry wrong).
    None when no index builder is installed."""
    _log.warning(
        "%s:%s: the checkpoint index from the index cache (%s) is wrong (%s); removing it "
        "and building the index again",
        reader.url,
        member.name,
        bad.cache_dir,
        why,
    )
    drop_cache_file(bad.cache_dir, bad.key, why)
    build = functools.partial(build_and_cache_index, reader, member, bad.cache_dir)
    return slot.replace(bad, build)
