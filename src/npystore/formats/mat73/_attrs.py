"""Reading MATLAB's attributes and small metadata datasets, checked.

``where`` arguments name the URL and variable path for messages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final, TypeGuard

import numpy as np

from npystore.errors import FormatError
from npystore.formats.mat73._nodes import MAX_DIM, MAX_NDIM, Attrs, H5Dataset, H5Group, is_dataset

__all__ = [
    "count", "dims_of", "empty_dims", "field_names", "flag", "is_ref_field", "object_dims",
    "optional", "shape_of", "size", "text",
]  # fmt: skip

#: Classdef object header: magic word, then ndims, dims, object ids, class id.
_MCOS_MAGIC: Final = 0xDD000000
_MAX_HEADER: Final = 1 << 16


def is_ref_field(obj: H5Dataset | H5Group) -> TypeGuard[H5Dataset]:
    """A struct array's field: references per element, without a class of its own."""
    return is_dataset(obj) and obj.dtype.kind == "O" and "MATLAB_class" not in obj.attrs


def optional(attrs: Attrs, name: str) -> Any:
    """An attribute that is usually absent (asking first is cheaper with h5py)."""
    return attrs.get(name) if name in attrs else None


def text(value: Any) -> str | None:
    """An attribute holding a string (bytes, str or a 1-element array of them)."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        if value.size != 1:
            return None
        value = value.reshape(-1)[0]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def flag(value: Any) -> bool:
    """An attribute holding a truth value (MATLAB_empty, MATLAB_global)."""
    if value is None:
        return False
    arr = np.asarray(value)
    return bool(arr.size and arr.dtype.kind in "biuf" and arr.reshape(-1)[0])


def count(value: Any, where: str, what: str) -> int:
    """An attribute holding one count (MATLAB_sparse: the rows)."""
    arr = np.asarray(value) if value is not None else np.zeros(0)
    if arr.size != 1 or arr.dtype.kind not in "iu" or not 0 <= int(arr.reshape(-1)[0]) <= MAX_DIM:
        raise FormatError(f"{where}: {what} is {value!r}, expected one count 0..{MAX_DIM}")
    return int(arr.reshape(-1)[0])


def size(dset: H5Dataset, where: str) -> int:
    """Number of elements of a dataset."""
    return math.prod(shape_of(dset, where))


def shape_of(dset: H5Dataset, where: str) -> tuple[int, ...]:
    """A dataset's HDF5 shape, checked (a null dataspace has none)."""
    shape = dset.shape
    if shape is None:
        raise FormatError(f"{where}: dataset without a dataspace (HDF5 null), expected an array")
    if len(shape) > MAX_NDIM:
        raise FormatError(f"{where}: {len(shape)} dimensions, more than {MAX_NDIM}")
    return tuple(int(n) for n in shape)


def dims_of(dset: H5Dataset, where: str) -> tuple[int, ...]:
    """MATLAB dims of a dataset: its shape reversed, padded to two with ones."""
    dims = shape_of(dset, where)[::-1]
    return dims + (1,) * (2 - len(dims))


def empty_dims(dset: H5Dataset, where: str) -> tuple[int, ...]:
    """The dims an empty value's dataset holds (in MATLAB order)."""
    if dset.dtype.kind not in "iu" or not 2 <= size(dset, where) <= MAX_NDIM:
        raise FormatError(
            f"{where}: MATLAB_empty dataset of {dset.dtype} {dset.shape}, expected 2..{MAX_NDIM} "
            "integer dims"
        )
    dims = np.asarray(dset.read(where)).reshape(-1)
    if dims.min() < 0 or dims.max() > MAX_DIM:
        raise FormatError(f"{where}: empty value with dims {dims.tolist()}")
    return tuple(int(d) for d in dims)


def object_dims(dset: H5Dataset, where: str) -> tuple[int, ...]:
    """The dims in a classdef object's header, or () when the dataset is not one."""
    if dset.dtype.kind != "u" or dset.dtype.itemsize != 4 or dset.shape is None:
        return ()
    if not 4 <= math.prod(dset.shape) <= _MAX_HEADER:
        return ()
    head = np.asarray(dset.read(where)).reshape(-1).astype(np.int64)
    ndim = int(head[1])
    if head[0] != _MCOS_MAGIC or not 2 <= ndim <= min(MAX_NDIM, head.size - 2):
        return ()
    dims = tuple(int(d) for d in head[2 : 2 + ndim])
    # then one object id per element and the class id
    return dims if head.size == 2 + ndim + math.prod(dims) + 1 else ()


def field_names(raw: Any, members: Sequence[str], where: str) -> tuple[str, ...]:
    """Field order: MATLAB_fields (each name a vlen array of 1-byte strings), then any
    member it does not name; member order when the attribute is absent."""
    if raw is None:
        return tuple(members)
    names: list[str] = []
    for raw_name in np.asarray(raw, dtype=object).reshape(-1):
        name = raw_name
        if isinstance(name, np.ndarray):
            name = _joined(name, where)
        if isinstance(name, bytes):
            try:
                name = name.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FormatError(f"{where}: field name {name!r} is not UTF-8") from exc
        if not isinstance(name, str):
            raise FormatError(f"{where}: MATLAB_fields holds {raw_name!r}, expected names")
        names.append(name)
    if len(set(names)) != len(names):
        raise FormatError(f"{where}: MATLAB_fields names a field twice: {names}")
    return (*names, *(m for m in members if m not in names))


def _joined(chars: Any, where: str) -> bytes | str:
    """A field name stored as an array of characters (MATLAB: a vlen array of 1-byte
    strings), joined; numbers and other element types are refused, not converted."""
    flat = chars.reshape(-1)
    if flat.dtype.kind == "S":
        return b"".join(flat.tolist())
    if flat.dtype.kind == "U":
        return "".join(flat.tolist())
    if flat.dtype.kind in "iu" and flat.dtype.itemsize == 1:
        return bytes(flat.astype(np.uint8).tobytes())
    raise FormatError(
        f"{where}: MATLAB_fields holds a name stored as {flat.size} values of {flat.dtype}, "
        "expected 1-byte characters"
    )
