"""The public entry points: :func:`read_header`, :func:`open_npy`, :func:`load`, :func:`open`.

They wire the layers together: open a :class:`~npystore.fetch.RangeReader`, parse the header
bytes with :mod:`npystore.formats`, describe the data as an
:class:`~npystore.read.layout.ArrayLayout`, and hand it to a face.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, overload

import numpy as np

from npystore.errors import UnsupportedError
from npystore.faces.dask import DEFAULT_MAX_CHUNKS, to_dask
from npystore.fetch import RangeReader, open_reader
from npystore.fetch.fileobj import BinaryFile
from npystore.files import read_prefix
from npystore.files.npy import header_from_prefix, open_layout_array
from npystore.files.open import sniff, sniff_source
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE, NpyHeader
from npystore.read.layout import ArrayLayout, RawExtent, Unpickle

if TYPE_CHECKING:
    import dask.array as da

    from npystore.faces.matfile import MatFile
    from npystore.faces.npz import NpzArrays, NpzFile
    from npystore.write import save, savez, savez_compressed

__all__ = ["load", "open", "open_npy", "read_header", "save", "savez", "savez_compressed", "sniff"]

#: The writers, imported on first use: they import dask.array (and through it much more),
#: which :func:`load`, :func:`read_header` and ``npystore info``/``cat`` never need.
_WRITERS: Final = frozenset({"save", "savez", "savez_compressed"})


def __getattr__(name: str) -> Any:
    if name in _WRITERS:
        from npystore import write  # noqa: PLC0415 - see _WRITERS

        value = getattr(write, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Bytes :func:`load` asks for when it opens an S3 object: the header and the first data,
#: so a file up to this size is read in one request (the whole file is read anyway). Not
#: more: the opening response is one stream, and the concurrent reads of a large file's
#: rest start only once it is in (measured on a 128 MiB file: 8 MiB cost ~25 ms, 1 MiB
#: nothing measurable).
LOAD_HEAD: Final = 2**20

#: :func:`load` of many S3 files: a file the listing found at most this large is read whole
#: by its opening request (one request per file).
LOAD_WHOLE: Final = 16 * 2**20

StorageOptions = Mapping[str, Any] | None
#: What the open functions take: a local path, an fsspec URL or an open binary file object.
Source = str | BinaryFile


def read_header(
    url: Source,
    *,
    storage_options: StorageOptions = None,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
) -> NpyHeader:
    """Read the header of an ``.npy`` file without reading its data.

    At most two range reads: the first 128 bytes, then exactly the rest of the header if it
    is longer. On S3 the first GET's answer carries the object's size and identity; other
    filesystems make one metadata request first.

    Parameters
    ----------
    url : str or file object
        Local path or any fsspec URL (``s3://``, ``http(s)://``, ``memory://``, chained URLs
        such as ``simplecache::s3://...``), or an open binary file object (read from its
        current position; left at the start of the data, as numpy's
        ``read_array_header_*`` leave it).
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    max_header_size : int
        Largest header accepted, in bytes (default 1 MiB; numpy.load accepts 10,000).

    Returns
    -------
    NpyHeader
        ``version``, ``dtype``, ``shape``, ``fortran_order``, ``data_offset``.

    Raises
    ------
    FormatError
        Not an ``.npy`` file, a malformed header, or a file shorter than its header says.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> np.save("/tmp/doc_header.npy", np.zeros((3, 4), dtype="<f4"))
    >>> h = npystore.read_header("/tmp/doc_header.npy")
    >>> h.shape, h.dtype, h.fortran_order, h.data_offset
    ((3, 4), dtype('float32'), False, 128)
    """
    reader = open_reader(url, storage_options)
    header = header_from_prefix(reader, read_prefix(reader), max_header_size)
    if reader.source is not None:
        reader.source.move_to(header.data_offset)
    return header


def open_npy(
    url: Source | Sequence[str],
    *,
    axis: int | None = None,
    stack: bool = False,
    chunks: Any = "auto",
    storage_options: StorageOptions = None,
    allow_pickle: bool = False,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    name: str | bool | None = None,
    inline_array: bool = False,
) -> da.Array:
    """Open an ``.npy`` file as a lazy dask array; no data is read until chunks compute.

    Parameters
    ----------
    url : str, file object or list of str
        Local path or any fsspec URL, or an open binary file object (read from its current
        position; its position is unspecified while the array is in use; the dask graph
        runs in the threads of this process: pickled, only an ``io.BytesIO`` travels, by
        value). Many files as one array: a list of URLs (kept in its order), a glob
        (``"s3://b/emb/*.npy"``, ``**`` across folders; natural order: ``emb_2`` before
        ``emb_10``), a folder (a ``dask.array.to_npy_stack`` one too; its ``info`` is never
        unpickled), or a manifest (a ``.json`` written by :func:`npystore.to_manifest` or
        :func:`npystore.to_kerchunk`, reopened with no request per file). The files are
        opened together (one listing per prefix, every opening request in flight at once)
        and checked: the same dtype, and the same shape but along ``axis``.
    axis : int, optional
        Many files: the axis they are concatenated along (default 0; a ``to_npy_stack``
        folder's own axis), or, with ``stack=True``, the new axis they are stacked along.
    stack : bool
        Many files: stack them along a new axis instead of concatenating.
    chunks : "auto", int, tuple, dict or -1
        Dask chunk spec. ``"auto"`` (default) makes chunks of about dask's
        ``array.chunk-size`` split along the slowest-varying axis only, so each chunk is one
        contiguous byte range. With many files no chunk spans two files: each file is
        chunked on its own (explicit sizes are cut again at the files' boundaries).
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    allow_pickle : bool
        Allow object arrays, which are stored as pickles (unpickling runs code from the
        file). Such arrays are read whole when computed.
    max_header_size : int
        Largest header accepted, in bytes (default 1 MiB; numpy.load accepts 10,000).
    max_chunks : int
        Most chunks (one dask task each) the array may have (default 1,000,000), checked
        before the graph is built; integer ``chunks`` are counted without expanding them.
    fix_imports, encoding
        How object arrays are unpickled, as :func:`numpy.load` takes them
        (``encoding="latin1"`` reads Python 2 pickles of numpy arrays); ``encoding`` must
        be ``"ASCII"``, ``"latin1"`` or ``"bytes"`` (a :class:`ValueError` otherwise, as
        numpy raises).
    name : str, bool or None
        The dask name, as :func:`dask.array.from_array` takes it: ``None`` (default) derives
        it from the object's identity and the chunks, a string is used as it is, ``False``
        makes a random one.
    inline_array : bool
        Embed the (small, picklable) reader in every task instead of once in the graph, as
        :func:`dask.array.from_array` does.

    Returns
    -------
    dask.array.Array
        Values and dtype (byte order included) equal to ``numpy.load``'s. The dask name is
        derived from the object's identity: the same object gives the same name, a rewritten
        one a different name.

    Raises
    ------
    FormatError
        Malformed or truncated file (a header declaring more data than the file holds, or
        longer than ``max_header_size``).
    UnsupportedError
        An object array without ``allow_pickle=True``; ``chunks`` giving more than
        ``max_chunks`` chunks.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> np.save("/tmp/doc_open.npy", np.arange(12.0).reshape(3, 4))
    >>> a = npystore.open_npy("/tmp/doc_open.npy")
    >>> a
    dask.array<npy, shape=(3, 4), dtype=float64, chunksize=(3, 4), chunktype=numpy.ndarray>
    >>> float(a[1:].sum().compute())
    60.0
    """
    many = _many(url, storage_options)
    if many is None and (axis is not None or stack):
        raise TypeError("axis and stack apply to many files (a list, a glob or a folder)")
    if many is not None:
        from npystore.faces.many import sharded_dask  # noqa: PLC0415

        array = _sharded(
            many, axis, stack, storage_options, allow_pickle, max_header_size,
            Unpickle(encoding, fix_imports),
        )  # fmt: skip
        return sharded_dask(array, chunks, max_chunks=max_chunks, name=name)
    reader = _open_one(url, storage_options)  # type: ignore[arg-type]
    if reader is None:  # a remote folder named without its trailing "/"
        return open_npy(
            f"{url}/", axis=axis, stack=stack, chunks=chunks, storage_options=storage_options,
            allow_pickle=allow_pickle, max_header_size=max_header_size, max_chunks=max_chunks,
            fix_imports=fix_imports, encoding=encoding, name=name,
        )  # fmt: skip
    return _npy_dask(
        reader,
        read_prefix(reader),
        chunks=chunks,
        allow_pickle=allow_pickle,
        max_header_size=max_header_size,
        max_chunks=max_chunks,
        fix_imports=fix_imports,
        encoding=encoding,
        name=name,
        inline_array=inline_array,
    )


def _npy_dask(
    reader: RangeReader,
    prefix: bytes,
    *,
    chunks: Any = "auto",
    allow_pickle: bool = False,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    name: str | bool | None = None,
    inline_array: bool = False,
) -> da.Array:
    unpickle = Unpickle(encoding, fix_imports)
    array = open_layout_array(reader, prefix, allow_pickle, max_header_size, unpickle)
    return to_dask(array, chunks, max_chunks=max_chunks, name=name, inline_array=inline_array)


@overload
def load(
    url: Source | Sequence[str],
    *,
    axis: int | None = ...,
    stack: bool = ...,
    storage_options: StorageOptions = ...,
    allow_pickle: Literal[False] = ...,
    max_header_size: int = ...,
    fix_imports: bool = ...,
    encoding: str = ...,
    mmap_mode: MmapMode | None = ...,
) -> np.ndarray[Any, Any] | NpzArrays: ...


@overload
def load(
    url: Source | Sequence[str],
    *,
    axis: int | None = ...,
    stack: bool = ...,
    storage_options: StorageOptions = ...,
    allow_pickle: bool,
    max_header_size: int = ...,
    fix_imports: bool = ...,
    encoding: str = ...,
    mmap_mode: MmapMode | None = ...,
) -> Any: ...


def load(
    url: Source | Sequence[str],
    *,
    axis: int | None = None,
    stack: bool = False,
    storage_options: StorageOptions = None,
    allow_pickle: bool = False,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    mmap_mode: MmapMode | None = None,
) -> Any:  # the overloads: an array or an archive; with allow_pickle=True also a pickle
    """Read a whole ``.npy`` file into a numpy array, eagerly and in parallel, as
    :func:`numpy.load` does; an ``.npz`` archive gives numpy's mapping of arrays.

    The data is read with concurrent range requests (threads with ``preadv`` locally)
    straight into one preallocated buffer: no per-chunk arrays and no concatenation. On S3
    the opening request asks for the first :data:`LOAD_HEAD` bytes (1 MiB) with the
    object's identity, so a file up to that size is read in one request.

    Parameters
    ----------
    url : str or file object
        Local path or any fsspec URL, or an open binary file object as :func:`numpy.load`
        takes it (``open(path, "rb")``, ``io.BytesIO``, an fsspec file): read from its
        current position; after an ``.npy`` array its position is just after the array, as
        numpy leaves it. Many ``.npy`` files (a list, a glob, a folder, a manifest; see
        :func:`open_npy`) are read into one array, every file's requests in flight at once
        (on S3 a file up to :data:`LOAD_HEAD` bytes is read by its opening request).
    axis, stack
        Many files: as :func:`open_npy`.
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    allow_pickle : bool
        Allow object arrays (stored as pickles).
    max_header_size : int
        Largest header accepted, in bytes.
    fix_imports, encoding
        How object arrays are unpickled, as :func:`numpy.load` takes them
        (``encoding="latin1"`` reads Python 2 pickles of numpy arrays); ``encoding`` must
        be ``"ASCII"``, ``"latin1"`` or ``"bytes"`` (a :class:`ValueError` otherwise, as
        numpy raises).
    mmap_mode : {None, "r+", "r", "c"}
        Local ``.npy`` files only: memory-map the data instead of reading it, as
        :func:`numpy.load` does (the header is parsed and checked by npystore); ignored for
        an ``.npz`` archive, as numpy ignores it. ``"w+"`` is refused (numpy.load truncates
        the file to nothing with it).

    Returns
    -------
    numpy.ndarray or numpy.memmap or NpzArrays or object
        For an ``.npy`` file, equal to ``numpy.load(url)``, dtype and memory order included;
        writable (a :class:`numpy.memmap` with ``mmap_mode``). For an ``.npz`` archive, an
        :class:`~npystore.faces.npz.NpzArrays` mapping that reads each member on access.
        Any other file, with ``allow_pickle=True``, is unpickled as ``numpy.load`` does.
        Typed ``numpy.ndarray | NpzArrays`` without ``allow_pickle=True`` (``Any`` with
        it: a pickle can hold anything).

    Raises
    ------
    FormatError
        Not an ``.npy`` or ``.npz`` file (nor, with ``allow_pickle=True``, a pickle), or a
        malformed one.
    UnsupportedError
        ``mmap_mode`` for a remote file or an object array, ``mmap_mode="w+"`` (also
        :class:`ValueError`, as numpy raises); an object array without
        ``allow_pickle=True``.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> np.save("/tmp/doc_load.npy", np.asfortranarray(np.eye(3, dtype=">i2")))
    >>> x = npystore.load("/tmp/doc_load.npy")
    >>> x.dtype, bool(x.flags.f_contiguous), int(x.trace())
    (dtype('>i2'), True, 3)
    >>> np.savez("/tmp/doc_load.npz", a=np.arange(3))
    >>> with npystore.load("/tmp/doc_load.npz") as z:
    ...     z.files, z["a"]
    (['a'], array([0, 1, 2]))
    """
    many = _many(url, storage_options)
    if many is not None:
        if mmap_mode is not None:
            raise UnsupportedError("mmap_mode maps one local file; open many with open_npy()")
        unpickle = Unpickle(encoding, fix_imports)
        return _sharded(
            many, axis, stack, storage_options, allow_pickle, max_header_size, unpickle,
            head=LOAD_HEAD,
        ).read()  # fmt: skip
    if axis is not None or stack:
        raise TypeError("axis and stack apply to many files (a list, a glob or a folder)")
    reader = _open_one(url, storage_options, head=LOAD_HEAD)  # type: ignore[arg-type]
    if reader is None:  # a remote folder named without its trailing "/"
        return load(
            f"{url}/", axis=axis, stack=stack, storage_options=storage_options,
            allow_pickle=allow_pickle,
            max_header_size=max_header_size, fix_imports=fix_imports, encoding=encoding,
        )  # fmt: skip
    reader.data_from_head = True  # read now, in this call: the opening bytes are current
    prefix = read_prefix(reader)
    unpickle = Unpickle(encoding, fix_imports)
    kind = sniff(prefix)
    if kind == "unknown":  # numpy.load reads any other file as a pickle
        from npystore.errors import FormatError  # noqa: PLC0415 - this branch only
        from npystore.read.access import load_pickle_file  # noqa: PLC0415

        if not allow_pickle:
            raise FormatError(
                f"{reader.url}: not an .npy or .npz file (the first bytes are "
                f"{bytes(prefix[:8])!r}); numpy.load would unpickle it: if it is a pickle you "
                f"trust, pass allow_pickle=True (unpickling runs code from the file)"
            )
        value, end = load_pickle_file(reader, unpickle)
        if reader.source is not None:
            reader.source.move_to(end)
        return value
    if kind == "npz":  # mmap_mode is ignored for archives, as numpy.load ignores it
        from npystore.faces.npz import NpzArrays, npz_from_reader  # noqa: PLC0415

        npz = npz_from_reader(
            reader,
            allow_pickle=allow_pickle,
            max_header_size=max_header_size,
            fix_imports=fix_imports,
            encoding=encoding,
        )
        return NpzArrays(npz)
    array = open_layout_array(reader, prefix, allow_pickle, max_header_size, unpickle)
    if mmap_mode is not None:
        return _memmap(reader, array.layout, mmap_mode)
    values = array.read(parallel=True)
    if reader.source is not None:  # where numpy.load leaves the file: after the array
        storage = array.layout.storage
        end = storage.offset + storage.nbytes if isinstance(storage, RawExtent) else reader.size
        reader.source.move_to(end)
    return values


def _open_one(url: Source, storage_options: StorageOptions, **kwargs: Any) -> RangeReader | None:
    """``open_reader(url)``; None when a remote URL is not an object but a folder."""
    try:
        return open_reader(url, storage_options, **kwargs)
    except FileNotFoundError:
        from npystore.fetch.naming import is_folder  # noqa: PLC0415

        if isinstance(url, str) and is_folder(url, storage_options, ask=True):
            return None
        raise


def _many(url: Any, storage_options: StorageOptions) -> Any:
    """``url`` if it names many ``.npy`` files (a list, a glob, a folder, a manifest), else
    None. A folder named without a trailing ``/`` is found by asking (one request).

    The questions are :mod:`npystore.fetch.naming`'s, which import nothing heavy: one local
    file costs no fsspec."""
    from npystore.fetch.naming import is_folder, is_manifest_url, is_many  # noqa: PLC0415

    if is_many(url) or is_manifest_url(url):
        return url
    if isinstance(url, str | os.PathLike) and is_folder(url, storage_options):
        return url
    return None


def _sharded(
    url: Any,
    axis: int | None,
    stack: bool,
    storage_options: StorageOptions,
    allow_pickle: bool,
    max_header_size: int,
    unpickle: Unpickle,
    head: int | None = None,
) -> Any:
    """The :class:`~npystore.read.shards.ShardedArray` of many files or of a manifest,
    a progress bar drawn while a long list opens (on a terminal)."""
    from npystore.files.many import is_manifest_url, open_manifest, sharded_npy  # noqa: PLC0415
    from npystore.tools.progress import CountProgress  # noqa: PLC0415

    if is_manifest_url(url):
        if axis is not None or stack:
            raise TypeError("a manifest fixes axis and stack: leave them out")
        return open_manifest(url, storage_options)
    extra: dict[str, Any] = (
        {} if head is None else {"head": head, "whole": LOAD_WHOLE, "data_from_head": True}
    )
    with CountProgress("open files") as progress:
        return sharded_npy(
            url, axis=axis, stack=stack, storage_options=storage_options,
            allow_pickle=allow_pickle, max_header_size=max_header_size, unpickle=unpickle,
            on_count=progress.start, **extra,
        )  # fmt: skip


MmapMode = Literal["r+", "r", "w+", "c", "readonly", "readwrite", "write", "copyonwrite"]


def _memmap(reader: RangeReader, layout: ArrayLayout, mode: MmapMode) -> np.memmap[Any, Any]:
    """The data of a local ``.npy`` file mapped into memory (numpy.load's ``mmap_mode``)."""
    if not reader.local:
        raise UnsupportedError(
            f"{reader.url}: mmap_mode maps local files only; read remote files with "
            f"load() or open_npy()"
        )
    if layout.dtype.hasobject:
        raise UnsupportedError(f"{reader.url}: an object array (a pickle) cannot be memory-mapped")
    if mode in ("w+", "write"):
        raise UnsupportedError(
            f"{reader.url}: mmap_mode {mode!r} is refused: it would truncate the file "
            f"(numpy.load empties the file with it, then fails); use 'r+' to change values "
            f"in place, or npystore.save to write a new file"
        )
    storage = layout.storage
    if not isinstance(storage, RawExtent):
        raise TypeError(f"an .npy file's data is a raw extent, not {type(storage).__name__}")
    return np.memmap(
        reader.path,
        dtype=layout.dtype,
        mode=mode,
        offset=storage.offset,
        shape=layout.shape,
        order=layout.order,
    )


def open(
    url: Source,
    *,
    storage_options: StorageOptions = None,
    **kwargs: Any,
) -> da.Array | NpzFile | MatFile:
    """Open any supported file, choosing the format by its magic bytes, not its extension.

    Parameters
    ----------
    url : str or file object
        Local path or any fsspec URL, or an open binary file object (see :func:`open_npy`).
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    **kwargs
        Passed on to the format's opener: :func:`open_npy`, :func:`~npystore.open_npz` or
        :func:`~npystore.open_mat` (e.g. ``chunks`` and ``max_chunks`` for all three,
        ``allow_pickle`` (accepted for MATLAB files too, which hold no pickles) and
        ``max_header_size`` for ``.npy`` and ``.npz``,
        ``max_members`` for ``.npz``, ``max_depth`` and ``squeeze`` for ``.mat``).

    Returns
    -------
    dask.array.Array or NpzFile or MatFile
        A dask array for an ``.npy`` file; an :class:`~npystore.faces.npz.NpzFile` mapping for a
        ZIP archive (``.npz``); a :class:`~npystore.faces.matfile.MatFile` for a MATLAB file.

    Raises
    ------
    FormatError
        The bytes are not a known format, or the file is malformed.
    UnsupportedError
        A recognised format that this version of npystore cannot open yet, or a limit
        (``max_members``, ``max_chunks``) exceeded.
    TypeError
        A keyword the format's opener does not take.
    """
    found = sniff_source(url, storage_options)
    if found.kind == "npy":
        return _npy_dask(found.reader, found.prefix, **kwargs)
    if found.kind == "npz":
        from npystore.faces.npz import npz_from_reader  # noqa: PLC0415

        return npz_from_reader(found.reader, **kwargs)
    from npystore.faces.matfile import mat_from_reader  # noqa: PLC0415

    kwargs.pop("allow_pickle", None)  # MATLAB files hold no pickles
    return mat_from_reader(found.reader, found.prefix, **kwargs)
