"""The attributes of a checked HDF5 object (:mod:`npystore.files.mat.h5safe`), as h5py reads
them, those its object header keeps itself read by npystore
(:meth:`~npystore.files.mat.h5meta.H5Meta.attributes`).
"""

from __future__ import annotations

from typing import Any, Protocol

from npystore.errors import UnsupportedError
from npystore.formats import h5index

__all__ = ["HasH5Object", "SafeAttrs"]


class HasH5Object(Protocol):
    """An object whose h5py object can be asked for (opened on first use)."""

    @property
    def h5obj(self) -> Any: ...


class SafeAttrs:
    """The attributes of an h5py object, as h5py reads them; an attribute of an HDF5
    datatype numpy cannot represent (h5py's TypeError) is an
    :class:`~npystore.errors.UnsupportedError`.

    Where the object's header keeps its attributes itself (``table``: read by
    :meth:`~npystore.files.mat.h5meta.H5Meta.attributes` from the bytes libhdf5 reads),
    names are looked up there and the integers and fixed-length strings MATLAB writes are
    taken from there: h5py's attribute manager costs some 130 microseconds an attribute,
    more than the rest of reading a small MATLAB value. Anything else goes to h5py.
    """

    __slots__ = ("_owner", "_table", "_where")

    def __init__(
        self, owner: HasH5Object, where: str, table: h5index.CompactAttributes | None
    ) -> None:
        self._owner = owner
        self._where = where
        self._table = table

    def get(self, name: str, default: Any = None, /) -> Any:
        """The value of attribute ``name``, or ``default``."""
        table = self._table
        if table is not None:
            if name not in table:
                return default
            value = table.value(name)
            if value is not h5index.UNDECODED:
                return value
        try:
            return self._owner.h5obj.attrs.get(name, default)
        except TypeError as exc:
            raise UnsupportedError(
                f"{self._where}: attribute {name!r} of an HDF5 datatype numpy cannot "
                f"represent: {exc}"
            ) from exc

    def __contains__(self, name: object, /) -> bool:
        if self._table is not None:
            return name in self._table
        return name in self._owner.h5obj.attrs
