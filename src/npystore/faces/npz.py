"""``.npz`` archives as a lazy, read-only mapping of dask arrays: :func:`open_npz`.

:class:`NpzFile` behaves like numpy's ``NpzFile``: keys are member names without ``.npy``, in
the archive's order (``files``); ``npz["x"]`` and ``npz["x.npy"]`` are the same member (when
an archive holds members ``x`` and ``x.npy``, both list as ``x``, ``npz["x"]`` is member ``x``
and ``npz["x.npy"]`` member ``x.npy``, as in numpy; :attr:`NpzFile.member_keys` gives every
member a key of its own). Each
value is a lazy dask array (a member that is not an ``.npy`` file gives its bytes, as numpy
does). Headers (dtype, shape, order) are read in one concurrent batch for all members, without
reading data.

Stored members read like ``.npy`` files: chunks are byte ranges of the archive. Deflated
members (``savez_compressed``) read through a checkpoint index built in one sequential pass
on first need (or explicitly with :meth:`NpzFile.build_index`) and kept on the archive
object; after that every chunk is one range read and a short inflate, and chunks compute in
parallel.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from npystore.errors import FormatError
from npystore.faces.dask import DEFAULT_MAX_CHUNKS, to_dask
from npystore.fetch import RangeReader, open_reader
from npystore.fetch.cache import IndexCacheOption
from npystore.files.zip import (
    DEFAULT_MAX_MEMBERS,
    OPEN_TAIL,
    MemberInfo,
    ZipArchive,
    deflated_member,
    member_key,
    resolve_key,
    unique_keys,
)
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE, NpyHeader
from npystore.read.access import LayoutArray
from npystore.read.index import build_or_load_index
from npystore.read.layout import Unpickle

__all__ = ["NpzArrays", "NpzFile", "open_npz"]


class NpzFile(Mapping[str, Any]):
    """A read-only mapping of an ``.npz`` archive's members to lazy dask arrays.

    Use :func:`open_npz` (or :func:`npystore.open`) to make one. Instances pickle (the lock
    is recreated), so they can be passed to dask or distributed tasks.

    Parameters
    ----------
    archive : ZipArchive
        The archive's directory.
    chunks : chunk spec
        Dask chunks of every member (see :func:`open_npz`).
    allow_pickle : bool
        Allow object-array members.
    max_chunks : int
        Most chunks (dask tasks) one member's array may have.
    unpickle : Unpickle, optional
        How object-array members are unpickled (``encoding``, ``fix_imports``).

    Attributes
    ----------
    f : object
        The members as attributes, as numpy's ``NpzFile.f``: ``z.f.x`` is ``z["x"]``.
    """

    def __init__(
        self,
        archive: ZipArchive,
        *,
        chunks: Any = "auto",
        allow_pickle: bool = False,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
        unpickle: Unpickle = Unpickle(),  # noqa: B008 - frozen
    ) -> None:
        self.archive = archive
        self.url = archive.url
        self._chunks = chunks
        self._allow_pickle = allow_pickle
        self._unpickle = unpickle
        self._max_chunks = max_chunks
        self.f = _Members(self)
        names = archive.names
        #: Keys in archive order, as numpy lists them (``x`` and ``x.npy`` both give ``x``).
        self.files: list[str] = [member_key(name) for name in names]
        #: Member name -> a key that reads it, distinct per member (see
        #: :func:`npystore.files.zip.unique_keys`).
        self.member_keys: dict[str, str] = unique_keys(names)
        self._arrays: dict[str, Any] = {}
        self._lock = threading.Lock()

    # -- Mapping ---------------------------------------------------------------------------

    def _name(self, key: str) -> str:
        # numpy's order: a member named exactly ``key``, else ``key + ".npy"``
        name = resolve_key(key, self.archive.entries)
        if name is None:
            raise KeyError(f"{key!r} is not a file in the archive {self.url}")
        return name

    def __getitem__(self, key: str) -> Any:
        name = self._name(key)
        with self._lock:
            if name in self._arrays:
                return self._arrays[name]
        info = self.archive.info(name)
        value: Any
        if info.header is None:
            value = self.archive.member_bytes(info)
        else:
            value = to_dask(
                self.array(key),
                self._chunks,
                prefix=_dask_prefix(info.key),
                max_chunks=self._max_chunks,
            )
        with self._lock:
            return self._arrays.setdefault(name, value)

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and resolve_key(key, self.archive.entries) is not None

    def __repr__(self) -> str:
        return f"NpzFile({self.url!r}, files={self.files!r})"

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = dict(self.__dict__, _arrays=dict(self._arrays))
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __enter__(self) -> NpzFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop cached arrays (nothing is held open; for parity with numpy's NpzFile)."""
        with self._lock:
            self._arrays.clear()

    # -- metadata --------------------------------------------------------------------------

    @property
    def headers(self) -> dict[str, NpyHeader]:
        """The npy header of every ``.npy`` member (one concurrent batch of range reads),
        by :attr:`member_keys` key.

        ``data_offset`` is relative to the member's uncompressed data.
        """
        infos = self.archive.resolve(self.archive.names)
        return {
            self.member_keys[name]: i.header for name, i in infos.items() if i.header is not None
        }

    def info(self, key: str) -> MemberInfo:
        """Directory entry, data offset and npy header of one member."""
        return self.archive.info(self._name(key))

    # -- reading ---------------------------------------------------------------------------

    def array(self, key: str) -> LayoutArray:
        """The member as a lazy, numpy-indexable :class:`~npystore.read.access.LayoutArray`."""
        name = self._name(key)
        layout = self.archive.layout(name, allow_pickle=self._allow_pickle, unpickle=self._unpickle)
        return LayoutArray(self.archive.reader, layout, source=f"{self.url}:{name}")

    def load(self, key: str) -> np.ndarray[Any, Any]:
        """Read one member eagerly: parallel range reads (stored) or one inflate pass with
        CRC check (deflated), into one buffer."""
        return self.array(key).read(parallel=True)

    def build_index(self, key: str | None = None) -> None:
        """Build the checkpoint index of one deflated member, or of all of them, now.

        Each is one sequential pass over the member (CRC-32 checked); afterwards any chunk
        of it is one range read plus a short inflate. Stored members need no index.
        """
        names = [self._name(key)] if key is not None else self.archive.names
        for name in names:
            info = self.archive.info(name)
            slot = self.archive.index_slot(name)
            if slot is None or info.header is None:
                continue
            slot.ensure(
                functools.partial(
                    build_or_load_index, self.archive.reader, deflated_member(info), slot.cache_dir
                )
            )


class NpzArrays(Mapping[str, Any]):
    """What :func:`npystore.load` returns for an ``.npz`` archive, as ``numpy.load`` does:
    a mapping whose values are read eagerly on access into numpy arrays (``bytes`` for
    members that are not ``.npy`` files), with ``files``, ``f``, ``close`` and ``with``.

    Parameters
    ----------
    npz : NpzFile
        The opened archive; its :meth:`NpzFile.load` reads each member.
    """

    def __init__(self, npz: NpzFile) -> None:
        self.npz = npz
        self.files: list[str] = list(npz.files)
        self.f = _Members(self)

    def __getitem__(self, key: str) -> Any:
        info = self.npz.info(key)
        if info.header is None:
            return self.npz[key]  # the member's bytes
        return self.npz.load(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def __contains__(self, key: object) -> bool:
        return key in self.npz

    def __repr__(self) -> str:
        return f"NpzArrays({self.npz.url!r}, files={self.files!r})"

    def __enter__(self) -> NpzArrays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is held open (for parity with numpy's NpzFile)."""
        self.npz.close()


class _Members:
    """An archive's members as attributes (numpy's ``NpzFile.f``)."""

    def __init__(self, npz: NpzFile | NpzArrays) -> None:
        self._npz = npz

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") or key == "_npz":
            raise AttributeError(key)
        try:
            return self._npz[key]
        except KeyError:
            raise AttributeError(f"the archive has no member {key!r}") from None

    def __dir__(self) -> list[str]:
        return list(self._npz.files)


def _dask_prefix(key: str) -> str:
    clean = "".join(c if c.isalnum() or c in "_-" else "_" for c in key)[:40]
    return f"npz-{clean}" if clean else "npz"


def open_npz(
    url: str | list[str] | tuple[str, ...],
    *,
    axis: int | None = None,
    stack: bool = False,
    chunks: Any = "auto",
    storage_options: Mapping[str, Any] | None = None,
    allow_pickle: bool = False,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    index_cache: IndexCacheOption = None,
    max_members: int = DEFAULT_MAX_MEMBERS,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    fix_imports: bool = True,
    encoding: str = "ASCII",
) -> NpzFile:
    """Open an ``.npz`` archive as a read-only mapping of lazy dask arrays.

    Opening reads the archive's directory (one tail read, rarely one more); member headers
    are read on first access, all members in one concurrent batch.

    Parameters
    ----------
    url : str or list of str
        Local path or any fsspec URL. Many archives (a list, a glob, a folder; see
        :func:`npystore.open_npy`) give a :class:`~npystore.faces.many.ManyFiles` mapping
        whose ``z["x"]`` is every archive's ``x`` concatenated along ``axis`` (stacked with
        ``stack=True``); the archives are opened together.
    axis : int, optional
        Many archives: the axis their members are concatenated (stacked) along (default 0).
    stack : bool
        Many archives: stack the members along a new axis.
    chunks : "auto", int, tuple, dict or -1
        Dask chunk spec for every member. ``"auto"`` makes contiguous chunks of about dask's
        ``array.chunk-size`` (at most 32 MiB for deflated members, which inflate per chunk).
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    allow_pickle : bool
        Allow object-array members (pickles; unpickling runs code from the file).
    max_header_size : int
        Largest npy header accepted in a member.
    index_cache : str, bool or None
        Where deflate checkpoint indexes are kept, keyed by the object's identity (URL,
        size, ETag/mtime) and the member: later sessions and other processes (e.g. dask
        workers on the same machine) reuse them instead of re-reading the member. Default
        (None): ``NPYSTORE_INDEX_CACHE`` if set, else ``~/.cache/npystore/deflate-index``
        (``$XDG_CACHE_HOME``), kept under 256 MiB; a directory; or False for none.
    max_members : int
        Most members the archive may declare (default 100,000). The count in the end
        record (ZIP64: up to 2**64 - 1) is checked before the central directory is read.
    max_chunks : int
        Most chunks (dask tasks) one member's array may have (default 1,000,000), checked
        before its graph is built.
    fix_imports, encoding
        How object-array members are unpickled, as :func:`numpy.load` takes them.

    Returns
    -------
    NpzFile
        Keys in ``numpy.load(url).files`` order; values lazy dask arrays equal to
        ``numpy.load(url)[key]``.

    Raises
    ------
    FormatError
        A malformed or hostile archive (truncated, bad signatures, offsets out of bounds,
        overlapping members, unsafe names, headers declaring more data than a member holds,
        more members than the central directory can hold).
    UnsupportedError
        More than ``max_members`` members; when a member is accessed, ``chunks`` that
        would give it more than ``max_chunks`` chunks.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> np.savez_compressed("/tmp/doc_npz.npz", a=np.arange(10), b=np.eye(2))
    >>> z = npystore.open_npz("/tmp/doc_npz.npz")
    >>> z.files
    ['a', 'b']
    >>> int(z["a"][2:5].sum().compute())
    9
    """
    from npystore.fetch.naming import is_folder, is_many  # noqa: PLC0415

    if is_many(url) or is_folder(url, storage_options):
        from npystore.faces.many import open_npz_many  # noqa: PLC0415

        return open_npz_many(  # type: ignore[return-value]
            url, axis=axis, stack=stack, chunks=chunks, storage_options=storage_options,
            max_chunks=max_chunks, allow_pickle=allow_pickle, max_header_size=max_header_size,
            index_cache=index_cache, max_members=max_members, fix_imports=fix_imports,
            encoding=encoding,
        )  # fmt: skip
    if axis is not None or stack:
        raise TypeError("axis and stack apply to many archives (a list, a glob or a folder)")
    # on S3 the archive's tail (end record and, usually, the central directory) comes with
    # the object's identity: opening is one request
    reader = open_reader(url, storage_options, tail=OPEN_TAIL)  # type: ignore[arg-type]
    return npz_from_reader(
        reader,
        chunks=chunks,
        allow_pickle=allow_pickle,
        max_header_size=max_header_size,
        index_cache=index_cache,
        max_members=max_members,
        max_chunks=max_chunks,
        fix_imports=fix_imports,
        encoding=encoding,
    )


def npz_from_reader(
    reader: RangeReader,
    *,
    chunks: Any = "auto",
    allow_pickle: bool = False,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    index_cache: IndexCacheOption = None,
    max_members: int = DEFAULT_MAX_MEMBERS,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    fix_imports: bool = True,
    encoding: str = "ASCII",
) -> NpzFile:
    """:func:`open_npz` on an opened reader (for :func:`npystore.open` and the package's
    tools, which sniff the format first); the keywords are :func:`open_npz`'s."""
    if reader.size < 22:
        raise FormatError(f"{reader.url}: {reader.size} bytes is too short for a ZIP archive")
    archive = ZipArchive(
        reader,
        max_header_size=max_header_size,
        index_cache=index_cache,
        max_members=max_members,
    )
    return NpzFile(
        archive,
        chunks=chunks,
        allow_pickle=allow_pickle,
        max_chunks=max_chunks,
        unpickle=Unpickle(encoding, fix_imports),
    )
