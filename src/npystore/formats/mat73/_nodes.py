"""The pieces of a v7.3 tree: limits, the HDF5 protocols, the node types.

Nothing here reads anything; see :mod:`npystore.formats.mat73`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol, TypeAlias, TypeGuard

import numpy as np
import numpy.typing as npt

__all__ = [
    "CLASS_DTYPES", "DEFAULT_MAX_DEPTH", "MAX_CHARS", "MAX_DEPTH_LIMIT", "MAX_DIM",
    "MAX_ELEMENTS", "MAX_NDIM", "RESERVED", "SUBSYSTEM_REASON",
    "Attrs", "CellArray", "Chain", "CharArray", "H5Dataset", "H5Group", "MatNode",
    "NumericArray", "OpaqueObject", "SparseArray", "StructArray", "VarInfo", "char_value",
    "is_dataset", "is_group",
]  # fmt: skip

#: Root members that are not variables.
RESERVED: Final = frozenset({"#refs#", "#subsystem#"})
DEFAULT_MAX_DEPTH: Final = 64
MAX_DEPTH_LIMIT: Final = 256
#: Most elements a cell or struct array may have (each is an HDF5 object to visit).
MAX_ELEMENTS: Final = 1 << 24
#: Most characters a char array may have (they are read with the metadata).
MAX_CHARS: Final = 1 << 27
MAX_NDIM: Final = 64
MAX_DIM: Final = 2**48 - 1

#: MATLAB numeric classes and the dtype of their values.
CLASS_DTYPES: Final[Mapping[str, np.dtype[Any]]] = {
    name: np.dtype(code)
    for name, code in (
        ("double", "f8"), ("single", "f4"), ("int8", "i1"), ("uint8", "u1"),
        ("int16", "i2"), ("uint16", "u2"), ("int32", "i4"), ("uint32", "u4"),
        ("int64", "i8"), ("uint64", "u8"), ("logical", "?"),
    )
}  # fmt: skip
_BY_DTYPE: Final = {dt: name for name, dt in CLASS_DTYPES.items()}
SUBSYSTEM_REASON: Final = "stored in MATLAB's undocumented subsystem (#subsystem#/MCOS)"


class Attrs(Protocol):
    """The attributes of an HDF5 object (h5py's ``AttributeManager``)."""

    def get(self, name: str, default: Any = None, /) -> Any: ...

    def __contains__(self, name: object, /) -> bool: ...


class H5Dataset(Protocol):
    """What is used of an HDF5 dataset (:class:`npystore.files.mat.h5safe.SafeDataset`: an h5py
    ``Dataset`` whose values are read only through :meth:`read`)."""

    @property
    def name(self) -> str | None: ...

    @property
    def attrs(self) -> Attrs: ...

    @property
    def shape(self) -> tuple[int, ...] | None: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    def check(self, where: str, /) -> None:
        """UnsupportedError naming ``where`` when the values would be read from other
        files (what :meth:`read` checks first)."""
        ...

    def read(self, where: str, /) -> Any:
        """All values (h5py's ``dset[()]``), or UnsupportedError naming ``where`` when
        they would be read from other files (external storage, virtual datasets)."""
        ...

    def reference_keys(self, where: str, /) -> npt.NDArray[np.uint64] | None:
        """For a dataset of object references: per element (C order), a number naming the
        object its reference points to (equal numbers, the same object), so that each
        distinct object is followed once; None when there is none to give."""
        ...


class H5Group(Protocol):
    """What is used of an HDF5 group (:class:`npystore.files.mat.h5safe.SafeGroup`: an h5py
    ``Group`` whose members are opened one checked link at a time, external links
    refused); indexing it with an object reference resolves the reference.

    Groups and datasets must hash and compare equal by the HDF5 object they open (h5py's
    do: file number and object address), so that a value reached twice is recognised.
    """

    @property
    def name(self) -> str | None: ...

    @property
    def attrs(self) -> Attrs: ...

    def __iter__(self) -> Iterator[str]: ...

    def __contains__(self, name: object, /) -> bool: ...

    def __getitem__(self, key: Any, /) -> H5Dataset | H5Group: ...


def is_dataset(obj: object) -> TypeGuard[H5Dataset]:
    """Whether an HDF5 object is a dataset: its type has a shape and a dtype (asked of the
    type: h5py computes these properties with library calls)."""
    kind = type(obj)
    return hasattr(kind, "shape") and hasattr(kind, "dtype") and hasattr(kind, "attrs")


def is_group(obj: object) -> TypeGuard[H5Group]:
    """Whether an HDF5 object is a group: its type has members and no dtype."""
    kind = type(obj)
    return hasattr(kind, "keys") and hasattr(kind, "attrs") and not hasattr(kind, "dtype")


@dataclass(frozen=True, slots=True, eq=False)
class NumericArray:
    """A numeric, logical or complex array; ``dataset`` is None for an empty one.

    ``dtype`` is the result type (the class's, complex when stored as a compound); the
    dataset's own dtype is what is stored. ``value`` holds the values (read-only, MATLAB
    shape, ``dtype``) when they were read with their container (``eager_bytes`` of
    :class:`~npystore.formats.mat73.Mat73Tree`), else None.
    """

    path: str
    matlab_class: str
    dims: tuple[int, ...]
    dtype: np.dtype[Any]
    dataset: H5Dataset | None
    value: npt.NDArray[Any] | None = None


@dataclass(frozen=True, slots=True, eq=False)
class CharArray:
    """A char array, decoded: ``value`` as in :func:`char_value`, ``units`` the code units
    in MATLAB shape."""

    path: str
    dims: tuple[int, ...]
    units: npt.NDArray[Any]
    value: Any


@dataclass(frozen=True, slots=True, eq=False)
class SparseArray:
    """A sparse matrix: ``dims = (rows, len(jc) - 1)``; ``data``/``ir`` None when absent
    (no nonzeros). ``dtype``: bool, float64 or complex."""

    path: str
    dims: tuple[int, int]
    matlab_class: str
    dtype: np.dtype[Any]
    data: H5Dataset | None
    ir: H5Dataset | None
    jc: H5Dataset


@dataclass(frozen=True, slots=True, eq=False)
class CellArray:
    """A cell array: its elements in column-major order."""

    path: str
    dims: tuple[int, ...]
    cells: tuple[MatNode, ...]


@dataclass(frozen=True, slots=True, eq=False)
class StructArray:
    """A struct array or old-style object: field -> node per element, column-major."""

    path: str
    dims: tuple[int, ...]
    fields: tuple[str, ...]
    elements: tuple[Mapping[str, MatNode], ...]
    matlab_class: str = "struct"


@dataclass(frozen=True, slots=True, eq=False)
class OpaqueObject:
    """A value kept as a placeholder (objects, function handles, missing fields)."""

    path: str
    matlab_class: str
    dims: tuple[int, ...]
    reason: str


#: The containers being parsed, outermost first (a reference back into them is a cycle).
Chain: TypeAlias = "tuple[H5Dataset | H5Group, ...]"

MatNode: TypeAlias = NumericArray | CharArray | SparseArray | CellArray | StructArray | OpaqueObject


class VarInfo(NamedTuple):
    """A variable as ``whos`` lists it (the fields of :class:`npystore.files.mat.tree.MatInfo`)."""

    name: str
    matlab_class: str
    dims: tuple[int, ...]
    sparse: bool = False
    complex: bool = False
    is_global: bool = False
    refused: str = ""


def char_value(rows: npt.NDArray[Any]) -> Any:
    """A char array's user value from its rows: one ``str`` when there is one row (or none
    in a 0-d or 1-d grid), else the object array of rows (as the v5 reader does)."""
    if rows.size == 1:
        return str(rows.reshape(-1)[0])
    if rows.size == 0 and rows.ndim <= 1:
        return ""
    return rows
