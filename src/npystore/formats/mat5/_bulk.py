"""Fast paths for many small matrices: the common layout read with a few ``unpack_from`` calls.

A cell of 100,000 small arrays, or a file of 200,000 variables, is mostly per-subelement
bookkeeping for the generic parser (``_meta``, ``_parse``): a reader, a tag tuple and a
message label per subelement. The functions here recognise the layout every writer uses
(array flags, dimensions, name, then the data elements) inside one buffer that holds the
whole matrix, and give its header or its decoded value directly.

They never raise on malformed input and accept only what the generic parser accepts, with
the same result: anything else (an unusual layout, a value the generic parser would refuse,
an empty array of more than one row or column, a value over the caller's size limit) gives
None, and the caller falls back to the generic parser, which reports any problem.

Decoded values are what :meth:`NumericArray.decode` gives, read-only (they may be handed
out again, and many are views of one block); a char row of ``(1, n)`` characters is its
``str`` (every character one code unit), other char arrays decoded here (no row, or blanks)
are :class:`DecodedChars`.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from npystore.formats.mat5._char import chars_from_units
from npystore.formats.mat5._tags import (
    _CHAR_ENCODINGS,
    _CLASS_DTYPES,
    _F_COMPLEX,
    _F_GLOBAL,
    _F_LOGICAL,
    _MI_DTYPES,
    CHAR,
    CLASS_NAMES,
    MAX_NDIM,
    MAX_NUMEL,
    MAX_UNBACKED,
    MI_UTF8,
    OBJECT,
    OPAQUE,
    SPARSE,
    _Bytes,
    _dt,
)

__all__ = [
    "MEMO_ENTRIES",
    "MEMO_SIZE",
    "VECTOR_MIN",
    "DecodedChars",
    "QuickHeader",
    "decode_children",
    "decoded_class",
    "quick_chars",
    "quick_header",
    "quick_leaf",
    "quick_numeric",
]

#: Elements of at most this many bytes are remembered while decoding children: identical
#: ones (``[]``, repeated scalars and short strings) share one read-only value.
MEMO_SIZE: Final = 64
#: Most distinct elements remembered per variable.
MEMO_ENTRIES: Final = 4096

#: Bytes of the shortest regular miMATRIX: tag, array flags (16), 2-d dims (16), name tag.
_MIN_SIZE: Final = 48
#: flags tag, flags, dims tag, two dims, name tag
_TEN: Final = {o: struct.Struct(o + "6I2i2I") for o in "<>"}
#: The 48 bytes after the tag of a 2-d matrix with an empty name: flags, dims, name and
#: data tags.
_TWELVE: Final = {o: struct.Struct(o + "12I") for o in "<>"}
_KIND_FLAGS: Final = 0xFF | _F_LOGICAL | _F_COMPLEX
_PAIR: Final = {o: struct.Struct(o + "II") for o in "<>"}
#: Stored dtype of each numeric data type, per byte order.
_STORED: Final = {o: {t: _dt(o, code) for t, code in _MI_DTYPES.items()} for o in "<>"}
_U4: Final = np.dtype(np.uint32)
_EMPTY_DOUBLE: Final = np.dtype(np.float64)


def _value_dtype(code: int, flags: int) -> np.dtype[Any] | None:
    """The dtype a numeric class decodes to (as ``NumericArray.dtype``); None if invalid,
    and for complex integers (complex128 would not tell their class: the generic parser's)."""
    if flags & _F_LOGICAL:
        return None if flags & _F_COMPLEX else np.dtype(np.bool_)
    if flags & _F_COMPLEX:
        if code not in (6, 7):
            return None
        return np.dtype(np.complex128 if code == 6 else np.complex64)
    return np.dtype(_CLASS_DTYPES[code])


#: Decoded dtype per ``class code | logical and complex flags``: numeric classes only.
_VALUE_DTYPES: Final = {
    code | flags: dtype
    for code in _CLASS_DTYPES
    for flags in (0, _F_LOGICAL, _F_COMPLEX)
    if (dtype := _value_dtype(code, flags)) is not None
}


def decoded_class(value: npt.NDArray[Any] | str | DecodedChars) -> str:
    """The MATLAB class of a value decoded with its container (its dtype tells it: complex
    integers are never decoded so)."""
    if isinstance(value, np.ndarray):
        return _CLASS_OF_DTYPE[value.dtype]
    return "char"


class QuickHeader(NamedTuple):
    """What :func:`quick_header` reads: the fields of :class:`MatrixHeader` a listing uses.

    Attributes
    ----------
    name : str
        Variable name.
    flags : int
        The first word of the array flags: class | flags << 8.
    dims : tuple of int
        MATLAB dimensions.
    next : int
        Buffer offset of the subelement after the name.
    """

    name: str
    flags: int
    dims: tuple[int, ...]
    next: int

    @property
    def class_code(self) -> int:
        """Array class (1 cell ... 16 function handle)."""
        return self.flags & 0xFF

    @property
    def is_logical(self) -> bool:
        """The logical flag."""
        return bool(self.flags & _F_LOGICAL)

    @property
    def is_complex(self) -> bool:
        """The complex flag."""
        return bool(self.flags & _F_COMPLEX)

    @property
    def is_global(self) -> bool:
        """The global flag."""
        return bool(self.flags & _F_GLOBAL)

    @property
    def is_sparse(self) -> bool:
        """Whether the array is sparse."""
        return self.class_code == SPARSE

    @property
    def matlab_class(self) -> str:
        """As :attr:`MatrixHeader.matlab_class` (quick headers are never objects)."""
        code = self.class_code
        if code in _CLASS_DTYPES or code == SPARSE:
            if self.is_logical:
                return "logical"
            return "double" if code == SPARSE else CLASS_NAMES[code]
        return CLASS_NAMES.get(code, f"<class {code}>")


#: The class of each decoded dtype (complex: double and single only).
_CLASS_OF_DTYPE: Final = {
    dtype: "logical" if key & _F_LOGICAL else CLASS_NAMES[key & 0xFF]
    for key, dtype in sorted(_VALUE_DTYPES.items(), reverse=True)
}


class DecodedChars(NamedTuple):
    """A char array of at most one row, decoded with its container.

    Attributes
    ----------
    dims : tuple of int
        MATLAB dimensions: ``(1, n)``, ``(0, 0)`` or ``(0, 1)``.
    text : str
        The row ("" when there is none). Its characters are its code units (no character
        beyond the BMP is decoded this way).
    """

    dims: tuple[int, ...]
    text: str

    @property
    def matlab_class(self) -> str:
        """``"char"``."""
        return "char"

    @property
    def units(self) -> npt.NDArray[np.uint32]:
        """The code units, uint32, shape ``dims`` (as :meth:`CharArray.code_units`)."""
        points = np.frombuffer(self.text.encode("utf-32-le"), "<u4").astype(_U4)
        return points.reshape(self.dims, order="F")

    def decode(self, buffer: _Bytes = b"", base: int = 0) -> npt.NDArray[Any]:
        """As :meth:`CharArray.decode` with ``as_strings=True``."""
        del buffer, base
        return chars_from_units(self.units.reshape(-1, order="F"), self.dims)


def quick_header(buf: _Bytes, q: int, end: int, order: str) -> QuickHeader | None:
    """The flags, dims and name of the miMATRIX whose tag is at ``buf[q]`` and whose
    element ends at ``buf[end]`` (``end`` may lie past the buffer when only the header is
    wanted); None when the layout is not the common one (opaque objects and old-style
    objects never are) or the generic parser would refuse it."""
    stop = len(buf)
    stop = end if end < stop else stop  # (not min(): called once per variable)
    if stop - q < _MIN_SIZE:
        return None
    ft, fn, word, _, dt, dn, d0, d1, w, n = _TEN[order].unpack_from(buf, q + 8)
    if (  # 2-d: flags, dims and the name's tag in one unpack
        dn == 8
        and fn == 8
        and ft in (5, 6)
        and dt in (5, 6)
        and d0 >= 0
        and d1 >= 0
        and d0 * d1 <= MAX_NUMEL
        and word & 0xFF not in (OPAQUE, OBJECT)
    ):
        return _with_name(buf, q + 40, w, n, end, stop, word, (d0, d1))
    # N-d (2-d ones that failed the checks above fail these too)
    if fn != 8 or ft not in (5, 6) or dt not in (5, 6) or dn & 3 or dn == 8:
        return None
    if word & 0xFF in (OPAQUE, OBJECT):
        return None
    ndim = dn >> 2
    if not 2 < ndim <= MAX_NDIM or q + 32 + dn > stop:
        return None
    dims: tuple[int, ...] = struct.unpack_from(f"{order}{ndim}i", buf, q + 32)
    if min(dims) < 0 or math.prod(dims) > MAX_NUMEL:
        return None
    p = q + 32 + dn + (-dn & 7)
    if p + 8 > stop:
        return None
    w, n = _PAIR[order].unpack_from(buf, p)
    return _with_name(buf, p, w, n, end, stop, word, dims)


def _with_name(
    buf: _Bytes, p: int, w: int, n: int, end: int, stop: int, word: int, dims: tuple[int, ...]
) -> QuickHeader | None:
    """The header, given the words ``(w, n)`` of the name's tag at ``buf[p]``."""
    if w >> 16:
        t, n, s, nxt = w & 0xFFFF, w >> 16, p + 4, p + 8
        if n > 4:
            return None
    else:
        t, s = w, p + 8
        if n > end - s or s + n > stop:
            return None
        nxt = s + n + (-n & 7)
        nxt = end if end < nxt else nxt
    if t not in (1, 2, MI_UTF8):
        return None
    if not n:
        return QuickHeader("", word, dims, nxt)
    raw = bytes(buf[s : s + n])
    if t != MI_UTF8:
        return QuickHeader(raw.decode("latin-1"), word, dims, nxt)
    try:
        return QuickHeader(raw.decode("utf-8"), word, dims, nxt)
    except UnicodeDecodeError:
        return None


def _data(buf: _Bytes, p: int, end: int, order: str) -> tuple[int, int, int, int] | None:
    """``(type, data offset, nbytes, next offset)`` of the data subelement at ``buf[p]``."""
    if p + 8 > end:
        return None
    w, n = _PAIR[order].unpack_from(buf, p)
    if w >> 16:
        if w >> 16 > 4:
            return None
        return w & 0xFFFF, p + 4, w >> 16, p + 8
    if n > end - p - 8:
        return None
    nxt = p + 8 + n + (-n & 7)
    return w, p + 8, n, nxt if nxt < end else end


def quick_numeric(
    buf: _Bytes, q: int, end: int, order: str, limit: int, header: QuickHeader | None = None
) -> npt.NDArray[Any] | None:
    """The decoded value of the numeric or logical miMATRIX at ``buf[q:end]`` (all in
    ``buf``), read-only, when its values take at most ``limit`` bytes; else None.

    ``header`` is its :func:`quick_header` when the caller has it already.
    """
    h = header or quick_header(buf, q, end, order)
    if h is None or end > len(buf):
        return None
    word, dims = h.flags, h.dims
    out = _VALUE_DTYPES.get(word & (0xFF | _F_LOGICAL | _F_COMPLEX))
    if out is None:
        return None
    numel = dims[0] * dims[1] if len(dims) == 2 else math.prod(dims)
    if (not numel and max(dims) > 1) or numel * out.itemsize > limit:
        return None  # empties of more than one row or column: the generic parser's checks
    real = _data(buf, h.next, end, order)
    if real is None:
        return None
    stored = _STORED[order].get(real[0])
    if stored is None or real[2] != numel * stored.itemsize:
        return None
    imag = None
    if word & _F_COMPLEX:
        imag = _data(buf, real[3], end, order)
        istored = None if imag is None else _STORED[order].get(imag[0])
        if imag is None or istored is None or imag[2] != numel * istored.itemsize:
            return None
    if not numel:
        arr = np.empty(dims, out, order="F")
        arr.setflags(write=False)
        return arr
    values = np.frombuffer(buf, stored, numel, real[1])
    if imag is not None and istored is not None:
        arr = np.empty(numel, out)
        arr.real = values
        arr.imag = np.frombuffer(buf, istored, numel, imag[1])
        arr = arr.reshape(dims, order="F")
    elif stored.kind == "f" and out.kind in "iu":
        with np.errstate(all="ignore"):  # NaN or out of range, as NumericArray.convert
            arr = values.astype(out).reshape(dims, order="F")
    else:  # one array object (no base array behind a reshaped view)
        arr = values.reshape(dims, order="F").astype(out, order="K")
    arr.setflags(write=False)
    return arr


def quick_chars(
    buf: _Bytes, q: int, end: int, order: str, header: QuickHeader | None = None
) -> str | DecodedChars | None:
    """The char miMATRIX at ``buf[q:end]`` decoded, when it holds at most one row of ASCII
    (or Latin-1, UTF-16 without surrogates) text: a ``str`` for a row of ``(1, n)``
    characters, ``n >= 1`` (each character one code unit), else :class:`DecodedChars`;
    None for anything else."""
    h = header or quick_header(buf, q, end, order)
    if h is None or end > len(buf) or h.flags & 0xFF != CHAR or len(h.dims) != 2:
        return None
    d0, d1 = h.dims
    if d0 != 1 and not (d0 == 0 and d1 <= 1):
        return None
    numel = d0 * d1
    data = _data(buf, h.next, end, order)
    if data is None:
        return None
    t, s, n, _ = data
    spec = _CHAR_ENCODINGS.get(t)
    if spec is None:
        return None
    encoding = spec[0]
    if not n:  # no data: blanks, as scipy reads them
        return None if numel > MAX_UNBACKED else DecodedChars(h.dims, " " * numel)
    raw = bytes(buf[s : s + n])
    if encoding in ("latin-1", "utf-8"):
        if n != numel:
            return None  # utf-8: multi-byte characters are the generic parser's
        text = raw.decode("latin-1")
        if encoding == "utf-8" and not text.isascii():
            return None
    elif encoding == "utf-16":
        if n != 2 * numel:
            return None
        try:
            text = raw.decode("utf-16-le" if order == "<" else "utf-16-be")
        except UnicodeDecodeError:  # a lone surrogate
            return None
        if len(text) != numel:  # surrogate pairs joined: rows of code units differ
            return None
    else:
        return None
    return text if d0 == 1 else DecodedChars(h.dims, text)


def quick_leaf(
    buf: _Bytes, q: int, end: int, order: str, limit: int
) -> npt.NDArray[Any] | str | DecodedChars | None:
    """The decoded value of a small numeric, logical or char miMATRIX at ``buf[q:end]``
    (see :func:`quick_numeric`, :func:`quick_chars`); MATLAB's 8-byte ``[]`` is a 0x0
    double. None for anything else."""
    if end - q == 8:
        arr = np.empty((0, 0), _EMPTY_DOUBLE)
        arr.setflags(write=False)
        return arr
    if end - q >= _MIN_SIZE + 8 and end <= len(buf):
        # the commonest layout of all, read with one unpack: a real 2-d numeric matrix
        # without a name (what cells and struct fields hold)
        ft, fn, word, _, dt, dn, d0, d1, nt, nn, vt, vn = _TWELVE[order].unpack_from(buf, q + 8)
        out = _VALUE_DTYPES.get(word & _KIND_FLAGS)
        if (
            out is not None
            and fn == dn == 8
            and nn == 0
            and ft in (5, 6)
            and dt in (5, 6)
            and nt in (1, 2, MI_UTF8)
            and d0 < 2**31
            and d1 < 2**31
            and not word & _F_COMPLEX
        ):
            numel = d0 * d1
            if vt >> 16:
                t, n, s = vt & 0xFFFF, vt >> 16, q + 52
            else:
                t, n, s = vt, vn, q + 56
            stored = _STORED[order].get(t)
            if (
                stored is not None
                and n == numel * stored.itemsize
                and s + n <= end
                and (numel or (d0 <= 1 and d1 <= 1))
                and numel * out.itemsize <= limit
                and (n <= 4 or not vt >> 16)
            ):
                if not numel:
                    arr = np.empty((d0, d1), out)
                elif stored.kind == "f" and out.kind in "iu":
                    with np.errstate(all="ignore"):
                        arr = np.frombuffer(buf, stored, numel, s).astype(out)
                    arr = arr.reshape(d1, d0).T  # column-major (d0, d1)
                else:  # column-major (d0, d1), one array object
                    values = np.frombuffer(buf, stored, numel, s).reshape(d1, d0)
                    arr = values.T.astype(out, order="K")
                arr.setflags(write=False)
                return arr
    h = quick_header(buf, q, end, order)
    if h is None:
        return None
    if h.flags & 0xFF == CHAR:
        return quick_chars(buf, q, end, order, h)
    return quick_numeric(buf, q, end, order, limit, h)


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
            value = quick_leaf(buf, q, q + 8 + nbytes, order, limit)
        nodes[i] = value if value is not None else fallback(i, base + q)[0]
    for i in range(walked, count):  # after a wrong tag: the fallback reports it
        node, pos = fallback(i, pos)
        nodes.append(node)
    return nodes


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


#: Fewest siblings decoded together by :func:`_vector_leaves`, and fewest of one group
#: (class, type, dims) decoded together.
VECTOR_MIN: Final = 32
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
        (fn == 8) & (dn == 8) & (nn == 0) & np.isin(ft, (5, 6)) & np.isin(dt, (5, 6))
        & np.isin(nt, (1, 2, MI_UTF8)) & (d0 < 2**31) & (d1 < 2**31)
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
    chars &= np.isin(dtype_code, _CHAR_BYTES) & (nbytes == d1)
    chars |= (
        common
        & ((flags & 0xFF) == CHAR)
        & (d0 == 1)
        & (d1 > 0)
        & np.isin(dtype_code, _CHAR_UNITS)
        & (nbytes == 2 * d1)
    )
    for members, key in _groups(chars, dtype_code, d1):
        _decode_rows(out, candidates[members], data[members], int(key[0]), int(key[1]),
                     u1, order)  # fmt: skip
    return [i for i, node in enumerate(out) if node is None]


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
