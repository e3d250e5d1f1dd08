"""One reader per file format, over the fetch layer: what a file holds, as layouts and trees
of nodes."""

from __future__ import annotations

from npystore.fetch import RangeReader
from npystore.formats.sniff import PREFIX_SIZE

__all__ = ["read_prefix"]


def read_prefix(reader: RangeReader) -> bytes:
    """The object's first :data:`~npystore.formats.sniff.PREFIX_SIZE` (128) bytes, fewer for
    a smaller object: every magic :func:`~npystore.formats.sniff.sniff` looks for, and the
    whole header of most ``.npy`` files (numpy pads headers so that the data starts at a
    multiple of 64 bytes; for every non-structured dtype the header ends at byte 128, so this
    read holds exactly the header and no data; longer headers, structured dtypes, take one
    more read of exactly the rest)."""
    return reader.read(0, min(reader.size, PREFIX_SIZE))
