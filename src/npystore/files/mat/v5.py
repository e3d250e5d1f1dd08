"""MAT v5 (``-v6``, ``-v7``) files through the fetch layer: listings and value trees (v4:
:mod:`npystore.files.mat.v4`).

Reading a Level-5 file (the parser is :mod:`npystore.formats.mat5`):

1. The top-level element tags are walked in windows (256 KiB from byte 128, then at each
   tag that was not in a window: 64 KiB after a large element, doubling up to 4 MiB while
   the elements are small): one request for a file of small variables, one per large
   variable otherwise. The windows are kept.
2. Each variable's header (name, class, dims) is read from the window its tag is in, in
   the common layout by :func:`~npystore.formats.mat5.quick_header` (compressed ones:
   their first 512 bytes inflated); the others' first bytes are fetched in one concurrent
   batch and parsed the generic way. One tuple per variable is kept (a file may have
   hundreds of thousands); :meth:`Mat5File.infos` makes the listing when asked, and
   :meth:`Mat5File.loaded` decodes a small variable straight from its window.
3. A variable's tree (:meth:`Mat5File.node`) reads its element without numeric data:
   uncompressed numeric values become byte ranges of the file (:class:`RawExtent`);
   compressed variables of up to :data:`INFLATE_WHOLE` bytes are inflated once (Adler-32
   checked) and parsed in memory: leaves of at most :data:`~npystore.files.mat.tree.EAGER_BYTES`
   are held as values (those inside cells and structs decoded while parsing), larger ones
   as ranges of the zlib stream (:class:`DeflatedExtent`, read from the inflated bytes kept
   in this process, so a dask graph never carries them) (as are those of
   uncompressed variables of at most :data:`READ_WHOLE` bytes); larger ones are parsed
   from an inflated prefix that grows by doubling, and their numeric leaves stay inside
   the zlib stream (:class:`DeflatedExtent`: read from a checkpoint index, or
   sequentially, on demand).
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable, Collection
from typing import Any, Final, TypeAlias, TypeVar

import numpy as np

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.files.mat.tree import (
    EAGER_BYTES,
    MatInfo,
    MatNode,
    ValueLeaf,
    row_leaf,
)
from npystore.files.mat.v5_build import Builder
from npystore.files.mat.v5_source import HEAD_BYTES, ElementSource, inflate_prefix, mat5_pair
from npystore.formats import mat5
from npystore.formats.mat5 import MatHeader, NeedMoreBytes, VariableEntry
from npystore.read.drive import parse_with_more

__all__ = ["INFLATE_WHOLE", "Mat5File", "mat5_pair"]

#: First window of tags read after the header.
FIRST_WINDOW: Final = 256 * 2**10
#: Later windows of tags: this size after a large element, doubling up to MAX_WINDOW
#: while the elements are small.
WINDOW: Final = 64 * 2**10
MAX_WINDOW: Final = 4 * 2**20
#: Inflated bytes of a compressed variable enough for its header in the common layout.
QUICK_HEADER_BYTES: Final = 512
#: Uncompressed elements up to this size are read whole to parse their tree.
READ_WHOLE: Final = 8 * 2**20
#: Compressed variables inflating to at most this many bytes are inflated whole once.
INFLATE_WHOLE: Final = 16 * 2**20
#: Compressed elements up to this size are read whole to read their tree (one read; the
#: stream inflated by one call when it is inflated whole).
READ_STREAM_WHOLE: Final = 2 * 2**20
#: A compressed header being parsed: the zlib stream read so far and its inflated prefix.
_Inflating: TypeAlias = tuple[bytes | memoryview, bytes]
_T = TypeVar("_T")


_CHAR: Final = 4  # the char array class (cells, structs, objects: the classes below)
_SPARSE: Final = 5
_NUMERIC_FIRST, _NUMERIC_LAST = 6, 15  # the numeric classes, double to uint64


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
    char_errors : {"strict", "replace"}
        Invalid UTF-8 in char arrays: refused, or read as U+FFFD.
    """

    version = "5"

    def __init__(
        self,
        reader: RangeReader,
        header: MatHeader,
        *,
        max_depth: int = 64,
        char_errors: mat5.CharErrors = "strict",
    ) -> None:
        self.reader = reader
        self.header = header
        self.source = reader.url
        self.header_text = header.text
        self.max_depth = max_depth
        self.char_errors: mat5.CharErrors = char_errors
        self._windows = _Windows()
        #: name -> (offset, total size, compressed, array flags, dims, header size) of its
        #: element (a file may have hundreds of thousands: one tuple each; the header size
        #: is where the data subelement starts); flags -1 for headers read the generic
        #: way, which are in ``_generic``
        self._vars: dict[str, tuple[int, int, bool, int, tuple[int, ...], int]] = {}
        self._generic: dict[str, mat5.MatrixHeader] = {}
        self._heads: dict[int, bytes] = {}  # first bytes of elements outside the windows
        self._scan()

    def _scan(self) -> None:
        """One pass over the top-level tags, reading each variable's header from the window
        its tag is in when it is there in the common layout; the other headers afterwards
        (their first bytes in one concurrent batch), parsed the generic way."""
        r, h = self.reader, self.header
        order = h.byte_order
        slow: list[VariableEntry] = []
        pos: int | None = h.data_start
        size = FIRST_WINDOW
        while pos is not None and pos < r.size:
            window = r.read(pos, min(r.size, pos + size))
            self._windows.add(pos, window)
            found, after = mat5.scan_elements(
                window,
                pos,
                r.size,
                order,
                source=r.url,
                subsys_offset=h.subsys_offset,
            )
            view = memoryview(window)
            for e in found:
                if e.is_subsystem:
                    continue
                if e.compressed:
                    header = self._quick_header(e, view, pos)
                    start = 0  # offsets in the inflated element
                else:
                    start = e.offset - pos
                    header = mat5.quick_header(view, start, start + e.total_size, order)
                if header is None:
                    slow.append(e)
                else:
                    self._add(e, header, header.next - start)
            # many small elements: larger windows (fewer requests); a big one: start over
            dense = after is not None and after - (pos + len(window)) < WINDOW
            size = min(2 * size, MAX_WINDOW) if dense and len(found) > 1 else WINDOW
            pos = after
        if not slow:
            return
        heads = {e.offset: self._head_view(e) for e in slow}
        missing = [e for e in slow if heads[e.offset] is None]
        if missing:
            ranges = [_head_range(e) for e in missing]
            for e, data in zip(missing, r.read_many(ranges), strict=True):
                heads[e.offset] = self._heads[e.offset] = data
        for e in slow:
            self._add(e, self._matrix_header(e, heads[e.offset] or b""))
        self._vars = dict(sorted(self._vars.items(), key=lambda item: item[1][0]))

    def _add(
        self, e: VariableEntry, header: mat5.MatrixHeader | mat5.QuickHeader, size: int = 0
    ) -> None:
        """List a variable; ``size``: bytes of its quick header (its data's offset)."""
        name = header.name
        if name in self._vars:
            offsets = sorted((self._vars[name][0], e.offset))
            raise FormatError(f"{self.source}: variable {name!r} appears twice (offsets "
                              f"{offsets[0]} and {offsets[1]})")  # fmt: skip
        if isinstance(header, mat5.QuickHeader):
            flags = header.flags
        else:
            flags = -1
            self._generic[name] = header
        self._vars[name] = e.offset, e.total_size, e.compressed, flags, header.dims, size

    def _entry(self, name: str) -> VariableEntry:
        """The element of a variable; KeyError naming it when there is none."""
        if name not in self._vars:
            raise KeyError(f"{self.source}: no variable {name!r}")
        offset, total, compressed = self._vars[name][:3]
        mdtype = mat5.MI_COMPRESSED if compressed else mat5.MI_MATRIX
        return VariableEntry(offset, total, compressed, mdtype)

    def _head_view(self, e: VariableEntry) -> memoryview | bytes | None:
        """The first bytes of an element (of a compressed one's zlib stream)."""
        got = self._windows.view(*_head_range(e))
        return got if got is not None else self._heads.get(e.offset)

    def _quick_header(
        self, e: VariableEntry, window: memoryview, base: int
    ) -> mat5.QuickHeader | None:
        """The header by the fast path (:func:`~npystore.formats.mat5.quick_header`) from
        the window holding the element's tag (``window[0]`` at offset ``base``), or None to
        parse it the generic way."""
        order = self.header.byte_order
        if not e.compressed:
            return mat5.quick_header(window, e.offset - base, e.offset + e.total_size - base,
                                     order)  # fmt: skip
        start = e.offset + 8 - base
        if start >= len(window):
            return None
        stream = window[start : min(len(window), start + e.total_size - 8)]
        try:
            inflated = zlib.decompressobj(15).decompress(stream, QUICK_HEADER_BYTES)
        except zlib.error:
            return None  # the generic path reports it
        if len(inflated) < 8:
            return None
        mdtype, nbytes = mat5_pair(order).unpack_from(inflated, 0)
        if mdtype != mat5.MI_MATRIX:
            return None
        return mat5.quick_header(inflated, 0, 8 + nbytes, order)

    def _matrix_header(self, e: VariableEntry, head: memoryview | bytes) -> mat5.MatrixHeader:
        r, order = self.reader, self.header.byte_order
        if not e.compressed:
            return _in_pieces(
                lambda extra: mat5.parse_matrix_header(
                    head, e.offset, order, source=r.url, extra=extra
                ),
                r, e.end, HEAD_BYTES, f"{r.url}: element at offset {e.offset}",
            )  # fmt: skip
        where = f"{r.url}: miCOMPRESSED element at offset {e.offset}"

        def inflate_more(state: _Inflating, more: NeedMoreBytes) -> _Inflating:
            """More of the stream read (4 times as much) and inflated (at least doubled)."""
            stream, inflated = state
            want = more.offset + more.needed
            if len(stream) < e.data_size:
                stream = r.read(e.data_offset, min(e.end, e.data_offset + 4 * len(stream)))
            before = len(inflated)
            inflated = inflate_prefix(stream, max(want, 2 * before), where)
            if len(inflated) <= before:
                raise FormatError(
                    f"{where}: the stream ends after {before} bytes, the element needs "
                    f"bytes up to {want}"
                )
            return stream, inflated

        return parse_with_more(
            lambda state: mat5.parse_matrix_header(state[1], 0, order, source=where, inflated=True),
            inflate_more,
            (head, inflate_prefix(head, 1024, where)),
            source=where,
        )

    # -- the backend protocol ----------------------------------------------------------------

    def names(self) -> Collection[str]:
        """The variables' names, in file order: a dict keyed by them (not to be changed),
        which a :class:`~npystore.faces.matfile.MatFile` uses without a copy."""
        return self._vars

    def infos(self) -> dict[str, MatInfo]:
        """The variables, in file order, as ``whos`` lists them (made on each call: the
        :class:`~npystore.faces.matfile.MatFile` keeps them)."""
        infos: dict[str, MatInfo] = {}
        kinds: dict[int, tuple[str, bool, bool, bool]] = {}  # by flags: few distinct
        for name, (_, _, _, flags, dims, _) in self._vars.items():
            kind = kinds.get(flags)
            if kind is None:
                header = (
                    self._generic[name] if flags < 0 else mat5.QuickHeader(name, flags, dims, 0)
                )
                cls = header.matlab_class
                if header.is_sparse:
                    cls = "logical" if header.is_logical else "double"
                kind = cls, header.is_sparse, header.is_complex, header.is_global
                if flags >= 0:
                    kinds[flags] = kind
            infos[name] = MatInfo(name, kind[0], dims, *kind[1:])
        return infos

    def node(self, name: str, *, inline: bool = False) -> MatNode:
        """The tree of one variable (numeric data not read; small values inside cells and
        structs read with the variable when it is read whole: see
        :data:`~npystore.files.mat.tree.EAGER_BYTES`). With ``inline`` (a tree read at
        once, not kept), every value whose bytes were read with the variable is held in
        its layout whatever its size."""
        e = self._entry(name)
        src = ElementSource(self.reader, e, name, self.header.byte_order, inline=inline)
        variable = self._parse(src)
        return Builder(src, self.reader, self.char_errors).build(variable.value, name)

    def loaded(self, name: str) -> MatNode:
        """The variable's tree to be read at once: a small numeric or char variable decoded
        straight from the bytes read at open (:class:`~npystore.files.mat.tree.ValueLeaf`,
        :class:`~npystore.files.mat.tree.CharLeaf`), else its :meth:`node` with the values
        read with the variable held in it (``inline``: no second read of them)."""
        listed = self._vars.get(name)
        if listed is None:
            raise KeyError(f"{self.source}: no variable {name!r}")
        quick = self._quick(name, listed)
        return self.node(name, inline=True) if quick is None else quick

    def _quick(
        self, name: str, listed: tuple[int, int, bool, int, tuple[int, ...], int]
    ) -> MatNode | None:
        """A small numeric or char variable decoded from the bytes read at open, or None."""
        offset, total, compressed, flags, dims, head = listed
        if flags < 0 or (flags & 0xFF) < _CHAR or (flags & 0xFF) == _SPARSE:
            return None  # an unusual header, a container, an object or sparse: its tree
        order = self.header.byte_order
        if compressed:
            stream = self._windows.view(offset + 8, offset + total)
            inflated = None if stream is None else _inflate_small(stream)
            if inflated is None or len(inflated) < 8:
                return None
            mdtype, nbytes = mat5_pair(order).unpack_from(inflated, 0)
            if mdtype != mat5.MI_MATRIX or 8 + nbytes != len(inflated):
                return None
            buf: memoryview | bytes = inflated
            q = 0
        else:
            found = self._windows.find(offset, offset + total)
            if found is None:
                return None
            buf, base = found
            q = offset - base  # the header was read from this window: its offsets agree
        stop = q + (len(buf) if compressed else total)
        header = mat5.QuickHeader(name, flags, dims, q + head)  # as read at open
        if flags & 0xFF == _CHAR:
            chars = mat5.quick_chars(buf, q, stop, order, header)
            if isinstance(chars, str):
                return row_leaf(chars)
            return None if chars is None else Builder.chars(chars)
        value = mat5.quick_numeric(buf, q, stop, order, stop - q << 3, header)
        return None if value is None else ValueLeaf(value)

    def _parse(self, src: ElementSource) -> mat5.MatVariable:
        e, order, r = src.entry, self.header.byte_order, self.reader
        if not e.compressed:
            flags = self._vars[src.name][3]
            # a numeric matrix has no tree below it: its header is enough (its values are
            # read straight into the output), unless the open read it already
            whole = e.total_size <= READ_WHOLE
            element: memoryview | bytes | None = (
                self._windows.view(e.offset, e.end) if whole else None
            )
            if element is None and _NUMERIC_FIRST <= flags & 0xFF <= _NUMERIC_LAST:
                whole = False
                element = r.read(e.offset, min(e.end, e.offset + HEAD_BYTES))
            elif element is None and whole and src.inline:
                # read for this load alone: its values are handed out as they are (a read
                # into bytes, then a copy of each value, took twice the time of scipy's)
                own = np.empty(e.total_size, np.uint8)
                r.readinto_many([(e.offset, memoryview(own.data))])
                src.owned = memoryview(own.data)
                element = src.owned.toreadonly()
            elif element is None:
                element = r.read(e.offset, min(e.end, e.offset + READ_WHOLE))
            if whole:
                src.raw, src.raw_base = memoryview(element), e.offset
            return _in_pieces(
                lambda extra: mat5.parse_variable(
                    element, e.offset, order, source=r.url, max_depth=self.max_depth,
                    extra=extra, decode_below=EAGER_BYTES if whole else 0,
                ),
                r, e.end, WINDOW, src.where,
            )  # fmt: skip
        read: memoryview | bytes | None = self._windows.view(e.offset, e.end)
        if read is None and e.total_size <= READ_STREAM_WHOLE:
            read = r.read(e.offset, e.end)  # one read, inflated by one call
        src.open_stream(self._head_view(e), read)
        member = src.member
        if member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        if member.uncompressed_size <= INFLATE_WHOLE:
            src.inflate_whole()
            data = b"" if src.whole is None else src.whole
            return mat5.parse_variable(
                data, 0, order, source=src.where, max_depth=self.max_depth, inflated=True,
                decode_below=EAGER_BYTES,
            )  # fmt: skip
        src.grow(HEAD_BYTES * 16)
        return parse_with_more(
            lambda prefix: mat5.parse_variable(
                prefix, 0, order, source=src.where, max_depth=self.max_depth, inflated=True
            ),
            src.more,
            src.prefix,
            source=src.where,
        )

    def close(self) -> None:
        """Nothing to release (reads are stateless)."""


class _Windows:
    """The windows of the file read while scanning the tags, found by offset."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._data: list[memoryview] = []

    def __reduce__(self) -> tuple[Any, ...]:
        # memoryviews do not pickle: the bytes they view do
        return (_windows_of, (self._starts, [bytes(d.obj) for d in self._data]))

    def add(self, start: int, data: bytes) -> None:
        """Keep ``data``, the bytes from ``start`` (windows come in increasing order)."""
        self._starts.append(start)
        self._data.append(memoryview(data))

    def find(self, start: int, stop: int) -> tuple[memoryview, int] | None:
        """The window holding bytes ``[start, stop)`` and its offset, or None."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0 or stop - self._starts[i] > len(self._data[i]):
            return None
        return self._data[i], self._starts[i]

    def view(self, start: int, stop: int) -> memoryview | None:
        """Bytes ``[start, stop)`` without a copy, if one window holds them."""
        found = self.find(start, stop)
        if found is None:
            return None
        data, base = found
        return data[start - base : stop - base]


def _windows_of(starts: list[int], data: list[bytes]) -> _Windows:
    """Unpickle :class:`_Windows`."""
    windows = _Windows()
    for start, window in zip(starts, data, strict=True):
        windows.add(start, window)
    return windows


def _in_pieces(
    parse: Callable[[dict[int, bytes]], _T], reader: RangeReader, end: int, least: int, where: str
) -> _T:
    """``parse(extra)`` of an uncompressed element, run by
    :func:`~npystore.read.drive.parse_with_more`: each piece it asks for (at least ``least``
    bytes, not past the element's ``end``) read into ``extra``."""

    def more(extra: dict[int, bytes], need: NeedMoreBytes) -> dict[int, bytes]:
        extra[need.offset] = reader.read(
            need.offset, min(end, need.offset + max(need.needed, least))
        )
        return extra

    first: dict[int, bytes] = {}
    return parse_with_more(parse, more, first, source=where)


def _head_range(e: VariableEntry) -> tuple[int, int]:
    """The first bytes of an element, or of a compressed one's zlib stream, read to list it."""
    start = e.offset + 8 if e.compressed else e.offset
    return start, min(e.offset + e.total_size, start + HEAD_BYTES)


def _inflate_small(stream: memoryview | bytes) -> bytes | None:
    """A whole small zlib stream inflated (Adler-32 checked by zlib), or None when it is
    not one: malformed (the generic path reports why), or more than INFLATE_WHOLE bytes."""
    d = zlib.decompressobj(15)
    try:
        out = d.decompress(stream, INFLATE_WHOLE)
    except zlib.error:
        return None
    if not d.eof or d.unused_data:
        return None
    return out
