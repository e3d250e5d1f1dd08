"""HDF5 objects that never make libhdf5 read a file named by the file's own metadata.

An HDF5 file can point outside itself: a dataset's values may live in *external
storage* (raw files named in its header, read by libhdf5 with a plain ``open()`` of the
name, whatever driver opened the HDF5 file), in a *virtual dataset*'s source files, or
behind an *external link* (a link naming another file and an object in it); user-defined
link types run whatever traversal the library registered. A MAT-file read from S3 that
names ``/etc/passwd`` or ``~/.aws/credentials`` that way must not return the local
file's bytes, so npystore refuses all of these (:class:`~npystore.errors.UnsupportedError`)
and reads HDF5 only through the objects of this module:

- :func:`check_storage` is the one check of where a dataset's values are: virtual
  datasets and external storage are refused, naming the dataset. Every path that reads
  values calls it first: :func:`npystore.hdf5.dataset_layout` (numeric, logical, sparse
  parts) and :meth:`SafeDataset.read` (characters, object references, the dims of empty
  values, classdef object headers).
- :class:`SafeGroup` opens members one link at a time, looking at each link's type before
  anything follows it: hard links are opened, soft links are resolved here (each hop
  checked again, at most :data:`MAX_SOFT_LINKS`), external and user-defined links are
  refused. Object references resolve within the file (they are addresses).
- :class:`SafeDataset` has no ``__getitem__``: the MATLAB tree
  (:mod:`npystore.formats.mat73`) gets only these wrappers, so it cannot read values
  without the check.

Defence in depth: libhdf5 opens external link targets and virtual sources through the
parent file's driver, and :func:`npystore.hdf5.open_h5` uses h5py's file-object driver,
which ignores file names (they resolve inside the same file): even if those checks were
bypassed, no local file would be opened. External *storage* is opened by name with a plain
``open()``; an external-file prefix (``H5Pset_efile_prefix``) cannot close it: libhdf5
ignores the prefix for absolute names, and refuses to open a dataset that is already open
with a different prefix, while h5py dereferences object references with the default one.
That case is closed by :func:`check_storage` and by the tree seeing only these wrappers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import h5py
import numpy as np

from npystore.errors import FormatError, UnsupportedError

__all__ = [
    "MAX_SOFT_LINKS",
    "SafeDataset",
    "SafeGroup",
    "check_storage",
    "safe_root",
    "unwrap",
]

#: Most soft links followed while opening one member (libhdf5's own default limit).
MAX_SOFT_LINKS: Final = 16
#: Why the refusal: the end of every message.
_WHY: Final = (
    "because the file names come from the file's own metadata (a remote file could "
    "make npystore read local files)"
)
#: How many external file names a message shows.
_NAMES_SHOWN: Final = 3


def check_storage(dset: h5py.Dataset, source: str) -> None:
    """Refuse a dataset whose values would be read from other files (the one check).

    Parameters
    ----------
    dset : h5py.Dataset
        The dataset about to be read or laid out.
    source : str
        The URL and variable, for messages.

    Raises
    ------
    UnsupportedError
        A virtual dataset (values in source datasets, possibly in other files) or external
        storage (values in raw files named by the dataset's header). Compact, contiguous
        and chunked datasets pass.
    """
    dcpl = dset.id.get_create_plist()
    if dcpl.get_layout() == h5py.h5d.VIRTUAL:
        files = [_text(dcpl.get_virtual_filename(i)) for i in range(dcpl.get_virtual_count())]
        raise UnsupportedError(
            f"{source}: a virtual dataset (values mapped from datasets in "
            f"{_listed(files)}): npystore refuses virtual datasets, {_WHY}"
        )
    count = dcpl.get_external_count()
    if count > 0:
        files = [_text(dcpl.get_external(i)[0]) for i in range(min(count, _NAMES_SHOWN + 1))]
        raise UnsupportedError(
            f"{source}: values in external storage ({count} raw file(s): {_listed(files)}): "
            f"npystore refuses HDF5 external storage, {_WHY}"
        )


def _text(raw: Any) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n[:200]) for n in names[:_NAMES_SHOWN])
    return shown + (", ..." if len(names) > _NAMES_SHOWN else "")


class SafeDataset:
    """An h5py dataset whose values are read only through :meth:`read` (checked).

    Hashes and compares equal by the HDF5 object, as h5py's datasets do.
    """

    __slots__ = ("_dset", "_source")

    def __init__(self, dset: h5py.Dataset, source: str) -> None:
        self._dset = dset
        self._source = source

    def __repr__(self) -> str:
        return f"SafeDataset({self._dset!r})"

    def __hash__(self) -> int:
        return hash(self._dset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SafeDataset) and self._dset == other._dset

    @property
    def name(self) -> str | None:
        """The HDF5 path (searched for by libhdf5 when reached by reference)."""
        name: str | None = self._dset.name
        return name

    @property
    def attrs(self) -> Any:
        """The attributes (stored in the object header: no other file is involved)."""
        return self._dset.attrs

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The HDF5 shape (None for a null dataspace)."""
        shape: tuple[int, ...] | None = self._dset.shape
        return shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The stored type as h5py maps it."""
        dtype: np.dtype[Any] = self._dset.dtype
        return dtype

    def check(self, where: str) -> None:
        """:func:`check_storage` (``where`` names the variable)."""
        check_storage(self._dset, where)

    def read(self, where: str) -> Any:
        """All values, after :func:`check_storage` (``where`` names the variable)."""
        check_storage(self._dset, where)
        return self._dset[()]


class SafeGroup:
    """An h5py group whose members are opened one checked link at a time.

    Parameters
    ----------
    group : h5py.Group
        The group.
    root : h5py.Group
        The file's root group (absolute soft links start there).
    source : str
        The URL, for messages.
    """

    __slots__ = ("_group", "_root", "_source")

    def __init__(self, group: h5py.Group, root: h5py.Group, source: str) -> None:
        self._group = group
        self._root = root
        self._source = source

    def __repr__(self) -> str:
        return f"SafeGroup({self._group!r})"

    def __hash__(self) -> int:
        return hash(self._group)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SafeGroup) and self._group == other._group

    @property
    def name(self) -> str | None:
        """The HDF5 path."""
        name: str | None = self._group.name
        return name

    @property
    def attrs(self) -> Any:
        """The attributes."""
        return self._group.attrs

    def keys(self) -> list[str]:
        """Member (link) names; no link is followed."""
        return list(self)

    def __iter__(self) -> Iterator[str]:
        return iter(self._group)

    def __contains__(self, name: object) -> bool:
        """Whether a link of that name exists here (a single name: no path is walked and
        the link is not followed)."""
        if not isinstance(name, str) or not name or "/" in name or name == ".":
            return False
        exists: bool = self._group.id.links.exists(name.encode())
        return exists

    def __getitem__(self, key: Any) -> SafeDataset | SafeGroup | Any:
        """A member by name or path (each link checked), or the object a reference points
        to (references are addresses in this file).

        Raises
        ------
        KeyError
            No such member.
        UnsupportedError
            An external or user-defined link on the way.
        FormatError
            Soft links that loop or chain more than :data:`MAX_SOFT_LINKS` times, or a path
            through something that is not a group.
        """
        if isinstance(key, h5py.Reference):
            return self._wrap(self._group[key])
        if not isinstance(key, str):
            raise TypeError(f"{self._source}: members are named by str or reference, not {key!r}")
        return self._wrap(self._walk(self._group, key, [MAX_SOFT_LINKS], key))

    def _wrap(self, obj: Any) -> SafeDataset | SafeGroup | Any:
        if isinstance(obj, h5py.Dataset):
            return SafeDataset(obj, self._source)
        if isinstance(obj, h5py.Group):
            return SafeGroup(obj, self._root, self._source)
        return obj  # a committed datatype: attributes only, no values

    def _walk(self, start: h5py.Group, path: str, hops: list[int], asked: str) -> Any:
        """The object at ``path`` from ``start`` (from the root when absolute)."""
        current: Any = self._root if path.startswith("/") else start
        for part in (p for p in path.split("/") if p and p != "."):
            if not isinstance(current, h5py.Group):
                raise FormatError(
                    f"{self._source}: {asked!r}: {part!r} is looked up inside "
                    f"{current.name}, which is not a group"
                )
            current = self._step(current, part, hops, asked)
        return current

    def _step(self, group: h5py.Group, name: str, hops: list[int], asked: str) -> Any:
        """Open one link of ``group``, having looked at its type first."""
        key = name.encode()
        links = group.id.links
        if not links.exists(key):
            raise KeyError(f"{self._source}: no member {name!r} in {group.name}")
        kind = links.get_info(key).type
        where = f"{self._source}: {_joined(group.name, name)}"
        if kind == h5py.h5l.TYPE_HARD:
            return _open_hard(group, key)
        if kind == h5py.h5l.TYPE_SOFT:
            hops[0] -= 1
            if hops[0] < 0:
                raise FormatError(
                    f"{where}: more than {MAX_SOFT_LINKS} soft links followed to open "
                    f"{asked!r} (a loop?)"
                )
            target = _text(links.get_val(key))
            try:
                return self._walk(group, target, hops, asked)
            except KeyError as exc:
                raise FormatError(
                    f"{where}: a soft link to {target[:200]!r}, which does not resolve: "
                    f"{exc.args[0] if exc.args else exc}"
                ) from exc
        if kind == h5py.h5l.TYPE_EXTERNAL:
            filename, obj = (_text(v) for v in links.get_val(key))
            raise UnsupportedError(
                f"{where}: an external link to {obj[:200]!r} in file {filename[:200]!r}: "
                f"npystore refuses HDF5 external links, {_WHY}"
            )
        raise UnsupportedError(
            f"{where}: a user-defined HDF5 link (type {int(kind)}): npystore refuses "
            f"user-defined links, it follows only hard and soft links within the file"
        )


def _joined(group: str | None, name: str) -> str:
    base = (group or "").rstrip("/")
    return f"{base}/{name}"


def _open_hard(group: h5py.Group, key: bytes) -> Any:
    """The object a hard link of ``group`` names, as h5py's object."""
    oid = h5py.h5o.open(group.id, key)
    kind = h5py.h5i.get_type(oid)
    if kind == h5py.h5i.DATASET:
        return h5py.Dataset(oid, readonly=True)
    return h5py.Group(oid) if kind == h5py.h5i.GROUP else h5py.Datatype(oid)


def safe_root(h5: h5py.File, source: str) -> SafeGroup:
    """The root group of an open file, as a :class:`SafeGroup`."""
    return SafeGroup(h5, h5, source)


def unwrap(dset: Any) -> h5py.Dataset:
    """The h5py dataset inside a :class:`SafeDataset` (for
    :func:`npystore.hdf5.dataset_layout`, which checks its storage itself)."""
    if not isinstance(dset, SafeDataset):
        raise TypeError(f"expected a SafeDataset, got {type(dset).__name__}")
    return dset._dset
