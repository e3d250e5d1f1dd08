"""MAT v4 files through the fetch layer (the parser is :mod:`npystore.formats.mat4`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.files.mat.tree import CharLeaf, MatInfo, MatNode, NumericLeaf, SparseLeaf
from npystore.files.mat.v5 import FIRST_WINDOW, WINDOW
from npystore.files.mat.v5_build import char_value
from npystore.formats import mat4
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, ConvertedExtent, InlineExtent, RawExtent, Storage

__all__ = ["Mat4File"]


class Mat4File:
    """A Level-4 MAT-file (no header; both byte orders) read through a reader.

    v4 files are small by nature (no compression, no containers): the matrix headers are
    walked in windows; numeric values stay byte ranges of the file.
    """

    version = "4"
    header_text = ""

    def __init__(self, reader: RangeReader) -> None:
        self.reader = reader
        self.source = reader.url
        matrices: list[mat4.V4Matrix] = []
        pos: int | None = 0
        size = FIRST_WINDOW
        while pos is not None and pos < reader.size:
            window = reader.read(pos, min(reader.size, pos + size))
            found, pos = mat4.scan_v4(window, pos, reader.size, source=reader.url)
            matrices.extend(found)
            size = WINDOW
        self._matrices: dict[str, mat4.V4Matrix] = {}
        for m in matrices:
            if m.name in self._matrices:
                raise FormatError(f"{reader.url}: variable {m.name!r} appears twice")
            self._matrices[m.name] = m

    def names(self) -> list[str]:
        """The matrices' names, in file order."""
        return list(self._matrices)

    def loaded(self, name: str) -> MatNode | None:
        """None: a v4 matrix is always read through its :meth:`node`."""
        del name
        return None

    def infos(self) -> dict[str, MatInfo]:
        """The matrices, in file order (a sparse matrix's size is in its data: read it)."""
        out: dict[str, MatInfo] = {}
        for name, m in self._matrices.items():
            dims: tuple[int, ...] = m.dims
            if m.is_sparse:
                node = self.node(name)
                dims = node.dims
            out[name] = MatInfo(name, m.matlab_class, dims, m.is_sparse, m.dtype.kind == "c")
        return out

    def node(self, name: str) -> MatNode:
        """One matrix as a tree leaf."""
        m = self._matrices.get(name)
        if m is None:
            raise KeyError(f"{self.source}: no variable {name!r}")
        path = f"{self.source}:{name}"
        if m.kind == "full":
            dtype = m.dtype
            shape = m.dims
            if m.imag is None and m.real.stored_dtype == dtype:
                storage: Storage = RawExtent(m.real.offset, m.real.nbytes)
            else:
                storage = ConvertedExtent(
                    ArrayLayout(m.real.stored_dtype, shape, "F",
                                RawExtent(m.real.offset, m.real.nbytes)),
                    None if m.imag is None else ArrayLayout(
                        m.imag.stored_dtype, shape, "F", RawExtent(m.imag.offset, m.imag.nbytes)
                    ),
                )  # fmt: skip
            arr = LayoutArray(self.reader, ArrayLayout(dtype, shape, "F", storage), source=path)
            return NumericLeaf(arr, "double", shape)
        start = m.real.offset
        stop = (m.imag or m.real).end
        data = self.reader.read(start, stop)
        if m.kind == "text":
            value = m.decode(data, start, as_strings=True)
            codes = m.real.view(data, start).astype(np.uint32).reshape(m.dims, order="F")
            return CharLeaf(char_value(value), codes, m.dims)
        coo = m.decode(data, start)
        csc = coo.tocsc()
        csc.sort_indices()

        def inline(values: np.ndarray[Any, Any], label: str) -> LayoutArray:
            values = np.ascontiguousarray(values)
            layout = ArrayLayout(values.dtype, values.shape, "F", InlineExtent(values.tobytes()))
            return LayoutArray(self.reader, layout, source=f"{path}.{label}")

        dims = (int(csc.shape[0]), int(csc.shape[1]))
        return SparseLeaf(
            dims,
            "double",
            inline(csc.data, "data"),
            inline(csc.indices.astype(np.int64), "ir"),
            inline(csc.indptr.astype(np.int64), "jc"),
            csc.dtype.kind == "c",
        )

    def close(self) -> None:
        """Nothing to release."""
