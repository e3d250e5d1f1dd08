"""The one loop that runs a pure parser until the bytes it was given are enough.

A parser in :mod:`npystore.formats` gets only the bytes its caller read; when they stop
short it raises :class:`~npystore.formats.need.NeedMoreBytes` naming the range it needs.
:func:`parse_with_more` calls the parser, hands each such request to the caller's ``more``,
which reads the range and returns the parser's next input (a window moved to the range, a
piece added to an ``extra`` mapping, an inflated prefix grown), and calls the parser
again, at most :data:`MAX_ROUNDS` times.

Used for the ZIP end records and central directory (:mod:`npystore.files.zip`) and for
MAT v5 headers and variables (:mod:`npystore.files.mat.v5`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from npystore.errors import FormatError
from npystore.formats.need import NeedMoreBytes

__all__ = ["MAX_ROUNDS", "parse_with_more"]

#: Most parser calls for one parse: a guard against a parser that keeps asking. A MAT v5
#: variable larger than the first read, with its metadata scattered between numeric data,
#: asks once per piece; a ZIP directory asks at most twice.
MAX_ROUNDS: Final = 100_000

_In = TypeVar("_In")
_Out = TypeVar("_Out")


def parse_with_more(
    parse: Callable[[_In], _Out],
    more: Callable[[_In, NeedMoreBytes], _In],
    first: _In,
    *,
    source: str,
    limit: int = MAX_ROUNDS,
) -> _Out:
    """Run ``parse`` from ``first``, giving it what it asks for, until it returns.

    Parameters
    ----------
    parse : callable
        ``parse(data)``: the parser on its current input; it returns the result or raises
        :class:`~npystore.formats.need.NeedMoreBytes`.
    more : callable
        ``more(data, need)``: read what ``need`` names and return the next input. It may
        raise (a range too large to read, a stream that ended first).
    first : object
        The first input (the bytes read before, or an empty mapping of pieces).
    source : str
        What is being parsed (URL, and member or variable), for the message.
    limit : int
        Most calls of ``parse``; :data:`MAX_ROUNDS` unless a test wants fewer.

    Returns
    -------
    object
        What ``parse`` returned.

    Raises
    ------
    FormatError
        ``parse`` still asked for more bytes after ``limit`` calls.
    """
    data = first
    for round_ in range(1, limit + 1):
        try:
            return parse(data)
        except NeedMoreBytes as exc:
            need = exc
        if round_ == limit:
            break
        data = more(data, need)  # outside the except: its errors do not chain to ``need``
    raise FormatError(
        f"{source}: too many metadata pieces (the parser still asks for more bytes after "
        f"{limit} rounds)"
    )
