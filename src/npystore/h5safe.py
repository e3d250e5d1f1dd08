"""h5py groups and datasets that libhdf5 may walk only after npystore checked them.

:class:`SafeGroup` and :class:`SafeDataset` stand for h5py's ``Group`` and ``Dataset`` where
:mod:`npystore.formats.mat73` walks a file: before libhdf5 lists or searches a group, the
group's symbol table (B-tree, symbol nodes, local heap) has passed
:meth:`npystore.h5meta.H5Meta.group_links`; before libhdf5 reads a chunked dataset's values
(characters, object references, dims: small metadata read with ``dset[()]``), its chunk
index has passed npystore's walk (:func:`npystore.hdf5.chunk_table`). A hostile B-tree is
then a :class:`~npystore.errors.FormatError` instead of a crash inside libhdf5.

They hash and compare by the object they wrap (h5py's: file and address), so a value
reached twice is still recognised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import RangeReader
from npystore.formats.mat73 import is_dataset, is_group
from npystore.h5meta import H5Meta

__all__ = ["Guard", "SafeDataset", "SafeGroup"]


class Guard:
    """Checks the structures of one file before libhdf5 walks them.

    Parameters
    ----------
    reader : RangeReader
        Reader of the file (its :class:`~npystore.h5meta.H5Meta` is attached).
    identity_of : callable
        ``(file number, object header address)`` of an h5py object (the address relative
        to the superblock).
    chunks_of : callable
        ``chunks_of(dset, source)`` walks a chunked dataset's index (raises on a bad one).
    """

    def __init__(
        self,
        reader: RangeReader,
        identity_of: Callable[[Any], tuple[int, int]],
        chunks_of: Callable[[Any, str], object],
    ) -> None:
        self.reader = reader
        self.meta = H5Meta.for_reader(reader)
        self.identity_of = identity_of
        self._chunks_of = chunks_of
        self._datasets: set[int] = set()

    def group(self, obj: Any, path: str) -> None:
        """Check the symbol table of the group ``obj`` (once per group)."""
        address = self.identity_of(obj)[1]
        self.meta.group_links(address, f"{self.reader.url}: group {path}")

    def dataset(self, obj: Any, path: str) -> None:
        """Check the chunk index of ``obj`` when it is chunked (once per dataset)."""
        address = self.identity_of(obj)[1]
        if address in self._datasets:
            return
        # libhdf5's view of the layout decides (chunk_table checks npystore's agrees)
        if obj.chunks is not None and obj.shape and np.prod(obj.shape):
            self._chunks_of(obj, f"{self.reader.url}:{path}")
        self._datasets.add(address)

    def wrap(self, obj: Any, path: str | None) -> Any:
        """``obj`` as a :class:`SafeGroup` or :class:`SafeDataset` (others as they are)."""
        if is_group(obj):
            return SafeGroup(obj, self, path)
        if is_dataset(obj):
            return SafeDataset(obj, self, path)
        return obj

    def all_groups(self) -> None:
        """Check every group reachable from the root (before libhdf5 searches the whole
        file, e.g. for the name of an object reached by reference)."""
        sb = self.meta.superblock()
        todo = [sb.root_header]
        seen: set[int] = set()
        while todo:
            address = todo.pop()
            if address in seen:
                continue
            seen.add(address)
            links = self.meta.group_links(address, f"{self.reader.url}: group at {address}")
            for _, header in links or ():
                if header not in seen and self._is_group(header):
                    todo.append(header)

    def _is_group(self, address: int) -> bool:
        try:
            messages = self.meta.messages(address)
        except FormatError:
            return False  # libhdf5 opens it only when asked, and reports it then
        return any(kind in (0x02, 0x06, 0x11) for kind, _ in messages)


class _Safe:
    __slots__ = ("_guard", "_key", "_obj", "_path")
    _key: tuple[int, int] | None

    def __init__(self, obj: Any, guard: Guard, path: str | None) -> None:
        self._obj = obj
        self._guard = guard
        self._path = path
        self._key = None

    @property
    def h5obj(self) -> Any:
        """The wrapped h5py object (for callers that checked what they use)."""
        return self._obj

    @property
    def name(self) -> str | None:
        """The object's path (libhdf5 searches every group of the file for the name of an
        object reached by reference: they are all checked first)."""
        if self._path is None:
            self._guard.all_groups()
            self._path = str(self._obj.name)
        return self._path

    @property
    def attrs(self) -> SafeAttrs:
        """The object's attributes."""
        return SafeAttrs(self._obj.attrs, f"{self._guard.reader.url}: {self._path or 'object'}")

    def _identity(self) -> tuple[int, int]:
        """(file number, object number): what h5py compares, asked of libhdf5 once."""
        if self._key is None:
            self._key = self._guard.identity_of(self._obj)
        return self._key

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Safe):
            return self._identity() == other._identity()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._obj!r})"


class SafeAttrs:
    """h5py's attributes of an object; an attribute of an HDF5 datatype numpy cannot
    represent (h5py's TypeError) is an :class:`~npystore.errors.UnsupportedError`."""

    __slots__ = ("_attrs", "_where")

    def __init__(self, attrs: Any, where: str) -> None:
        self._attrs = attrs
        self._where = where

    def get(self, name: str, default: Any = None, /) -> Any:
        """The value of attribute ``name``, or ``default``."""
        try:
            return self._attrs.get(name, default)
        except TypeError as exc:
            raise UnsupportedError(
                f"{self._where}: attribute {name!r} of an HDF5 datatype numpy cannot "
                f"represent: {exc}"
            ) from exc

    def __contains__(self, name: object, /) -> bool:
        return name in self._attrs


class SafeGroup(_Safe):
    """An h5py group whose symbol table is checked before libhdf5 walks it."""

    __slots__ = ("_checked",)

    def __init__(self, obj: Any, guard: Guard, path: str | None) -> None:
        super().__init__(obj, guard, path)
        self._checked = False

    def _check(self) -> None:
        if not self._checked:
            self._guard.group(self._obj, self._path or "(reached by reference)")
            self._checked = True

    def keys(self) -> Any:
        """Member names (the symbol table checked first)."""
        self._check()
        return self._obj.keys()

    def __iter__(self) -> Iterator[str]:
        self._check()
        return iter(self._obj)

    def __len__(self) -> int:
        self._check()
        return len(self._obj)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            parent, name = self._parent_of(key)
            if parent is None:
                return False
            parent._check()
            return name in parent._obj
        return key in self._obj

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            parent, name = self._parent_of(key)
            if parent is None:
                raise KeyError(f"{key!r}: a component of the path is not a group")
            parent._check()
            return self._guard.wrap(parent._obj[name], _join(parent._path, name))
        # an object reference: opened by address, no group is walked
        return self._guard.wrap(self._obj[key], None)

    def _parent_of(self, key: str) -> tuple[SafeGroup | None, str]:
        """The group holding the last component of ``key`` (each group on the way checked),
        and that component."""
        parts = [p for p in key.split("/") if p]
        group: SafeGroup | None = self
        if key.startswith("/"):
            group = self._guard.wrap(self._obj.file, "/")
        for part in parts[:-1]:
            assert group is not None
            group._check()
            if part not in group._obj:
                return None, ""
            child = self._guard.wrap(group._obj[part], _join(group._path, part))
            group = child if isinstance(child, SafeGroup) else None
            if group is None:
                return None, ""
        return group, parts[-1] if parts else "."


class SafeDataset(_Safe):
    """An h5py dataset whose chunk index is checked before libhdf5 reads its values."""

    __slots__ = ()

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The dataset's shape (None: a null dataspace)."""
        shape = self._obj.shape
        return None if shape is None else tuple(shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dataset's numpy dtype (h5py's).

        Raises
        ------
        UnsupportedError
            An HDF5 datatype numpy has no equivalent of (time, some bitfields, ...): h5py
            raises TypeError.
        """
        try:
            dtype: np.dtype[Any] = np.dtype(self._obj.dtype)
        except TypeError as exc:
            raise UnsupportedError(
                f"{self._guard.reader.url}: dataset {self._path or '(reached by reference)'}: "
                f"an HDF5 datatype numpy cannot represent: {exc}"
            ) from exc
        return dtype

    def __getitem__(self, key: Any) -> Any:
        self._guard.dataset(self._obj, self._path or "(reached by reference)")
        return self._obj[key]


def _join(parent: str | None, name: str) -> str | None:
    if parent is None:
        return None
    return f"{parent.rstrip('/')}/{name}"
