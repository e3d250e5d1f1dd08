"""MATLAB .mat files as a mapping of lazy values: :func:`open_mat` and :class:`MatFile`.

Every MAT-file version opens through the same interface: v7.3 (HDF5, read by
:mod:`npystore.files.mat.v73`), v5/v6/v7 and v4 (:mod:`npystore.files.mat.v5`). Each reader
lists the
variables from their headers and turns one variable into a tree of layouts
(:mod:`npystore.files.mat.tree`) on first access; this module makes the user-facing values.

>>> import numpy as np, scipy.io, npystore
>>> scipy.io.savemat("/tmp/doc_mat.mat", {"x": np.arange(6.0).reshape(2, 3), "s": "hi"})
>>> m = npystore.open_mat("/tmp/doc_mat.mat")
>>> sorted(m)
['s', 'x']
>>> m["x"].shape, m["x"].dtype
((2, 3), dtype('float64'))
>>> m["x"][1].compute()
array([3., 4., 5.])
>>> m["s"]
'hi'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from npystore.errors import UnsupportedError
from npystore.faces.dask import DEFAULT_MAX_CHUNKS, ChunksSpec, to_dask
from npystore.fetch import RangeReader, open_reader
from npystore.files import read_prefix
from npystore.files.mat import MatReader, open_mat_reader
from npystore.files.mat.tree import MatInfo, MatNode, NumericLeaf, ValueLeaf, to_value
from npystore.formats.mat5 import CharErrors

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["MatFile", "open_mat"]

#: Bytes asked for with the object's identity when a remote MAT-file is opened (more than
#: :data:`npystore.fetch.OPEN_HEAD`, the 128 bytes any format's magic needs): the MAT header
#: and, in MATLAB-written v7.3 files, the superblock, root group and variables' object
#: headers, so listing a file costs one round trip.
MAT_OPEN_HEAD: Final = 64 * 2**10


class MatFile(Mapping[str, Any]):
    """The variables of a MAT-file: name -> value, read on access.

    Values follow MATLAB: numeric, logical and complex arrays are lazy
    :class:`dask.array.Array` objects whose shape is MATLAB's ``size()`` (at least 2-D
    unless ``squeeze=True``), except that those inside cells and structs whose values take
    at most :data:`~npystore.files.mat.tree.EAGER_BYTES` (64 KiB) are read with their container,
    as read-only numpy arrays (in v5 files: when the variable is read whole, i.e.
    compressed ones inflating to at most 16 MiB and uncompressed ones of at most 8 MiB);
    char arrays are ``str`` (an object array of ``str``, one per
    row, for char matrices); structs are :class:`~npystore.files.mat.tree.MatStruct` mappings
    (struct arrays: object arrays of them); cells are object arrays in MATLAB shape; sparse
    matrices are ``scipy.sparse.csc_matrix``; objects, function handles, strings, tables
    and datetimes are :class:`~npystore.files.mat.tree.MatlabObject` placeholders.

    Attributes
    ----------
    url : str
        The file.
    version : str
        ``"7.3"``, ``"5"`` (``-v6``/``-v7``) or ``"4"``.
    header_text : str
        The file's descriptive text ("" for v4).
    """

    def __init__(
        self,
        reader: MatReader,
        *,
        chunks: ChunksSpec = "auto",
        squeeze: bool = False,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
    ):
        self._reader = reader
        self._chunks = chunks
        self._squeeze = squeeze
        self._max_chunks = max_chunks
        names = reader.names()  # a v5 file's is a dict keyed by them already: not copied
        self._names: Mapping[str, Any] = names if isinstance(names, dict) else dict.fromkeys(names)
        self._infos: dict[str, MatInfo] | None = None  # made when first asked for
        self._nodes: dict[str, MatNode] = {}
        self.url = reader.source
        self.version = reader.version
        self.header_text = reader.header_text

    # -- Mapping ------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        return to_value(self.node(name), numeric=self._numeric, array=self._eager)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __repr__(self) -> str:
        return f"MatFile({self.url!r}, version={self.version!r}, variables={list(self._names)})"

    # -- more --------------------------------------------------------------------------

    @property
    def variables(self) -> dict[str, MatInfo]:
        """Each variable's class, size and attributes, known without reading its data."""
        if self._infos is None:
            self._infos = self._reader.infos()
        return dict(self._infos)

    def describe(self) -> str:
        """A ``whos``-like table of the variables."""
        rows = [("Name", "Size", "Class", "Attributes")]
        for info in self.variables.values():
            size = "x".join(map(str, info.dims)) if info.dims else "?"
            attrs = " ".join(
                w
                for w, on in (("sparse", info.sparse), ("complex", info.complex),
                              ("global", info.is_global), ("refused", bool(info.refused)))
                if on
            )  # fmt: skip
            rows.append((info.name, size, info.matlab_class, attrs))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return "\n".join(
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
            for r in rows
        )

    def node(self, name: str) -> MatNode:
        """The variable's tree of layouts (what the Zarr face and the values are made of)."""
        node = self._nodes.get(name)
        if node is None:
            if name not in self._names:
                raise KeyError(f"{self.url}: no variable {name!r}")
            node = self._nodes[name] = self._reader.node(name)
        return node

    def load(self, name: str) -> Any:
        """The variable with every array read into memory (numpy instead of dask).

        Small variables of a v5 file are decoded from the bytes read when the file was
        opened, without building their tree; the values of other v5 variables that were
        read (or inflated) with the variable's tree are taken from those bytes, not read
        again. Such a tree is not kept: each call reads the variable anew (a tree built
        by ``m[name]`` or :meth:`node` is kept, and used by later calls).
        """
        node = self._nodes.get(name)
        if node is None:
            if name not in self._names:
                raise KeyError(f"{self.url}: no variable {name!r}")
            node = self._reader.loaded(name)
            if isinstance(node, ValueLeaf):
                return self._array(node.value)
            if node is None:
                node = self.node(name)
        return to_value(
            node, numeric=lambda leaf: self._array(leaf.array.read()), array=self._eager
        )

    def close(self) -> None:
        """Release the reader (h5py file handles for v7.3)."""
        self._reader.close()

    def __enter__(self) -> MatFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _numeric(self, leaf: NumericLeaf) -> da.Array:
        prefix = "mat-" + leaf.array.source.rsplit(":", 1)[-1][:40].replace("/", "_")
        arr = to_dask(leaf.array, self._chunks, prefix=prefix, max_chunks=self._max_chunks)
        shaped: da.Array = self._array(arr)
        return shaped

    def _array(self, arr: Any) -> Any:
        """A numeric value as the user asked for it (``squeeze``)."""
        return arr.squeeze() if self._squeeze else arr

    @property
    def _eager(self) -> Callable[[Any], Any] | None:
        """What :func:`~npystore.files.mat.tree.to_value` does to values read with their
        container: nothing (None, the fast path), or squeeze them."""
        return self._array if self._squeeze else None


def open_mat(
    url: str | list[str] | tuple[str, ...],
    *,
    axis: int | None = None,
    stack: bool = False,
    chunks: ChunksSpec = "auto",
    storage_options: Mapping[str, Any] | None = None,
    squeeze: bool = False,
    max_depth: int = 64,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    char_errors: CharErrors = "strict",
) -> MatFile:
    """Open a MATLAB .mat file (v7.3, v7, v6 or v4) as a mapping of lazy values.

    Only headers and metadata are read here; numeric data is read by the values' dask
    arrays, only the bytes a computation needs.

    Parameters
    ----------
    url : str or list of str
        Local path or fsspec URL. Many MAT-files (a list, a glob, a folder; see
        :func:`npystore.open_npy`) give a :class:`~npystore.faces.many.ManyFiles` mapping
        whose ``m["x"]`` is every file's numeric variable ``x`` concatenated along ``axis``
        (stacked with ``stack=True``); the files are opened together.
    axis : int, optional
        Many files: the axis their variables are concatenated (stacked) along (default 0).
    stack : bool
        Many files: stack the variables along a new axis.
    chunks : chunk spec
        dask chunks of numeric arrays (``"auto"``: about dask's ``array.chunk-size``,
        aligned to the file's own chunks).
    storage_options : mapping, optional
        fsspec filesystem options.
    squeeze : bool
        Drop length-1 dimensions of numeric arrays (MATLAB sizes are at least 2-D).
    max_depth : int
        Most nesting levels of cells and structs (deeper files raise FormatError when the
        variable is read); at most 256.
    max_chunks : int
        Most chunks (one dask task each) a numeric variable's array may have (default
        1,000,000), checked before its graph is built.
    char_errors : {"strict", "replace"}
        Invalid UTF-8 in a char variable (v6/v7 files store chars as UTF-8): ``"strict"``
        raises FormatError naming the variable and the byte; ``"replace"`` reads each
        invalid sequence as U+FFFD, as ``scipy.io.loadmat`` does.

    Returns
    -------
    MatFile

    Raises
    ------
    FormatError
        Not a MAT-file, or malformed.
    UnsupportedError
        A valid file using features npystore does not read (e.g. unknown HDF5 filters);
        ``chunks`` giving a variable more than ``max_chunks`` chunks.
    MissingDependencyError
        A v7.3 (HDF5) file without h5py installed (``pip install 'npystore[mat]'``); sparse
        variables need scipy, and say so when they are read.
    ValueError
        ``max_depth`` outside 1 to 256.
    """
    from npystore.fetch.naming import is_folder, is_many  # noqa: PLC0415

    if is_many(url) or is_folder(url, storage_options):
        if squeeze:
            raise UnsupportedError("squeeze=True is for one MAT-file: squeeze the joined array")
        from npystore.faces.many import open_mat_many  # noqa: PLC0415

        return open_mat_many(  # type: ignore[return-value]
            url, axis=axis, stack=stack, chunks=chunks, storage_options=storage_options,
            max_chunks=max_chunks, max_depth=max_depth, char_errors=char_errors,
        )  # fmt: skip
    if axis is not None or stack:
        raise TypeError("axis and stack apply to many MAT-files (a list, a glob or a folder)")
    reader = open_reader(url, storage_options, head=MAT_OPEN_HEAD)  # type: ignore[arg-type]
    prefix = read_prefix(reader)
    return mat_from_reader(
        reader,
        prefix,
        chunks=chunks,
        squeeze=squeeze,
        max_depth=max_depth,
        max_chunks=max_chunks,
        char_errors=char_errors,
    )


def mat_from_reader(
    reader: RangeReader,
    prefix: bytes,
    *,
    chunks: ChunksSpec = "auto",
    squeeze: bool = False,
    max_depth: int = 64,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    char_errors: CharErrors = "strict",
) -> MatFile:
    """:func:`open_mat` for an open reader whose first bytes were read already."""
    if char_errors not in ("strict", "replace"):
        raise ValueError(f"char_errors={char_errors!r}, expected 'strict' or 'replace'")
    return MatFile(
        open_mat_reader(reader, prefix, max_depth, char_errors),
        chunks=chunks,
        squeeze=squeeze,
        max_chunks=max_chunks,
    )
