"""Char leaves: MATLAB char arrays and the arrangement of their characters into strings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.mat5._tags import MAX_UNBACKED, DataRef, _Bytes
from npystore.formats.shapes import shape_problem

#: How invalid UTF-8 in a char array is read: refused, or as U+FFFD.
CharErrors = Literal["strict", "replace"]


@dataclass(frozen=True, slots=True)
class CharArray:
    """A char array: UTF-16 code units in MATLAB, stored in one of several encodings.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        MATLAB dimensions; ``dims[1]`` runs along a row (one string).
    encoding : str
        How ``data`` is read: ``"utf-8"`` (miUTF8), ``"utf-16"`` (code units: miUTF16,
        miUINT16, miINT16), ``"utf-32"`` (code points: miUTF32, miUINT32, miINT32) or
        ``"latin-1"`` (bytes: miUINT8, miINT8).
    data : DataRef
        The characters, column-major; ``stored_dtype`` is the unsigned code unit.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    encoding: str
    data: DataRef
    offset: int
    size: int
    is_global: bool = False

    matlab_class = "char"

    @property
    def numel(self) -> int:
        """Number of characters MATLAB counts (UTF-16 code units)."""
        return math.prod(self.dims)

    def data_refs(self) -> tuple[DataRef, ...]:
        """The range holding the characters."""
        return (self.data,)

    def code_units(
        self, buffer: _Bytes, base: int = 0, *, errors: CharErrors = "strict"
    ) -> npt.NDArray[np.uint32]:
        """The characters as ``numel`` integers, column-major.

        UTF-16 code units (a character outside the BMP is two units, as in MATLAB) or, for
        UTF-8 and UTF-32 data whose count matches ``dims`` that way, code points (scipy's
        ``savemat`` counts code points).

        ``errors="replace"`` reads invalid UTF-8 as scipy's ``loadmat`` does: U+FFFD for each
        invalid sequence (Python's codec), then the first ``numel`` characters kept when
        that makes more; ``"strict"`` refuses it.

        Raises
        ------
        FormatError
            Invalid UTF-8 (strict), values above U+10FFFF, or a count that matches neither.
        """
        n = self.numel
        if self.data.nbytes == 0:
            return np.full(n, 0x20, np.uint32)
        raw = self.data.view(buffer, base)
        if self.encoding == "utf-8":
            try:
                text = raw.tobytes().decode("utf-8", "surrogatepass")
            except UnicodeDecodeError as exc:
                if errors != "replace":
                    raise FormatError(
                        f"char variable {self.name!r}: invalid UTF-8 at byte {exc.start} of "
                        f"{self.data.nbytes} (bytes {bytes(raw[exc.start : exc.start + 8])!r}); "
                        "open with char_errors='replace' to read such characters as U+FFFD"
                    ) from None
                # scipy keeps the first numel characters when replacements make more
                text = raw.tobytes().decode("utf-8", "replace")[:n]
            units = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4")
            if len(units) != n:
                units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), "<u2")
        else:
            units = raw
        if len(units) != n:
            raise FormatError(
                f"char variable {self.name!r}: {len(units)} characters in {self.data.nbytes} "
                f"bytes of {self.encoding}, expected {n} for dims {self.dims}"
            )
        out = units.astype(np.uint32)
        if n and int(out.max()) > 0x10FFFF:
            raise FormatError(
                f"char variable {self.name!r}: character value {int(out.max())}, expected at "
                "most 0x10FFFF"
            )
        return out

    def decode(
        self,
        buffer: _Bytes,
        base: int = 0,
        *,
        as_strings: bool = True,
        errors: CharErrors = "strict",
    ) -> npt.NDArray[Any]:
        """The characters, as strings (one per row) or as a grid of characters.

        Parameters
        ----------
        buffer, base
            As for :meth:`NumericArray.decode`.
        as_strings : bool
            True: an object array of ``str`` of shape ``(dims[0],) + dims[2:]``, each the
            row along ``dims[1]`` with UTF-16 surrogate pairs joined (lone surrogates kept;
            NULs and trailing blanks kept). False: a ``<U1`` array of shape ``dims``, one
            code unit each, as scipy's ``chars_as_strings=False``.
        errors : {"strict", "replace"}
            Invalid UTF-8: refused, or read as U+FFFD (see :meth:`code_units`).

        Returns
        -------
        numpy.ndarray
        """
        units = self.code_units(buffer, base, errors=errors)
        return chars_from_units(units, self.dims, as_strings=as_strings)


#: The dtype of the code points, one per character, that a char array of its dims holds.
_CODE_POINTS: Final = np.dtype("<U1")


def char_dims_problem(dims: tuple[int, ...]) -> str | None:
    """Why char dims would decode to too many empty strings, or None.

    With ``dims[1] == 0`` there is no data at all, yet ``dims[0] * dims[2] * ...`` strings;
    more than :data:`MAX_UNBACKED` of them are refused.
    """
    strings = math.prod(dims) // dims[1] if dims[1] else dims[0] * math.prod(dims[2:])
    if dims[1] == 0 and strings > MAX_UNBACKED:
        return (
            f"char dims {dims} give {strings} empty strings, more than {MAX_UNBACKED} without data"
        )
    return None


def chars_from_units(
    units: npt.NDArray[Any], dims: tuple[int, ...], *, as_strings: bool = True, where: str = ""
) -> npt.NDArray[Any]:
    """Arrange column-major character codes as MATLAB does: strings along ``dims[1]``.

    Parameters
    ----------
    units : numpy.ndarray
        ``prod(dims)`` UTF-16 code units or code points (at most 0x10FFFF), column-major.
    dims : tuple of int
        MATLAB dimensions, at least 2.
    where : str
        The variable, for error messages.
    as_strings : bool
        True: an object array of ``str``, shape ``(dims[0],) + dims[2:]``, each the row
        along ``dims[1]`` with surrogate pairs joined. False: ``<U1``, shape ``dims``.

    Returns
    -------
    numpy.ndarray
    """
    prefix = f"{where}: " if where else ""
    problem = shape_problem(dims, _CODE_POINTS)  # as_strings=False makes these
    if problem is not None:
        raise UnsupportedError(
            f"{prefix}a char array of size {'x'.join(map(str, dims))}: {problem}"
        )
    if not as_strings:
        return units.astype("<u4").view("<U1").reshape(dims, order="F")
    problem = char_dims_problem(dims)
    if problem:
        raise FormatError(prefix + problem)
    if math.prod(dims) == 0:  # no data: empty strings (dims[1] == 0) or no strings at all
        return np.full(dims[:1] + dims[2:], "", dtype=object)
    if len(dims) == 2 and dims[0] == 1:  # one row (the commonest): no grid to arrange
        one = np.empty(1, dtype=object)
        one[0] = _join_units(units.reshape(-1))
        return one
    grid = np.moveaxis(units.reshape(dims, order="F"), 1, -1)
    width = grid.shape[-1]
    if width and grid.size and not np.any((grid == 0) | ((grid >= 0xD800) & (grid <= 0xDFFF))):
        # no NULs (numpy's str dtype would drop trailing ones), no surrogates to join
        rows = np.ascontiguousarray(grid, dtype="<u4").view(f"<U{width}")[..., 0]
        return rows.astype(object)
    out = np.empty(grid.shape[:-1], dtype=object)
    for index in np.ndindex(out.shape):
        out[index] = _join_units(grid[index])
    return out


def _join_units(units: npt.NDArray[Any]) -> str:
    """A row of code units or code points as a str, UTF-16 surrogate pairs joined."""
    text = units.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
