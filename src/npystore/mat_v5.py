"""MAT v5 (``-v6``, ``-v7``) and v4 files through the fetch layer: listings and value trees.

Reading a Level-5 file (the parsers are :mod:`npystore.formats.mat5` and ``mat4``):

1. The top-level element tags are walked in windows (256 KiB from byte 128, then 64 KiB at
   each tag that was not in a window): one request for a file of small variables, one per
   large variable otherwise. Nothing is inflated.
2. The listing (:meth:`Mat5File.infos`) needs each variable's first bytes: uncompressed
   ones are usually inside a window already; for ``miCOMPRESSED`` ones the first 4 KiB of
   the zlib stream are fetched (one concurrent batch) and inflated only until the array
   flags, dimensions and name are known.
3. A variable's tree (:meth:`Mat5File.node`) reads its element without numeric data:
   uncompressed numeric values become byte ranges of the file (:class:`RawExtent`);
   compressed variables of up to :data:`INFLATE_WHOLE` bytes are inflated once (Adler-32
   checked) and their leaves held in memory; larger ones are parsed from an inflated
   prefix that grows by doubling, and their numeric leaves stay inside the zlib stream
   (:class:`DeflatedExtent`: read from a checkpoint index, or sequentially, on demand).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Final

import numpy as np

from npystore.access import LayoutArray
from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.formats import deflate, mat4, mat5
from npystore.formats.mat5 import DataRef, MatHeader, NeedMoreBytes, VariableEntry
from npystore.inflate import inflate_into, inflate_range
from npystore.layout import (
    ArrayLayout,
    ConvertedExtent,
    DeflatedExtent,
    DeflatedMember,
    IndexSlot,
    InlineExtent,
    RawExtent,
    Storage,
)
from npystore.mattree import (
    CellNode,
    CharLeaf,
    MatInfo,
    MatlabObject,
    MatNode,
    NumericLeaf,
    ObjectLeaf,
    SparseLeaf,
    StructNode,
)

__all__ = ["INFLATE_WHOLE", "Mat4File", "Mat5File", "mat5_pair"]

#: First window of tags read after the header.
FIRST_WINDOW: Final = 256 * 2**10
#: Later windows of tags.
WINDOW: Final = 64 * 2**10
#: Bytes of an element (or of a zlib stream) read for its listing.
HEAD_BYTES: Final = 4096
#: Uncompressed elements up to this size are read whole to parse their tree.
READ_WHOLE: Final = 8 * 2**20
#: Compressed variables inflating to at most this many bytes are inflated whole once.
INFLATE_WHOLE: Final = 16 * 2**20
#: Most NeedMoreBytes rounds while parsing one variable.
MAX_ROUNDS: Final = 100_000


class _Source:
    """The bytes of one variable's address space: the file, or its inflated zlib stream."""

    def __init__(self, reader: RangeReader, entry: VariableEntry, name: str, order: str) -> None:
        self.reader = reader
        self.entry = entry
        self.name = name
        self.order = order
        self.where = f"{reader.url}:{name}" if name else reader.url
        self.member: DeflatedMember | None = None
        self.slot = IndexSlot()
        self.whole: bytes | None = None  # the inflated element, when inflated whole
        self.prefix = b""

    # -- compressed ----------------------------------------------------------------------

    def open_stream(self, head: bytes | None = None) -> None:
        """Learn the zlib stream's sizes and checksum (two small reads, concurrent)."""
        e = self.entry
        if e.data_size < 2 + 4:
            raise FormatError(
                f"{self.where}: miCOMPRESSED element at offset {e.offset} holds {e.data_size} "
                "bytes, expected a zlib stream (2-byte header, data, 4-byte Adler-32)"
            )
        ranges = [(e.end - 4, e.end)]
        if head is None:
            ranges.append((e.data_offset, e.data_offset + min(e.data_size, HEAD_BYTES)))
        got = self.reader.read_many(ranges)
        trailer = got[0]
        head = got[1] if head is None else head
        cmf, flg = head[0], head[1]
        if cmf & 0x0F != 8 or (cmf << 8 | flg) % 31 or flg & 0x20:
            raise FormatError(
                f"{self.where}: miCOMPRESSED data at offset {e.data_offset} starts with "
                f"{bytes(head[:2])!r}, expected a zlib header (deflate, no preset dictionary)"
            )
        inner = _inflate_prefix(head, 8, self.where)
        if len(inner) < 8:
            raise FormatError(f"{self.where}: the zlib stream inflates to fewer than 8 bytes")
        mdtype, nbytes = mat5_pair(self.order).unpack_from(inner, 0)
        size = 8 + nbytes if mdtype >> 16 == 0 else 8
        if size > deflate.max_inflated_size(e.data_size - 6):
            raise FormatError(
                f"{self.where}: the miCOMPRESSED element at offset {e.offset} declares {size} "
                f"inflated bytes in {e.data_size - 6} bytes of deflate data, expected at most "
                f"{deflate.MAX_INFLATE_RATIO} per compressed byte"
            )
        self.member = DeflatedMember(
            self.name,
            e.data_offset + 2,
            e.data_size - 6,
            size,
            None,
            int.from_bytes(trailer, "big"),
        )

    def grow(self, stop: int) -> None:
        """Make ``prefix`` cover inflated bytes ``[0, stop)`` (doubling: linear total work)."""
        member = self.member
        if member is None:  # pragma: no cover - callers open the stream first
            raise RuntimeError("stream not opened")
        size = min(member.uncompressed_size, max(stop, 2 * len(self.prefix), 64 * 2**10))
        if size <= len(self.prefix):
            return
        self.prefix = inflate_range(self.reader, member, self.slot, 0, size)

    def inflate_whole(self) -> None:
        """Inflate the whole stream once, checking its size and Adler-32."""
        member = self.member
        if member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        buf = bytearray(member.uncompressed_size)
        inflate_into(self.reader, member, memoryview(buf))
        self.whole = bytes(buf)

    # -- ranges ----------------------------------------------------------------------------

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the address space."""
        if not self.entry.compressed:
            return self.reader.read(start, stop)
        if self.whole is not None:
            return self.whole[start:stop]
        if stop <= len(self.prefix):
            return self.prefix[start:stop]
        if self.member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        return inflate_range(self.reader, self.member, self.slot, start, stop)

    def storage(self, ref: DataRef) -> Storage:
        """Where a leaf's values are, as layout storage."""
        if not self.entry.compressed:
            return RawExtent(ref.offset, ref.nbytes)
        if self.whole is not None:
            return InlineExtent(self.whole[ref.offset : ref.end])
        if self.member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        return DeflatedExtent(self.member, ref.offset, ref.nbytes, self.slot)


def mat5_pair(order: str) -> struct.Struct:
    """The ``struct.Struct`` of two uint32 in the file's byte order."""
    return struct.Struct(f"{order}II")


def _inflate_prefix(data: bytes, want: int, where: str) -> bytes:
    d = zlib.decompressobj(15)
    try:
        return d.decompress(data, max(want, 1))
    except zlib.error as exc:
        raise FormatError(f"{where}: corrupt miCOMPRESSED data: {exc}") from None


class Mat5File:
    """A Level-5 MAT-file read through a :class:`~npystore.fetch.RangeReader`.

    Parameters
    ----------
    reader : RangeReader
        The file.
    header : MatHeader
        Its parsed header (version 5).
    max_depth : int
        Most nesting levels of cells/structs below a variable.
    """

    version = "5"

    def __init__(self, reader: RangeReader, header: MatHeader, *, max_depth: int = 64) -> None:
        self.reader = reader
        self.header = header
        self.source = reader.url
        self.header_text = header.text
        self.max_depth = max_depth
        self._windows: dict[int, bytes] = {}
        self._entries: dict[str, VariableEntry] = {}
        self._infos: dict[str, MatInfo] = {}
        self._heads: dict[str, bytes] = {}
        self._scan()

    def _scan(self) -> None:
        r, h = self.reader, self.header
        entries: list[VariableEntry] = []
        pos: int | None = h.data_start
        size = FIRST_WINDOW
        while pos is not None and pos < r.size:
            window = r.read(pos, min(r.size, pos + size))
            self._windows[pos] = window
            found, pos = mat5.scan_elements(
                window,
                pos,
                r.size,
                h.byte_order,
                source=r.url,
                subsys_offset=h.subsys_offset,
            )
            entries.extend(found)
            size = WINDOW
        users = [e for e in entries if not e.is_subsystem]
        # the first bytes of every element: from a window, else one concurrent batch
        heads: dict[int, bytes] = {}
        missing: list[tuple[int, int]] = []
        for e in users:
            start = e.data_offset if e.compressed else e.offset
            stop = min(e.end, start + HEAD_BYTES)
            got = self._from_windows(start, stop)
            if got is None:
                missing.append((start, stop))
            else:
                heads[e.offset] = got
        for (start, _), data in zip(missing, r.read_many(missing), strict=True):
            owner = next(e for e in users if start in (e.offset, e.data_offset))
            heads[owner.offset] = data
        for e in users:
            header = self._matrix_header(e, heads[e.offset])
            name = header.name
            if name in self._entries:
                raise FormatError(f"{r.url}: variable {name!r} appears twice (offsets "
                                  f"{self._entries[name].offset} and {e.offset})")  # fmt: skip
            self._entries[name] = e
            self._heads[name] = heads[e.offset]
            sparse = header.is_sparse
            cls = header.matlab_class
            if sparse:
                cls = "logical" if header.is_logical else "double"
            self._infos[name] = MatInfo(
                name, cls, header.dims, sparse, header.is_complex, header.is_global
            )

    def _from_windows(self, start: int, stop: int) -> bytes | None:
        for base, data in self._windows.items():
            if base <= start and stop <= base + len(data):
                return data[start - base : stop - base]
        return None

    def _matrix_header(self, e: VariableEntry, head: bytes) -> mat5.MatrixHeader:
        r, order = self.reader, self.header.byte_order
        if not e.compressed:
            extra: dict[int, bytes] = {}
            for _ in range(64):
                try:
                    return mat5.parse_matrix_header(
                        head, e.offset, order, source=r.url, extra=extra
                    )
                except NeedMoreBytes as more:
                    stop = min(e.end, more.offset + max(more.needed, HEAD_BYTES))
                    extra[more.offset] = r.read(more.offset, stop)
            raise FormatError(f"{r.url}: element at offset {e.offset}: header too scattered")
        where = f"{r.url}: miCOMPRESSED element at offset {e.offset}"
        inflated = _inflate_prefix(head, 1024, where)
        for _ in range(16):
            try:
                return mat5.parse_matrix_header(inflated, 0, order, source=where, inflated=True)
            except NeedMoreBytes as more:
                want = more.offset + more.needed
                if len(head) < e.data_size:
                    head = r.read(e.data_offset, min(e.end, e.data_offset + 4 * len(head)))
                before = len(inflated)
                inflated = _inflate_prefix(head, max(want, 2 * before), where)
                if len(inflated) <= before:
                    raise FormatError(
                        f"{where}: the stream ends after {before} bytes, the element needs "
                        f"bytes up to {want}"
                    ) from None
        raise FormatError(f"{where}: header too long")

    # -- the backend protocol ----------------------------------------------------------------

    def infos(self) -> dict[str, MatInfo]:
        """The variables, in file order, as ``whos`` lists them."""
        return dict(self._infos)

    def node(self, name: str) -> MatNode:
        """The tree of one variable (numeric data not read)."""
        e = self._entries.get(name)
        if e is None:
            raise KeyError(f"{self.source}: no variable {name!r}")
        src = _Source(self.reader, e, name, self.header.byte_order)
        variable = self._parse(src)
        return _Builder(src, self.reader).build(variable.value, name)

    def _parse(self, src: _Source) -> mat5.MatVariable:
        e, order, r = src.entry, self.header.byte_order, self.reader
        extra: dict[int, bytes] = {}
        if not e.compressed:
            element = r.read(e.offset, min(e.end, e.offset + READ_WHOLE))
            for _ in range(MAX_ROUNDS):
                try:
                    return mat5.parse_variable(
                        element, e.offset, order, source=r.url, max_depth=self.max_depth,
                        extra=extra,
                    )  # fmt: skip
                except NeedMoreBytes as more:
                    stop = min(e.end, more.offset + max(more.needed, WINDOW))
                    extra[more.offset] = r.read(more.offset, stop)
            raise FormatError(f"{src.where}: too many metadata pieces")
        src.open_stream(self._heads.get(src.name))
        member = src.member
        if member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        if member.uncompressed_size <= INFLATE_WHOLE:
            src.inflate_whole()
            data = src.whole or b""
            return mat5.parse_variable(
                data, 0, order, source=src.where, max_depth=self.max_depth, inflated=True
            )
        src.grow(HEAD_BYTES * 16)
        for _ in range(MAX_ROUNDS):
            try:
                return mat5.parse_variable(
                    src.prefix, 0, order, source=src.where, max_depth=self.max_depth,
                    inflated=True,
                )  # fmt: skip
            except NeedMoreBytes as more:
                before = len(src.prefix)
                src.grow(more.offset + more.needed)
                if len(src.prefix) <= before:
                    raise FormatError(
                        f"{src.where}: the element needs inflated bytes up to "
                        f"{more.offset + more.needed}, the stream has {before}"
                    ) from None
        raise FormatError(f"{src.where}: too many metadata pieces")

    def close(self) -> None:
        """Nothing to release (reads are stateless)."""


class _Builder:
    """Turns a parsed v5 tree into a :data:`~npystore.mattree.MatNode` tree."""

    def __init__(self, src: _Source, reader: RangeReader) -> None:
        self.src = src
        self.reader = reader

    def array(self, dtype: np.dtype[Any], shape: tuple[int, ...], storage: Storage,
              path: str) -> LayoutArray:  # fmt: skip
        layout = ArrayLayout(dtype, shape, "F", storage)
        return LayoutArray(self.reader, layout, source=f"{self.reader.url}:{path}")

    def part(self, ref: DataRef, shape: tuple[int, ...]) -> ArrayLayout:
        return ArrayLayout(ref.stored_dtype, shape, "F", self.src.storage(ref))

    def values(
        self, dtype: np.dtype[Any], shape: tuple[int, ...], real: DataRef,
        imag: DataRef | None, path: str,
    ) -> LayoutArray:  # fmt: skip
        """The leaf's values as ``dtype``: the stored range itself when it already is."""
        if imag is None and real.stored_dtype == dtype:
            return self.array(dtype, shape, self.src.storage(real), path)
        parts = ConvertedExtent(
            self.part(real, shape), None if imag is None else self.part(imag, shape)
        )
        return self.array(dtype, shape, parts, path)

    def build(self, node: mat5.MatNode, path: str) -> MatNode:
        if isinstance(node, mat5.NumericArray):
            arr = self.values(node.dtype, node.dims, node.real, node.imag, path)
            return NumericLeaf(arr, node.matlab_class, node.dims)
        if isinstance(node, mat5.CharArray):
            data = self.src.read(node.data.offset, node.data.end)
            units = node.code_units(data, node.data.offset)
            value = node.decode(data, node.data.offset, as_strings=True)
            return CharLeaf(_char_value(value), units.reshape(node.dims, order="F"), node.dims)
        if isinstance(node, mat5.SparseArray):
            return self.sparse(node, path)
        if isinstance(node, mat5.CellArray):
            cells = tuple(self.build(c, f"{path}{{{i}}}") for i, c in enumerate(node.cells))
            return CellNode(node.dims, cells)
        if isinstance(node, mat5.StructArray):
            elements = tuple(
                {f: self.build(v, f"{path}({i}).{f}") for f, v in node.element(i).items()}
                for i in range(node.numel)
            )
            return StructNode(node.dims, node.field_names, elements, node.matlab_class)
        reason = (
            "function handles are stored in MATLAB's undocumented subsystem"
            if node.kind == "function_handle"
            else f"{node.type_system or 'unknown'} objects are stored in MATLAB's undocumented "
            "subsystem"
        )
        dims = node.dims if node.kind != "opaque" else ()
        return ObjectLeaf(MatlabObject(node.matlab_class, dims, reason))

    def sparse(self, node: mat5.SparseArray, path: str) -> SparseLeaf:
        nnz_max = node.ir.count
        pr = node.pr
        count = min(nnz_max, pr.count)
        real = DataRef(pr.offset, count * pr.stored_dtype.itemsize, pr.stored_dtype, pr.data_type)
        imag = None
        if node.pi is not None:
            pi = node.pi
            imag = DataRef(pi.offset, count * pi.stored_dtype.itemsize, pi.stored_dtype,
                           pi.data_type)  # fmt: skip
        data = self.values(node.dtype, (count,), real, imag, f"{path}.data")
        ir = self.array(node.ir.stored_dtype, (node.ir.count,), self.src.storage(node.ir),
                        f"{path}.ir")  # fmt: skip
        jc = self.array(node.jc.stored_dtype, (node.jc.count,), self.src.storage(node.jc),
                        f"{path}.jc")  # fmt: skip
        return SparseLeaf(node.dims, node.matlab_class, data, ir, jc, node.is_complex)


def _char_value(value: Any) -> Any:
    arr = np.asarray(value, dtype=object)
    if arr.size == 1:
        return str(arr.reshape(-1)[0])
    if arr.size == 0 and arr.ndim <= 1:
        return ""
    return arr


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
            return CharLeaf(_char_value(value), codes, m.dims)
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
