"""HDF5 files (MATLAB v7.3 MAT-files) read through a :class:`~npystore.fetch.RangeReader`.

h5py parses the metadata (object headers, B-trees, attributes) over a
:class:`~npystore.blockfile.BlockFile`, a read-only file object that fetches the object in
large cached blocks: a small file is read whole in one request when it is opened, a large
one costs a few block requests. Array
*values* never go through h5py: :func:`dataset_layout` turns a dataset into an
:class:`~npystore.layout.ArrayLayout` (where its bytes are, how its chunks decode) and the
values are then read through the reader, chunks batched and in parallel
(:mod:`npystore.chunked`).

Addresses are checked against the bytes. libhdf5 releases before the 2024 fix
(HDFGroup/hdf5#4236, in 1.14.4) reported chunk addresses relative to the end of the user
block, and MATLAB v7.3 files have a 512-byte user block; so, once per file, one chunk as
libhdf5 reads it (``read_direct_chunk``) is compared with the raw bytes at the reported
address and at that address plus the user block (:class:`AddressCheck`), and likewise a
prefix of one contiguous dataset.

Typical use::

    h5 = open_h5(reader)                      # one GET for a small file
    layout = dataset_layout(h5["x"], reader, matlab=True)
    values = LayoutArray(reader, layout).read()
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import h5py
import numpy as np

from npystore.blockfile import DEFAULT_BLOCK_SIZE, WHOLE_FILE_LIMIT, BlockFile
from npystore.errors import FormatError, NpystoreError, UnsupportedError
from npystore.fetch import RangeReader
from npystore.formats import h5index
from npystore.h5guard import check_storage
from npystore.layout import ArrayLayout, ChunkedExtent, Filter, InlineExtent, RawExtent, Storage

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "WHOLE_FILE_LIMIT",
    "AddressCheck",
    "BlockFile",
    "ChunkRecord",
    "chunk_records",
    "dataset_layout",
    "open_h5",
]

_log = logging.getLogger(__name__)

#: Unwritten contiguous datasets up to this size become inline fill values.
_INLINE_FILL_LIMIT: Final = 16 * 2**20
#: Chunk size of the never-written chunk grid standing for a larger unwritten dataset.
_FILL_CHUNK_BYTES: Final = 4 * 2**20
#: Bytes of a contiguous dataset compared with the raw bytes when verifying its address.
_PREFIX_BYTES: Final = 4096
#: Chunks of at most this size are preferred for the address check (cheap to compare).
_CHECK_CHUNK_BYTES: Final = 2**20
#: The first libhdf5 release that reports chunk addresses with the user block.
_FIXED_HDF5: Final = (1, 14, 4)
#: Chunks (in index order) looked at for one already cached, to check addresses with.
_CACHED_SCAN: Final = 64
#: Most bytes of chunk B-tree nodes fetched ahead of libhdf5 for one dataset.
_PRELOAD_BYTES: Final = 32 * 2**20
#: Most chunks of one dataset's chunk grid (its offsets, sizes and masks take 20 bytes each,
#: allocated up front: a 2 KB file may declare a grid of 2**40 chunks).
MAX_CHUNK_GRID: Final = 1 << 24


class AddressCheck:
    """Byte addresses libhdf5 reports for one file, checked against the file's bytes.

    One per reader (:meth:`for_reader`); :func:`open_h5` registers its :class:`BlockFile`
    so that the raw bytes compared come from the block cache. The first chunked dataset
    with a chunk decides the correction of every chunk address of the file
    (:attr:`chunk_shift`, 0 or the user block size), the first contiguous dataset that of
    contiguous addresses (:attr:`contiguous_shift`).

    Parameters
    ----------
    reader : RangeReader
        Reader of the file.
    """

    def __init__(self, reader: RangeReader) -> None:
        self.reader = reader
        #: Bytes added to every chunk address (None until a chunk was checked).
        self.chunk_shift: int | None = None
        #: Bytes added to every contiguous address (None until one was checked).
        self.contiguous_shift: int | None = None
        self._blockfile: weakref.ref[BlockFile] | None = None
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"AddressCheck({self.reader.url!r}, chunk_shift={self.chunk_shift}, "
            f"contiguous_shift={self.contiguous_shift})"
        )

    @classmethod
    def for_reader(cls, reader: RangeReader) -> AddressCheck:
        """The check of ``reader``'s file (made on first use, kept while the reader lives)."""
        with _CHECKS_LOCK:
            check = _CHECKS.get(reader)
            if check is None:
                check = _CHECKS[reader] = cls(reader)
            return check

    def attach(self, blockfile: BlockFile) -> None:
        """Read raw bytes through ``blockfile``'s cache while it is open."""
        self._blockfile = weakref.ref(blockfile)

    def blockfile(self) -> BlockFile | None:
        """The attached :class:`BlockFile`, while it is open."""
        blockfile = self._blockfile() if self._blockfile is not None else None
        return blockfile if blockfile is not None and not blockfile.closed else None

    def read_raw(self, start: int, stop: int) -> bytes | None:
        """The file's bytes ``[start, stop)``, or None if they lie outside the file."""
        if start < 0 or stop > self.reader.size:
            return None
        blockfile = self.blockfile()
        if blockfile is not None:
            return blockfile.read_at(start, stop)
        return self.reader.read(start, stop)

    def chunk_shift_of(
        self, dset: Any, records: Sequence[ChunkRecord], userblock: int, source: str
    ) -> int:
        """The correction of the chunk addresses of ``dset``'s file, deciding it if needed.

        Parameters
        ----------
        dset : h5py.Dataset
            A chunked dataset.
        records : sequence of ChunkRecord
            Its chunks as libhdf5 reports them (at least one).
        userblock : int
            The file's user block size.
        source : str
            Name for messages.

        Returns
        -------
        int
            0, or ``userblock`` when libhdf5 reports addresses without the user block.

        Raises
        ------
        FormatError
            The raw bytes match libhdf5's chunk at neither address.
        """
        with self._lock:
            if self.chunk_shift is None:
                self.chunk_shift = self._decide_chunks(dset, records, userblock, source)
            return self.chunk_shift

    def _decide_chunks(
        self, dset: Any, records: Sequence[ChunkRecord], userblock: int, source: str
    ) -> int:
        # prefer chunks already in the block cache (near the metadata): no request
        blockfile = self.blockfile()
        cached = (
            {
                r
                for r in records[:_CACHED_SCAN]
                if blockfile.cached(r.address, r.address + r.size + userblock)
            }
            if blockfile is not None
            else set()
        )
        small = sorted(
            (r for r in records if r.size <= _CHECK_CHUNK_BYTES),
            key=lambda r: (r not in cached, -r.size),
        )
        candidates = small[:3] or [min(records, key=lambda r: r.size)]
        for rec in candidates:
            _, truth = dset.id.read_direct_chunk(rec.coords)
            truth = bytes(truth)
            plain = self.read_raw(rec.address, rec.address + rec.size) == truth
            shifted = bool(userblock) and (
                self.read_raw(rec.address + userblock, rec.address + userblock + rec.size) == truth
            )
            if plain and not shifted:
                return 0
            if shifted and not plain:
                return userblock
            if not plain:
                raise FormatError(
                    f"{source}: chunk {rec.coords} as HDF5 reads it ({len(truth)} bytes) "
                    f"matches the file's bytes neither at its reported address "
                    f"{rec.address} nor {userblock} bytes later (the user block)"
                )
        # every candidate matched at both addresses (repetitive data): trust the version
        return 0 if h5py.version.hdf5_version_tuple >= _FIXED_HDF5 else userblock

    def contiguous_shift_of(
        self, dset: Any, offset: int, nbytes: int, userblock: int, source: str
    ) -> int:
        """The correction of contiguous addresses, deciding it from ``dset`` if needed.

        A prefix of at most 4 KiB of ``dset`` as h5py reads it is compared with the raw
        bytes at ``offset`` (and ``offset + userblock``). Same returns and errors as
        :meth:`chunk_shift_of`.
        """
        with self._lock:
            if self.contiguous_shift is None:
                self.contiguous_shift = self._decide_contiguous(
                    dset, offset, nbytes, userblock, source
                )
            return self.contiguous_shift

    def _decide_contiguous(
        self, dset: Any, offset: int, nbytes: int, userblock: int, source: str
    ) -> int:
        shape = tuple(dset.shape)
        itemsize = dset.dtype.itemsize
        if shape:
            k = max(1, min(shape[-1], _PREFIX_BYTES // max(itemsize, 1)))
            prefix = dset[(0,) * (len(shape) - 1) + (slice(0, k),)]
        else:
            prefix = dset[()]
        truth = np.ascontiguousarray(prefix, dtype=dset.dtype).tobytes()
        n = len(truth)
        plain = self.read_raw(offset, offset + n) == truth
        shifted = bool(userblock) and self.read_raw(offset + userblock, offset + userblock + n) == (
            truth
        )
        if plain:
            return 0
        if shifted:
            return userblock
        raise FormatError(
            f"{source}: the first {n} bytes of the dataset as HDF5 reads them match the "
            f"file's bytes neither at its reported address {offset} nor {userblock} bytes "
            f"later (the user block)"
        )


#: The address check of each live reader.
_CHECKS: weakref.WeakKeyDictionary[RangeReader, AddressCheck] = weakref.WeakKeyDictionary()
_CHECKS_LOCK: Final = threading.Lock()


def open_h5(reader: RangeReader, *, block_size: int | None = None) -> h5py.File:
    """Open the HDF5 file behind ``reader`` with h5py, over a cached :class:`BlockFile`.

    Parameters
    ----------
    reader : RangeReader
        Reader of the file.
    block_size : int, optional
        Bytes per metadata block (default :data:`DEFAULT_BLOCK_SIZE`); files up to
        :data:`WHOLE_FILE_LIMIT` are read whole, in one request.

    Returns
    -------
    h5py.File
        Open read-only; pass its datasets to :func:`dataset_layout` with the same reader.
        Close it when done (layouts already made keep working: they read through the
        reader).

    Raises
    ------
    FormatError
        Not a readable HDF5 file.

    Notes
    -----
    Read members through :func:`npystore.h5guard.safe_root`, which refuses external and
    user-defined links, virtual datasets and external storage. Should anything follow
    them anyway, libhdf5 opens external link targets and virtual sources with this file's
    driver (h5py's file-object driver, which ignores file names: they resolve inside this
    same file), never from the local filesystem; only external *storage* is opened by
    name, which is why every read checks :func:`npystore.h5guard.check_storage` first.
    """
    blockfile = BlockFile(reader, block_size=block_size)
    try:
        h5 = h5py.File(blockfile, "r")
    except NpystoreError:
        raise
    except OSError as exc:
        raise FormatError(f"{reader.url}: not a readable HDF5 file: {exc}") from exc
    AddressCheck.for_reader(reader).attach(blockfile)
    return h5


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One stored chunk as libhdf5 reports it.

    Attributes
    ----------
    coords : tuple of int
        Element coordinates of the chunk's first element (HDF5 axes).
    filter_mask : int
        Bit ``i`` set: filter ``i`` was skipped.
    address : int
        Reported byte address of the stored chunk (not yet checked).
    size : int
        Stored bytes.
    """

    coords: tuple[int, ...]
    filter_mask: int
    address: int
    size: int


def chunk_records(dset: Any) -> list[ChunkRecord]:
    """Every stored chunk of a chunked h5py dataset (``chunk_iter``, or one
    ``get_chunk_info`` call per chunk with older libhdf5)."""
    out: list[ChunkRecord] = []

    def visit(info: Any) -> None:
        out.append(
            ChunkRecord(
                tuple(int(c) for c in info.chunk_offset),
                int(info.filter_mask),
                int(info.byte_offset),
                int(info.size),
            )
        )

    if hasattr(dset.id, "chunk_iter"):
        dset.id.chunk_iter(visit)
    else:  # pragma: no cover - libhdf5 < 1.12.3
        for i in range(dset.id.get_num_chunks()):
            visit(dset.id.get_chunk_info(i))
    return out


def dataset_layout(
    dset: Any,
    reader: RangeReader,
    *,
    matlab: bool = False,
    source: str | None = None,
    check: AddressCheck | None = None,
) -> ArrayLayout:
    """Where the values of an h5py dataset are, as an :class:`~npystore.layout.ArrayLayout`.

    Parameters
    ----------
    dset : h5py.Dataset
        A dataset of a file opened with :func:`open_h5` on ``reader`` (or any h5py file
        whose bytes ``reader`` reads).
    reader : RangeReader
        Reader of the file; the layout's values are read through it.
    matlab : bool
        Give the layout in MATLAB axes: the HDF5 shape (and chunk shape, and chunk grid)
        reversed, Fortran order (the bytes are the same: MATLAB is column-major).
        Otherwise the HDF5 shape, C order.
    source : str, optional
        Name for messages (default ``"<url>:<dataset name>"``).
    check : AddressCheck, optional
        The file's address check (default :meth:`AddressCheck.for_reader`).

    Returns
    -------
    ArrayLayout
        The stored dtype (``dset.dtype``, byte order and compound fields as stored) and
        shape; storage is a :class:`~npystore.layout.RawExtent` (contiguous), an
        :class:`~npystore.layout.InlineExtent` (compact, empty, or never written) or a
        :class:`~npystore.layout.ChunkedExtent` (chunked; never-written chunks read as the
        fill value). Addresses are verified against the file's bytes once per file.

    Raises
    ------
    UnsupportedError
        Variable-length or reference types, a null dataspace, external storage, virtual
        datasets.
    FormatError
        Addresses that do not match the file's bytes, or data past its end.
    """
    source = source or f"{reader.url}:{dset.name}"
    check = check or AddressCheck.for_reader(reader)
    check_storage(dset, source)  # virtual datasets and external storage: refused first
    dtype = np.dtype(dset.dtype)
    if dtype.hasobject:
        raise UnsupportedError(
            f"{source}: dataset of type {dtype} (variable-length or references) has no "
            f"fixed-size elements to read"
        )
    if dset.shape is None:
        raise UnsupportedError(f"{source}: dataset with a null dataspace (no shape)")
    shape = tuple(int(n) for n in dset.shape)
    dcpl = dset.id.get_create_plist()
    kind = dcpl.get_layout()
    userblock = int(dset.file.id.get_create_plist().get_userblock())
    storage: Storage
    if math.prod(shape) == 0:
        storage = InlineExtent(b"")
    elif kind == h5py.h5d.COMPACT:
        values = np.empty(shape, dtype=dtype)
        dset.read_direct(values)
        storage = InlineExtent(values.tobytes())
    elif kind == h5py.h5d.CONTIGUOUS:
        storage = _contiguous(dset, reader, shape, dtype, dcpl, check, userblock, source)
    elif kind == h5py.h5d.CHUNKED:
        storage = _chunked(dset, reader, shape, dtype, dcpl, check, userblock, source)
    else:
        raise UnsupportedError(f"{source}: HDF5 storage layout {kind}")
    if not matlab:
        return ArrayLayout(dtype, shape, "C", storage)
    if isinstance(storage, ChunkedExtent):
        storage = ChunkedExtent(
            tuple(reversed(storage.chunk_shape)),
            np.ascontiguousarray(storage.offsets.T),
            np.ascontiguousarray(storage.sizes.T),
            np.ascontiguousarray(storage.filter_masks.T),
            storage.filters,
            storage.fill,
        )
    return ArrayLayout(dtype, tuple(reversed(shape)), "F", storage)


def _fill_bytes(dcpl: Any, dtype: np.dtype[Any]) -> bytes:
    """One element of the fill value ("" for zeros)."""
    if dcpl.fill_value_defined() == h5py.h5d.FILL_VALUE_UNDEFINED:
        return b""
    value = np.zeros((), dtype=dtype)
    dcpl.get_fill_value(value)
    data = value.tobytes()
    return b"" if not any(data) else data


def _contiguous(
    dset: Any,
    reader: RangeReader,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    dcpl: Any,
    check: AddressCheck,
    userblock: int,
    source: str,
) -> Storage:
    nbytes = math.prod(shape) * dtype.itemsize
    offset = dset.id.get_offset()
    if offset is None or dset.id.get_storage_size() == 0:  # never written
        return _unwritten(shape, dtype, _fill_bytes(dcpl, dtype), source)
    offset = int(offset)
    offset += check.contiguous_shift_of(dset, offset, nbytes, userblock, source)
    if offset + nbytes > reader.size:
        raise FormatError(
            f"{source}: {nbytes} bytes of data at byte {offset} run past the end of the "
            f"file ({reader.size} bytes)"
        )
    return RawExtent(offset, nbytes)


def _unwritten(shape: tuple[int, ...], dtype: np.dtype[Any], fill: bytes, source: str) -> Storage:
    """A never-written dataset: inline fill values, or a grid of unwritten chunks."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes <= _INLINE_FILL_LIMIT:
        return InlineExtent(fill * math.prod(shape) if fill else bytes(nbytes))
    row = math.prod(shape[1:]) * dtype.itemsize
    chunk = (max(1, _FILL_CHUNK_BYTES // max(row, 1)), *shape[1:])
    grid = _grid(shape, chunk, source)
    return ChunkedExtent(
        chunk,
        np.full(grid, -1, dtype=np.int64),
        np.zeros(grid, dtype=np.int64),
        np.zeros(grid, dtype=np.uint32),
        (),
        fill,
    )


def _filters(dcpl: Any) -> tuple[Filter, ...]:
    out = []
    for i in range(dcpl.get_nfilters()):
        fid, flags, client_data, name = dcpl.get_filter(i)
        text = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
        out.append(
            Filter(
                int(fid),
                text,
                tuple(int(c) for c in client_data),
                bool(flags & h5py.h5z.FLAG_OPTIONAL),
            )
        )
    return tuple(out)


def _chunked(
    dset: Any,
    reader: RangeReader,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    dcpl: Any,
    check: AddressCheck,
    userblock: int,
    source: str,
) -> ChunkedExtent:
    chunk = tuple(int(c) for c in dset.chunks)
    if len(chunk) != len(shape) or any(c <= 0 for c in chunk):
        raise FormatError(f"{source}: chunk shape {chunk} for a dataset of shape {shape}")
    grid = _grid(shape, chunk, source)
    offsets = np.full(grid, -1, dtype=np.int64)
    sizes = np.zeros(grid, dtype=np.int64)
    masks = np.zeros(grid, dtype=np.uint32)
    blockfile = check.blockfile()
    if blockfile is not None:
        prefetch_chunk_index(dset, blockfile, userblock, source)
    try:
        records = [
            r
            for r in chunk_records(dset)
            if all(0 <= o < n for o, n in zip(r.coords, shape, strict=True))
        ]
    finally:
        if blockfile is not None:
            blockfile.drop_preloaded()
    if records:
        shift = check.chunk_shift_of(dset, records, userblock, source)
        index = tuple(
            np.array([r.coords[d] // chunk[d] for r in records], dtype=np.intp)
            for d in range(len(shape))
        )
        offsets[index] = np.array([r.address for r in records], dtype=np.int64) + shift
        sizes[index] = [r.size for r in records]
        masks[index] = [r.filter_mask for r in records]
        end = offsets[index] + sizes[index]
        if int(end.max()) > reader.size:
            worst = int(np.argmax(end))
            raise FormatError(
                f"{source}: chunk {records[worst].coords} at bytes "
                f"[{int(offsets[index][worst])}, {int(end[worst])}) runs past the end of "
                f"the file ({reader.size} bytes)"
            )
    return ChunkedExtent(chunk, offsets, sizes, masks, _filters(dcpl), _fill_bytes(dcpl, dtype))


def prefetch_chunk_index(dset: Any, blockfile: BlockFile, base: int, source: str) -> int:
    """Fetch the nodes of ``dset``'s chunk B-tree into ``blockfile``, one level per batch of
    concurrent requests, before libhdf5 walks them one at a time.

    Only version-1 B-tree indexes (data layout version 3: what MATLAB, hdf5storage and
    h5py's defaults write) are walked, at most :data:`_PRELOAD_BYTES` of nodes; anything
    else is left to libhdf5. The parse only decides what to fetch: libhdf5 still reads and
    checks every node, so a wrong guess costs requests, never values.

    Parameters
    ----------
    dset : h5py.Dataset
        A chunked dataset of the file ``blockfile`` holds.
    blockfile : BlockFile
        The file object h5py reads the file through.
    base : int
        The base address (the user block size).
    source : str
        Name for the debug log.

    Returns
    -------
    int
        Number of nodes fetched (0 when nothing was walked).
    """
    try:
        sb = h5index.parse_superblock(blockfile.read_at(base, base + 32))
        if sb is None:
            return 0
        address = _header_address(dset)
        if address is None:
            return 0
        messages = _header_messages(blockfile, base, address, sb)
        index = h5index.chunk_index(messages, sb.sizeof_addr)
        if index is None:
            return 0
        size = h5index.btree_node_size(index.dimensionality, sb.sizeof_addr, sb.chunk_k)
        level = [index.root]
        seen = set(level)
        fetched = 0
        while level and fetched + len(level) <= _PRELOAD_BYTES // size:
            blockfile.preload([(base + a, base + a + size) for a in level])
            fetched += len(level)
            below: list[int] = []
            for a in level:
                depth, children = h5index.parse_btree_node(
                    blockfile.read_at(base + a, base + a + size),
                    index.dimensionality,
                    sb.sizeof_addr,
                )
                if depth > 0:
                    below.extend(c for c in children if c not in seen)
                    seen.update(children)
            level = below
        return fetched
    except FormatError as exc:
        _log.debug("%s: chunk index not prefetched: %s", source, exc)
        return 0


def _header_address(dset: Any) -> int | None:
    """The object header address of ``dset`` (relative to the base address).

    ``H5Gget_objinfo`` reads the header only; ``H5Oget_info`` would also walk the whole
    chunk index to total its size, one node read at a time: what the prefetch avoids.
    """
    get_objinfo = getattr(h5py.h5g, "get_objinfo", None)
    if get_objinfo is None:  # pragma: no cover - HDF5 built without deprecated symbols
        return None
    low, high = get_objinfo(dset.id).objno
    return int(low) + (int(high) << 64)


def _header_messages(
    blockfile: BlockFile, base: int, address: int, sb: h5index.Superblock
) -> tuple[tuple[int, bytes], ...]:
    """Every message of the object header at ``address`` (continuations followed)."""
    return h5index.object_header_messages(blockfile.read_at, base, address, sb.sizeof_addr)


def _grid(shape: tuple[int, ...], chunk: tuple[int, ...], source: str) -> tuple[int, ...]:
    """The chunk grid of ``shape``, refused before anything is allocated when too large."""
    grid = tuple(-(-n // c) for n, c in zip(shape, chunk, strict=True))
    if math.prod(grid) > MAX_CHUNK_GRID:
        raise UnsupportedError(
            f"{source}: a dataset of shape {shape} in chunks of {chunk} has a grid of "
            f"{math.prod(grid)} chunks; npystore indexes at most {MAX_CHUNK_GRID} chunks "
            f"per dataset"
        )
    return grid
