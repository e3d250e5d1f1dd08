"""Reading selections of a layout through a reader: :class:`LayoutArray`.

:class:`LayoutArray` is a lazy, numpy-like view of one array (``shape``, ``dtype``, ``ndim``,
basic indexing). Indexing it plans the byte ranges of the selection
(:func:`npystore.read.layout.plan_reads`), fetches them through the
:class:`~npystore.fetch.RangeReader` and assembles the result in one preallocated buffer:
contiguous pieces are read straight into it, others through a small temporary buffer. It is
what the dask face slices chunk by chunk, and what :func:`npystore.load` reads whole.
"""

from __future__ import annotations

import io
import itertools
import math
import pickle
from collections.abc import Iterator
from itertools import islice
from typing import Any, Final, Literal

import numpy as np

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.read.layout import (
    ArrayLayout,
    ChunkedExtent,
    ConvertedExtent,
    DeflatedExtent,
    Hyperslab,
    InlineExtent,
    PickledExtent,
    Piece,
    RawExtent,
    ReadPlan,
    Unpickle,
    full_selection,
    plan_reads,
)

__all__ = [
    "LayoutArray",
    "as_records",
    "convert_values",
    "load_pickle_file",
    "normalize_key",
    "read_selection",
]

#: Pieces fetched per batch (bounds memory and keeps many requests in flight).
_BATCH: Final = 1024
#: A gap or span limit that never splits (inflating is sequential anyway).
_UNBOUNDED: Final = 1 << 62

Key = tuple[Any, ...]


def as_records(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array`` viewed as whole records (unstructured ``np.void`` of its itemsize) when its
    dtype is structured, else ``array`` itself: copies and index results through the view
    keep every byte of each record.

    numpy copies structured values field by field (assignment, ``copy``, fancy indexing),
    so the padding bytes between fields would be whatever the destination held (for a new
    buffer, uninitialised memory); ``numpy.load`` gives the file's bytes. Every buffer npystore
    assembles from pieces copies through this view (no copy is made here).
    """
    dtype = array.dtype
    if dtype.names is None or dtype.hasobject:
        return array
    return array.view(np.dtype((np.void, dtype.itemsize)))


def normalize_key(key: Any, shape: tuple[int, ...]) -> tuple[Hyperslab, Key]:
    """Split a numpy index into a hyperslab to read and a numpy key to apply after.

    Parameters
    ----------
    key : int, slice, Ellipsis, None, integer or boolean array, or a tuple of them
        A numpy index. Integer arrays (and 1-d boolean masks) read the smallest hyperslab
        covering them and then index it, so numpy's advanced-indexing rules apply unchanged.
    shape : tuple of int
        The array's shape.

    Returns
    -------
    selection : Hyperslab
        Per dimension ``(start, count, step)`` with positive steps.
    post : tuple
        Index applied to the hyperslab's result: drops integer-indexed dimensions, reverses
        negative-step dimensions, applies shifted index arrays and inserts ``None`` axes,
        exactly as numpy would on the whole array.
    """
    items = key if isinstance(key, tuple) else (key,)
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_real = sum(1 for k in items if k is not None and k is not Ellipsis)
    if n_real > len(shape):
        raise IndexError(
            f"too many indices for array: array is {len(shape)}-dimensional, "
            f"but {n_real} were indexed"
        )
    if n_ellipsis == 0:
        items = (*items, Ellipsis)
    expanded: list[Any] = []
    for k in items:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - n_real))
        else:
            expanded.append(k)
    selection: list[tuple[int, int, int]] = []
    post: list[Any] = []
    dim = 0
    for k in expanded:
        if k is None:
            post.append(None)
            continue
        n = shape[dim]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            r = range(start, stop, step)
            if len(r) == 0:
                selection.append((0, 0, 1))
                post.append(slice(None))
            elif step > 0:
                selection.append((r[0], len(r), step))
                post.append(slice(None))
            else:
                selection.append((r[-1], len(r), -step))
                post.append(slice(None, None, -1))
        elif isinstance(k, int | np.integer) and not isinstance(k, bool | np.bool_):
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            selection.append((i % n, 1, 1))
            post.append(0)
        elif isinstance(k, list | np.ndarray):
            sel, shifted = _array_index(k, n, dim)
            selection.append(sel)
            post.append(shifted)
        else:
            raise TypeError(
                f"only integers, slices, Ellipsis, None and integer or boolean arrays are "
                f"valid indices, got {k!r}"
            )
        dim += 1
    return tuple(selection), tuple(post)


def _array_index(
    k: Any, n: int, dim: int
) -> tuple[tuple[int, int, int], np.ndarray[Any, np.dtype[np.intp]]]:
    arr = np.asarray(k)
    if arr.dtype == np.bool_:
        if arr.ndim != 1 or arr.shape[0] != n:
            raise IndexError(
                f"boolean index of shape {arr.shape} does not match axis {dim} of size {n}"
            )
        arr = np.flatnonzero(arr)
    elif arr.size == 0:
        arr = arr.astype(np.intp)
    elif arr.dtype.kind not in "iu":
        raise IndexError(
            f"arrays used as indices must be of integer or boolean type, got {arr.dtype}"
        )
    if arr.size == 0:
        return (0, 0, 1), arr.astype(np.intp)
    if arr.min() < -n or arr.max() >= n:
        bad = arr[(arr < -n) | (arr >= n)][0]
        raise IndexError(f"index {bad} is out of bounds for axis {dim} with size {n}")
    arr = np.where(arr < 0, arr + n, arr).astype(np.intp)
    lo, hi = int(arr.min()), int(arr.max())
    return (lo, hi - lo + 1, 1), arr - lo


def read_selection(
    reader: RangeReader,
    layout: ArrayLayout,
    selection: Hyperslab,
    *,
    parallel: bool = False,
) -> np.ndarray[Any, Any]:
    """Read one hyperslab of a raw layout into a new, writable array.

    Parameters
    ----------
    reader : RangeReader
        Reader of the object holding the layout.
    layout : ArrayLayout
        A layout with :class:`RawExtent` storage.
    selection : Hyperslab
        Per dimension ``(start, count, step)``.
    parallel : bool
        Split large local reads across threads (for eager whole-array reads).

    Returns
    -------
    numpy.ndarray
        Shape ``count`` per dimension, the layout's dtype and memory order.
    """
    storage = layout.storage
    if isinstance(storage, DeflatedExtent):
        return _read_deflated(reader, layout, storage, selection)
    if isinstance(storage, InlineExtent):
        return _read_inline(layout, storage, selection)
    if isinstance(storage, ConvertedExtent):
        real = read_selection(reader, storage.real, selection, parallel=parallel)
        imag = (
            None
            if storage.imag is None
            else read_selection(reader, storage.imag, selection, parallel=parallel)
        )
        return convert_values(layout.dtype, real, imag)
    if isinstance(storage, ChunkedExtent):
        from npystore.read.chunked import read_chunked  # noqa: PLC0415 - chunked imports access

        return read_chunked(reader, layout, storage, selection, parallel=parallel)
    plan = plan_reads(layout, selection, max_gap=reader.max_gap, max_span=reader.max_span)
    dtype = layout.dtype
    nbytes = math.prod(plan.shape) * dtype.itemsize
    if nbytes == 0 or plan.pieces == 0:
        if isinstance(storage, RawExtent) and storage.crc is not None and storage.nbytes == 0:
            storage.crc.record(storage.offset, b"", reader.read)  # a member without data
        return np.ndarray(plan.shape, dtype=dtype, order=layout.order)
    buf = np.empty(nbytes, dtype=np.uint8)
    out: np.ndarray[Any, Any] = np.ndarray(plan.shape, dtype=dtype, buffer=buf, order=layout.order)
    raw = memoryview(buf.data)
    pieces = plan.iter_pieces()
    while batch := list(islice(pieces, _BATCH)):
        _read_batch(reader, plan, out, raw, batch, parallel)
    return out


def _read_batch(
    reader: RangeReader,
    plan: ReadPlan,
    out: np.ndarray[Any, Any],
    raw: memoryview,
    batch: list[Piece],
    parallel: bool,
) -> None:
    direct: list[tuple[int, memoryview]] = []
    staged: list[Piece] = []
    for piece in batch:
        if piece.contiguous:
            o = sum(b * s for (b, _), s in zip(piece.region, out.strides, strict=True))
            direct.append((piece.start, raw[o : o + piece.stop - piece.start]))
        else:
            staged.append(piece)
    storage = plan.layout.storage
    ledger = storage.crc if isinstance(storage, RawExtent) else None
    if direct:
        reader.readinto_many(direct, parallel=parallel)
        if ledger is not None:
            for start, target in direct:
                ledger.record(start, target, reader.read)
    if staged:
        datas = reader.read_many([(p.start, p.stop) for p in staged])
        for piece, data in zip(staged, datas, strict=True):
            if ledger is not None:
                ledger.record(piece.start, data, reader.read)
            view: np.ndarray[Any, Any] = np.ndarray(
                piece.shape, dtype=plan.layout.dtype, buffer=data, strides=plan.strides
            )
            as_records(out)[tuple(slice(b, e) for b, e in piece.region)] = as_records(view)


def convert_values(
    dtype: np.dtype[Any], real: np.ndarray[Any, Any], imag: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    """Stored values as ``dtype``: a cast, or a complex array from two parts or from a
    ``{real, imag}`` compound. Keeps the memory order of ``real``."""
    order: Literal["C", "F"] = (
        "F" if real.flags.f_contiguous and not real.flags.c_contiguous else "C"
    )
    with np.errstate(all="ignore"):
        if dtype.kind == "c":
            out = np.empty(real.shape, dtype, order=order)
            if real.dtype.names is not None:
                out.real = real["real"]
                out.imag = real["imag"]
            else:
                out.real = real
                out.imag = 0 if imag is None else imag
            return out
        if dtype == np.bool_ and real.dtype != np.bool_:
            return np.asarray(real != 0, order=order)
        return real.astype(dtype, order=order)


def _read_inline(
    layout: ArrayLayout, storage: InlineExtent, selection: Hyperslab
) -> np.ndarray[Any, Any]:
    whole = _inline_view(layout, storage)
    picked = np.array(as_records(whole)[_as_index(selection)], order=layout.order)
    return picked.view(layout.dtype)


def _inline_whole(layout: ArrayLayout, storage: InlineExtent) -> np.ndarray[Any, Any]:
    """The whole array of inline bytes: one copy (every byte of each record kept), or,
    once, the bytes themselves when the extent hands them over (writable, aligned)."""
    whole = as_records(_inline_view(layout, storage))
    handover = storage.handover
    if handover is not None and whole.flags.writeable and whole.flags.aligned and handover.take():
        return whole.view(layout.dtype)
    return whole.copy(order=layout.order).view(layout.dtype)


def _inline_view(layout: ArrayLayout, storage: InlineExtent) -> np.ndarray[Any, Any]:
    if len(storage.data) != layout.nbytes:
        raise FormatError(
            f"inline data holds {len(storage.data)} bytes, expected {layout.nbytes} for "
            f"{layout.shape} {layout.dtype}"
        )
    return np.ndarray(layout.shape, dtype=layout.dtype, buffer=storage.data, order=layout.order)


def _read_deflated(
    reader: RangeReader, layout: ArrayLayout, storage: DeflatedExtent, selection: Hyperslab
) -> np.ndarray[Any, Any]:
    """A hyperslab of a deflated member: plan in uncompressed coordinates, inflate one span.

    Inflating is sequential, so the whole selection is one uncompressed span (gaps cost
    inflate time, not requests) from the nearest checkpoint; a contiguous span is inflated
    straight into the output buffer. (:mod:`npystore.read.inflate` and the deflate
    machinery under it are imported here, on the first deflated read: an ``.npy`` file
    never needs them.)
    """
    from npystore.read.inflate import (  # noqa: PLC0415
        TAIL,
        inflate_into,
        inflate_range_array,
        inflate_range_into,
    )

    member = storage.member
    if storage.nbytes == 0 and member.uncompressed_size <= TAIL:
        # no data: the member is (about) its header; inflating it checks its checksum
        inflate_into(reader, member, memoryview(bytearray(member.uncompressed_size)))
    virtual = ArrayLayout(
        layout.dtype, layout.shape, layout.order, RawExtent(storage.data_start, storage.nbytes)
    )
    plan = plan_reads(virtual, selection, max_gap=_UNBOUNDED, max_span=_UNBOUNDED)
    nbytes = math.prod(plan.shape) * layout.dtype.itemsize
    pieces = plan.iter_pieces()
    first = next(pieces, None)
    if first is not None and first.contiguous and first.stop - first.start == nbytes:
        # one span, the whole result: inflated into a buffer that becomes the result (a
        # chunk of a first compute: the buffer the shared pass inflated it into)
        whole = inflate_range_array(reader, member, storage.index, first.start, nbytes)
        return np.ndarray(plan.shape, dtype=layout.dtype, buffer=whole, order=layout.order)
    buf = np.empty(nbytes, dtype=np.uint8)
    out: np.ndarray[Any, Any] = np.ndarray(
        plan.shape, dtype=layout.dtype, buffer=buf, order=layout.order
    )
    raw = memoryview(buf.data)
    for piece in itertools.chain([first] if first is not None else [], pieces):
        if piece.contiguous:
            o = sum(b * s for (b, _), s in zip(piece.region, out.strides, strict=True))
            target = raw[o : o + piece.stop - piece.start]
            inflate_range_into(reader, member, storage.index, piece.start, target)
            continue
        span = bytearray(piece.stop - piece.start)
        inflate_range_into(reader, member, storage.index, piece.start, memoryview(span))
        view: np.ndarray[Any, Any] = np.ndarray(
            piece.shape, dtype=layout.dtype, buffer=span, strides=plan.strides
        )
        as_records(out)[tuple(slice(b, e) for b, e in piece.region)] = as_records(view)
    return out


def _read_whole_deflated(
    reader: RangeReader, layout: ArrayLayout, storage: DeflatedExtent
) -> np.ndarray[Any, Any]:
    """The array's values: copied from the member's inflated bytes when this process keeps
    them (a compressed MAT v5 variable inflated to be parsed: each of its leaves would
    otherwise inflate the whole stream again), else the whole member in one sequential
    pass (CRC checked), viewed without a copy."""
    if storage.index.inflated() is not None:
        out = np.empty(layout.shape, dtype=layout.dtype, order=layout.order)
        view = memoryview(out.reshape(-1, order="A").view(np.uint8).data)
        if storage.index.serve(storage.data_start, view):
            return out
    from npystore.read.inflate import inflate_into  # noqa: PLC0415 - see _read_deflated

    buf = np.empty(storage.member.uncompressed_size, dtype=np.uint8)  # no zero-fill pass
    inflate_into(reader, storage.member, memoryview(buf.data))
    return np.ndarray(
        layout.shape, dtype=layout.dtype, buffer=buf, offset=storage.data_start, order=layout.order
    )


def _load_pickled(reader: RangeReader, layout: ArrayLayout) -> np.ndarray[Any, Any]:
    storage = layout.storage
    if isinstance(storage, DeflatedExtent):
        from npystore.read.inflate import inflate_into  # noqa: PLC0415 - see _read_deflated

        whole = bytearray(storage.member.uncompressed_size)
        inflate_into(reader, storage.member, memoryview(whole))
        data = bytes(whole[storage.data_start :])
    elif isinstance(storage, RawExtent | PickledExtent):
        data = reader.read(storage.offset, storage.offset + storage.nbytes)
        if storage.crc is not None:
            storage.crc.record(storage.offset, data, reader.read)
    else:
        raise TypeError(f"object arrays are never stored as {type(storage).__name__}")
    options = layout.unpickle or Unpickle()
    try:
        value = pickle.loads(data, encoding=options.encoding, fix_imports=options.fix_imports)
    except Exception as exc:
        raise FormatError(
            f"{reader.url}: the pickled object array could not be unpickled: {exc!r}"
        ) from exc
    if not isinstance(value, np.ndarray) or value.shape != layout.shape:
        got = getattr(value, "shape", type(value).__name__)
        raise FormatError(
            f"{reader.url}: the pickle holds {got}, expected an array of shape {layout.shape}"
        )
    return value


def load_pickle_file(reader: RangeReader, unpickle: Unpickle) -> tuple[Any, int]:
    """A whole file that is a plain pickle (not an ``.npy`` or ``.npz``), unpickled as
    ``numpy.load(..., allow_pickle=True)`` does, and the offset where the pickle ended.
    The caller decided ``allow_pickle``: unpickling runs code from the file."""
    data = reader.read(0, reader.size)
    stream = io.BytesIO(data)
    try:
        value = pickle.load(stream, encoding=unpickle.encoding, fix_imports=unpickle.fix_imports)
    except Exception as exc:
        raise FormatError(
            f"{reader.url}: not an .npy or .npz file, and not a pickle either (the first bytes "
            f"are {bytes(data[:8])!r}): {exc!r}"
        ) from exc
    return value, stream.tell()


class LayoutArray:
    """A lazy, read-only, numpy-like array over a layout, read through a reader.

    Supports ``shape``, ``dtype``, ``ndim``, ``size``, ``nbytes`` and basic indexing (ints,
    slices with any step, ``...``, ``None``). Each indexing reads only the bytes the selection
    needs. Pickles small: the reader and the layout.

    Parameters
    ----------
    reader : RangeReader
        Reader of the object.
    layout : ArrayLayout
        Where the array's elements are.
    source : str, optional
        Name for messages (the URL, or ``url:member`` inside an archive).
    """

    def __init__(
        self, reader: RangeReader, layout: ArrayLayout, *, source: str | None = None
    ) -> None:
        self.reader = reader
        self.layout = layout
        self.source = source or reader.url

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self.layout.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The array's dtype (byte order as stored)."""
        return self.layout.dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self.layout.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return self.layout.size

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array in memory."""
        return self.layout.nbytes

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        return (
            f"LayoutArray({self.source!r}, shape={self.shape}, dtype={self.dtype}, "
            f"order={self.layout.order!r})"
        )

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, key: Any) -> np.ndarray[Any, Any]:
        selection, post = normalize_key(key, self.shape)
        if self.layout.dtype.hasobject:
            whole = _load_pickled(self.reader, self.layout)
            # index with a trailing Ellipsis: a 0-d object array stays an array (``a[()]``
            # would return the object it holds: a dict, a list, a sparse matrix, an ndarray)
            index: tuple[Any, ...] = (*_as_index(selection), Ellipsis)
            picked: np.ndarray[Any, Any] = whole[index][(*post, Ellipsis)]
            return picked
        result = read_selection(self.reader, self.layout, selection)
        # through the records view: index arrays copy, and must keep the padding bytes
        picked = as_records(result)[(*post, Ellipsis)]
        return np.asarray(picked if picked.dtype == result.dtype else picked.view(result.dtype))

    def read(self, *, parallel: bool = True) -> np.ndarray[Any, Any]:
        """Read the whole array into one new array (large local reads use threads)."""
        storage = self.layout.storage
        if self.layout.dtype.hasobject:
            return _load_pickled(self.reader, self.layout)
        if isinstance(storage, DeflatedExtent):
            return _read_whole_deflated(self.reader, self.layout, storage)
        if isinstance(storage, InlineExtent):
            return _inline_whole(self.layout, storage)
        if isinstance(storage, ConvertedExtent):
            real = LayoutArray(self.reader, storage.real, source=self.source).read(
                parallel=parallel
            )
            imag = (
                None
                if storage.imag is None
                else LayoutArray(self.reader, storage.imag, source=self.source).read(
                    parallel=parallel
                )
            )
            return convert_values(self.layout.dtype, real, imag)
        return read_selection(
            self.reader, self.layout, full_selection(self.shape), parallel=parallel
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        arr = self.read()
        return arr if dtype is None else arr.astype(dtype, copy=False)


def _as_index(selection: Hyperslab) -> tuple[slice, ...]:
    return tuple(slice(start, start + count * step, step) for start, count, step in selection)
