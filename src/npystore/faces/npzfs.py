"""``npz://``: the members of a ZIP archive (``.npz``) as files, for fsspec.

>>> import numpy as np, fsspec, npystore
>>> np.savez("/tmp/doc_npzfs.npz", x=np.arange(5), y=np.eye(2))
>>> with fsspec.open("npz://x.npy::/tmp/doc_npzfs.npz") as f:
...     np.load(f)
array([0, 1, 2, 3, 4])

:class:`NpzFileSystem` is an fsspec archive filesystem in the manner of fsspec's
``ZipFileSystem`` (``fo`` is the archive, ``target_protocol`` and ``target_options`` say
where it lives, so chained URLs such as ``npz://x.npy::s3://bucket/a.npz`` work), but it
reads the archive through npystore's fetch layer: opening it reads the ZIP directory from
the archive's tail (one request, rarely two), and opening a member reads its local header.

- A *stored* member (``numpy.savez``) is a byte range of the archive: every read is a
  direct range read of exactly the bytes asked for (the first read, and each one that
  continues the previous one, also read ahead, doubling from 64 KiB up to ``block_size``).
  Once the reads of a file have covered the whole member, its CRC-32 is checked.
- A *deflated* member (``numpy.savez_compressed``) is read by inflating: forwards in one
  sequential pass, fetching compressed bytes in growing pieces; a seek backwards restarts
  from the member's start, or from the nearest checkpoint when the member has a deflate
  index (:meth:`NpzFileSystem.build_index`, or one found in ``index_cache``), which also
  serves seeks far ahead. A pass from the start to the end is checked against the
  member's CRC-32.

Names are the archive's own (``x.npy``, not ``x``). Instances are cached by fsspec per
``(fo, target_protocol, target_options, index_cache)``: the directory is read once, and
reads stay pinned to the archive as it was then (a replaced archive raises
:class:`~npystore.errors.ConsistencyError`; ``NpzFileSystem.clear_instance_cache()`` or
``skip_instance_cache=True`` opens it anew).
"""

from __future__ import annotations

import functools
import os
from typing import Any, ClassVar, Final

from fsspec.archive import AbstractArchiveFileSystem
from fsspec.caching import BaseCache, caches
from fsspec.core import split_protocol
from fsspec.registry import known_implementations, register_implementation, registry
from fsspec.spec import AbstractBufferedFile

from npystore.errors import FormatError
from npystore.fetch import RangeReader, open_reader
from npystore.fetch.cache import IndexCacheOption
from npystore.fetch.local import LocalRanges
from npystore.files.zip import MemberInfo, ZipArchive, deflated_member
from npystore.read.crccheck import CrcLedger
from npystore.read.index import build_or_load_index, load_cached_index
from npystore.read.slot import IndexSlot
from npystore.read.stream import FIRST_READAHEAD, StreamInflater

__all__ = ["DeflatedMemberFile", "NpzFileSystem", "StoredMemberFile", "register_protocol"]

PROTOCOL: Final = "npz"
#: Default ``block_size``: the largest read-ahead.
DEFAULT_BLOCK_SIZE: Final = 8 * 2**20


def register_protocol() -> None:
    """Register ``npz://`` with fsspec, unless another implementation holds the name.

    The ``fsspec.specs`` entry point registers the same class whenever fsspec is imported;
    this is for an environment where npystore's entry points are not installed.
    """
    target = "npystore.faces.npzfs.NpzFileSystem"
    current = known_implementations.get(PROTOCOL, {}).get("class")
    loaded = registry.get(PROTOCOL)
    if current in (None, target) and (loaded is None or loaded is NpzFileSystem):
        register_implementation(PROTOCOL, target, clobber=True)


class NpzFileSystem(AbstractArchiveFileSystem):  # type: ignore[misc]
    """The members of a ZIP archive (``.npz``) as read-only files, read by byte ranges.

    Parameters
    ----------
    fo : str or os.PathLike
        The archive: a local path or URL (with ``target_protocol``, a path on that
        filesystem, as fsspec passes it for chained URLs).
    target_protocol : str, optional
        The archive's filesystem protocol (``"s3"``, ``"file"``, ...).
    target_options : mapping, optional
        Options of the archive's filesystem (fsspec's ``storage_options``).
    index_cache : str, bool or None
        Local directory of deflate checkpoint indexes (shared with
        :func:`npystore.open_npz`, the same default): an index found there serves seeks in
        deflated members; :meth:`build_index` stores the indexes it builds there.
    default_block_size : int, optional
        Largest read-ahead of files opened without ``block_size`` (default 8 MiB).
    default_cache_type : str, optional
        fsspec cache of files opened without ``cache_type`` (default: npystore's
        read-ahead on sequential reads only; ``"none"`` reads exactly what is asked for).
        These two are how options reach files opened by ``fsspec.open``.
    **kwargs
        Passed to :class:`fsspec.spec.AbstractFileSystem`.

    Examples
    --------
    >>> import numpy as np, fsspec
    >>> np.savez_compressed("/tmp/doc_npzfs2.npz", a=np.arange(100), b=np.ones(3))
    >>> fs = fsspec.filesystem("npz", fo="/tmp/doc_npzfs2.npz")
    >>> fs.ls("", detail=False)
    ['a.npy', 'b.npy']
    >>> fs.info("a.npy")["size"], fs.info("a.npy")["compression"]
    (928, 'deflate')
    """

    protocol: ClassVar[str] = PROTOCOL
    root_marker: ClassVar[str] = ""

    def __init__(
        self,
        fo: str | os.PathLike[str] = "",
        *,
        target_protocol: str | None = None,
        target_options: dict[str, Any] | None = None,
        index_cache: IndexCacheOption = None,
        default_block_size: int | None = None,
        default_cache_type: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.default_block_size = default_block_size
        self.default_cache_type = default_cache_type
        if not isinstance(fo, str | os.PathLike):
            raise TypeError(
                f"npz:// needs the archive's path or URL as fo=, got {type(fo).__name__}"
            )
        fo = os.fspath(fo)
        if not fo:
            raise ValueError("npz:// needs the archive: fo='s3://bucket/a.npz' or a chained URL")
        url = fo if not target_protocol or split_protocol(fo)[0] else f"{target_protocol}://{fo}"
        self.fo = fo
        self._target = (url, target_options, index_cache)
        self._open_archive()
        self._opened_files = False

    def _open_archive(self) -> None:
        """Open the archive's current version: its reader (pinned) and directory."""
        url, target_options, index_cache = self._target
        self.reader: RangeReader = open_reader(url, target_options)
        self.url = self.reader.url
        if self.reader.size < 22:
            raise FormatError(
                f"{self.url}: {self.reader.size} bytes is too short for a ZIP archive"
            )
        self.archive = ZipArchive(self.reader, index_cache=index_cache)
        #: The resolved cache directory (None: no cache).
        self.index_cache = self.archive.index_cache
        self.dir_cache: dict[str, dict[str, Any]] | None = None

    def _refresh_if_replaced(self) -> None:
        """fsspec keeps one instance per archive and hands it to every later ``fsspec.open``:
        a local archive rewritten since the instance opened it is opened again here (one
        ``stat``), so a new open reads the new version instead of failing on the old pin.
        Files already open keep their reader, pinned to the version they started on."""
        transport = self.reader.transport
        if isinstance(transport, LocalRanges) and not transport.is_current():
            self._open_archive()

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        # member paths are relative to the archive's root
        stripped: str = super()._strip_protocol(path)
        return stripped.lstrip("/")

    def _get_dirs(self) -> None:
        if self.dir_cache is not None:
            return
        cache: dict[str, dict[str, Any]] = {
            d: {"name": d, "size": 0, "type": "directory"}
            for d in self._all_dirnames([n.rstrip("/") for n in self.archive.names])
        }
        for entry in self.archive.directory.entries:
            name = entry.name.rstrip("/")
            is_dir = entry.name.endswith("/")
            cache[name] = {
                "name": name,
                "size": 0 if is_dir else entry.uncompressed_size,
                "type": "directory" if is_dir else "file",
                "compressed_size": entry.compressed_size,
                "compression": {0: "stored", 8: "deflate"}.get(entry.method, str(entry.method)),
                "crc32": entry.crc32,
            }
        self.dir_cache = cache

    def _member(self, path: str) -> MemberInfo:
        """The member at ``path``, its local header read (FileNotFoundError if none)."""
        name = self._strip_protocol(path)
        if name not in self.archive.entries:
            self._get_dirs()
            if self.dir_cache is not None and name in self.dir_cache:
                raise IsADirectoryError(f"{self.url}: {name!r} is a directory of the archive")
            hint = (
                f"; did you mean {name + '.npy'!r}?"
                if name + ".npy" in self.archive.entries
                else ""
            )
            raise FileNotFoundError(
                f"{self.url}: no member {name!r} in the archive ({len(self.archive.entries)} "
                f"members){hint}"
            )
        return self.archive.info(name)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        cache_type: str | None = None,
        **kwargs: Any,
    ) -> AbstractBufferedFile:
        if mode != "rb":
            raise ValueError(f"{self.url}: npz:// is read-only: mode {mode!r}, expected 'rb'")
        if self._opened_files:
            self._refresh_if_replaced()
        self._opened_files = True
        info = self._member(path)
        cls = DeflatedMemberFile if info.compressed else StoredMemberFile
        return cls(
            self,
            info,
            block_size=block_size or self.default_block_size,
            cache_type=cache_type or self.default_cache_type,
            cache_options=cache_options,
            autocommit=autocommit,
            **kwargs,
        )

    def build_index(self, path: str | None = None) -> None:
        """Build the deflate checkpoint index of one deflated member, or of all of them.

        Each is one sequential pass over the member (CRC-32 checked), or a read of
        ``index_cache`` when it holds the index already; afterwards files opened on the
        member seek anywhere at the cost of one range read and a short inflate. Without
        an index builder installed (``indexed_gzip`` or ``rapidgzip``) nothing is built.
        """
        names = [self._member(path).entry.name] if path is not None else self.archive.names
        for name in names:
            slot = self.archive.index_slot(name)
            if slot is None:
                continue
            member = deflated_member(self.archive.info(name))
            slot.ensure(
                functools.partial(build_or_load_index, self.reader, member, self.index_cache)
            )


class _SequentialReadahead(BaseCache):  # type: ignore[misc]
    """Keeps the last block read; reads exactly what is asked for, plus a read-ahead
    (doubling from :data:`FIRST_READAHEAD` up to ``blocksize``) when the read starts where
    the previous one ended (a file read from its start counts as sequential)."""

    name: ClassVar[str] = "npystore-sequential"

    def __init__(self, blocksize: int, fetcher: Any, size: int) -> None:
        super().__init__(blocksize, fetcher, size)
        self.cache = b""
        self.start = 0
        self.end = 0
        self.ahead = 0

    def _fetch(self, start: int | None, end: int | None) -> bytes:
        start = 0 if start is None else start
        end = self.size if end is None else min(end, self.size)
        if start >= end:
            return b""
        if self.start <= start and end <= self.end:
            self.hit_count += 1
            return self.cache[start - self.start : end - self.start]
        self.miss_count += 1
        part = b""
        if self.start <= start < self.end:
            part = self.cache[start - self.start :]
            start = self.end
        if start == self.end:
            self.ahead = min(self.blocksize, max(FIRST_READAHEAD, 2 * self.ahead))
        else:
            self.ahead = 0
        stop = min(self.size, end + self.ahead)
        self.total_requested_bytes += stop - start
        data: bytes = self.fetcher(start, stop)
        self.cache, self.start, self.end = data, start, start + len(data)
        return part + data[: end - start]


class _MemberFile(AbstractBufferedFile):  # type: ignore[misc]
    """A read-only file over one member (what :meth:`NpzFileSystem.open` returns)."""

    def __init__(
        self,
        fs: NpzFileSystem,
        info: MemberInfo,
        *,
        block_size: int | None = None,
        cache_type: str | None = None,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if cache_type is not None and cache_type not in caches:
            raise ValueError(f"unknown cache_type {cache_type!r}, expected one of {list(caches)}")
        self.member = info
        self.reader = fs.reader
        size = info.entry.uncompressed_size
        super().__init__(
            fs,
            info.entry.name,
            mode="rb",
            block_size=block_size or DEFAULT_BLOCK_SIZE,
            cache_type=cache_type or "none",
            cache_options=cache_options,
            size=size,
            **kwargs,
        )
        if cache_type is None:
            self.cache = _SequentialReadahead(self.blocksize, self._fetch_range, size)
        self.details = fs.info(info.entry.name)


class StoredMemberFile(_MemberFile):
    """A stored member: each read is a range read of the archive at the member's data.

    The CRC-32s of the ranges read are collected (:class:`~npystore.read.crccheck.CrcLedger`):
    the read that completes the member (a sequential read to the end, or any reads that
    together cover it) checks it against the ZIP directory's CRC-32.
    """

    def __init__(self, fs: NpzFileSystem, info: MemberInfo, **kwargs: Any) -> None:
        e = info.entry
        self.ledger = CrcLedger(
            f"{fs.url}:{e.name}", info.data_offset, e.uncompressed_size, e.crc32, 0, 0,
            e.uncompressed_size,
        )  # fmt: skip
        super().__init__(fs, info, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if start >= end:
            return b""
        buf = bytearray(end - start)
        offset = self.member.data_offset + start
        self.reader.readinto_many([(offset, memoryview(buf))], parallel=True)
        self.ledger.record(offset, buf)
        return bytes(buf)


class DeflatedMemberFile(_MemberFile):
    """A deflated member: inflated sequentially, restarting (from the start or a
    checkpoint) on a backwards seek."""

    def __init__(self, fs: NpzFileSystem, info: MemberInfo, **kwargs: Any) -> None:
        slot = fs.archive.index_slot(info.entry.name) or IndexSlot()
        member = deflated_member(info)
        if slot.get() is None and fs.index_cache is not None:
            cached = load_cached_index(fs.reader, member, fs.index_cache)
            if cached is not None:
                slot.set(cached)
        self.inflater = StreamInflater(fs.reader, member, slot)
        super().__init__(fs, info, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.inflater.read(start, end)
