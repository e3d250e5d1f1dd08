"""Many siblings at once: the elements of a cell or the fields of a struct array.

:func:`decode_children` walks the tags of consecutive elements (or, when they all have one
size, checks them at once), then decodes the common layouts among them together: their
header words are gathered into one numpy array, checked as :func:`~._bulk.quick_leaf`
checks one element, and the values of each group of equal class, stored type and dims are
gathered into one block whose rows become the elements (:func:`_vector_leaves`). What is
left goes one by one through :func:`~._bulk.quick_leaf`, then the generic parser.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from npystore.formats.mat5._bulk import (
    _MIN_SIZE,
    _PAIR,
    _STORED,
    _TWELVE,
    _VALUE_DTYPES,
    quick_leaf,
)
from npystore.formats.mat5._tags import (
    _F_COMPLEX,
    _F_LOGICAL,
    _MI_DTYPES,
    CHAR,
    MI_UTF8,
    _Bytes,
    _dt,
)

__all__ = ["GROUP_MIN", "MEMO_ENTRIES", "MEMO_SIZE", "VECTOR_MIN", "decode_children"]

#: Elements of at most this many bytes are remembered while decoding children one by one:
#: identical ones (``[]``, repeated scalars and short strings) share one read-only value.
MEMO_SIZE: Final = 64
#: Most distinct elements remembered per variable.
MEMO_ENTRIES: Final = 4096


def decode_children(
    buf: _Bytes,
    base: int,
    pos: int,
    end: int,
    count: int,
    order: str,
    limit: int,
    memo: dict[bytes, Any],
    fallback: Callable[[int, int], tuple[Any, int]],
) -> list[Any]:
    """Walk ``count`` consecutive miMATRIX elements from offset ``pos`` (``buf[0]`` is at
    offset ``base``; the elements lie before ``end``), decoding each small leaf.

    The tags are walked first; the common layouts among many siblings are then decoded
    together (:func:`_vector_leaves`: numpy over all of them, no per-element parsing),
    the rest one by one with :func:`quick_leaf`. ``fallback(i, pos)`` parses the i-th
    element, at ``pos``, when it is no small leaf (or its tag is wrong: the fallback
    reports that) and returns ``(node, next offset)``. Identical elements of at most
    :data:`MEMO_SIZE` bytes decoded one by one share one value, kept in ``memo`` (at most
    :data:`MEMO_ENTRIES` of them).
    """
    if count >= SAME_MIN:
        same = _same_layout(buf, pos - base, end - base, count, order, limit)
        if same is not None:
            return same
    unpack = _PAIR[order].unpack_from
    starts: list[int] = []
    sizes: list[int] = []
    uniform = _uniform(buf, base, pos, end, count, order) if count >= VECTOR_MIN else None
    if uniform is not None:  # all of one size: no walk
        starts, sizes = uniform
        pos = base + starts[-1] + 8 + sizes[-1]
    else:
        add_start, add_size = starts.append, sizes.append
        for _ in range(count):
            if pos + 8 > end:
                break
            mdtype, nbytes = unpack(buf, pos - base)
            if mdtype != 14 or nbytes > end - pos - 8:
                break  # the fallback reports it, in order
            add_start(pos - base)
            add_size(nbytes)
            pos += 8 + nbytes
    walked = len(starts)
    nodes: list[Any] = [None] * walked
    todo: Iterable[int] = range(walked)
    if walked >= VECTOR_MIN:
        todo = _vector_leaves(nodes, buf, starts, sizes, order, limit)
    for i in todo:
        q, nbytes = starts[i], sizes[i]
        value = None
        if nbytes <= MEMO_SIZE - 8:
            key = bytes(buf[q : q + 8 + nbytes])
            value = memo.get(key)
            if value is None:
                value = quick_leaf(buf, q, q + 8 + nbytes, order, limit)
                if value is not None and len(memo) < MEMO_ENTRIES:
                    memo[key] = value
        else:
            # (a leaf too large to decode here: its node, as parsed)
            value = quick_leaf(buf, q, q + 8 + nbytes, order, limit, base=base)
        nodes[i] = value if value is not None else fallback(i, base + q)[0]
    for i in range(walked, count):  # after a wrong tag: the fallback reports it
        node, pos = fallback(i, pos)
        nodes.append(node)
    return nodes


def _same_layout(
    buf: _Bytes, q: int, stop: int, count: int, order: str, limit: int
) -> list[Any] | None:
    """The values of ``count`` consecutive miMATRIX elements from buffer offset ``q`` (all
    before ``stop``) when they are one real 2-d numeric matrix's layout repeated: the first
    decoded by :func:`quick_leaf`, every element's bytes before its values the same as the
    first's, so each decodes as the first does; the values then come as one block (a
    strided view of the buffer converted at once) whose rows are the elements (read-only
    views). None otherwise."""
    if q + 8 > stop:
        return None
    mdtype, nbytes = _PAIR[order].unpack_from(buf, q)
    step = 8 + nbytes
    if mdtype != 14 or q + count * step > stop or nbytes < _MIN_SIZE:
        return None
    ft, fn, word, _, dt, dn, d0, d1, nt, nn, vt, vn = _TWELVE[order].unpack_from(buf, q + 8)
    small = vt >> 16  # the values in a small data element
    stored = _STORED[order].get(vt & 0xFFFF if small else vt)
    if (  # quick_leaf's commonest layout: a real 2-d numeric matrix without a name
        stored is None or fn != 8 or dn != 8 or nn != 0 or ft not in (5, 6)
        or dt not in (5, 6) or nt not in (1, 2, MI_UTF8) or word & _F_COMPLEX
        or (small if small else vn) != d0 * d1 * stored.itemsize or (small and small > 4)
    ):  # fmt: skip
        return None
    first = quick_leaf(buf, q, q + step, order, limit)
    if type(first) is not np.ndarray or first.shape != (d0, d1):
        return None
    if stored.kind == "f" and first.dtype.kind in "iu":
        return None  # NaN and out-of-range casts: one by one, as the generic parser
    head = 52 if small else 56  # the bytes before the values
    rows = np.frombuffer(buf, np.uint8, count * step, q).reshape(count, step)
    if not (rows[:, :head] == rows[0, :head]).all():
        return None
    if not first.size:
        return [first] * count  # read-only, shared: as identical elements are
    values = rows[:, head : head + first.size * stored.itemsize].view(stored)
    with np.errstate(all="ignore"):
        block = values.astype(first.dtype)  # (count, numel), a copy
    grid = block.reshape(count, d1, d0).transpose(0, 2, 1)
    grid.setflags(write=False)
    return list(grid)


def _uniform(
    buf: _Bytes, base: int, pos: int, end: int, count: int, order: str
) -> tuple[list[int], list[int]] | None:
    """The buffer offsets and sizes of ``count`` miMATRIX elements from offset ``pos``
    when they all have the first one's size (checked at once), else None."""
    q = pos - base
    mdtype, nbytes = _PAIR[order].unpack_from(buf, q)
    step = 8 + nbytes
    if mdtype != 14 or step % 4 or pos + count * step > end:
        return None
    r = q % 4
    words = np.frombuffer(buf, order + "u4", (len(buf) - r) // 4, r)
    first = (q - r) // 4 + np.arange(count) * (step // 4)
    tags = words[first[:, None] + np.arange(2)]
    if not ((tags[:, 0] == 14) & (tags[:, 1] == nbytes)).all():
        return None
    return list(range(q, q + count * step, step)), [nbytes] * count


#: Fewest siblings tried as one layout repeated (:func:`_same_layout`).
SAME_MIN: Final = 8
#: Fewest siblings decoded together by :func:`_vector_leaves` (below it, one by one is
#: faster: measured crossover between 64 and 128 siblings), and fewest of one group (class,
#: type, dims) decoded together.
VECTOR_MIN: Final = 96
GROUP_MIN: Final = 4
#: Char data types read together: bytes (ASCII for miUTF8) or UTF-16 code units.
_CHAR_BYTES: Final = (1, 2, MI_UTF8)
_CHAR_UNITS: Final = (3, 4, 17)
#: Decoded itemsize by ``class code | logical | complex`` (0: not decoded together).
_OUT_SIZES: Final = np.zeros(_F_COMPLEX << 1, np.int64)
for _key, _dtype in _VALUE_DTYPES.items():
    if not _key & _F_COMPLEX:
        _OUT_SIZES[_key] = _dtype.itemsize
#: Stored itemsize by numeric data type (0: not numeric).
_STORED_SIZES: Final = np.zeros(64, np.int64)
for _type, _code in _MI_DTYPES.items():
    _STORED_SIZES[_type] = np.dtype(_code).itemsize


def _vector_leaves(
    out: list[Any], buf: _Bytes, starts: list[int], sizes: list[int], order: str, limit: int
) -> list[int]:
    """Decode together the siblings at buffer offsets ``starts`` (their tags say ``sizes``
    bytes follow) that are real 2-d numeric matrices or single char rows without a name,
    into ``out``: their header words are gathered into one array, checked as
    :func:`quick_leaf` checks them, and the values of each group of equal class, type and
    dims gathered into one block whose rows become the elements (read-only views).
    Return the indices of the others."""
    q = np.array(starts, np.int64)
    n = np.array(sizes, np.int64)
    r = starts[0] % 4
    candidates = np.flatnonzero((q % 4 == r) & (n >= _MIN_SIZE))
    if len(candidates) < VECTOR_MIN:
        return list(range(len(starts)))
    q, n = q[candidates], n[candidates]
    words = np.frombuffer(buf, order + "u4", (len(buf) - r) // 4, r)
    w = words[((q - r) // 4 + 2)[:, None] + np.arange(12)].astype(np.int64)
    ft, fn, flags, _, dt, dn, d0, d1, nt, nn, vt, vn = w.T
    small = (vt >> 16) != 0  # the data as a small data element
    dtype_code = np.where(small, vt & 0xFFFF, vt)
    nbytes = np.where(small, vt >> 16, vn)
    data = q + np.where(small, 52, 56)
    common = (
        (fn == 8) & (dn == 8) & (nn == 0) & _among(ft, (5, 6)) & _among(dt, (5, 6))
        & _among(nt, (1, 2, MI_UTF8)) & (d0 < 2**31) & (d1 < 2**31)
        & ~(small & (nbytes > 4)) & (data + nbytes <= q + 8 + n) & (dtype_code < 64)
    )  # fmt: skip
    dtype_code = np.where(common, dtype_code, 0)
    kind = flags & (0xFF | _F_LOGICAL | _F_COMPLEX)
    numel = d0 * d1
    stored_size = _STORED_SIZES[dtype_code]
    out_size = _OUT_SIZES[kind]
    numeric = (
        common & (out_size > 0) & (stored_size > 0) & (nbytes == numel * stored_size)
        & ((numel > 0) | ((d0 <= 1) & (d1 <= 1))) & (numel * out_size <= limit)
    )  # fmt: skip
    u1 = np.frombuffer(buf, np.uint8)
    for members, key in _groups(numeric, kind, dtype_code, d0, d1):
        out_dtype = _VALUE_DTYPES[int(key[0])]
        stored = _dt(order, _MI_DTYPES[int(key[1])])
        if stored.kind == "f" and out_dtype.kind in "iu":
            continue  # NaN and out-of-range casts give what numpy's loop for the shape
            # gives: one by one, as the generic parser does them
        _decode_group(out, candidates[members], data[members], int(key[2]), int(key[3]),
                      stored, out_dtype, u1)  # fmt: skip
    chars = common & ((flags & 0xFF) == CHAR) & (d0 == 1) & (d1 > 0)
    chars &= _among(dtype_code, _CHAR_BYTES) & (nbytes == d1)
    chars |= (
        common
        & ((flags & 0xFF) == CHAR)
        & (d0 == 1)
        & (d1 > 0)
        & _among(dtype_code, _CHAR_UNITS)
        & (nbytes == 2 * d1)
    )
    for members, key in _groups(chars, dtype_code, d1):
        _decode_rows(out, candidates[members], data[members], int(key[0]), int(key[1]),
                     u1, order)  # fmt: skip
    return [i for i, node in enumerate(out) if node is None]


def _among(values: npt.NDArray[np.int64], choices: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    """``numpy.isin(values, choices)`` for a few choices (isin sorts: costly on the short
    arrays of a small cell)."""
    out: npt.NDArray[np.bool_] = values == choices[0]
    for choice in choices[1:]:
        out |= values == choice
    return out


def _groups(
    mask: npt.NDArray[np.bool_], *keys: npt.NDArray[np.int64]
) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]]:
    """The elements selected by ``mask`` grouped by equal ``keys``: ``(members, key
    values)`` per group of at least :data:`GROUP_MIN` (smaller ones are left out)."""
    chosen = np.flatnonzero(mask)
    if len(chosen) < GROUP_MIN:
        return []
    columns = np.stack([k[chosen] for k in keys])
    order = np.lexsort(columns[::-1])
    sorted_keys = columns[:, order]
    change = np.flatnonzero(np.any(sorted_keys[:, 1:] != sorted_keys[:, :-1], axis=0)) + 1
    bounds = [0, *change.tolist(), len(order)]
    return [
        (chosen[order[a:b]], sorted_keys[:, a])
        for a, b in itertools.pairwise(bounds)
        if b - a >= GROUP_MIN
    ]


def _decode_group(
    out: list[Any],
    positions: npt.NDArray[np.intp],
    data: npt.NDArray[np.int64],
    rows: int,
    cols: int,
    stored: np.dtype[Any],
    out_dtype: np.dtype[Any],
    u1: npt.NDArray[np.uint8],
) -> None:
    """Siblings of one class, stored type and dims: one gather, one conversion."""
    numel = rows * cols
    if not numel:
        empty = np.empty((rows, cols), out_dtype)
        empty.setflags(write=False)  # shared: as identical elements are
        for i in positions.tolist():
            out[i] = empty
        return
    size = numel * stored.itemsize
    block = u1[data[:, None] + np.arange(size)].view(stored)  # (k, numel), a copy
    if stored != out_dtype:
        with np.errstate(all="ignore"):  # NaN or out of range, as NumericArray.convert
            block = block.astype(out_dtype)
    grid = block.reshape(len(positions), cols, rows).transpose(0, 2, 1)
    grid.setflags(write=False)
    for i, value in zip(positions.tolist(), grid, strict=True):
        out[i] = value  # (rows, cols), column-major: a view of the group's block


def _decode_rows(
    out: list[Any],
    positions: npt.NDArray[np.intp],
    data: npt.NDArray[np.int64],
    dtype_code: int,
    cols: int,
    u1: npt.NDArray[np.uint8],
    order: str,
) -> None:
    """Single rows of ``cols`` characters of one data type: bytes (ASCII for miUTF8,
    Latin-1 otherwise) or UTF-16 code units, without NULs (numpy's str drops trailing
    ones) or surrogates; the others stay None."""
    unit = np.dtype(np.uint8) if dtype_code in _CHAR_BYTES else np.dtype(order + "u2")
    units = u1[data[:, None] + np.arange(cols * unit.itemsize)].view(unit)
    bad = (units == 0).any(axis=1)
    if dtype_code == MI_UTF8:
        bad |= (units >= 0x80).any(axis=1)
    elif unit.itemsize == 2:
        bad |= ((units >= 0xD800) & (units <= 0xDFFF)).any(axis=1)
    keep = ~bad
    texts = units[keep].astype("<u4").view(f"<U{cols}")[:, 0].tolist()
    for i, text in zip(positions[keep].tolist(), texts, strict=True):
        out[i] = text  # a row of 1 x len(text) characters, each one code unit
