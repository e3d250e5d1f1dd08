"""Reference plans: each array of a file's tree as chunks that are byte ranges of the file.

A plan (:class:`ArrayRefs`) is what kerchunk references (:mod:`npystore.faces.refs.kerchunk`)
and VirtualiZarr manifests (:mod:`npystore.faces.refs.virtual`) both write: the array as
Zarr sees it (dtype, shape, chunk shape, memory order, numcodecs filters) and, per chunk, a
byte range ``(offset, length)`` of the file or, where no range holds the chunk, its encoded
bytes to inline.

How chunks are chosen (``chunks=None``):

- raw arrays (``.npy`` files, stored ``.npz`` members, uncompressed MAT v5 and contiguous
  v7.3 variables): chunks of at most :data:`~npystore.faces.tree.nodes.CHUNK_TARGET` bytes
  that are each one contiguous range (the slowest-varying axis is split). When the split
  axis is not a multiple of that chunk length, the largest length that divides it is used
  if its chunks hold at least :data:`MIN_DIVISOR_CHUNK` bytes; otherwise chunks of
  :data:`EDGE_CHUNK` bytes whose zero-padded last chunk is inlined (references only, for
  VirtualiZarr: one chunk for the whole axis up to :data:`MAX_WHOLE_CHUNK`, else the
  divisor). An edge chunk whose padded range still lies inside the object (a member
  followed by other bytes) is a reference too: Zarr never uses the bytes past the array's
  end. With ``chunks=`` given, an edge chunk past the object's end is inlined, zero-padded.
- HDF5 chunked arrays (MAT v7.3): the file's own chunks, their deflate, shuffle and
  fletcher32 filters as numcodecs ``zlib``, ``shuffle`` and ``fletcher32``; a chunk whose
  filter mask skipped a filter is decoded and re-encoded inline.
- deflated ``.npz`` members with npystore's block index (``npystore.savez_compressed``):
  one chunk per deflate block (the ``.npy`` header is block 0, every later block whole
  chunks), each a byte range of the compressed member decoded by the numcodecs codec
  ``npystore.raw_deflate`` (:class:`npystore.codecs.RawDeflate`; whatever ``chunks`` says).
- everything else (deflated members without a block index, compressed v5 variables, HDF5
  compact data, text, filters numcodecs lacks): the values, inlined.

Every inlined byte counts against one :class:`~npystore.faces.refs.budget.InlineBudget` per
set of references (:data:`~npystore.faces.refs.budget.MAX_INLINE`, 16 MiB), reserved before
anything is read.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from npystore.errors import UnsupportedError
from npystore.faces.dask import ChunksSpec, check_chunk_count, normalize_layout_chunks
from npystore.faces.refs.budget import MAX_INLINE, InlineBudget, OverBudget, Why
from npystore.faces.tree import nodes as tree_nodes
from npystore.faces.tree.nodes import ArrayNode
from npystore.read.access import LayoutArray
from npystore.read.layout import (
    ArrayLayout,
    ChunkedExtent,
    ConvertedExtent,
    DeflatedExtent,
    InlineExtent,
    RawExtent,
    contiguous_chunks,
    largest_divisor,
)

__all__ = [
    "EDGE_CHUNK",
    "EDGE_INLINE",
    "MAX_INLINE",
    "MAX_WHOLE_CHUNK",
    "MIN_DIVISOR_CHUNK",
    "ArrayRefs",
    "plan_array",
]

#: Chunk bytes when the split axis has no divisor giving chunks of MIN_DIVISOR_CHUNK: the
#: zero-padded last chunk is inlined, so it stays this small.
EDGE_CHUNK: Final = 512 * 2**10
#: Smallest chunk (bytes) of a chunk length that divides the split axis, preferred over
#: EDGE_CHUNK chunks with an inlined edge.
MIN_DIVISOR_CHUNK: Final = 2**20
#: Most bytes of zero-padded edge chunks ``chunks=None`` plans to inline for one array
#: (else it picks a divisor).
EDGE_INLINE: Final = 4 * 2**20
#: References only (VirtualiZarr): largest single chunk spanning a split axis that has no
#: useful divisor.
MAX_WHOLE_CHUNK: Final = 256 * 2**20
#: Chunks refused beyond this many (references only, where nothing can be inlined).
MAX_CHUNKS: Final = 1_000_000

#: HDF5 filter ids numcodecs undoes the same way.
_H5_FILTERS: Final = {1: "zlib", 2: "shuffle", 3: "fletcher32"}

Ref = tuple[int, int] | bytes


@dataclass(frozen=True)
class ArrayRefs:
    """One array as Zarr sees it, and where each of its chunks is.

    Attributes
    ----------
    node : ArrayNode
        The array: its layout's dtype, shape and order are Zarr's (a complex or logical
        MATLAB variable is viewed as the complex or bool dtype of its stored bytes), its
        ``chunks()`` the chunk shape.
    filters : tuple of dict
        numcodecs configurations (``{"id": "zlib", "level": 3}``) in the order they were
        applied when the chunks were written (undone in reverse).
    offsets, lengths : numpy.ndarray
        int64 per chunk of the grid: the byte range holding it (``-1``: inlined or absent).
    inline : dict
        Chunk index -> encoded bytes, for chunks no range holds.
    fill : bytes
        One element of the value of absent chunks (``b""``: zeros).
    """

    node: ArrayNode
    filters: tuple[dict[str, Any], ...]
    offsets: np.ndarray[Any, np.dtype[np.int64]]
    lengths: np.ndarray[Any, np.dtype[np.int64]]
    inline: dict[tuple[int, ...], bytes]
    fill: bytes = b""

    @property
    def layout(self) -> ArrayLayout:
        """The array's layout as Zarr sees it."""
        return self.node.array.layout

    @property
    def chunks(self) -> tuple[int, ...]:
        """The chunk shape."""
        return self.node.chunks()

    def items(self) -> Iterator[tuple[tuple[int, ...], Ref]]:
        """Every chunk that is present: ``(index, (offset, length))`` or ``(index, bytes)``."""
        for index in itertools.product(*(range(n) for n in self.offsets.shape)):
            data = self.inline.get(index)
            if data is not None:
                yield index, data
            elif self.offsets[index] >= 0:
                yield index, (int(self.offsets[index]), int(self.lengths[index]))


def plan_array(
    node: ArrayNode,
    *,
    chunks: ChunksSpec = None,
    references_only: bool = False,
    budget: InlineBudget | None = None,
) -> ArrayRefs:
    """The reference plan of one array.

    Parameters
    ----------
    node : ArrayNode
        The array (a node of :func:`~npystore.faces.tree.file_nodes`).
    chunks : chunk spec, optional
        ``None``: chosen for references (module docstring); otherwise dask's meaning, as
        in :func:`npystore.open_npy` (HDF5 chunked arrays and block-indexed members keep
        the file's chunks).
    references_only : bool
        Nothing may be inlined (VirtualiZarr manifests carry no bytes).
    budget : InlineBudget, optional
        The inline budget of the whole set of references this array belongs to (default: a
        budget of :data:`MAX_INLINE` for this array alone, refused at once when spent).

    Raises
    ------
    UnsupportedError
        The array needs inlined bytes with ``references_only``, or more than the budget
        holds (without ``budget``); the message says why and what to use instead.
    OverBudget
        With ``budget``: the array's inlined bytes did not fit (recorded in ``budget``,
        whose :meth:`~InlineBudget.check` raises the refusal of every array together).
    """
    if budget is None:
        own = InlineBudget()
        try:
            return plan_array(node, chunks=chunks, references_only=references_only, budget=own)
        except OverBudget:
            own.check(node.array.source)
            raise
    source = node.array.source
    layout, filters = _zarr_view(node.array.layout)
    if isinstance(layout.storage, RawExtent):
        shaped = _with_layout(node, layout, _raw_chunks(node, layout, chunks, references_only))
        return _raw_refs(shaped, budget, references_only)
    if isinstance(layout.storage, ChunkedExtent) and filters is not None:
        shaped = _with_layout(node, layout, layout.storage.chunk_shape)
        return _chunked_refs(shaped, layout.storage, filters, budget, references_only)
    if isinstance(layout.storage, DeflatedExtent) and layout.storage.member.crc32 is not None:
        found = _block_refs(node, layout, layout.storage)  # a ZIP member (.npz)
        if isinstance(found, ArrayRefs):
            return found
        why: Why = "deflated"
        reason = found
    else:
        why, reason = "values", _why_inline(node.array.layout)
    # values only: every chunk inlined (decoded from the original layout)
    if references_only:
        way = f"; {_CONVERT_NPZ}" if why == "deflated" else ""
        raise UnsupportedError(
            f"{source}: {reason}; no byte range of the file holds its values{way}"
        )
    budget.take(source, node.array.layout.nbytes, reason, why)
    shape = node.array.layout.shape
    grid_chunks = (
        tuple(max(1, n) for n in shape) if chunks is None else _normalized(node.array, chunks)
    )
    shaped = dataclasses.replace(node, chunk_shape=grid_chunks)
    grid = _grid(shape, grid_chunks)
    inline = {
        index: shaped.chunk_bytes(index) for index in itertools.product(*(range(n) for n in grid))
    }
    offsets = np.full(grid, -1, dtype=np.int64)
    return ArrayRefs(shaped, (), offsets, np.zeros(grid, dtype=np.int64), inline)


#: The way out for a deflated member without a usable block index.
_CONVERT_NPZ: Final = (
    "re-deflate the archive with a block index, `npystore convert IN.npz OUT.npz` "
    "(npystore.savez_compressed writes one), then make references to OUT.npz: each block "
    "is a chunk"
)


# -- deflated members with a block index -------------------------------------------------------


def _block_refs(node: ArrayNode, layout: ArrayLayout, storage: DeflatedExtent) -> ArrayRefs | str:
    """The plan of a deflated member whose block index gives one chunk per block, or why
    it does not (the reason, for the refusal or the inline budget)."""
    blocks = storage.member.blocks
    if blocks is None:
        return "a deflated member without a block index (its bytes are one deflate stream)"
    old = (
        "a deflated member whose blocks are not whole chunks of the array (written by an "
        "earlier npystore, or by another writer)"
    )
    usizes = blocks.usizes
    if usizes[0] != storage.data_start or sum(usizes[1:]) != storage.nbytes:
        return old  # block 0 is not the .npy header alone
    chunks = _chunks_of_blocks(layout, usizes[1:])
    if chunks is None:
        return old
    shaped = _with_layout(node, layout, chunks)
    grid = _grid(layout.shape, chunks)
    file_grid = grid if layout.order == "C" else grid[::-1]
    starts = np.asarray(blocks.coffsets[1:-1], dtype=np.int64) + storage.member.offset
    sizes = np.asarray(blocks.csizes[1:], dtype=np.int64)
    if not starts.size:  # no data: no chunk is stored
        offsets = np.full(grid, -1, dtype=np.int64)
        lengths = np.zeros(grid, dtype=np.int64)
    else:
        offsets = starts.reshape(file_grid)
        lengths = sizes.reshape(file_grid)
        if layout.order == "F":
            offsets, lengths = offsets.transpose(), lengths.transpose()
    from npystore.codecs import RAW_DEFLATE_ID  # noqa: PLC0415 - numcodecs, only when used

    size = math.prod(chunks) * layout.dtype.itemsize
    codec = {"id": RAW_DEFLATE_ID, "size": size}
    return ArrayRefs(shaped, (codec,), offsets.copy(), lengths.copy(), {})


def _chunks_of_blocks(layout: ArrayLayout, usizes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The chunk shape of which each of the member's data blocks holds exactly one chunk
    (in the order of the bytes: the last chunk along the slowest axis may be shorter), or
    ``None`` when the blocks are not whole chunks."""
    shape, itemsize = layout.shape, layout.dtype.itemsize
    if not usizes:  # no data
        return tuple(max(1, n) for n in shape)
    if len(usizes) == 1:
        return tuple(max(1, n) for n in shape) if usizes[0] == layout.nbytes else None
    file_shape = shape if layout.order == "C" else shape[::-1]
    size = usizes[0]
    units = [itemsize * math.prod(file_shape[d + 1 :]) for d in range(len(file_shape))]
    d = next((d for d, unit in enumerate(units) if unit <= size), None)
    if d is None:
        return None
    n, unit = file_shape[d], units[d]
    count, rest = divmod(size, unit)
    if rest or count > n or (d > 0 and n % count):
        return None
    outer = math.prod(file_shape[:d])
    full, tail = divmod(n, count)
    if outer * (full + bool(tail)) != len(usizes):
        return None
    want = ((size,) * full + ((tail * unit,) if tail else ())) * outer
    if tuple(usizes) != want:
        return None
    chunks = (1,) * d + (count,) + tuple(file_shape[d + 1 :])
    return chunks if layout.order == "C" else chunks[::-1]


def _why_inline(layout: ArrayLayout) -> str:
    storage = layout.storage
    while isinstance(storage, ConvertedExtent):
        storage = storage.real.storage
    if isinstance(storage, DeflatedExtent):
        return "a compressed variable (its bytes are one deflate stream)"
    if isinstance(storage, InlineExtent):
        return "values that arrived with the metadata (HDF5 compact data, text)"
    if isinstance(storage, ChunkedExtent):
        names = ", ".join(f.name or str(f.id) for f in storage.filters if f.id not in _H5_FILTERS)
        return f"HDF5 chunks filtered by {names or 'a filter'}, which numcodecs does not undo"
    if layout.storage is not storage:
        return "values stored in another type than the array's"
    return f"stored as {type(storage).__name__}"


def _zarr_view(layout: ArrayLayout) -> tuple[ArrayLayout, tuple[dict[str, Any], ...] | None]:
    """The layout whose stored bytes Zarr reads as they are (a MATLAB complex compound as
    complex, a logical as bool), and the numcodecs filters of chunked storage (``None``
    when one has no numcodecs equivalent)."""
    storage = layout.storage
    if isinstance(storage, ConvertedExtent) and storage.imag is None:
        stored = storage.real
        view = _byte_identical(stored.dtype, layout.dtype)
        if view is not None:
            layout = ArrayLayout(view, stored.shape, stored.order, stored.storage)
    if not isinstance(layout.storage, ChunkedExtent):
        return layout, ()
    filters: list[dict[str, Any]] = []
    for f in layout.storage.filters:
        name = _H5_FILTERS.get(f.id)
        if name is None:
            return layout, None
        if name == "zlib":
            level = f.client_data[0] if f.client_data else 6
            filters.append({"id": "zlib", "level": int(min(max(level, 0), 9))})
        elif name == "shuffle":
            size = f.client_data[0] if f.client_data else layout.dtype.itemsize
            filters.append({"id": "shuffle", "elementsize": int(size)})
        else:
            filters.append({"id": "fletcher32"})
    return layout, tuple(filters)


def _byte_identical(stored: np.dtype[Any], wanted: np.dtype[Any]) -> np.dtype[Any] | None:
    """A dtype of ``wanted``'s kind whose bytes are ``stored``'s, or None."""
    if wanted.kind == "c" and stored.names == ("real", "imag"):
        re, im = stored.fields["real"], stored.fields["imag"]  # type: ignore[index]
        f = re[0]
        packed = re[1] == 0 and im[1] == f.itemsize and stored.itemsize == 2 * f.itemsize
        if f.kind == "f" and im[0] == f and packed and f.itemsize in (4, 8):
            complex_type = np.complex64 if f.itemsize == 4 else np.complex128
            return np.dtype(complex_type).newbyteorder(f.byteorder)
        return None
    if wanted.kind == "b" and stored.names is None and stored.kind in "iu" and stored.itemsize == 1:
        return np.dtype(np.bool_)
    return None


def _with_layout(node: ArrayNode, layout: ArrayLayout, chunks: tuple[int, ...]) -> ArrayNode:
    array = node.array
    if layout is not array.layout:
        array = LayoutArray(array.reader, layout, source=array.source)
    return dataclasses.replace(node, array=array, chunk_shape=chunks)


def _grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.ceil(n / c) for n, c in zip(shape, chunks, strict=True))


def _normalized(array: LayoutArray, spec: ChunksSpec) -> tuple[int, ...]:
    """``spec`` (dask's meaning) for ``array``, as a regular chunk shape."""
    ndim = array.layout.ndim
    if isinstance(spec, tuple | list) and len(spec) != ndim:
        raise ValueError(
            f"{array.source}: chunks={tuple(spec)!r} has {len(spec)} lengths for an array of "
            f"{ndim} dimensions (pass an int or a dict for arrays of several ranks)"
        )
    return _regular(array, normalize_layout_chunks(array, spec), spec)


def _regular(
    array: LayoutArray, normalized: tuple[tuple[int, ...], ...], spec: ChunksSpec
) -> tuple[int, ...]:
    """The chunk shape of dask chunks that Zarr's regular grid can hold."""
    out: list[int] = []
    for axis, sizes in enumerate(normalized):
        first = sizes[0] if sizes else 1
        if any(s != first for s in sizes[:-1]) or (sizes and sizes[-1] > first):
            raise ValueError(
                f"{array.source}: chunks={spec!r} gives chunks {sizes} along axis {axis}; "
                f"Zarr needs equal chunks (the last may be smaller)"
            )
        out.append(max(1, first))
    return tuple(out)


# -- raw arrays ------------------------------------------------------------------------------


def _raw_chunks(
    node: ArrayNode, layout: ArrayLayout, spec: ChunksSpec, references_only: bool
) -> tuple[int, ...]:
    array = node.array
    shape, itemsize = layout.shape, layout.dtype.itemsize
    if spec is not None:
        viewed = LayoutArray(array.reader, layout, source=array.source)
        chunks = _normalized(viewed, spec)
    elif not shape:
        return ()
    elif 0 in shape or itemsize == 0:
        return tuple(max(1, n) for n in shape)
    else:
        grid = contiguous_chunks(shape, itemsize, layout.order, tree_nodes.CHUNK_TARGET)
        chunks = tuple(max(1, c[0]) for c in grid)
        chunks = _refine(layout, chunks, array.reader.size, references_only)
    if references_only:
        count = math.prod(_grid(shape, chunks))
        check_chunk_count(array, spec if spec is not None else chunks, count, MAX_CHUNKS)
    return chunks


def _slow_to_fast(layout: ArrayLayout) -> list[int]:
    return list(range(layout.ndim)) if layout.order == "C" else list(range(layout.ndim))[::-1]


def _refine(
    layout: ArrayLayout, chunks: tuple[int, ...], size: int, references_only: bool
) -> tuple[int, ...]:
    """Contiguous chunks adjusted so that no large edge chunk must be inlined."""
    order = _slow_to_fast(layout)
    split = next((d for d in order if chunks[d] < layout.shape[d]), None)
    if split is None:
        return chunks  # one chunk
    n, c = layout.shape[split], chunks[split]
    unit = layout.dtype.itemsize * math.prod(
        layout.shape[d] for d in order[order.index(split) + 1 :]
    )
    assert isinstance(layout.storage, RawExtent)
    end = layout.storage.offset + layout.nbytes
    if n % c == 0 or end + (c - n % c) * unit <= size:
        return chunks  # no edge, or an edge the object's bytes cover
    outer = math.prod(layout.shape[d] for d in order[: order.index(split)])
    divisor = largest_divisor(n, c)
    pick = divisor
    if divisor * unit < MIN_DIVISOR_CHUNK:
        if references_only:
            pick = n if n * unit <= MAX_WHOLE_CHUNK else divisor
        else:
            small = min(n, max(1, EDGE_CHUNK // unit))
            if small > divisor and outer * small * unit <= EDGE_INLINE:
                pick = small
    out = list(chunks)
    out[split] = pick
    return tuple(out)


def _raw_refs(node: ArrayNode, budget: InlineBudget, references_only: bool) -> ArrayRefs:
    layout = node.array.layout
    storage = layout.storage
    assert isinstance(storage, RawExtent)
    chunks = node.chunks()
    grid = _grid(layout.shape, chunks)
    offsets = np.full(grid, -1, dtype=np.int64)
    lengths = np.zeros(grid, dtype=np.int64)
    size = node.array.reader.size
    strides = layout.byte_strides
    order = _slow_to_fast(layout)
    lead = next((k for k, d in enumerate(order) if chunks[d] != 1), len(order))
    contiguous = all(
        chunks[d] >= layout.shape[d] for d in order[lead + 1 :]
    )  # outer chunk lengths are 1, inner ones whole axes: every chunk is one range
    length = math.prod(chunks) * layout.dtype.itemsize
    source = node.array.source
    if not contiguous:  # no chunk is a range: all inlined (reserved before any is read)
        if references_only:
            raise UnsupportedError(
                f"{source}: chunks of shape {chunks} are not byte ranges of the file (pass "
                f"chunks that split only the slowest-varying axis)"
            )
        why = _why_chunks(layout, chunks, contiguous)
        budget.take(source, math.prod(grid) * length, why, "chunks")
    todo: list[tuple[int, ...]] = []
    for index in itertools.product(*(range(g) for g in grid)):
        start = storage.offset + sum(
            i * c * s for i, c, s in zip(index, chunks, strides, strict=True)
        )
        if contiguous and start + length <= size:
            offsets[index] = start
            lengths[index] = length
            continue
        if references_only:
            raise UnsupportedError(
                f"{source}: chunk {index} of shape {chunks} lies past the end of the file "
                f"(pass chunks whose length divides the split axis)"
            )
        todo.append(index)
    if todo and contiguous:  # edge chunks past the end of the file
        budget.take(source, len(todo) * length, _why_chunks(layout, chunks, contiguous), "chunks")
    inline = {index: node.chunk_bytes(index) for index in todo}
    return ArrayRefs(node, (), offsets, lengths, inline)


def _why_chunks(layout: ArrayLayout, chunks: tuple[int, ...], contiguous: bool) -> str:
    """Why a raw array's chunks are inlined, and which chunk lengths would not be."""
    if not contiguous:
        slow = "first" if layout.order == "C" else "last"
        return (
            f"chunks {chunks} are not byte ranges of the file (chunks that split only the "
            f"slowest-varying axis, the {slow}, are)"
        )
    d = next(d for d in _slow_to_fast(layout) if chunks[d] < layout.shape[d])
    n, c = layout.shape[d], chunks[d]
    return (
        f"chunks {chunks} leave an edge chunk along axis {d} past the end of the file, "
        f"inlined zero-padded to full size (a length that divides {n}, such as "
        f"{largest_divisor(n, c)}, has none)"
    )


# -- HDF5 chunked arrays ----------------------------------------------------------------------


def _chunked_refs(
    node: ArrayNode,
    storage: ChunkedExtent,
    filters: tuple[dict[str, Any], ...],
    budget: InlineBudget,
    references_only: bool,
) -> ArrayRefs:
    offsets = storage.offsets.astype(np.int64, copy=True)
    lengths = storage.sizes.astype(np.int64, copy=True)
    inline: dict[tuple[int, ...], bytes] = {}
    active = (1 << len(storage.filters)) - 1
    skipped = [tuple(int(i) for i in w) for w in np.argwhere((storage.filter_masks & active) != 0)]
    missing = (
        [tuple(int(i) for i in w) for w in np.argwhere(offsets < 0)]
        if storage.fill and not references_only
        else []
    )
    if references_only and skipped:
        where = skipped[0]
        mask = int(storage.filter_masks[where])
        names = [f.name for k, f in enumerate(storage.filters) if mask >> k & 1]
        raise UnsupportedError(
            f"{node.array.source}: HDF5 chunk {where} was stored without filter(s) "
            f"{', '.join(names)}; the other chunks use them, and a manifest holds one "
            f"codec pipeline per array"
        )
    if not skipped and not missing:
        return ArrayRefs(node, filters, offsets, lengths, inline, storage.fill)
    source = node.array.source
    reason = (
        "HDF5 chunks stored without some of the array's filters, or never written (fill "
        "value), inlined re-encoded"
    )
    raw = math.prod(node.chunks()) * node.array.layout.dtype.itemsize
    reserved = raw * (len(skipped) + len(missing))
    budget.take(source, reserved, reason, "values")
    for where in skipped + missing:
        inline[where] = _encode(node.chunk_bytes(where), filters)
        offsets[where] = -1
    budget.settle(source, reserved, sum(map(len, inline.values())), reason, "values")
    return ArrayRefs(node, filters, offsets, lengths, inline, storage.fill)


def _encode(data: bytes, filters: tuple[dict[str, Any], ...]) -> bytes:
    """``data`` through the numcodecs ``filters`` in order (as the chunks were written)."""
    if not filters:
        return data
    import numcodecs  # noqa: PLC0415 - only for chunks that are inlined

    out: Any = data
    for config in filters:
        out = numcodecs.get_codec(dict(config)).encode(out)
    return bytes(out)
