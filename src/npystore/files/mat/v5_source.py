"""The bytes of one MAT v5 variable's address space (part of :mod:`npystore.files.mat.v5`):
the file itself for an uncompressed element, the inflated zlib stream of a miCOMPRESSED
one.

:class:`ElementSource` learns a compressed element's stream (its sizes and Adler-32),
inflates it whole once or a prefix that grows by doubling, serves byte ranges of the
address space, and tells where each leaf's values are as layout storage: byte ranges of
the file (:class:`~npystore.read.layout.RawExtent`), ranges of the zlib stream
(:class:`~npystore.read.layout.DeflatedExtent`), or the bytes themselves when they were
read with the variable (:class:`~npystore.read.layout.InlineExtent`: small values; in a
tree read at once, every value).
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.files.mat.tree import EAGER_BYTES
from npystore.formats import deflate
from npystore.formats.mat5 import DataRef, NeedMoreBytes, VariableEntry
from npystore.formats.zlib_whole import inflate_zlib
from npystore.read.inflate import inflate_into, inflate_range
from npystore.read.layout import (
    DeflatedExtent,
    DeflatedMember,
    Handover,
    InlineExtent,
    RawExtent,
    Storage,
)
from npystore.read.slot import IndexSlot

__all__ = ["HEAD_BYTES", "ElementSource", "inflate_prefix", "mat5_pair"]

#: Bytes of an element (or of a zlib stream) read for its listing.
HEAD_BYTES: Final = 4096


class ElementSource:
    """The bytes of one variable's address space: the file, or its inflated zlib stream."""

    def __init__(
        self, reader: RangeReader, entry: VariableEntry, name: str, order: str, *,
        inline: bool = False,
    ) -> None:  # fmt: skip
        self.reader = reader
        self.entry = entry
        self.name = name
        self.order = order
        #: a tree read at once (``load``): every value whose bytes are in memory is held
        #: in its layout (:class:`InlineExtent`) whatever its size
        self.inline = inline
        #: an uncompressed element's bytes, when it was read whole, and its offset
        self.raw: memoryview | None = None
        self.raw_base = 0
        #: ``raw`` writable, when it was read for this tree alone (``inline``): its values
        #: are handed over to the load (:class:`~npystore.read.layout.Handover`)
        self.owned: memoryview | None = None
        self.where = f"{reader.url}:{name}" if name else reader.url
        self.member: DeflatedMember | None = None
        self.slot = IndexSlot()
        #: the inflated element, when inflated whole (read-only: values may view it)
        self.whole: memoryview | None = None
        self.prefix = b""
        #: the zlib stream, when the element was read already (see open_stream)
        self.held: memoryview | None = None

    # -- compressed ----------------------------------------------------------------------

    def open_stream(
        self,
        head: bytes | memoryview | None = None,
        element: bytes | memoryview | None = None,
    ) -> None:
        """Learn the zlib stream's sizes and checksum: from ``element`` (the whole element,
        when it was read already), else two small reads, concurrent."""
        e = self.entry
        if e.data_size < 2 + 4:
            raise FormatError(
                f"{self.where}: miCOMPRESSED element at offset {e.offset} holds {e.data_size} "
                "bytes, expected a zlib stream (2-byte header, data, 4-byte Adler-32)"
            )
        trailer: bytes | memoryview
        if element is not None:
            data = memoryview(element)[e.data_offset - e.offset : e.end - e.offset]
            trailer, head = data[-4:], data[:HEAD_BYTES]
            self.held = data
        else:
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
        inner = inflate_prefix(head, 8, self.where)
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
            sized_by=f"the miMATRIX tag inside the miCOMPRESSED element at offset {e.offset}",
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

    def more(self, prefix: bytes, need: NeedMoreBytes) -> bytes:
        """``prefix`` grown to cover what ``need`` asks for (for
        :func:`~npystore.read.drive.parse_with_more`).

        Raises
        ------
        FormatError
            The stream ends first.
        """
        before = len(prefix)
        self.grow(need.offset + need.needed)
        if len(self.prefix) <= before:
            raise FormatError(
                f"{self.where}: the element needs inflated bytes up to "
                f"{need.offset + need.needed}, the stream has {before}"
            )
        return self.prefix

    def inflate_whole(self) -> None:
        """Inflate the whole stream once, checking its size and Adler-32."""
        member = self.member
        if member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        if self.held is not None:  # one call, into one buffer (Adler-32 checked)
            inflated = inflate_zlib(
                self.held, member.uncompressed_size, source=self.where,
                what=f"the zlib stream of the miCOMPRESSED element at offset {self.entry.offset}",
                sized_by=member.sized_by,
            )  # fmt: skip
        else:
            inflated = bytearray(member.uncompressed_size)
            inflate_into(self.reader, member, memoryview(inflated))
        self.whole = memoryview(inflated).toreadonly()  # no copy
        self.slot.keep(self.whole)

    # -- ranges ----------------------------------------------------------------------------

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the address space."""
        if not self.entry.compressed:
            raw = self._raw(start, stop)
            return self.reader.read(start, stop) if raw is None else bytes(raw)
        if self.whole is not None:
            return bytes(self.whole[start:stop])
        if stop <= len(self.prefix):
            return self.prefix[start:stop]
        if self.member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        return inflate_range(self.reader, self.member, self.slot, start, stop)

    def storage(self, ref: DataRef) -> Storage:
        """Where a leaf's values are, as layout storage."""
        if not self.entry.compressed:
            raw = self._raw(ref.offset, ref.end) if self.inline else None
            if raw is None:
                return RawExtent(ref.offset, ref.nbytes)
            owned = self.owned
            if owned is not None:  # the same bytes as raw, this tree's alone
                base = self.raw_base
                return InlineExtent(owned[ref.offset - base : ref.end - base], Handover())
            return InlineExtent(raw.toreadonly())  # a tree read at once
        if self.whole is not None and (self.inline or ref.nbytes <= EAGER_BYTES):
            held = self.whole[ref.offset : ref.end]  # a tree read at once: not pickled
            return InlineExtent(held if self.inline else bytes(held))
        if self.member is None:  # pragma: no cover
            raise RuntimeError("stream not opened")
        # larger values stay in the stream: a graph holds where they are, not the bytes
        # (read from the inflated bytes kept in this process, re-inflated by a worker)
        return DeflatedExtent(self.member, ref.offset, ref.nbytes, self.slot)

    def _raw(self, start: int, stop: int) -> memoryview | None:
        """Bytes ``[start, stop)`` of the file from the element read whole, or None."""
        raw, base = self.raw, self.raw_base
        if raw is None or start < base or stop - base > len(raw):
            return None
        return raw[start - base : stop - base]  # no copy


def mat5_pair(order: str) -> struct.Struct:
    """The ``struct.Struct`` of two uint32 in the file's byte order."""
    return _PAIRS[order]


_PAIRS: Final = {o: struct.Struct(f"{o}II") for o in "<>"}


def inflate_prefix(data: bytes | memoryview, want: int, where: str) -> bytes:
    d = zlib.decompressobj(15)
    try:
        return d.decompress(data, max(want, 1))
    except zlib.error as exc:
        raise FormatError(f"{where}: corrupt miCOMPRESSED data: {exc}") from None
