"""Checkpoint indexes of deflated members: built, cached on disk, built in the background.

- :func:`build_index` makes the index in one sequential pass with indexed_gzip (or
  rapidgzip) over :class:`MemberGzipFile`, a gzip view of the member; without either it
  returns ``None``;
- :func:`build_or_load_index` / :func:`load_cached_index`: the index cache directory
  (:func:`index_cache_path`, keyed by the object's identity and the member).

(A first compute of a member builds its index in the pass its chunk reads share:
:mod:`npystore.read.firstpass`.)
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, NoReturn

from npystore.errors import ConsistencyError, FetchError, FormatError
from npystore.fetch import RangeReader, read_cache_file, write_cache_file
from npystore.formats import deflate
from npystore.formats.deflate import DeflateIndex
from npystore.read.layout import DeflatedMember
from npystore.read.sequential import STREAM_BLOCK, CompressedBlocks, check_full_pass, stream

__all__ = [
    "INDEX_SPACING",
    "MemberGzipFile",
    "build_and_cache_index",
    "build_index",
    "build_or_load_index",
    "index_builder_name",
    "index_cache_path",
    "load_cached_index",
]

#: Output spacing asked of index builders.
INDEX_SPACING: Final = 4 * 2**20

_log = logging.getLogger(__name__)
_BACKGROUND: ThreadPoolExecutor | None = None
_BACKGROUND_LOCK = threading.Lock()


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


def index_cache_path(reader: RangeReader, member: DeflatedMember, cache_dir: str) -> str:
    """Where a member's index is cached: keyed by the object's identity and the member."""
    key = repr((reader.token, member.name, member.offset, member.compressed_size, member.crc32))
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return os.path.join(cache_dir, f"{digest}.dflidx")


def load_cached_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None
) -> DeflateIndex | None:
    """The member's index from the local cache, when there is one for this object and it
    matches the member's sizes (a damaged entry counts as none: the caller rebuilds it)."""
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
    return build_and_cache_index(reader, member, cache_dir)


def build_and_cache_index(
    reader: RangeReader, member: DeflatedMember, cache_dir: str | None
) -> DeflateIndex | None:
    """Build the member's index (:func:`build_index`) and write it to the cache directory."""
    index = build_index(reader, member)
    if index is not None and cache_dir is not None:
        write_cache_file(index_cache_path(reader, member, cache_dir), index.to_bytes())
    return index
