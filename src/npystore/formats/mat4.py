"""MATLAB Level-4 MAT-files (``save -v4``), parsed from byte ranges into descriptions.

Reading order (what the IO layer does)::

    1. prefix = file[0:min(128, size)]            -> mat5.parse_header: version 4 when a
                                                     zero is among the first 4 bytes
    2. windows of the file from offset 0          -> scan_v4: one V4Matrix per matrix whose
                                                     20-byte header and name are inside the
                                                     window; it returns the offset of the next
                                                     header it could not see
    3. per matrix: its DataRef ranges             -> V4Matrix.decode / convert

Byte layout (MathWorks, "MAT-File Format", Level 4): matrices back to back from offset 0,
no file header, each in its own byte order (the M digit of its type)::

    0   4  type MOPT = M*1000 + O*100 + P*10 + T
             M  0 IEEE little endian, 1 IEEE big endian (2 VAX D, 3 VAX G, 4 Cray: refused)
             O  0
             P  precision of the stored values: 0 double, 1 single, 2 int32, 3 int16,
                4 uint16, 5 uint8
             T  0 full matrix, 1 text (character codes), 2 sparse
    4   4  mrows; 8 4 ncols (int32)
    12  4  imagf: 1 if an imaginary part follows the real part
    16  4  namlen: length of the name including its terminating NUL
    20  namlen  name, NUL terminated (latin-1)
    ...    real part: mrows * ncols values of precision P, column-major
    ...    imaginary part, the same, if imagf

    A sparse matrix (T = 2) is stored as an (nnz + 1) x 3 full matrix: 1-based row indices,
    1-based column indices, values; its last row holds the dimensions (M, N, 0). A complex
    sparse matrix has a fourth column of imaginary parts (imagf stays 0).

Every Level-4 value is a double (or char) to MATLAB, whatever precision stores it: decoded
full matrices are float64 or complex128, text a str per row, sparse a COO matrix.

This module is pure: bytes in, frozen dataclasses out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, UnsupportedError, require
from npystore.formats.mat5 import (
    DataRef,
    Mopt,
    NeedMoreBytes,
    char_dims_problem,
    chars_from_units,
    decode_mopt,
    with_source,
)

__all__ = [
    "MAX_V4_NAME", "V4_HEADER_SIZE", "V4Matrix", "NeedMoreBytes", "parse_v4", "scan_v4",
]  # fmt: skip

#: Size of the fixed part of a Level-4 matrix header.
V4_HEADER_SIZE: Final = 20
#: Longest name (namlen) accepted; MATLAB names have at most 63 characters.
MAX_V4_NAME: Final = 4096

#: Stored dtype (without byte order) of each precision P.
_PRECISIONS: Final = {0: "f8", 1: "f4", 2: "i4", 3: "i2", 4: "u2", 5: "u1"}
_KINDS: Final = {0: "full", 1: "text", 2: "sparse"}
_FULL, _TEXT, _SPARSE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class V4Matrix:
    """One Level-4 matrix.

    Attributes
    ----------
    name : str
        The name, up to its NUL, latin-1.
    offset : int
        Absolute offset of the 20-byte header.
    size : int
        Header + name + data bytes; the next matrix starts at ``offset + size``.
    mopt : Mopt
        Byte order, precision and kind (full, text, sparse) of the matrix.
    mrows, ncols : int
        Stored dimensions (for sparse: ``nnz + 1`` and 3 or 4).
    is_complex : bool
        imagf: an imaginary part follows the real one (full and text only).
    real, imag : DataRef, DataRef or None
        The stored parts, ``mrows * ncols`` values of the precision each.
    source : str
        Name of the file, prefixed to the messages of errors from :meth:`decode`.
    """

    name: str
    offset: int
    size: int
    mopt: Mopt
    mrows: int
    ncols: int
    is_complex: bool
    real: DataRef
    imag: DataRef | None
    source: str = "<bytes>"

    @property
    def byte_order(self) -> str:
        """``"<"`` or ``">"``."""
        return self.mopt.byte_order

    @property
    def kind(self) -> str:
        """``"full"``, ``"text"`` or ``"sparse"``."""
        return _KINDS[self.mopt.kind]

    @property
    def is_sparse(self) -> bool:
        """Whether the matrix is sparse (stored as triplets)."""
        return self.mopt.kind == _SPARSE

    @property
    def dims(self) -> tuple[int, int]:
        """Stored dimensions ``(mrows, ncols)``; a sparse matrix's own shape is in its data."""
        return (self.mrows, self.ncols)

    @property
    def matlab_class(self) -> str:
        """``"char"`` for text, else ``"double"``."""
        return "char" if self.mopt.kind == _TEXT else "double"

    @property
    def dtype(self) -> np.dtype[Any]:
        """float64 or complex128 (full and sparse matrices)."""
        complex_ = self.is_complex or (self.is_sparse and self.ncols == 4)
        return np.dtype(np.complex128 if complex_ else np.float64)

    def data_refs(self) -> tuple[DataRef, ...]:
        """The ranges holding the values."""
        return (self.real,) if self.imag is None else (self.real, self.imag)

    def convert(
        self, real: npt.NDArray[Any], imag: npt.NDArray[Any] | None = None
    ) -> npt.NDArray[Any]:
        """Stored values (any matching slices of both parts) as float64 or complex128."""
        if imag is None:
            return real.astype(np.float64)
        out = np.empty(real.shape, np.complex128)
        out.real = real
        out.imag = imag
        return out

    def decode(self, buffer: bytes, base: int = 0, *, as_strings: bool = True) -> Any:
        """The value: a Fortran-order array, strings, or a ``scipy.sparse.coo_matrix``.

        Parameters
        ----------
        buffer : bytes
            Bytes holding the data ranges (e.g. the whole file, ``base=0``).
        base : int
            Absolute offset of ``buffer[0]``.
        as_strings : bool
            Text only: one str per row (object array of shape ``(mrows,)``), or a ``<U1``
            grid of shape ``(mrows, ncols)``.

        Returns
        -------
        numpy.ndarray or scipy.sparse.coo_matrix
            Sparse matrices import scipy here, and only here. COO as scipy returns it: a
            CSC matrix would need an array as long as the column count the data claims.

        Raises
        ------
        FormatError
            Text codes that are not characters; sparse triplets out of range.
        NeedMoreBytes
            A DataRef range is not inside ``buffer``.
        """
        try:
            return self._decode(buffer, base, as_strings)
        except (FormatError, NeedMoreBytes) as exc:
            raise with_source(exc, self.source) from None

    def _decode(self, buffer: bytes, base: int, as_strings: bool) -> Any:
        if self.is_sparse:
            data, rows, cols, shape = self.decode_parts(buffer, base)
            sparse = require("scipy.sparse", "scipy", "mat", f"{self.source}: a sparse matrix")
            return sparse.coo_matrix((data, (rows, cols)), shape=shape)
        imag = None if self.imag is None else self.imag.view(buffer, base)
        values = self.convert(self.real.view(buffer, base), imag)
        if self.mopt.kind == _FULL:
            return values.reshape(self.dims, order="F")
        codes = values.real
        with np.errstate(all="ignore"):
            whole = bool(np.all(codes == np.floor(codes)))
        if len(codes) and not (whole and codes.min() >= 0 and codes.max() <= 0x10FFFF):
            raise FormatError(
                f"text matrix {self.name!r}: character codes must be integers from 0 to "
                f"0x10FFFF, found {codes.min()} to {codes.max()}"
            )
        return chars_from_units(codes.astype(np.uint32), self.dims, as_strings=as_strings)

    def decode_parts(
        self, buffer: bytes, base: int = 0
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64], tuple[int, int]]:
        """A sparse matrix as checked COO triplets ``(data, rows, cols, shape)``, 0-based.

        Sorted by column, then row; duplicates are kept (scipy sums them). COO, not CSC:
        nothing is allocated per column, whose count comes from the data.

        Raises
        ------
        FormatError
            Not sparse, non-integer or out-of-range indices or dimensions.
        """
        where = f"sparse matrix {self.name!r}"
        if not self.is_sparse:
            raise FormatError(f"{where}: the matrix is {self.kind}, not sparse")
        table = self.real.view(buffer, base).astype(np.float64).reshape(self.dims, order="F")
        m_f, n_f = table[-1, 0], table[-1, 1]
        rows_f, cols_f = table[:-1, 0], table[:-1, 1]
        checks = np.concatenate([[m_f, n_f], rows_f, cols_f])
        with np.errstate(all="ignore"):
            whole = bool(np.all(checks == np.floor(checks)))
        if not whole or not (min(m_f, n_f) >= 0 and max(m_f, n_f) <= 2**31 - 1):
            raise FormatError(
                f"{where}: dimensions ({m_f}, {n_f}) and indices must be whole numbers, "
                "dimensions 0 to 2**31 - 1"
            )
        m, n = int(m_f), int(n_f)
        with np.errstate(all="ignore"):
            rows, cols = rows_f.astype(np.int64) - 1, cols_f.astype(np.int64) - 1
        if len(rows) and (rows.min() < 0 or rows.max() >= m or cols.min() < 0 or cols.max() >= n):
            lo, hi = (
                (int(rows.min()) + 1, int(cols.min()) + 1),
                (int(rows.max()) + 1, int(cols.max()) + 1),
            )
            raise FormatError(
                f"{where}: 1-based (row, column) indices run from {lo} to {hi}, outside the "
                f"{m} x {n} matrix"
            )
        values = table[:-1, 2] + 1j * table[:-1, 3] if self.ncols == 4 else table[:-1, 2].copy()
        order = np.lexsort((rows, cols))
        return values[order], rows[order], cols[order], (m, n)


def scan_v4(
    data: bytes, data_offset: int, file_size: int, *, source: str
) -> tuple[list[V4Matrix], int | None]:
    """Walk the Level-4 matrix headers inside a window of the file.

    Only headers and names are read; the values may lie outside ``data``.

    Parameters
    ----------
    data : bytes
        ``file[data_offset:data_offset + len(data)]``, starting at a matrix header.
    data_offset : int
        Absolute offset of ``data[0]``: 0, or an offset this function returned.
    file_size : int
        Size of the file.
    source : str
        Name of the file, for messages.

    Returns
    -------
    matrices : list of V4Matrix
        The matrices whose header and name lie in ``data``, in file order.
    next_offset : int or None
        Absolute offset of the next header, not (wholly) in ``data``; None at the end.

    Raises
    ------
    FormatError
        A bad type, negative or inconsistent sizes, a matrix running past the end.
    UnsupportedError
        VAX or Cray numbers; a sparse matrix with imagf set.
    """
    out: list[V4Matrix] = []
    pos = data_offset
    stop = data_offset + len(data)
    while pos < file_size:
        where = f"{source}: v4 matrix at offset {pos}"
        if pos + V4_HEADER_SIZE > file_size:
            raise FormatError(
                f"{where}: {file_size - pos} bytes left, expected a {V4_HEADER_SIZE}-byte "
                "header or the end of the file (truncated?)"
            )
        if pos + V4_HEADER_SIZE > stop:
            return out, pos
        at = pos - data_offset
        mopt = decode_mopt(data[at : at + 4], source=where)
        mrows, ncols, imagf, namlen = struct.unpack_from(f"{mopt.byte_order}4i", data, at + 4)
        if min(mrows, ncols) < 0 or imagf not in (0, 1) or not 0 <= namlen <= MAX_V4_NAME:
            raise FormatError(
                f"{where}: mrows {mrows}, ncols {ncols}, imagf {imagf}, namlen {namlen}; "
                f"expected sizes >= 0, imagf 0 or 1, namlen 0 to {MAX_V4_NAME}"
            )
        start = pos + V4_HEADER_SIZE + namlen
        if start > file_size:
            raise FormatError(f"{where}: the {namlen}-byte name runs past the end of the file")
        if start > stop:
            return out, pos
        raw = bytes(data[at + V4_HEADER_SIZE : at + V4_HEADER_SIZE + namlen])
        name = raw.split(b"\x00", 1)[0].decode("latin-1")
        where = f"{source}: v4 matrix {name!r} at offset {pos}"
        _check_kind(mopt, mrows, ncols, imagf, where)
        dtype = np.dtype(mopt.byte_order + _PRECISIONS[mopt.precision])
        nbytes = mrows * ncols * dtype.itemsize
        end = start + nbytes * (1 + imagf)
        if end > file_size:
            raise FormatError(
                f"{where}: {mrows} x {ncols} {dtype} values{' (complex)' * imagf} need "
                f"{end - start} bytes, {file_size - start} are left (truncated?)"
            )
        real = DataRef(start, nbytes, dtype, mopt.precision)
        imag = DataRef(start + nbytes, nbytes, dtype, mopt.precision) if imagf else None
        matrix = V4Matrix(name, pos, end - pos, mopt, mrows, ncols, bool(imagf), real, imag, source)
        out.append(matrix)
        pos = end
    return out, None


def parse_v4(data: bytes, data_offset: int = 0, *, source: str) -> list[V4Matrix]:
    """Describe every matrix of a Level-4 file held whole in ``data``.

    Parameters
    ----------
    data : bytes
        The file from ``data_offset`` to its end.
    data_offset : int
        Absolute offset of ``data[0]``, a matrix header (0 for the whole file).
    source : str
        Name of the file, for messages.

    Returns
    -------
    list of V4Matrix

    Raises
    ------
    FormatError, UnsupportedError
        As for :func:`scan_v4`.
    """
    matrices, _ = scan_v4(data, data_offset, data_offset + len(data), source=source)
    return matrices


def _check_kind(mopt: Mopt, mrows: int, ncols: int, imagf: int, where: str) -> None:
    """The shape rules of text and sparse matrices."""
    if mopt.kind == _SPARSE:
        if imagf:
            raise UnsupportedError(
                f"{where}: sparse with imagf set; complex sparse v4 matrices have a fourth "
                "column instead"
            )
        if mrows < 1 or ncols not in (3, 4):
            raise FormatError(
                f"{where}: sparse stored as {mrows} x {ncols}, expected (nnz + 1) x 3 or 4"
            )
    if mopt.kind == _TEXT and imagf:
        raise FormatError(f"{where}: text with an imaginary part")
    problem = char_dims_problem((mrows, ncols)) if mopt.kind == _TEXT else None
    if problem:
        raise FormatError(f"{where}: {problem}")
