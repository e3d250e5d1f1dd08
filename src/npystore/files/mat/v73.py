"""MATLAB v7.3 MAT-files read through a :class:`~npystore.fetch.RangeReader`.

:class:`Mat73File` opens the HDF5 file with h5py over a block-cached view of the object
(:func:`npystore.files.mat.hdf5.open_h5`: metadata reads are few and cached), lets
:class:`npystore.formats.mat73.Mat73Tree` give each variable its MATLAB meaning, and turns
the result into a :mod:`npystore.files.mat.tree` tree. Numeric values are never read here: each
numeric leaf is a :class:`~npystore.read.access.LayoutArray` over the dataset's bytes
(:func:`npystore.files.mat.hdf5.dataset_layout`), read only when the leaf is read. Characters,
object references, the dims of empty values and object headers are small metadata and
are read with it. The tree is walked over :mod:`npystore.files.mat.h5safe`'s wrappers: external and
user-defined links, external storage and virtual datasets are refused
(:class:`~npystore.errors.UnsupportedError`), so a file never makes npystore read another.

>>> import numpy as np, h5py, npystore.fetch, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "a.mat")
>>> with h5py.File(path, "w", userblock_size=512) as f:
...     d = f.create_dataset("x", data=np.arange(6.0).reshape(3, 2))
...     d.attrs["MATLAB_class"] = np.bytes_("double")
>>> from npystore.formats.mat5 import v73_header
>>> with open(path, "r+b") as f:  # MATLAB's 128-byte header at the start of the user block
...     n = f.write(v73_header())
>>> m = Mat73File(npystore.fetch.open_reader(path))
>>> m.infos()["x"].dims
(2, 3)
>>> m.node("x").array.read().tolist()
[[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
>>> m.close()
"""

from __future__ import annotations

import dataclasses
from types import TracebackType
from typing import Any, Final

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import RangeReader
from npystore.files.mat.h5meta import H5Meta
from npystore.files.mat.h5safe import (
    Guard,
    PlainSafeDataset,
    SafeDataset,
    object_identity,
    safe_root,
)
from npystore.files.mat.hdf5 import (
    chunk_table,
    dataset_layout,
    hdf5_errors,
    open_h5,
    plain_layout,
)
from npystore.files.mat.tree import (
    EAGER_BYTES,
    CellNode,
    CharLeaf,
    MatInfo,
    MatlabObject,
    MatNode,
    NumericLeaf,
    ObjectLeaf,
    SparseLeaf,
    StructNode,
    ValueLeaf,
)
from npystore.formats import mat5, mat73
from npystore.read.access import LayoutArray
from npystore.read.layout import (
    ArrayLayout,
    ChunkedExtent,
    ConvertedExtent,
    InlineExtent,
    RawExtent,
)

__all__ = ["HEADER_TEXT_SIZE", "Mat73File"]

#: Bytes of descriptive text at the start of the user block.
HEADER_TEXT_SIZE: Final = 116
_INDEX_DTYPE: Final = np.dtype("<u8")


class Mat73File:
    """A MATLAB v7.3 MAT-file (HDF5 behind a 512-byte user block) read through a reader.

    Parameters
    ----------
    reader : RangeReader
        Reader of the file.
    max_depth : int
        Deepest nesting of cells and structs accepted (deeper is a FormatError).
    prefix : bytes, optional
        The file's first bytes when the caller read them already (saves one request).

    Attributes
    ----------
    source : str
        The URL.
    version : str
        ``"7.3"``.
    header_text : str
        The user block's descriptive text (its first 116 bytes), stripped.

    Raises
    ------
    FormatError
        Not a readable HDF5 file.
    UnsupportedError
        A plain HDF5 file: one without the 128-byte MAT-file header (version 0x0200) in its
        user block. MATLAB's shapes and types (column-major dims, ``MATLAB_class``) are not
        HDF5's, and a file that does not say it is a MAT-file is not read as one.
    """

    version = "7.3"

    def __init__(
        self, reader: RangeReader, *, max_depth: int = 64, prefix: bytes | None = None
    ) -> None:
        self.reader = reader
        self.source = reader.url
        if prefix is None or len(prefix) < min(reader.size, mat5.HEADER_SIZE):
            prefix = reader.read(0, min(reader.size, mat5.HEADER_SIZE))
        self.header_text = _header_text(prefix, self.source)
        self._h5 = open_h5(reader)
        self._meta = H5Meta.for_reader(reader)
        base = self._meta.base or 0
        guard = Guard(
            reader, object_identity, lambda dset, src: chunk_table(dset, reader, base, src)
        )
        self._max_depth = max_depth
        # the tree sees only checked wrappers: no B-tree libhdf5 walks is unchecked, and no
        # link or value it reaches can name a file
        root = safe_root(self._h5, self.source, guard)
        self._tree = mat73.Mat73Tree(
            root, source=self.source, max_depth=max_depth, eager_bytes=EAGER_BYTES
        )
        self._built: dict[mat73.MatNode, MatNode] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"Mat73File({self.source!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # h5py objects do not pickle: a copy (e.g. on a dask worker) reopens the file
        return (_reopen, (self.reader, self._max_depth))

    def __enter__(self) -> Mat73File:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def names(self) -> list[str]:
        """The variables' names, in the file's (HDF5 link) order."""
        self._check_open()
        with hdf5_errors(f"{self.source}: listing the variables"):
            return self._tree.names()

    def loaded(self, name: str) -> MatNode | None:
        """None: a v7.3 variable is always read through its :meth:`node`."""
        del name
        return None

    def infos(self) -> dict[str, MatInfo]:
        """Every variable as ``whos`` lists it, in the file's (HDF5 link) order, from
        attributes and shapes; no numeric data is read."""
        self._check_open()
        with hdf5_errors(f"{self.source}: listing the variables"):
            return {name: MatInfo(**self._tree.info(name)._asdict()) for name in self._tree.names()}

    def node(self, name: str) -> MatNode:
        """The tree of one variable; numeric leaves are lazy.

        Raises
        ------
        KeyError
            No such variable (the message names it).
        FormatError
            The variable is malformed (its path is in the message).
        UnsupportedError
            The variable is valid but beyond npystore's limits.
        """
        self._check_open()
        with hdf5_errors(f"{self.source}: variable {name}"):
            if self._tree.has(name):
                return self._build(self._tree.parse(name))
        raise KeyError(f"{self.source}: no variable {name!r}")

    def close(self) -> None:
        """Close the HDF5 file (leaves already built keep reading through the reader)."""
        self._closed = True
        self._h5.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.source}: the MAT-file is closed")

    # -- tree building ---------------------------------------------------------------------

    def _build(self, node: mat73.MatNode) -> MatNode:
        built = self._built.get(node)
        if built is None:
            built = self._built[node] = self._convert(node)
        return built

    def _convert(self, node: mat73.MatNode) -> MatNode:
        if isinstance(node, mat73.NumericArray):
            if node.value is not None:  # read with its container
                return ValueLeaf(node.value)
            arr = self._values(node.dataset, node.dtype, node.dims, node.path)
            return NumericLeaf(arr, node.matlab_class, node.dims)
        if isinstance(node, mat73.CharArray):
            return CharLeaf(node.value, node.units, node.dims)
        if isinstance(node, mat73.SparseArray):
            return self._sparse(node)
        if isinstance(node, mat73.CellArray):  # loops, not comprehensions: fewer frames
            cells: list[MatNode] = []
            for cell in node.cells:
                cells.append(self._build(cell))
            return CellNode(node.dims, tuple(cells))
        if isinstance(node, mat73.StructArray):
            elements: list[dict[str, MatNode]] = []
            for element in node.elements:
                built: dict[str, MatNode] = {}
                for f, child in element.items():
                    built[f] = self._build(child)
                elements.append(built)
            return StructNode(node.dims, node.fields, tuple(elements), node.matlab_class)
        return ObjectLeaf(MatlabObject(node.matlab_class, node.dims, node.reason))

    def _sparse(self, node: mat73.SparseArray) -> SparseLeaf:
        data = self._values(node.data, node.dtype, None, f"{node.path}.data")
        ir = self._values(node.ir, _INDEX_DTYPE, None, f"{node.path}.ir", keep=True)
        jc = self._values(node.jc, _INDEX_DTYPE, None, f"{node.path}.jc", keep=True)
        return SparseLeaf(node.dims, node.matlab_class, data, ir, jc, node.dtype.kind == "c")

    def _values(
        self,
        dset: mat73.H5Dataset | None,
        dtype: np.dtype[Any],
        dims: tuple[int, ...] | None,
        path: str,
        *,
        keep: bool = False,
    ) -> LayoutArray:
        """A dataset's values as ``dtype`` (converted on read when stored otherwise), in
        MATLAB shape padded to ``dims``; ``None`` is an empty array of ``dims`` (or 0).

        ``keep`` leaves any integer stored type as it is (sparse indices).
        """
        source = f"{self.source}:{path}"
        if dset is None:
            layout = ArrayLayout(dtype, dims or (0,), "F", InlineExtent(b""))
            return LayoutArray(self.reader, layout, source=source)
        if isinstance(dset, PlainSafeDataset):
            stored = plain_layout(dset, self._meta, source)  # libhdf5 not asked
        else:
            raw = dset.h5obj if isinstance(dset, SafeDataset) else dset
            stored = dataset_layout(raw, self.reader, matlab=True, source=source)
        if dims is not None:
            stored = _padded(stored, dims, source)
        same = stored.dtype.names is None and (
            stored.dtype.newbyteorder("=") == dtype or (keep and stored.dtype.kind in "iu")
        )
        layout = (
            stored
            if same
            else ArrayLayout(dtype, stored.shape, stored.order, ConvertedExtent(stored))
        )
        return LayoutArray(self.reader, layout, source=source)


def _reopen(reader: RangeReader, max_depth: int) -> Mat73File:
    """Unpickle a :class:`Mat73File`: open the same (pinned) object again."""
    return Mat73File(reader, max_depth=max_depth)


def _header_text(prefix: bytes, source: str) -> str:
    """The MAT-file header's text; a plain HDF5 file (no header) is refused."""
    if not mat5.is_v73(prefix):
        if prefix.startswith(mat5.HDF5_SIGNATURE):
            raise UnsupportedError(mat5.plain_hdf5_refused(source))
        raise FormatError(
            f"{source}: not a MATLAB v7.3 MAT-file: its first 128 bytes are not a MAT-file "
            f"header with version 0x0200 (first bytes {prefix[:20]!r})"
        )
    return prefix[:HEADER_TEXT_SIZE].decode("latin-1").strip(" \x00")


def _padded(layout: ArrayLayout, dims: tuple[int, ...], source: str) -> ArrayLayout:
    """The layout with trailing length-1 axes added up to ``dims`` (0-d and 1-d datasets,
    which MATLAB never writes, read as 1x1 and Nx1)."""
    if layout.shape == dims:
        return layout
    extra = len(dims) - len(layout.shape)
    if (
        extra <= 0
        or dims[: len(layout.shape)] != layout.shape
        or any(d != 1 for d in dims[-extra:])
    ):
        raise FormatError(f"{source}: dataset of shape {layout.shape}, expected MATLAB dims {dims}")
    storage = layout.storage
    if isinstance(storage, ChunkedExtent):
        grid = storage.grid + (1,) * extra
        storage = dataclasses.replace(
            storage,
            chunk_shape=storage.chunk_shape + (1,) * extra,
            offsets=storage.offsets.reshape(grid),
            sizes=storage.sizes.reshape(grid),
            filter_masks=storage.filter_masks.reshape(grid),
        )
    elif isinstance(storage, ConvertedExtent):
        storage = ConvertedExtent(
            _padded(storage.real, dims, source),
            None if storage.imag is None else _padded(storage.imag, dims, source),
        )
    elif not isinstance(storage, InlineExtent | RawExtent):
        raise UnsupportedError(
            f"{source}: a {layout.ndim}-d dataset stored as {type(storage).__name__}"
        )
    return ArrayLayout(layout.dtype, dims, "F", storage)
