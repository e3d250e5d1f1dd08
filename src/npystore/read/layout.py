"""Where every element sits: :class:`ArrayLayout` and the read plans derived from it.

Every format parser produces an :class:`ArrayLayout` (dtype, shape, memory order, and where the
bytes are); every face consumes layouts and asks :func:`plan_reads` which byte ranges hold a
selection. Nothing here does IO or parses a file format.

A selection is a hyperslab: per dimension ``(start, count, step)`` with ``step >= 1``. Its read
plan is a list of :class:`Piece` objects, each one byte range of the file that covers a
rectangular region of the selection. Regions whose bytes are separated by small gaps are read
as one range (the gap is cheaper than another request); a contiguous region is read straight
into the output buffer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from npystore.read.slot import IndexSlot

if TYPE_CHECKING:  # both load only for archives
    from npystore.formats.zipdir import BlockIndex
    from npystore.read.crccheck import CrcLedger

__all__ = [
    "ArrayLayout",
    "ChunkedExtent",
    "ConvertedExtent",
    "DeflatedExtent",
    "DeflatedMember",
    "Filter",
    "Handover",
    "Hyperslab",
    "IndexSlot",
    "InlineExtent",
    "Order",
    "Piece",
    "PickledExtent",
    "Unpickle",
    "RawExtent",
    "ReadPlan",
    "Storage",
    "contiguous_chunks",
    "full_selection",
    "largest_divisor",
    "plan_reads",
    "storage_token",
]

Order = Literal["C", "F"]
#: Per dimension ``(start, count, step)``.
Hyperslab = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class RawExtent:
    """The elements are stored uncompressed, back to back, starting at ``offset``.

    ``crc`` (stored ``.npz`` members) collects the CRC-32 of what is read, to check the
    member once all of it has been read; it takes no part in equality or dask names.
    """

    offset: int
    nbytes: int
    crc: CrcLedger | None = field(default=None, compare=False, hash=False, repr=False)


@dataclass(frozen=True, slots=True)
class PickledExtent:
    """The array is a pickle stream from ``offset`` to ``offset + nbytes`` (object arrays);
    ``crc`` as for :class:`RawExtent`."""

    offset: int
    nbytes: int
    crc: CrcLedger | None = field(default=None, compare=False, hash=False, repr=False)


@dataclass(frozen=True, slots=True)
class Unpickle:
    """How an object array's pickle is loaded: :func:`pickle.loads`' ``encoding`` and
    ``fix_imports``, as ``numpy.load`` takes them (``"latin1"`` reads Python 2 pickles of
    numpy arrays). Its presence on a layout is the caller's ``allow_pickle=True``.

    Raises
    ------
    ValueError
        An ``encoding`` other than ``"ASCII"``, ``"latin1"`` or ``"bytes"`` (numpy.load's
        rule: other encodings could decode a pickle's byte strings into wrong text).
    """

    encoding: str = "ASCII"
    fix_imports: bool = True

    def __post_init__(self) -> None:
        if self.encoding not in ("ASCII", "latin1", "bytes"):
            raise ValueError(
                f"encoding must be 'ASCII', 'latin1', or 'bytes' (as numpy.load requires), "
                f"not {self.encoding!r}"
            )


@dataclass(frozen=True, slots=True)
class DeflatedMember:
    """Where a raw deflate stream is and what it must inflate to.

    Attributes
    ----------
    name : str
        Member name, for messages.
    offset : int
        Absolute offset of the compressed data in the object.
    compressed_size, uncompressed_size : int
        Sizes from the ZIP directory (or the MAT-file's element tags).
    crc32 : int or None
        CRC-32 of the uncompressed data, from the ZIP directory; None when unknown (a
        MAT-file's zlib stream, checked with ``adler32`` instead).
    adler32 : int or None
        Adler-32 of the uncompressed data (the trailer of a zlib stream), when known.
    sized_by : str
        What declared ``uncompressed_size``, for messages ("the ZIP directory", a MAT-file's
        "miMATRIX tag").
    blocks : BlockIndex or None
        The member's independent deflate blocks, when the archive says (npystore's
        ``savez_compressed``): a checkpoint index that needs no pass, checked block by
        block as it is used.
    """

    name: str
    offset: int
    compressed_size: int
    uncompressed_size: int
    crc32: int | None
    adler32: int | None = None
    sized_by: str = "the ZIP directory"
    blocks: BlockIndex | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class DeflatedExtent:
    """The array is inside a raw deflate stream (a ``savez_compressed`` member).

    Attributes
    ----------
    member : DeflatedMember
        Where the compressed stream is and what it inflates to.
    data_start : int
        Offset of element 0 in the *uncompressed* stream (the end of the npy header).
    nbytes : int
        Bytes of array data from ``data_start``.
    index : IndexSlot
        The member's checkpoint index, shared by every chunk read (built on first need).
    """

    member: DeflatedMember
    data_start: int
    nbytes: int
    index: IndexSlot = field(compare=False, hash=False)

    def token(self) -> tuple[object, ...]:
        """What identifies the bytes (for dask names): everything but the index slot."""
        return ("deflated", self.member, self.data_start, self.nbytes)


class Handover:
    """A one-time permission to give a read an :class:`InlineExtent`'s writable bytes."""

    __slots__ = ("_left",)

    def __init__(self) -> None:
        self._left = [True]

    def take(self) -> bool:
        """True the first time only (``list.pop`` is atomic: two threads cannot both win)."""
        try:
            return self._left.pop()
        except IndexError:
            return False


@dataclass(frozen=True, slots=True)
class InlineExtent:
    """The elements' bytes are held in the layout itself (an HDF5 compact dataset, values
    that arrived with the metadata): ``data`` holds them back to back in the layout's order,
    stored dtype. A ``memoryview`` (no copy) only in a tree that is read at once and never
    pickled (a MAT v5 ``load``). With a ``handover``, ``data`` is a writable view of a buffer
    only this tree holds: the first whole read returns an array over it, later ones copy."""

    data: bytes | memoryview
    handover: Handover | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class Filter:
    """One step of an HDF5 filter pipeline, as recorded in the dataset's creation properties.

    Attributes
    ----------
    id : int
        HDF5 filter id (1 deflate, 2 shuffle, 3 fletcher32, ...).
    name : str
        Its name, for messages.
    client_data : tuple of int
        The filter's parameters (deflate: level; shuffle: element size).
    optional : bool
        The filter may have been skipped for a chunk (its bit in the chunk's filter mask).
    """

    id: int
    name: str
    client_data: tuple[int, ...] = ()
    optional: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class ChunkedExtent:
    """The array is cut into equal chunks stored apart, each maybe filtered (HDF5 chunked).

    Every chunk, edge chunks included, decodes to ``prod(chunk_shape)`` elements of the
    stored dtype in the layout's order (edge chunks are padded, as HDF5 stores them).

    Attributes
    ----------
    chunk_shape : tuple of int
        Shape of one chunk, in the layout's axes.
    offsets : numpy.ndarray
        int64, shape = the chunk grid (``ceil(shape / chunk_shape)`` per axis, layout axes):
        absolute offset of each chunk's stored bytes in the object, -1 for a chunk that was
        never written (it reads as ``fill``).
    sizes : numpy.ndarray
        int64, same shape: stored (filtered) bytes of each chunk.
    filter_masks : numpy.ndarray
        uint32, same shape: bit ``i`` set means filter ``i`` was skipped for that chunk.
    filters : tuple of Filter
        The pipeline in the order it was applied when writing (undone in reverse).
    fill : bytes
        One element of the stored dtype for chunks never written ("" means zeros).
    """

    chunk_shape: tuple[int, ...]
    offsets: np.ndarray[Any, np.dtype[np.int64]]
    sizes: np.ndarray[Any, np.dtype[np.int64]]
    filter_masks: np.ndarray[Any, np.dtype[np.uint32]]
    filters: tuple[Filter, ...] = ()
    fill: bytes = b""

    def token(self) -> tuple[object, ...]:
        """What identifies the bytes (for dask names and equality)."""
        return (
            "chunked",
            self.chunk_shape,
            self.offsets.tobytes(),
            self.sizes.tobytes(),
            self.filter_masks.tobytes(),
            self.filters,
            self.fill,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChunkedExtent) and self.token() == other.token()

    def __hash__(self) -> int:
        return hash(self.token())

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks per axis."""
        return tuple(int(n) for n in self.offsets.shape)


@dataclass(frozen=True, slots=True)
class ConvertedExtent:
    """Values stored in another type than the array's: read the parts, then convert.

    MATLAB stores a double array of small integers as uint8 (v5), a logical as uint8, a
    complex array as two parts (v5) or as a ``{real, imag}`` compound (v7.3). The layout's
    dtype is the result type; each part is a layout of the same shape and order with its
    stored dtype.

    Attributes
    ----------
    real : ArrayLayout
        The stored values, or the ``real``/``imag`` compound.
    imag : ArrayLayout or None
        The stored imaginary part, when kept apart.
    """

    real: ArrayLayout
    imag: ArrayLayout | None = None


Storage = (
    RawExtent | PickledExtent | DeflatedExtent | InlineExtent | ChunkedExtent | ConvertedExtent
)


def storage_token(storage: Storage) -> object:
    """A deterministic, hashable description of where a layout's bytes are (dask names)."""
    if isinstance(storage, DeflatedExtent | ChunkedExtent):
        return storage.token()
    if isinstance(storage, ConvertedExtent):
        parts = [storage.real] if storage.imag is None else [storage.real, storage.imag]
        return (
            "converted",
            *(
                (p.dtype.str, p.dtype.descr, p.shape, p.order, storage_token(p.storage))
                for p in parts
            ),
        )
    if isinstance(storage, RawExtent | PickledExtent) and storage.crc is not None:
        return type(storage)(storage.offset, storage.nbytes)  # the same token as unchecked
    return storage


@dataclass(frozen=True, slots=True)
class ArrayLayout:
    """The one value every format produces and every face consumes.

    Attributes
    ----------
    dtype : numpy.dtype
        Element type as stored (byte order included).
    shape : tuple of int
        Logical shape of the array.
    order : {"C", "F"}
        Memory order of the stored elements.
    storage : Storage
        Where the bytes are and how they decode.
    unpickle : Unpickle, optional
        For object arrays (pickles), how to load them; ``None`` otherwise.
    """

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    order: Order
    storage: Storage
    unpickle: Unpickle | None = None

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded array."""
        return self.size * self.dtype.itemsize

    @property
    def byte_strides(self) -> tuple[int, ...]:
        """Byte step between neighbours along each dimension, in the stored order."""
        itemsize = self.dtype.itemsize
        strides = [0] * self.ndim
        dims = range(self.ndim - 1, -1, -1) if self.order == "C" else range(self.ndim)
        step = itemsize
        for d in dims:
            strides[d] = step
            step *= self.shape[d]
        return tuple(strides)


@dataclass(frozen=True, slots=True)
class Piece:
    """One byte range of the file covering a rectangular region of a selection.

    Attributes
    ----------
    start, stop : int
        The byte range ``[start, stop)`` in the file.
    region : tuple of (int, int)
        Per dimension ``(begin, end)`` of the region, in selection (output) coordinates.
    contiguous : bool
        Whether the range holds exactly the region's elements, back to back in the layout's
        order (then it can be read straight into the output buffer).
    """

    start: int
    stop: int
    region: tuple[tuple[int, int], ...]
    contiguous: bool

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the region."""
        return tuple(end - begin for begin, end in self.region)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """How to read one hyperslab: output shape, the file strides of its elements, pieces.

    Attributes
    ----------
    shape : tuple of int
        Shape of the selection (the output array).
    strides : tuple of int
        Byte distance in the file between selection neighbours along each dimension; a
        non-contiguous piece's bytes are viewed with these strides.
    pieces : int
        Number of pieces; iterate them with :meth:`iter_pieces` (they are generated lazily,
        a sparse selection may have many).
    """

    layout: ArrayLayout
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    outer_levels: tuple[int, ...]
    core_level: int | None
    core_block: int
    core_span: int
    core_contiguous: bool
    pieces: int

    def iter_pieces(self) -> Iterator[Piece]:
        """Yield the pieces in file order."""
        if self.pieces == 0:
            return
        full = [(0, n) for n in self.shape]
        outer_ranges = [range(self.shape[d]) for d in self.outer_levels]
        for combo in itertools.product(*outer_ranges):
            region = list(full)
            start = self.base
            for d, i in zip(self.outer_levels, combo, strict=True):
                region[d] = (i, i + 1)
                start += i * self.strides[d]
            if self.core_level is None:
                yield Piece(start, start + self.core_span, tuple(region), self.core_contiguous)
                continue
            d = self.core_level
            count = self.shape[d]
            if self.core_block >= count:
                yield Piece(start, start + self.core_span, tuple(region), self.core_contiguous)
                continue
            inner_span = self.core_span - (count - 1) * self.strides[d]
            for b in range(0, count, self.core_block):
                e = min(b + self.core_block, count)
                region[d] = (b, e)
                first = start + b * self.strides[d]
                last = start + (e - 1) * self.strides[d] + inner_span
                yield Piece(first, last, tuple(region), self.core_contiguous)


def full_selection(shape: Sequence[int]) -> Hyperslab:
    """The hyperslab selecting the whole array."""
    return tuple((0, n, 1) for n in shape)


def plan_reads(
    layout: ArrayLayout,
    selection: Hyperslab,
    *,
    max_gap: int,
    max_span: int,
) -> ReadPlan:
    """Plan the byte ranges that hold a hyperslab of a raw layout.

    Parameters
    ----------
    layout : ArrayLayout
        A layout with :class:`RawExtent` storage.
    selection : Hyperslab
        Per dimension ``(start, count, step)``, already bounds-checked, ``step >= 1``.
    max_gap : int
        Neighbouring sub-regions separated by at most this many bytes are read as one range.
    max_span : int
        A non-contiguous merged range is cut into blocks of at most about this many bytes
        (it is read into a temporary buffer).

    Returns
    -------
    ReadPlan
    """
    storage = layout.storage
    if not isinstance(storage, RawExtent):
        raise TypeError(f"plan_reads needs raw storage, got {type(storage).__name__}")
    if len(selection) != layout.ndim:
        raise ValueError(f"selection has {len(selection)} dims, layout {layout.ndim}")
    itemsize = layout.dtype.itemsize
    shape = tuple(count for _, count, _ in selection)
    fstrides = layout.byte_strides
    strides = tuple(fs * step for fs, (_, _, step) in zip(fstrides, selection, strict=True))
    base = storage.offset + sum(
        start * fs for fs, (start, _, _) in zip(fstrides, selection, strict=True)
    )
    empty = math.prod(shape) == 0 or itemsize == 0
    # Levels: dimensions that vary, outermost (largest stride) first.
    levels = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: -strides[d])
    # spans[k]: bytes from the first to past the last element of levels k.. (others fixed).
    spans = [itemsize] * (len(levels) + 1)
    for k in range(len(levels) - 1, -1, -1):
        d = levels[k]
        spans[k] = (shape[d] - 1) * strides[d] + spans[k + 1]
    gaps = [strides[d] - spans[k + 1] for k, d in enumerate(levels)]
    core = len(levels)
    while core > 0 and gaps[core - 1] <= max_gap:
        core -= 1
    outer = tuple(levels[:core])
    core_level = levels[core] if core < len(levels) else None
    core_contiguous = all(g == 0 for g in gaps[core:])
    core_span = spans[core]
    core_block = shape[core_level] if core_level is not None else 1
    if empty:
        core_block = 1
    elif core_level is not None and not core_contiguous and core_span > max_span:
        core_block = max(1, max_span // strides[core_level])
    if empty:
        pieces = 0
    else:
        per_combo = 1 if core_level is None else math.ceil(shape[core_level] / core_block)
        pieces = math.prod(shape[d] for d in outer) * per_combo
    return ReadPlan(
        layout=layout,
        base=base,
        shape=shape,
        strides=strides,
        outer_levels=outer,
        core_level=core_level,
        core_block=core_block,
        core_span=core_span,
        core_contiguous=core_contiguous,
        pieces=pieces,
    )


def contiguous_chunks(
    shape: Sequence[int], itemsize: int, order: Order, target_bytes: int
) -> tuple[tuple[int, ...], ...]:
    """Chunks of about ``target_bytes`` that are each one contiguous byte range.

    Only the slowest-varying axis (0 for C order, the last for Fortran order) is split when a
    slab along it fits the target; otherwise the split moves inward one axis at a time, with
    the outer axes chunked by 1, so every chunk stays contiguous.

    Parameters
    ----------
    shape : sequence of int
        Array shape.
    itemsize : int
        Bytes per element.
    order : {"C", "F"}
        Memory order.
    target_bytes : int
        Desired chunk size in bytes (dask's ``array.chunk-size``).

    Returns
    -------
    tuple of tuple of int
        Explicit chunk sizes per dimension, as dask expects.
    """
    ndim = len(shape)
    if ndim == 0:
        return ()
    if 0 in shape or itemsize == 0:
        return tuple((n,) for n in shape)
    dims = list(range(ndim)) if order == "C" else list(range(ndim - 1, -1, -1))
    sizes = list(shape)
    target = max(1, target_bytes)
    for k, d in enumerate(dims):
        inner = itemsize * math.prod(shape[e] for e in dims[k + 1 :])
        if inner <= target or k == ndim - 1:
            sizes[d] = max(1, min(shape[d], target // inner))
            for e in dims[:k]:
                sizes[e] = 1
            break
    return tuple(_blocks(n, size) for n, size in zip(shape, sizes, strict=True))


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` (> 0) that is at most ``limit`` (1 when none is larger).

    >>> largest_divisor(354, 170), largest_divisor(1_000_003, 1000)
    (118, 1)
    """
    best = 1
    root = math.isqrt(n)
    step = 1 << 20
    for start in range(1, root + 1, step):
        i = np.arange(start, min(start + step, root + 1), dtype=np.int64)
        hits = i[n % i == 0]
        for d in hits.tolist():
            for cand in (d, n // d):
                if best < cand <= limit:
                    best = cand
    return best


def _blocks(n: int, size: int) -> tuple[int, ...]:
    full, rest = divmod(n, size)
    return (size,) * full + ((rest,) if rest else ())
