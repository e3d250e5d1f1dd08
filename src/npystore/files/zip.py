"""ZIP archives (``.npz``) by range reads: the directory at open, member headers in batches.

Opening reads the archive's tail once (the end record and, usually, the whole central
directory; one more read when the directory is larger, or the ZIP64 end record lies
outside the tail). Member headers are resolved lazily and in batches: for every member asked
for, one range holds its local header and the start of its data (the npy header, or for a
deflated member enough compressed bytes to inflate it), all fetched concurrently. Archives
small enough to fit in the tail read need no further request at all.

The local header decides where a member's data starts: ``numpy.savez`` writes a 20-byte ZIP64
extra field in every local header that the central directory lacks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import RangeReader
from npystore.fetch.cache import IndexCacheOption, resolve_cache_dir
from npystore.formats import deflate, npy, zipdir
from npystore.formats.need import NeedMoreBytes
from npystore.formats.shapes import check_shape
from npystore.read.crccheck import CrcLedger, crc32_combine
from npystore.read.drive import parse_with_more
from npystore.read.inflate import inflate_into
from npystore.read.layout import (
    ArrayLayout,
    DeflatedExtent,
    DeflatedMember,
    Order,
    PickledExtent,
    RawExtent,
    Unpickle,
)
from npystore.read.slot import IndexSlot

__all__ = ["MemberInfo", "ZipArchive", "member_key", "resolve_key", "unique_keys"]

#: Bytes read beyond a local header's fixed part and name: room for its extra fields.
_EXTRA_SLACK: Final = 64
#: Data bytes read with a stored member's local header: a plain npy header is 128 bytes.
_STORED_PREFIX: Final = 128
#: Compressed bytes read with a deflated member's local header (its npy header inflates from
#: the first few hundred bytes).
_DEFLATED_PREFIX: Final = 1024
#: Most batches of reads resolving member headers (each round reads, for every member
#: still short, the larger range its local header or npy header asked for).
_HEADER_ROUNDS: Final = 6
#: Largest central directory read (1,000,000 entries with long names fit).
MAX_DIRECTORY_SIZE: Final = 512 * 2**20
#: Default most members an archive may declare (``max_members``): the count is checked
#: before the central directory is read, so a hostile ZIP64 count costs nothing. Opening
#: keeps the directory, about 0.4 KB per member (40 MB at this limit; the headers read
#: later add about as much again), and parses it at about 10 us per member.
DEFAULT_MAX_MEMBERS: Final = 100_000
#: Bytes read from the archive's end first (on S3 together with the object's identity, see
#: :func:`npystore.fetch.open_reader`): the end record and, usually, the central directory.
OPEN_TAIL: Final = 256 * 2**10
_T = TypeVar("_T")

STORED, DEFLATED = 0, 8


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """What the archive says about one member.

    Attributes
    ----------
    key : str
        The name numpy uses for it (``.npy`` stripped).
    entry : ZipEntry
        Its central directory entry.
    data_offset : int
        Absolute offset of its (compressed) data, from the local header.
    header : NpyHeader or None
        Its npy header; ``None`` for a member that is not an ``.npy`` file.
    head_crc : int or None
        CRC-32 of the member's bytes before the array data (its npy header), for stored
        ``.npy`` members: with the CRC-32s of the data read later it checks the member.
    """

    key: str
    entry: zipdir.ZipEntry
    data_offset: int
    header: npy.NpyHeader | None
    head_crc: int | None = None

    @property
    def compressed(self) -> bool:
        """Whether the member is deflated."""
        return self.entry.method == DEFLATED


def member_key(name: str) -> str:
    """The key numpy gives a member: its name without a trailing ``.npy``."""
    return name[:-4] if name.endswith(".npy") else name


def resolve_key(key: str, names: Collection[str]) -> str | None:
    """The member ``numpy.load(...)[key]`` reads, as numpy's ``NpzFile`` resolves it: a
    member named exactly ``key`` first, else ``key + ".npy"``; ``None`` when neither is."""
    if key in names:
        return key
    if key + ".npy" in names:
        return key + ".npy"
    return None


def unique_keys(names: Sequence[str]) -> dict[str, str]:
    """Member name -> the key that reads it, distinct for every member.

    A member's key is its name without ``.npy`` (numpy's ``files``), unless another member
    is named exactly that: numpy then reads that other member for the key (members ``x``
    and ``x.npy`` both list as ``x``; ``numpy.load(p)["x"]`` reads ``x``), and the shadowed
    member keeps its full name (``x.npy``), which numpy resolves to it. Every key is one
    that ``numpy.load(p)[key]`` reads its member by, so no two members share one.
    """
    exact = set(names)
    out: dict[str, str] = {}
    for name in names:
        key = member_key(name)
        out[name] = key if key == name or key not in exact else name
    return out


class ZipArchive:
    """The directory of a ZIP archive and its members' headers, read by ranges.

    Parameters
    ----------
    reader : RangeReader
        Reader of the archive.
    max_header_size : int
        Largest npy header accepted in a member.
    index_cache : str, bool or None
        Local directory where deflate indexes are kept across processes and sessions
        (None or True: the default one, see :func:`npystore.fetch.cache.resolve_cache_dir`;
        False: none).
    max_members : int
        Most members the archive may declare. The count in the end record is checked
        before the central directory is read.

    Raises
    ------
    FormatError
        A malformed directory, among them an end record declaring more members than its
        central directory can hold (each takes at least 46 bytes).
    UnsupportedError
        More than ``max_members`` members, a central directory larger than
        :data:`MAX_DIRECTORY_SIZE`, a split archive, encrypted members.

    Notes
    -----
    Instances pickle (for dask workers) with the directory, the resolved headers and any
    built deflate indexes; the lock is recreated on unpickling.
    """

    def __init__(
        self,
        reader: RangeReader,
        *,
        max_header_size: int = npy.DEFAULT_MAX_HEADER_SIZE,
        index_cache: IndexCacheOption = None,
        max_members: int = DEFAULT_MAX_MEMBERS,
    ) -> None:
        if max_members < 0:
            raise ValueError(f"max_members must be >= 0, got {max_members}")
        self.reader = reader
        self.index_cache = resolve_cache_dir(index_cache)
        self.url = reader.url
        self.max_header_size = max_header_size
        size = reader.size
        self._tail_offset = size - zipdir.tail_size(size, OPEN_TAIL)
        self._tail = reader.read(self._tail_offset, size)
        end = self._parse(
            lambda data, start: zipdir.parse_end_record(data, start, size, source=self.url),
            self._tail,
            self._tail_offset,
        )
        if end.zip64_pending:
            end = self._parse(
                lambda data, start: zipdir.parse_zip64_end_record(
                    data, start, end, size, source=self.url
                ),
                *self._window(end.zip64_record_offset or 0, zipdir.ZIP64_RECORD_SIZE),
            )
        # zipdir has already refused a count its directory cannot hold (46 bytes per member)
        if end.entries > max_members:
            raise UnsupportedError(
                f"{self.url}: the archive declares {end.entries} members, more than "
                f"max_members={max_members}; pass max_members={end.entries} (or more) to "
                "open it"
            )
        if end.cd_size > MAX_DIRECTORY_SIZE:
            raise UnsupportedError(
                f"{self.url}: the central directory has {end.cd_size} bytes, more than the "
                f"{MAX_DIRECTORY_SIZE} npystore reads"
            )
        final_end = end
        self.directory = self._parse(
            lambda data, start: zipdir.parse_central_directory(
                data, start, final_end, size, source=self.url, max_entries=max_members
            ),
            *self._window(end.cd_offset, end.cd_size),
        )
        zipdir.check_members(self.directory, source=self.url)
        self.entries = {e.name: e for e in self.directory.entries}
        self._infos: dict[str, MemberInfo] = {}
        self._slots: dict[str, IndexSlot] = {}
        self._ledgers: dict[str, CrcLedger] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ZipArchive({self.url!r}, members={len(self.entries)})"

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = dict(
                self.__dict__,
                _infos=dict(self._infos),
                _slots=dict(self._slots),
                _ledgers=dict(self._ledgers),
            )
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _window(self, start: int, length: int) -> tuple[bytes, int]:
        """Bytes ``[start, start + length)``: a slice of the tail, or one read."""
        if start >= self._tail_offset:
            lo = start - self._tail_offset
            return self._tail[lo : lo + length], start
        return self.reader.read(start, min(self.reader.size, start + length)), start

    def _parse(self, parse: Callable[[bytes, int], _T], data: bytes, start: int) -> _T:
        """Run a directory parser on ``data`` (the archive from ``start``), reading exactly
        what it asks for when ``data`` is short."""
        return parse_with_more(
            lambda window: parse(*window), self._more, (data, start), source=self.url
        )

    def _more(self, _window: tuple[bytes, int], short: NeedMoreBytes) -> tuple[bytes, int]:
        """The window a directory parser asked for, within what npystore reads."""
        if short.needed > MAX_DIRECTORY_SIZE + zipdir.EOCD_SEARCH:
            raise UnsupportedError(
                f"{self.url}: a directory record of {short.needed} bytes is more than "
                f"npystore reads"
            )
        return self._window(short.offset, short.needed)

    @property
    def names(self) -> list[str]:
        """Member names in central directory order."""
        return [e.name for e in self.directory.entries]

    # -- reading, served from the tail when it holds the range ---------------------------

    def _read_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        out: list[bytes | None] = []
        fetch: list[tuple[int, int]] = []
        where: list[int] = []
        for i, (start, stop) in enumerate(ranges):
            if start >= self._tail_offset:
                lo = start - self._tail_offset
                out.append(self._tail[lo : lo + stop - start])
            else:
                out.append(None)
                fetch.append((start, stop))
                where.append(i)
        for i, data in zip(where, self.reader.read_many(fetch), strict=True):
            out[i] = data
        return [b if b is not None else b"" for b in out]

    # -- member headers --------------------------------------------------------------------

    def info(self, name: str) -> MemberInfo:
        """The member's info, resolving its headers if needed."""
        return self.resolve([name])[name]

    def resolve(self, names: Iterable[str]) -> dict[str, MemberInfo]:
        """Resolve the headers of several members with batched, concurrent range reads."""
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if name not in self.entries:
                raise KeyError(f"{name!r} is not a member of {self.url}")
        with self._lock:
            todo = [n for n in wanted if n not in self._infos]
            if todo:
                self._resolve(todo)
            return {n: self._infos[n] for n in wanted}

    def _first_range(self, entry: zipdir.ZipEntry) -> int:
        name_len = len(entry.raw_name)
        prefix = _DEFLATED_PREFIX if entry.method == DEFLATED else _STORED_PREFIX
        base = zipdir.LOCAL_HEADER_SIZE + name_len + _EXTRA_SLACK
        return base + min(prefix, entry.compressed_size)

    def _resolve(self, names: list[str]) -> None:
        # A loop of its own, not read.drive.parse_with_more: each round is one concurrent
        # batch of reads for every member still short, and a member is short for its npy
        # header (a stored or inflated prefix too short) as well as for its local header
        # (NeedMoreBytes, turned into a length by _try_parse).
        size = self.reader.size
        want = {n: self._first_range(self.entries[n]) for n in names}
        for _round in range(_HEADER_ROUNDS):
            order = list(want)
            datas = self._read_many(
                [
                    (
                        self.entries[n].local_header_offset,
                        min(size, self.entries[n].local_header_offset + want[n]),
                    )
                    for n in order
                ]
            )
            again: dict[str, int] = {}
            for name, data in zip(order, datas, strict=True):
                needed = self._try_parse(name, data)
                if needed is not None:
                    again[name] = needed
            if not again:
                return
            want = again
        raise FormatError(f"{self.url}: could not read the headers of {sorted(want)}")

    def _try_parse(self, name: str, data: bytes) -> int | None:
        """Parse local + npy header from ``data``; return bytes needed if it was too short."""
        entry = self.entries[name]
        source = f"{self.url}:{name}"
        try:
            local = zipdir.parse_local_header(
                data,
                entry,
                self.reader.size,
                source=self.url,
                cd_offset=self.directory.end.cd_offset,
            )
        except NeedMoreBytes as short:
            return short.needed + min(entry.compressed_size, _DEFLATED_PREFIX)
        within = local.data_offset - entry.local_header_offset
        payload = data[within:]
        if entry.method == STORED:
            if entry.compressed_size != entry.uncompressed_size:
                raise FormatError(
                    f"{source}: stored member with compressed size {entry.compressed_size} "
                    f"!= uncompressed size {entry.uncompressed_size}"
                )
            text = payload[: entry.compressed_size]
            complete = len(payload) >= entry.compressed_size
        elif entry.method == DEFLATED:
            text, complete = _inflate_prefix(payload, entry, source, self.max_header_size)
        else:
            raise UnsupportedError(
                f"{source}: compression method {entry.method} is not supported "
                "(expected 0, stored, or 8, deflated)"
            )
        need_more, header = _member_header(text, complete, source, self.max_header_size)
        if need_more:
            grow = max(8 * len(payload), 4096)
            if entry.method == STORED and len(text) >= npy.PREAMBLE_MAX_LEN:
                grow = npy.parse_preamble(text, source=source).data_offset
            return within + min(entry.compressed_size, grow)
        head_crc = None
        if entry.method == STORED and header is not None:
            head_crc = deflate.crc32(text[: header.data_offset])
        self._infos[name] = MemberInfo(
            key=member_key(name),
            entry=entry,
            data_offset=local.data_offset,
            header=header,
            head_crc=head_crc,
        )
        return None

    # -- layouts ---------------------------------------------------------------------------

    def layout(
        self,
        name: str,
        *,
        allow_pickle: bool = False,
        unpickle: Unpickle = Unpickle(),  # noqa: B008 - frozen
    ) -> ArrayLayout:
        """The layout of an ``.npy`` member (``unpickle``: how an object array loads)."""
        info = self.info(name)
        header = info.header
        source = f"{self.url}:{name}"
        if header is None:
            raise FormatError(f"{source}: not an .npy member")
        entry = info.entry
        member_size = entry.uncompressed_size
        if header.is_pickled and not allow_pickle:
            raise npy.pickle_refused(source, header.dtype)
        if not header.is_pickled and header.data_offset + header.nbytes > member_size:
            raise FormatError(
                f"{source}: the npy header declares {header.nbytes} bytes of data from byte "
                f"{header.data_offset}, but the member holds {member_size} bytes"
            )
        check_shape(header.shape, header.dtype, source=source)
        order: Order = "F" if header.fortran_order else "C"
        nbytes = member_size - header.data_offset if header.is_pickled else header.nbytes
        if info.compressed:
            with self._lock:
                slot = self._slots.setdefault(name, IndexSlot(cache_dir=self.index_cache))
            member = deflated_member(info)
            storage: RawExtent | PickledExtent | DeflatedExtent = DeflatedExtent(
                member, header.data_offset, nbytes, slot
            )
        elif header.is_pickled:
            storage = PickledExtent(
                info.data_offset + header.data_offset, nbytes, self._ledger(info, nbytes)
            )
        else:
            storage = RawExtent(
                info.data_offset + header.data_offset, nbytes, self._ledger(info, nbytes)
            )
        options = unpickle if header.is_pickled else None
        return ArrayLayout(header.dtype, header.shape, order, storage, options)

    def _ledger(self, info: MemberInfo, nbytes: int) -> CrcLedger | None:
        """The CRC-32 ledger of a stored ``.npy`` member (one per member, shared by every
        array read from it in this process)."""
        if info.header is None or info.head_crc is None:
            return None
        name = info.entry.name
        with self._lock:
            ledger = self._ledgers.get(name)
            if ledger is None:
                ledger = CrcLedger(
                    f"{self.url}:{name}",
                    info.data_offset,
                    info.entry.uncompressed_size,
                    info.entry.crc32,
                    info.header.data_offset,
                    info.head_crc,
                    nbytes,
                )
                self._ledgers[name] = ledger
            return ledger

    def index_slot(self, name: str) -> IndexSlot | None:
        """The index slot of a deflated member (``None`` for stored ones)."""
        if not self.info(name).compressed:
            return None
        with self._lock:
            return self._slots.setdefault(name, IndexSlot(cache_dir=self.index_cache))

    def member_bytes(self, info: MemberInfo) -> bytes:
        """A member read whole and checked: inflated (size and CRC-32 checked), or stored
        and its CRC-32 compared with the directory's (numpy.load raises BadZipFile)."""
        entry = info.entry
        if info.compressed:
            buf = bytearray(entry.uncompressed_size)
            inflate_into(self.reader, deflated_member(info), memoryview(buf))
            return bytes(buf)
        data = self.reader.read(info.data_offset, info.data_offset + entry.compressed_size)
        crc = deflate.crc32(data)
        if crc != entry.crc32:
            raise FormatError(
                f"{self.url}:{entry.name}: CRC-32 of the member's data is {crc:08x}, the ZIP "
                f"directory says {entry.crc32:08x}: the member is corrupt (numpy.load raises "
                "BadZipFile)"
            )
        return data


def deflated_member(info: MemberInfo) -> DeflatedMember:
    """Where a deflated member's stream is and what it must inflate to."""
    e = info.entry
    blocks = e.blocks if e.blocks is not None and _blocks_agree(e.blocks, e.crc32) else None
    return DeflatedMember(
        e.name, info.data_offset, e.compressed_size, e.uncompressed_size, e.crc32, blocks=blocks
    )


def _blocks_agree(blocks: zipdir.BlockIndex, crc: int) -> bool:
    """Whether a block index's CRC-32s combine to the member's (an index that does not is
    ignored: the member is read as any other)."""
    total = 0
    for block_crc, usize in zip(blocks.crcs, blocks.usizes, strict=True):
        total = crc32_combine(total, block_crc, usize)
    return total == crc


def _inflate_prefix(
    payload: bytes, entry: zipdir.ZipEntry, source: str, max_header_size: int
) -> tuple[bytes, bool]:
    """Inflate what the compressed prefix gives, up to the longest header accepted;
    ``complete`` if it was the whole member."""
    d = deflate.raw_decompressobj()
    limit = min(entry.uncompressed_size, max_header_size + npy.PREAMBLE_MAX_LEN)
    try:
        out = d.decompress(payload[: entry.compressed_size], max(1, limit))
    except deflate.INFLATE_ERRORS as exc:
        raise FormatError(f"{source}: corrupt deflate data at the member's start: {exc}") from None
    return bytes(out), len(payload) >= entry.compressed_size


def _member_header(
    text: bytes, complete: bool, source: str, max_header_size: int
) -> tuple[bool, npy.NpyHeader | None]:
    """``(need_more, header)``: the npy header in ``text`` (None for a non-npy member), or
    ``need_more`` when ``text`` is too short to tell."""
    if len(text) < len(npy.MAGIC):
        return (not complete), None
    if not npy.is_npy(text):
        return False, None
    if len(text) < npy.PREAMBLE_MAX_LEN and not complete:
        return True, None
    preamble = npy.parse_preamble(text, source=source)
    if preamble.header_length > max_header_size:
        raise FormatError(
            f"{source}: npy header declares {preamble.header_length} bytes, more than "
            f"max_header_size={max_header_size}"
        )
    if len(text) < preamble.data_offset:
        if complete:
            raise FormatError(
                f"{source}: truncated npy header: the member has {len(text)} bytes, the "
                f"header ends at byte {preamble.data_offset}"
            )
        return True, None
    return False, npy.parse_header(
        preamble, text[preamble.header_start : preamble.data_offset], source=source
    )
