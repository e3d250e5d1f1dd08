"""HDF5 files (MATLAB v7.3 MAT-files) read through a :class:`~npystore.fetch.RangeReader`.

h5py parses the metadata (object headers, B-trees, attributes) over a
:class:`~npystore.fetch.blockfile.BlockFile`, a read-only file object that fetches the object in
large cached blocks: a small file is read whole in one request when it is opened, a large
one costs a few block requests. Array
*values* never go through h5py: :func:`dataset_layout` turns a dataset into an
:class:`~npystore.read.layout.ArrayLayout` (where its bytes are, how its chunks decode) and the
values are then read through the reader, chunks batched and in parallel
(:mod:`npystore.read.chunked`).

Chunk indexes and group symbol tables are never walked by libhdf5 unchecked: a B-tree
node that points to itself would crash the process. :class:`~npystore.files.mat.h5meta.H5Meta`
parses them with npystore's own bounded parsers (:mod:`npystore.formats.h5chunks`,
:mod:`npystore.formats.h5groups`), one batch of requests per B-tree level, and the chunk
table of a :class:`~npystore.read.layout.ChunkedExtent` comes from that walk, its addresses as
the file format defines them (relative to the superblock). libhdf5's own errors on corrupt
structures become :class:`~npystore.errors.FormatError` at one place,
:func:`hdf5_errors`.

Contiguous addresses are checked against the bytes. libhdf5 releases before the 2024 fix
(HDFGroup/hdf5#4236, in 1.14.4) reported addresses relative to the end of the user block,
and MATLAB v7.3 files have a 512-byte user block; so, once per file, a prefix of one
contiguous dataset as libhdf5 reads it is compared with the raw bytes at the reported
address and at that address plus the user block (:class:`AddressCheck`).

Typical use::

    h5 = open_h5(reader)                      # one GET for a small file
    layout = dataset_layout(h5["x"], reader, matlab=True)
    values = LayoutArray(reader, layout).read()
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import h5py
import numpy as np

from npystore.errors import FormatError, NpystoreError, UnsupportedError
from npystore.fetch import RangeReader
from npystore.fetch.blockfile import DEFAULT_BLOCK_SIZE, WHOLE_FILE_LIMIT, BlockFile
from npystore.files.mat.h5meta import H5Meta, PerReader
from npystore.files.mat.h5safe import PlainSafeDataset, check_storage, object_identity
from npystore.formats.h5chunks import ChunkTable, Geometry
from npystore.read.layout import (
    ArrayLayout,
    ChunkedExtent,
    Filter,
    InlineExtent,
    RawExtent,
    Storage,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "WHOLE_FILE_LIMIT",
    "AddressCheck",
    "BlockFile",
    "chunk_table",
    "dataset_layout",
    "plain_layout",
    "hdf5_errors",
    "header_address",
    "object_identity",
    "open_h5",
]

#: Unwritten contiguous datasets up to this size become inline fill values.
_INLINE_FILL_LIMIT: Final = 16 * 2**20
#: Chunk size of the never-written chunk grid standing for a larger unwritten dataset.
_FILL_CHUNK_BYTES: Final = 4 * 2**20
#: Bytes of a contiguous dataset compared with the raw bytes when verifying its address.
_PREFIX_BYTES: Final = 4096
#: Most chunks of one dataset's chunk grid (its offsets, sizes and masks take 20 bytes each,
#: allocated up front: a 2 KB file may declare a grid of 2**40 chunks).
MAX_CHUNK_GRID: Final = 1 << 24


class AddressCheck(PerReader):
    """Byte addresses libhdf5 reports for one file, checked against the file's bytes.

    One per reader (:meth:`for_reader`); the raw bytes compared are read through the file's
    :class:`~npystore.files.mat.h5meta.H5Meta` (from the block cache :func:`open_h5`
    attached to it, while that is open). The first contiguous dataset
    decides the correction of every contiguous address of the file
    (:attr:`contiguous_shift`, 0 or the user block size). Chunk addresses come from
    npystore's own parse of the chunk index and need no correction.

    Parameters
    ----------
    reader : RangeReader
        Reader of the file.
    """

    def __init__(self, reader: RangeReader) -> None:
        super().__init__(reader)
        #: Bytes added to every contiguous address (None until one was checked).
        self.contiguous_shift: int | None = None

    def __repr__(self) -> str:
        return f"AddressCheck({self.reader.url!r}, contiguous_shift={self.contiguous_shift})"

    def read_raw(self, start: int, stop: int) -> bytes | None:
        """The file's bytes ``[start, stop)``, or None if they lie outside the file."""
        if start < 0 or stop > self.reader.size:
            return None
        return H5Meta.for_reader(self.reader).read_raw(start, stop)

    def contiguous_shift_of(
        self, dset: Any, offset: int, nbytes: int, userblock: int, source: str
    ) -> int:
        """The correction of contiguous addresses, deciding it from ``dset`` if needed.

        A prefix of at most 4 KiB of ``dset`` as h5py reads it is compared with the raw
        bytes at ``offset`` (and ``offset + userblock``).

        Returns
        -------
        int
            0, or ``userblock`` when libhdf5 reports addresses without the user block.

        Raises
        ------
        FormatError
            The raw bytes match libhdf5's values at neither address.
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
    Read members through :func:`npystore.files.mat.h5safe.safe_root`, which refuses external and
    user-defined links, virtual datasets and external storage. Should anything follow
    them anyway, libhdf5 opens external link targets and virtual sources with this file's
    driver (h5py's file-object driver, which ignores file names: they resolve inside this
    same file), never from the local filesystem; only external *storage* is opened by
    name, which is why every read checks :func:`npystore.files.mat.h5safe.check_storage` first.
    """
    blockfile = BlockFile(reader, block_size=block_size)
    with hdf5_errors(f"{reader.url}: not a readable HDF5 file"):
        h5 = h5py.File(blockfile, "r")
        try:
            userblock = int(h5.id.get_create_plist().get_userblock())
            H5Meta.for_reader(reader).attach(blockfile, userblock)
        except BaseException:
            h5.close()
            raise
    return h5


#: What h5py raises for libhdf5's errors (its error stack mapped to Python types).
LIBHDF5_ERRORS: Final = (RuntimeError, OSError, KeyError, ValueError)


@contextmanager
def hdf5_errors(context: str) -> Iterator[None]:
    """Turn the errors libhdf5 reports through h5py into :class:`FormatError`.

    The one place where libhdf5's complaints about a corrupt file (``RuntimeError``,
    ``OSError``, ``KeyError``, ``ValueError`` from h5py: a bad B-tree signature, a heap
    past the end of the file, an unreadable object header) become npystore's error;
    npystore's own errors pass through unchanged, and ``NotImplementedError`` (a valid
    feature h5py does not handle) becomes :class:`UnsupportedError`.

    Parameters
    ----------
    context : str
        Start of the message: the URL and what was being done, e.g.
        ``"s3://b/k.mat: variable x"``; libhdf5's message follows.
    """
    try:
        yield
    except NpystoreError:
        raise
    except NotImplementedError as exc:
        raise UnsupportedError(f"{context}: HDF5 cannot read it: {exc}") from exc
    except LIBHDF5_ERRORS as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise FormatError(f"{context}: HDF5 reports {text}") from exc


def dataset_layout(
    dset: Any,
    reader: RangeReader,
    *,
    matlab: bool = False,
    source: str | None = None,
    check: AddressCheck | None = None,
) -> ArrayLayout:
    """Where the values of an h5py dataset are, as an :class:`~npystore.read.layout.ArrayLayout`.

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
        shape; storage is a :class:`~npystore.read.layout.RawExtent` (contiguous), an
        :class:`~npystore.read.layout.InlineExtent` (compact, empty, or never written) or a
        :class:`~npystore.read.layout.ChunkedExtent` (chunked; never-written chunks read as the
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
        storage = _chunked(dset, reader, shape, dtype, dcpl, userblock, source)
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


def plain_layout(dset: PlainSafeDataset, meta: H5Meta, source: str) -> ArrayLayout:
    """The MATLAB-axes layout of a small plain dataset read from its object header
    (:class:`~npystore.files.mat.h5safe.PlainSafeDataset`): what :func:`dataset_layout` gives
    with ``matlab=True``, without libhdf5 opening the dataset.

    Raises
    ------
    FormatError
        A contiguous dataset's values run past the end of the file.
    """
    plain = dset.plain
    storage: Storage
    if plain.nbytes == 0:
        storage = InlineExtent(b"")
    elif plain.inline is not None:
        storage = InlineExtent(plain.inline)
    else:
        storage = RawExtent(meta.absolute(plain.address, plain.nbytes, source), plain.nbytes)
    return ArrayLayout(plain.dtype, tuple(reversed(plain.shape)), "F", storage)


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
    userblock: int,
    source: str,
) -> ChunkedExtent:
    chunk = tuple(int(c) for c in dset.chunks)
    if len(chunk) != len(shape) or any(c <= 0 for c in chunk):
        raise FormatError(f"{source}: chunk shape {chunk} for a dataset of shape {shape}")
    grid = _grid(shape, chunk, source)
    table = chunk_table(dset, reader, userblock, source)
    offsets = np.full(grid, -1, dtype=np.int64)
    sizes = np.zeros(grid, dtype=np.int64)
    masks = np.zeros(grid, dtype=np.uint32)
    if len(table):
        index = tuple(table.grid[:, d] for d in range(len(shape)))
        offsets[index] = table.addresses + userblock
        sizes[index] = table.sizes
        masks[index] = table.masks
    return ChunkedExtent(chunk, offsets, sizes, masks, _filters(dcpl), _fill_bytes(dcpl, dtype))


def chunk_table(dset: Any, reader: RangeReader, userblock: int, source: str) -> ChunkTable:
    """The stored chunks of a chunked h5py dataset, from npystore's own walk of its chunk
    index (libhdf5 never walks it: see :mod:`npystore.formats.h5chunks`).

    Parameters
    ----------
    dset : h5py.Dataset
        A chunked dataset of the file ``reader`` reads.
    reader : RangeReader
        Reader of the file.
    userblock : int
        The file's user block size (where the superblock is).
    source : str
        Name for messages.

    Returns
    -------
    ChunkTable
        Grid coordinates, addresses (relative to the superblock), sizes and filter masks.

    Raises
    ------
    FormatError
        The layout message or the chunk index is malformed or hostile, or disagrees with
        the dataset's chunk shape.
    UnsupportedError
        A chunk index type npystore does not parse (extensible array, version-2 B-tree),
        or a grid of more than :data:`MAX_CHUNK_GRID` chunks.
    """
    meta = H5Meta.for_reader(reader)
    meta.attach(None, userblock)
    address = header_address(dset)
    h5type = dset.id.get_type()
    geo = Geometry(
        source,
        tuple(int(n) for n in dset.shape),
        tuple(None if m is None else int(m) for m in dset.maxshape),
        int(h5type.get_size()),
        dset.id.get_create_plist().get_nfilters() > 0,
        meta.file_end,
        MAX_CHUNK_GRID,
    )
    layout = meta.chunk_layout(address)
    if layout is None:
        raise FormatError(f"{source}: HDF5 reports a chunked dataset, its layout message is not")
    chunk = tuple(int(c) for c in dset.chunks)
    if layout.chunk != chunk:
        raise FormatError(
            f"{source}: the layout message gives chunks of {layout.chunk}, HDF5 reports {chunk}"
        )
    table = meta.chunk_table(address, geo)
    assert table is not None  # the layout is chunked
    return table


def header_address(obj: Any) -> int:
    """The object header address of an h5py object (relative to the base address)."""
    return object_identity(obj)[1]


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
