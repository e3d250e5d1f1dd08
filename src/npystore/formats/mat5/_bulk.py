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

import math
import struct
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from npystore.formats.mat5._char import chars_from_units
from npystore.formats.mat5._numeric import NumericArray
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
    DataRef,
    _Bytes,
    _class_name,
    _dt,
)

__all__ = [
    "DecodedChars",
    "QuickHeader",
    "decoded_class",
    "quick_chars",
    "quick_header",
    "quick_leaf",
    "quick_numeric",
]

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
        return _class_name(self.class_code, self.is_logical)


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
    if imag is not None and istored is not None:
        arr = np.empty(numel, out)
        arr.real = np.frombuffer(buf, stored, numel, real[1])
        arr.imag = np.frombuffer(buf, istored, numel, imag[1])
        arr = arr.reshape(dims, order="F")
    elif stored.kind == "f" and out.kind in "iu":
        with np.errstate(all="ignore"):  # NaN or out of range, as NumericArray.convert
            arr = np.frombuffer(buf, stored, numel, real[1]).astype(out).reshape(dims, order="F")
    else:  # one array object (no base array behind a reshaped view)
        arr = np.ndarray(dims, stored, buf, real[1], order="F").astype(out, order="K")
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
    buf: _Bytes, q: int, end: int, order: str, limit: int, *, base: int | None = None
) -> npt.NDArray[Any] | str | DecodedChars | NumericArray | None:
    """The decoded value of a small numeric, logical or char miMATRIX at ``buf[q:end]``
    (see :func:`quick_numeric`, :func:`quick_chars`); MATLAB's 8-byte ``[]`` is a 0x0
    double. None for anything else.

    With ``base`` (the offset of ``buf[0]``), a real 2-d numeric leaf without a name in the
    commonest layout whose values take more than ``limit`` bytes is given as its node,
    what the generic parser gives for it below the top level (offsets ``base`` + those in
    ``buf``), instead of None."""
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
            if stored is not None and n == numel * stored.itemsize and s + n <= end:
                if numel * out.itemsize > limit:
                    if base is not None and not vt >> 16 and numel <= MAX_NUMEL:
                        cls = _class_name(word & 0xFF, bool(word & _F_LOGICAL))
                        real = DataRef(base + s, n, stored, t)
                        return NumericArray(
                            "", (d0, d1), cls, False, real, None, base + q, end - q,
                            bool(word & _F_GLOBAL),
                        )  # fmt: skip
                elif (numel or (d0 <= 1 and d1 <= 1)) and (n <= 4 or not vt >> 16):
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
