"""npystore's own reading of an HDF5 file's structures that libhdf5 must not walk unchecked.

libhdf5 trusts the B-trees of a file: a chunk index or a group B-tree whose node points to
itself crashes the process. :class:`H5Meta` reads the superblock, object headers, chunk
indexes (:mod:`npystore.formats.h5chunks`) and group symbol tables
(:mod:`npystore.formats.h5groups`) itself, through the same cached
:class:`~npystore.fetch.blockfile.BlockFile` h5py reads, one batch of concurrent requests per
B-tree level, and keeps what it validated. :mod:`npystore.files.mat.hdf5` builds chunk tables
from it (and compares contiguous addresses with the raw bytes it reads, :meth:`H5Meta.read_raw`)
and :mod:`npystore.files.mat.h5safe` lets libhdf5 at a group only after its symbol table passed.

No h5py here: callers hand in object header addresses and dataset geometry.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, ClassVar, Final, Self

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.fetch.blockfile import BlockFile
from npystore.formats import h5chunks, h5groups, h5index
from npystore.formats.h5chunks import ChunkTable, Geometry

__all__ = ["H5Meta", "PerReader"]

#: Object headers whose messages are kept per file.
_HEADER_CACHE: Final = 4096


class PerReader:
    """What is kept about one file while its reader lives: one instance per reader and
    class (:meth:`for_reader`), its state guarded by ``_lock``.

    Parameters
    ----------
    reader : RangeReader
        Reader of the file.
    """

    #: The instances of this class, by reader (each subclass has its own).
    _kept: ClassVar[weakref.WeakKeyDictionary[RangeReader, Any]]
    _kept_lock: ClassVar[threading.Lock]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._kept = weakref.WeakKeyDictionary()
        cls._kept_lock = threading.Lock()

    def __init__(self, reader: RangeReader) -> None:
        self.reader = reader
        self._lock = threading.RLock()

    @classmethod
    def for_reader(cls, reader: RangeReader) -> Self:
        """The instance of ``reader``'s file (made on first use, kept while it lives)."""
        with cls._kept_lock:
            found: Self | None = cls._kept.get(reader)
            if found is None:
                found = cls._kept[reader] = cls(reader)
            return found


class H5Meta(PerReader):
    """The validated metadata of one HDF5 file (one per reader: :meth:`for_reader`).

    Parameters
    ----------
    reader : RangeReader
        Reader of the file.
    """

    def __init__(self, reader: RangeReader) -> None:
        super().__init__(reader)
        self.base: int | None = None
        self._blockfile: weakref.ref[BlockFile] | None = None
        self._sb: h5index.Superblock | None = None
        self._headers: dict[int, tuple[tuple[int, bytes], ...]] = {}
        self._attributes: dict[int, h5index.CompactAttributes | None] = {}
        self._groups: dict[int, list[tuple[str, int]] | None] = {}

    def __repr__(self) -> str:
        return f"H5Meta({self.reader.url!r}, base={self.base})"

    def attach(self, blockfile: BlockFile | None, base: int) -> None:
        """Read through ``blockfile``'s cache while it is open; the superblock is at
        ``base`` (the user block size)."""
        with self._lock:
            if self.base is not None and self.base != base:
                raise FormatError(
                    f"{self.reader.url}: HDF5 superblock found at {base} and at {self.base}"
                )
            self.base = base
            if blockfile is not None:
                self._blockfile = weakref.ref(blockfile)

    def blockfile(self) -> BlockFile | None:
        """The attached :class:`BlockFile`, while it is open."""
        blockfile = self._blockfile() if self._blockfile is not None else None
        return blockfile if blockfile is not None and not blockfile.closed else None

    @property
    def file_end(self) -> int:
        """Bytes of the file after the base address."""
        return self.reader.size - self._base()

    def _base(self) -> int:
        if self.base is None:
            raise ValueError(f"{self.reader.url}: H5Meta used before attach()")
        return self.base

    def absolute(self, address: int, nbytes: int, source: str) -> int:
        """The file offset of ``nbytes`` at ``address`` (relative to the base address).

        Raises
        ------
        FormatError
            They run past the end of the file.
        """
        if address + nbytes > self.file_end:
            raise FormatError(
                f"{source}: {nbytes} bytes of data at address {address} run past the end of "
                f"the file ({self.reader.size} bytes, base address {self._base()})"
            )
        return self._base() + address

    def read_raw(self, start: int, stop: int) -> bytes:
        """The file's bytes ``[start, stop)`` at absolute offsets (no base address), through
        the block cache while one is attached."""
        blockfile = self.blockfile()
        if blockfile is not None:
            return blockfile.read_at(start, stop)
        return self.reader.read(start, stop)

    def read(self, start: int, stop: int) -> bytes:
        """The bytes ``[start, stop)`` relative to the base address (short at the end)."""
        base = self._base()
        stop = min(base + stop, self.reader.size)
        start = base + start
        if start >= stop:
            return b""
        return self.read_raw(start, stop)

    def fetch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of several ranges relative to the base address, fetched in one batch of
        concurrent requests (what the block cache does not hold already)."""
        base, size = self._base(), self.reader.size
        absolute = [(min(base + a, size), min(base + b, size)) for a, b in ranges]
        absolute = [(a, max(a, b)) for a, b in absolute]
        blockfile = self.blockfile()
        if blockfile is not None:
            blockfile.preload(absolute)
            return [blockfile.read_at(a, b) for a, b in absolute]
        todo = [(a, b) for a, b in absolute if b > a]
        got = iter(self.reader.read_many(todo)) if todo else iter(())
        return [next(got) if b > a else b"" for a, b in absolute]

    def drop_fetched(self) -> None:
        """Forget the extents :meth:`fetch` preloaded into the block cache."""
        blockfile = self.blockfile()
        if blockfile is not None:
            blockfile.drop_preloaded()

    def superblock(self) -> h5index.Superblock:
        """The superblock (with the K values of its extension, versions 2 and 3)."""
        with self._lock:
            if self._sb is None:
                sb = h5index.parse_superblock(self.read(0, h5index.SUPERBLOCK_SIZE))
                if sb.extension is not None:
                    sb = h5index.btree_k_values(self._messages(sb.extension, sb), sb)
                self._sb = sb
            return self._sb

    def messages(self, address: int) -> tuple[tuple[int, bytes], ...]:
        """Every message of the object header at ``address`` (continuations followed)."""
        sb = self.superblock()
        with self._lock:
            found = self._headers.get(address)
            if found is None:
                found = self._messages(address, sb)
                if len(self._headers) >= _HEADER_CACHE:
                    self._headers.clear()
                self._headers[address] = found
            return found

    def attributes(self, address: int) -> h5index.CompactAttributes | None:
        """The attributes the object header at ``address`` keeps itself, or None where
        only libhdf5 can tell (dense or shared attributes, or a header npystore does not
        parse): see :func:`npystore.formats.h5index.compact_attributes`."""
        with self._lock:
            if address in self._attributes:
                return self._attributes[address]
        try:
            messages = self.messages(address)
        except FormatError:
            found = None  # libhdf5 reads the header itself, and reports what it finds
        else:
            sb = self.superblock()
            found = h5index.compact_attributes(messages, sb.sizeof_addr, sb.sizeof_len)
        with self._lock:
            if len(self._attributes) >= _HEADER_CACHE:
                self._attributes.clear()
            self._attributes[address] = found
        return found

    def plain_dataset(self, address: int) -> h5index.PlainDataset | None:
        """The small plain dataset whose object header is at ``address`` (see
        :func:`npystore.formats.h5index.plain_dataset`), or None: not one, or a header
        npystore does not parse (libhdf5 reads it, and reports what it finds)."""
        try:
            messages = self.messages(address)
        except FormatError:
            return None
        sb = self.superblock()
        plain = h5index.plain_dataset(messages, sb.sizeof_addr, sb.sizeof_len)
        if (
            plain is not None
            and plain.inline is None
            and plain.address + plain.nbytes > self.file_end
        ):
            return None  # past the end: libhdf5's error
        return plain

    def plain_values(self, plain: h5index.PlainDataset) -> bytes:
        """The bytes of a :meth:`plain_dataset`'s values."""
        if plain.inline is not None:
            return plain.inline
        data = self.read(plain.address, plain.address + plain.nbytes)
        if len(data) != plain.nbytes:
            raise FormatError(
                f"{self.reader.url}: dataset values at {plain.address}: {len(data)} bytes "
                f"read, {plain.nbytes} expected"
            )
        return data

    def _messages(self, address: int, sb: h5index.Superblock) -> tuple[tuple[int, bytes], ...]:
        if address >= self.file_end:
            raise FormatError(
                f"{self.reader.url}: object header at {address} lies outside the file"
            )
        return h5index.object_header_messages(self.read, 0, address, sb.sizeof_addr)

    def chunk_table(self, address: int, geo: Geometry) -> ChunkTable | None:
        """The validated chunks of the dataset whose object header is at ``address``, or
        None when its layout is not chunked (walked anew each time: the caller keeps it).

        Raises
        ------
        FormatError
            A malformed or hostile layout or chunk index (the message says what and where).
        UnsupportedError
            A chunk index type npystore does not parse.
        """
        sb = self.superblock()
        layout = h5index.chunk_layout(self.messages(address), sb)
        if layout is None:
            return None
        try:
            return h5chunks.run(h5chunks.chunk_walk(layout, sb, geo), self.fetch)
        finally:
            self.drop_fetched()

    def chunk_layout(self, address: int) -> h5index.ChunkLayout | None:
        """The chunked layout message of the object header at ``address`` (None: not
        chunked)."""
        return h5index.chunk_layout(self.messages(address), self.superblock())

    def group_links(self, address: int, source: str) -> list[tuple[str, int]] | None:
        """The links of the old-style group at ``address``, its symbol table validated; None
        for a group whose links live in its object header or in dense storage.

        Raises
        ------
        FormatError
            A malformed or hostile symbol table (B-tree, symbol nodes, local heap).
        """
        with self._lock:
            if address in self._groups:
                return self._groups[address]
        sb = self.superblock()
        messages = self.messages(address)
        stab = h5index.symbol_table(messages, sb.sizeof_addr)
        links: list[tuple[str, int]] | None = None
        if stab is not None:
            walk = h5groups.SymbolTableWalk(stab[0], stab[1], sb, self.file_end, source)
            while ranges := walk.wanted():
                walk.feed(self.fetch(ranges))
            links = walk.result()
            if address == sb.root_header and sb.root_stab not in (None, stab):
                assert sb.root_stab is not None
                cached = h5groups.SymbolTableWalk(*sb.root_stab, sb, self.file_end, source)
                while ranges := cached.wanted():
                    cached.feed(self.fetch(ranges))
                cached.result()
        with self._lock:
            self._groups[address] = links
        return links
