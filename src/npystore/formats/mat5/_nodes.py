"""The tree: container nodes (cell, struct, opaque), :data:`MatNode` and :class:`MatVariable`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from npystore.errors import FormatError, MissingDependencyError
from npystore.formats.mat5._bulk import DecodedChars, decoded_class
from npystore.formats.mat5._char import CharArray
from npystore.formats.mat5._numeric import NumericArray, SparseArray
from npystore.formats.mat5._tags import DataRef, _Bytes
from npystore.formats.need import NeedMoreBytes


@dataclass(frozen=True, slots=True)
class CellArray:
    """A cell array: one node per element, column-major.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        MATLAB dimensions.
    cells : tuple of MatNode
        The elements in column-major order (``numel`` of them).
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    cells: tuple[MatNode, ...]
    offset: int
    size: int
    is_global: bool = False

    matlab_class = "cell"

    def decode(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[np.object_]:
        """An object array of MATLAB shape holding each element decoded."""
        out = np.empty(len(self.cells), dtype=object)
        _decode_into(out, self.cells, buffer, base)
        return out.reshape(self.dims, order="F")


@dataclass(frozen=True, slots=True)
class StructArray:
    """A struct array, or an (old-style, ``@class`` directory) object.

    Attributes
    ----------
    name : str
        Variable name.
    dims : tuple of int
        MATLAB dimensions.
    field_names : tuple of str
        The fields, in stored order; duplicates renamed ``_1_name``, ... as scipy does.
    values : tuple of MatNode
        ``numel * len(field_names)`` nodes: for each element (column-major), each field.
    class_name : str or None
        The class of an object (array class 3), None for a struct.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    dims: tuple[int, ...]
    field_names: tuple[str, ...]
    values: tuple[MatNode, ...]
    class_name: str | None
    offset: int
    size: int
    is_global: bool = False

    @property
    def matlab_class(self) -> str:
        """``"struct"``, or the object's class name."""
        return "struct" if self.class_name is None else self.class_name

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.dims)

    def element(self, index: int) -> dict[str, MatNode]:
        """The fields of element ``index`` (column-major linear index)."""
        k = len(self.field_names)
        return dict(zip(self.field_names, self.values[index * k : index * k + k], strict=True))

    def field(self, name: str) -> tuple[MatNode, ...]:
        """One field's node for every element, column-major."""
        j, k = self.field_names.index(name), len(self.field_names)
        return self.values[j::k]

    def decode(self, buffer: _Bytes, base: int = 0) -> npt.NDArray[Any]:
        """A structured array of MATLAB shape with one object field per MATLAB field.

        As scipy's ``struct_as_record=True``; a struct without fields gives a structured
        array with no fields (scipy: a plain object array of None).
        """
        dtype = np.dtype([(name, object) for name in self.field_names])
        out = np.zeros(self.numel, dtype=dtype)
        k = len(self.field_names)
        for j, name in enumerate(self.field_names):
            column = (self.values[i * k + j] for i in range(self.numel))
            _decode_into(out[name], column, buffer, base)
        return out.reshape(self.dims, order="F")


@dataclass(frozen=True, slots=True)
class OpaqueObject:
    """A value this parser does not decode: function handle, MCOS object, unknown class.

    Attributes
    ----------
    name : str
        Variable name.
    matlab_class : str
        ``"function_handle"``, the opaque's class name (``"string"``, ``"table"``,
        ``"datetime"``, a classdef name), or ``"<class N>"`` for an unknown array class.
    kind : str
        ``"function_handle"`` (class 16), ``"opaque"`` (class 17) or ``"unknown"``.
    class_code : int
        The array class from the array flags.
    type_system : str
        The opaque's type system (``"MCOS"``, ``"java"``, ``"handle"``); "" otherwise.
    dims : tuple of int
        As stored; ``(1, 1)`` for opaques, whose real size is in the subsystem data.
    content : MatNode or None
        The nested miMATRIX: the handle's struct, or the opaque's metadata (for MCOS a
        uint32 column naming the object in the subsystem); None for unknown classes.
    offset, size : int
        Offset of the miMATRIX tag and its tag + data bytes.
    is_global : bool
        The global flag.
    """

    name: str
    matlab_class: str
    kind: str
    class_code: int
    type_system: str
    dims: tuple[int, ...]
    content: MatNode | None
    offset: int
    size: int
    is_global: bool = False

    def decode(self, buffer: _Bytes, base: int = 0) -> OpaqueObject:
        """The placeholder itself: there is no array value to decode."""
        del buffer, base
        return self


#: Any node of a variable's tree. Leaves decoded with their container (``decode_below`` of
#: :func:`parse_variable`) are read-only numpy arrays, ``str`` (a char row of ``(1, n)``
#: characters, ``n >= 1``) and :class:`DecodedChars`.
MatNode: TypeAlias = (
    NumericArray | CharArray | SparseArray | CellArray | StructArray | OpaqueObject
    | npt.NDArray[Any] | str | DecodedChars
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MatVariable:
    """One top-level variable: its name and the tree describing its value.

    Attributes
    ----------
    name : str
        Variable name ("" for the subsystem data).
    value : MatNode
        The tree.
    offset : int
        Offset of the (inner) miMATRIX tag in the address space of the DataRefs.
    size : int
        Its tag + data bytes.
    inflated : bool
        The DataRefs are offsets into the inflated data of a miCOMPRESSED element (the
        caller's buffer), not into the file.
    is_global : bool
        The global flag.
    source : str
        Name of the file, prefixed to the messages of errors from :meth:`decode`.
    """

    name: str
    value: MatNode
    offset: int
    size: int
    inflated: bool
    is_global: bool
    source: str = "<bytes>"

    @property
    def matlab_class(self) -> str:
        """The value's MATLAB class."""
        value = self.value
        if isinstance(value, np.ndarray | str | DecodedChars):  # pragma: no cover - not here
            return decoded_class(value)
        return value.matlab_class

    def decode(self, buffer: _Bytes, base: int = 0, *, as_strings: bool = True) -> Any:
        """The value decoded: see each node's ``decode``.

        ``as_strings`` is passed on when the variable is a char array.

        Raises
        ------
        FormatError
            Values that contradict the description (sparse indices, char encodings).
        NeedMoreBytes
            A DataRef range is not inside ``buffer``.
        """
        try:
            if isinstance(self.value, CharArray):
                return self.value.decode(buffer, base, as_strings=as_strings)
            if isinstance(self.value, np.ndarray | str):  # pragma: no cover - never at the top
                return self.value
            return self.value.decode(buffer, base)
        except (FormatError, NeedMoreBytes) as exc:
            raise with_source(exc, self.source) from None
        except MissingDependencyError as exc:  # scipy, for a sparse value
            raise MissingDependencyError(f"{self.source}: {exc}", exc.name, exc.extra) from exc

    def data_refs(self) -> list[DataRef]:
        """Every range of values in the tree, in file order."""
        return sorted(iter_data_refs(self.value), key=lambda ref: ref.offset)


def _decode_into(
    out: npt.NDArray[Any], nodes: Iterable[MatNode], buffer: _Bytes, base: int
) -> None:
    """Store each node decoded in turn at ``out[0]``, ``out[1]``, ... (a 1-D object array
    or field): the walk shared by cell and struct decoding."""
    for i, node in enumerate(nodes):
        if isinstance(node, np.ndarray):
            out[i] = node
        elif isinstance(node, str):  # a char row: as CharArray.decode gives it
            row = np.empty(1, dtype=object)
            row[0] = node
            out[i] = row
        else:
            out[i] = node.decode(buffer, base)


def with_source(exc: FormatError | NeedMoreBytes, source: str) -> FormatError | NeedMoreBytes:
    """The same error with its message prefixed by ``f"{source}: "``."""
    message = f"{source}: {exc}"
    if isinstance(exc, NeedMoreBytes):
        return NeedMoreBytes(message, offset=exc.offset, needed=exc.needed)
    return FormatError(message)


def iter_data_refs(node: MatNode) -> Iterator[DataRef]:
    """Every DataRef in a tree (numeric, char and sparse leaves), depth first."""
    stack: list[MatNode] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, np.ndarray | str | DecodedChars):
            continue  # decoded already: no range to read
        if isinstance(item, NumericArray | CharArray | SparseArray):
            yield from item.data_refs()
        elif isinstance(item, CellArray):
            stack.extend(reversed(item.cells))
        elif isinstance(item, StructArray):
            stack.extend(reversed(item.values))
        elif item.content is not None:
            stack.append(item.content)
