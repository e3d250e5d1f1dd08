"""The one "read more bytes" signal of npystore's pure parsers.

A parser in :mod:`npystore.formats` gets only the bytes its caller read. When they stop
short of a record, it raises :class:`NeedMoreBytes` naming the range it needs; the caller
reads that range and calls it again (the loop is :func:`npystore.read.drive.parse_with_more`).
The ZIP directory (:mod:`npystore.formats.zipdir`) and the MAT-file parsers
(:mod:`npystore.formats.mat5`, :mod:`npystore.formats.mat4`) raise it.
"""

from __future__ import annotations

__all__ = ["NeedMoreBytes"]


class NeedMoreBytes(Exception):
    """The bytes passed in stop short of a record: read ``needed`` bytes at ``offset``.

    Not a :class:`~npystore.errors.FormatError`; the file may be fine. Raised only for
    ranges inside the file (for a MAT-file element read inflated: inside the inflated
    element), so a retry with that range does not ask for it again (it may ask for a later
    one: a ZIP directory never does, a MAT-file element's scattered metadata may).

    Attributes
    ----------
    offset : int
        Absolute offset to read from (for a ZIP local header: its local header offset; for
        an inflated element: the offset in the inflated bytes).
    needed : int
        Total number of bytes needed from ``offset``.
    """

    def __init__(self, message: str, *, offset: int, needed: int) -> None:
        super().__init__(message)
        self.offset = offset
        self.needed = needed
