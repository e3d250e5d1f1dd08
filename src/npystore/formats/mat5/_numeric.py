"""Numeric leaves: full numeric and logical arrays, and sparse (CSC) matrices."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, require
from npystore.formats.mat5._tags import _CLASS_CODES, _CLASS_DTYPES, DataRef, _Bytes


def numeric_dtype(matlab_class: str, is_complex: bool) -> np.dtype[Any]:
    """The dtype a full numeric or logical array of ``matlab_class`` decodes to (native order).

    The class's dtype (``bool`` for logical); complex: complex64 for single, complex128
    otherwise (numpy has no complex integers; exact up to 2**53).
    """
    if matlab_class == "logical":
        return np.dtype(np.bool_)
    if is_complex:
        return np.dtype(np.complex64 if matlab_class == "single" else np.complex128)
    return np.dtype(_CLASS_DTYPES[_CLASS_CODES[matlab_class]])


@dataclass(frozen=True, slots=True)
class NumericArray:
    """A full numeric or logical array.

    Attributes
    ----------
    name : str
        Variable name ("" below the top level).
    dims : tuple of int
        MATLAB dimensions (at least 2), column-major.
    matlab_class : str
        ``"double"``, ``"single"``, ``"int8"`` ... ``"uint64"`` or ``"logical"``.
    is_complex : bool
        Whether there is an imaginary part.
    real, imag : DataRef, DataRef or None
        The stored parts: ``numel`` values each, in a type that may be narrower than the
        class (a double array of small integers stored as miUINT8).
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    matlab_class: str
    is_complex: bool
    real: DataRef
    imag: DataRef | None
    offset: int
    size: int
    is_global: bool = False

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of decoded values, native byte order.

        The class's dtype (``bool`` for logical); complex: complex64 for single,
        complex128 otherwise (numpy has no complex integers; exact up to 2**53).
        """
        return numeric_dtype(self.matlab_class, self.is_complex)

    def data_refs(self) -> tuple[DataRef, ...]:
        """The ranges holding this array's values."""
        return (self.real,) if self.imag is None else (self.real, self.imag)

    def convert(
        self, real: npt.NDArray[Any], imag: npt.NDArray[Any] | None = None
    ) -> npt.NDArray[Any]:
        """Turn stored values (any slice of them) into values of the class's dtype.

        Parameters
        ----------
        real, imag : numpy.ndarray
            Stored values (``DataRef.view``), matching slices of both parts if complex.

        Returns
        -------
        numpy.ndarray
            Same shape, ``self.dtype``, a new writable array.
        """
        with np.errstate(all="ignore"):
            if self.is_complex:
                out = np.empty(real.shape, self.dtype)
                out.real = real
                out.imag = real.dtype.type(0) if imag is None else imag
                return out
            return real.astype(self.dtype)

    def decode(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[Any]:
        """The array: MATLAB shape, Fortran order, the class's dtype.

        Parameters
        ----------
        buffer : bytes
            Bytes holding the data ranges (the element, the inflated buffer, the file).
        base : int
            Offset of ``buffer[0]`` in the address space of the DataRefs.

        Returns
        -------
        numpy.ndarray
        """
        imag = None if self.imag is None else self.imag.view(buffer, base)
        return self.convert(self.real.view(buffer, base), imag).reshape(self.dims, order="F")


@dataclass(frozen=True, slots=True)
class SparseArray:
    """A sparse matrix, compressed sparse column (CSC) as MATLAB stores it.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        ``(M, N)``.
    matlab_class : str
        ``"double"`` or ``"logical"``.
    is_complex : bool
        Whether ``pi`` holds an imaginary part.
    nzmax : int
        The array flags' nzmax (room allocated, >= the number of nonzeros).
    ir, jc, pr, pi : DataRef
        Row indices, column starts (``N + 1`` used), real values, imaginary values. A
        logical ``pr`` declared miDOUBLE but holding a byte per value has ``stored_dtype``
        uint8 when that can be seen from sizes; :meth:`decode_parts` checks again against
        the number of nonzeros (``jc[N]``), as scipy does.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    matlab_class: str
    is_complex: bool
    nzmax: int
    ir: DataRef
    jc: DataRef
    pr: DataRef
    pi: DataRef | None
    offset: int
    size: int
    is_global: bool = False

    def data_refs(self) -> tuple[DataRef, ...]:
        """The ranges holding indices and values."""
        refs = (self.ir, self.jc, self.pr)
        return refs if self.pi is None else (*refs, self.pi)

    @property
    def dtype(self) -> np.dtype[Any]:
        """``bool``, ``float64`` or ``complex128``."""
        if self.matlab_class == "logical":
            return np.dtype(np.bool_)
        return np.dtype(np.complex128 if self.is_complex else np.float64)

    def decode_parts(
        self, buffer: _Bytes, base: int = 0
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64], tuple[int, int]]:
        """The checked CSC arrays ``(data, indices, indptr, shape)``, numpy only.

        Raises
        ------
        FormatError
            Column starts that do not start at 0 or decrease, more nonzeros than stored
            indices or values, or a row index outside ``0 .. M - 1``.
        """
        m, n = self.dims[0], self.dims[1]
        where = f"sparse variable {self.name!r}"
        indptr = self.jc.view(buffer, base)[: n + 1].astype(np.int64)
        if indptr[0] != 0 or (n and bool(np.any(np.diff(indptr) < 0))):
            raise FormatError(
                f"{where}: column starts (jc) {_short(indptr)} must start at 0 and not decrease"
            )
        nnz = int(indptr[-1])
        indices = self.ir.view(buffer, base).astype(np.int64)
        values = self.pr.view(buffer, base)
        if self.matlab_class == "logical" and values.dtype.itemsize != 1 and self.pr.nbytes == nnz:
            values = np.frombuffer(buffer, np.uint8, nnz, self.pr.offset - base)
        if nnz > len(indices) or nnz > len(values):
            raise FormatError(
                f"{where}: jc[{n}] = {nnz} nonzeros, but {len(indices)} row indices and "
                f"{len(values)} values are stored"
            )
        indices = indices[:nnz]
        if nnz and (int(indices.min()) < 0 or int(indices.max()) >= m):
            raise FormatError(
                f"{where}: row indices (ir) run from {int(indices.min())} to "
                f"{int(indices.max())}, expected 0 to {m - 1}"
            )
        with np.errstate(all="ignore"):
            if self.pi is not None:
                data = np.empty(nnz, np.complex128)
                data.real = values[:nnz]
                imag = self.pi.view(buffer, base)
                if len(imag) < nnz:
                    raise FormatError(f"{where}: {nnz} nonzeros, but {len(imag)} imaginary values")
                data.imag = imag[:nnz]
            else:
                data = values[:nnz].astype(self.dtype)
        return data, indices, indptr, (m, n)

    def decode(self, buffer: _Bytes, base: int = 0) -> Any:
        """A ``scipy.sparse.csc_matrix`` (scipy is imported here, and only here).

        Logical sparse arrays decode to dtype ``bool``.
        """
        data, indices, indptr, shape = self.decode_parts(buffer, base)
        sparse = require("scipy.sparse", "scipy", "mat", "a sparse MATLAB variable")
        return sparse.csc_matrix((data, indices, indptr), shape=shape)


def _short(values: npt.NDArray[Any], limit: int = 8) -> str:
    shown = ", ".join(str(int(v)) for v in values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}]"
