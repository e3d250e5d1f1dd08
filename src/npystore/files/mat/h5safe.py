"""h5py groups and datasets that libhdf5 may walk or read only after npystore checked them.

An HDF5 file from a place the user does not control can crash libhdf5 (a B-tree node that
lists itself as its child) or make it read local files (external storage, virtual datasets,
external and user-defined links). The MATLAB tree (:mod:`npystore.formats.mat73`) therefore
sees only the wrappers of this module, never h5py objects:

- :class:`SafeGroup` lets libhdf5 list or search a group only after the group's symbol
  table (B-tree, symbol nodes, local heap) passed
  :meth:`npystore.files.mat.h5meta.H5Meta.group_links`, and opens members one link at a time,
  looking at each link's type before anything follows it: hard links are opened, soft
  links are resolved here (each hop checked again, at most :data:`MAX_SOFT_LINKS`),
  external and user-defined links are refused. Object references resolve within the file
  (they are addresses).
- :class:`SafeDataset` has no ``__getitem__``: values come only from :meth:`SafeDataset.read`,
  which first applies :func:`check_storage` (virtual datasets and external storage are
  refused, naming the dataset) and, for a chunked dataset, walks its chunk index with
  npystore's own bounded parser (:func:`npystore.files.mat.hdf5.chunk_table`). The same
  :func:`check_storage` guards :func:`npystore.files.mat.hdf5.dataset_layout` (numeric, logical and
  sparse values, which npystore reads itself).

Defence in depth: libhdf5 opens external link targets and virtual sources through the
parent file's driver, and :func:`npystore.files.mat.hdf5.open_h5` uses h5py's file-object driver,
which ignores file names (they resolve inside the same file): even if those checks were
bypassed, no local file would be opened. External *storage* is opened by name with a plain
``open()``; an external-file prefix (``H5Pset_efile_prefix``) cannot close it: libhdf5
ignores the prefix for absolute names, and refuses to open a dataset that is already open
with a different prefix, while h5py dereferences object references with the default one.
That case is closed by :func:`check_storage` and by the tree seeing only these wrappers.

The wrappers hash and compare by the object they wrap (file number and object header
address, asked of libhdf5 once), so a value reached twice is still recognised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import h5py
import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import RangeReader
from npystore.files.mat.h5meta import H5Meta

__all__ = [
    "MAX_SOFT_LINKS",
    "Guard",
    "SafeDataset",
    "SafeGroup",
    "check_storage",
    "object_identity",
    "safe_root",
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


class Guard:
    """Checks the structures of one file before libhdf5 walks them.

    Parameters
    ----------
    reader : RangeReader or None
        Reader of the file (its :class:`~npystore.files.mat.h5meta.H5Meta` is attached by
        :func:`npystore.files.mat.hdf5.open_h5`). ``None`` for a file h5py opened some other way
        (tests): then only links and storage are checked, not the B-trees.
    identity_of : callable
        ``(file number, object header address)`` of an h5py object (the address relative
        to the superblock).
    chunks_of : callable
        ``chunks_of(dset, source)`` walks a chunked dataset's index (raises on a bad one).
    """

    def __init__(
        self,
        reader: RangeReader | None,
        identity_of: Callable[[Any], tuple[int, int]],
        chunks_of: Callable[[Any, str], object],
        *,
        source: str | None = None,
    ) -> None:
        self.reader = reader
        self.source = source or (reader.url if reader is not None else "<hdf5>")
        self.meta = H5Meta.for_reader(reader) if reader is not None else None
        self.identity_of = identity_of
        self._chunks_of = chunks_of
        self._datasets: set[int] = set()

    def group(self, obj: Any, path: str) -> None:
        """Check the symbol table of the group ``obj`` (once per group)."""
        if self.meta is None:
            return
        address = self.identity_of(obj)[1]
        self.meta.group_links(address, f"{self.source}: group {path}")

    def dataset(self, obj: Any, path: str) -> None:
        """Check the chunk index of ``obj`` when it is chunked (once per dataset)."""
        if self.meta is None:
            return
        address = self.identity_of(obj)[1]
        if address in self._datasets:
            return
        # libhdf5's view of the layout decides (chunk_table checks npystore's agrees)
        if obj.chunks is not None and obj.shape and np.prod(obj.shape):
            self._chunks_of(obj, f"{self.source}:{path}")
        self._datasets.add(address)

    def wrap(self, obj: Any, path: str | None) -> Any:
        """``obj`` as a :class:`SafeGroup` or :class:`SafeDataset` (a committed datatype,
        which has attributes only, as it is)."""
        if isinstance(obj, h5py.Group):
            return SafeGroup(obj, self, path)
        if isinstance(obj, h5py.Dataset):
            return SafeDataset(obj, self, path)
        return obj

    def all_groups(self) -> None:
        """Check every group reachable from the root (before libhdf5 searches the whole
        file, e.g. for the name of an object reached by reference)."""
        if self.meta is None:
            return
        sb = self.meta.superblock()
        todo = [sb.root_header]
        seen: set[int] = set()
        while todo:
            address = todo.pop()
            if address in seen:
                continue
            seen.add(address)
            links = self.meta.group_links(address, f"{self.source}: group at {address}")
            for _, header in links or ():
                if header >= 0 and header not in seen and self._is_group(header):
                    todo.append(header)

    def _is_group(self, address: int) -> bool:
        if self.meta is None:
            return False
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
        return SafeAttrs(self._obj.attrs, f"{self._guard.source}: {self._path or 'object'}")

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
    """An h5py group whose symbol table is checked before libhdf5 walks it, and whose
    members are opened one checked link at a time."""

    __slots__ = ("_checked",)

    def __init__(self, obj: Any, guard: Guard, path: str | None) -> None:
        super().__init__(obj, guard, path)
        self._checked = False

    def _check(self) -> None:
        if not self._checked:
            self._guard.group(self._obj, self._path or "(reached by reference)")
            self._checked = True

    def keys(self) -> list[str]:
        """Member (link) names (the symbol table checked first); no link is followed."""
        return list(self)

    def __iter__(self) -> Iterator[str]:
        self._check()
        return iter(self._obj)

    def __len__(self) -> int:
        self._check()
        return len(self._obj)

    def __contains__(self, name: object) -> bool:
        """Whether a link of that name exists here (a single name: no path is walked and
        the link is not followed)."""
        if not isinstance(name, str) or not name or "/" in name or name == ".":
            return False
        self._check()
        exists: bool = self._obj.id.links.exists(name.encode())
        return exists

    def __getitem__(self, key: Any) -> Any:
        """A member by name or path (each group on the way checked, each link looked at
        before it is followed), or the object a reference points to (references are
        addresses in this file: no group is walked).

        Raises
        ------
        KeyError
            No such member.
        UnsupportedError
            An external or user-defined link on the way.
        FormatError
            A symbol table that fails its checks; soft links that loop or chain more than
            :data:`MAX_SOFT_LINKS` times; a path through something that is not a group.
        """
        if isinstance(key, h5py.Reference):
            return self._guard.wrap(self._obj[key], None)
        if not isinstance(key, str):
            raise TypeError(
                f"{self._guard.source}: members are named by str or reference, not {key!r}"
            )
        root = self._guard.wrap(self._obj.file, "/")
        start: SafeGroup = root if key.startswith("/") else self
        obj, path = start._walk(key, [MAX_SOFT_LINKS], key, root)
        return self._guard.wrap(obj, path)

    def _walk(
        self, path: str, hops: list[int], asked: str, root: SafeGroup
    ) -> tuple[Any, str | None]:
        """The h5py object at ``path`` from this group (from ``root`` when absolute), and
        its path."""
        current: Any = root if path.startswith("/") else self
        where = current._path
        for part in (p for p in path.split("/") if p and p != "."):
            if not isinstance(current, SafeGroup):
                raise FormatError(
                    f"{self._guard.source}: {asked!r}: {part!r} is looked up inside "
                    f"{where}, which is not a group"
                )
            obj, where = current._step(part, hops, asked, root)
            current = self._guard.wrap(obj, where)
        return (current._obj if isinstance(current, _Safe) else current), where

    def _step(
        self, name: str, hops: list[int], asked: str, root: SafeGroup
    ) -> tuple[Any, str | None]:
        """Open one link of this group (its symbol table checked first), having looked at
        the link's type."""
        self._check()
        key = name.encode()
        links = self._obj.id.links
        path = _join(self._path, name)
        if not links.exists(key):
            raise KeyError(f"{self._guard.source}: no member {name!r} in {self._path}")
        kind = links.get_info(key).type
        where = f"{self._guard.source}: {path or name}"
        if kind == h5py.h5l.TYPE_HARD:
            return _open_hard(self._obj, key), path
        if kind == h5py.h5l.TYPE_SOFT:
            hops[0] -= 1
            if hops[0] < 0:
                raise FormatError(
                    f"{where}: more than {MAX_SOFT_LINKS} soft links followed to open "
                    f"{asked!r} (a loop?)"
                )
            target = _text(links.get_val(key))
            try:
                return self._walk(target, hops, asked, root)
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


class SafeDataset(_Safe):
    """An h5py dataset whose values are read only through :meth:`read` (checked)."""

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
                f"{self._guard.source}: dataset {self._path or '(reached by reference)'}: "
                f"an HDF5 datatype numpy cannot represent: {exc}"
            ) from exc
        return dtype

    def check(self, where: str) -> None:
        """:func:`check_storage` (``where`` names the variable)."""
        check_storage(self._obj, where)

    def read(self, where: str) -> Any:
        """All values (h5py's ``dset[()]``), after :func:`check_storage` and, for a
        chunked dataset, the walk of its chunk index (``where`` names the variable)."""
        check_storage(self._obj, where)
        self._guard.dataset(self._obj, self._path or "(reached by reference)")
        return self._obj[()]

    def reference_keys(self, where: str) -> np.ndarray[Any, np.dtype[np.uint64]] | None:
        """For a dataset of HDF5 object references: per element (C order), the address of
        the object it points to (what the file stores; equal addresses, the same object),
        read after the checks of :meth:`read`; None for any other datatype."""
        if not self._obj.id.get_type().equal(h5py.h5t.STD_REF_OBJ):
            return None
        check_storage(self._obj, where)
        self._guard.dataset(self._obj, self._path or "(reached by reference)")
        shape = self._obj.shape
        keys = np.zeros(shape if shape is not None else (0,), np.uint64)
        if keys.size:
            self._obj.id.read(h5py.h5s.ALL, h5py.h5s.ALL, keys, mtype=h5py.h5t.STD_REF_OBJ)
        return keys.reshape(-1)


def _join(parent: str | None, name: str) -> str | None:
    if parent is None:
        return None
    return f"{parent.rstrip('/')}/{name}"


def _open_hard(group: h5py.Group, key: bytes) -> Any:
    """The object a hard link of ``group`` names, as h5py's object."""
    oid = h5py.h5o.open(group.id, key)
    kind = h5py.h5i.get_type(oid)
    if kind == h5py.h5i.DATASET:
        return h5py.Dataset(oid, readonly=True)
    return h5py.Group(oid) if kind == h5py.h5i.GROUP else h5py.Datatype(oid)


def object_identity(obj: Any) -> tuple[int, int]:
    """``(file number, object header address)`` of an h5py object, the address relative
    to the base address: what h5py compares objects by.

    ``H5Gget_objinfo`` reads the object header only; ``H5Oget_info`` could also walk a
    dataset's whole chunk index (to total its size), which npystore never lets libhdf5 do
    unchecked.
    """
    get_objinfo = getattr(h5py.h5g, "get_objinfo", None)
    if get_objinfo is None:  # pragma: no cover - HDF5 built without deprecated symbols
        raise UnsupportedError(
            "h5py built without H5Gget_objinfo: npystore cannot locate object headers"
        )
    info = get_objinfo(obj.id)
    low, high = info.objno
    fileno = info.fileno
    return int(fileno[0]) + (int(fileno[1]) << 64), int(low) + (int(high) << 64)


def safe_root(h5: h5py.File, source: str, guard: Guard | None = None) -> SafeGroup:
    """The root group of an open file, as a :class:`SafeGroup`.

    ``guard`` is the file's :class:`Guard` (what :class:`~npystore.files.mat.v73.Mat73File`
    builds, checking B-trees too); without one, links and storage are checked, for a file
    h5py opened some other way.
    """
    if guard is None:
        guard = Guard(None, object_identity, lambda dset, src: None, source=source)
    return SafeGroup(h5, guard, "/")
