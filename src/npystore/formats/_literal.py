"""A safe parser for the Python literals that appear in NumPy ``.npy`` headers.

A ``.npy`` header is the ``repr`` of a small dict such as
``{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }``. NumPy reads it back with
:func:`ast.literal_eval`, which is safe from code execution but not from hostile input: deep
nesting can exhaust the C stack or raise :class:`RecursionError`, and huge integer literals cost
quadratic time. This module parses the subset of literal syntax that NumPy (including the
Python 2 era) ever writes, with explicit limits, and raises nothing but
:class:`~npystore.errors.FormatError` on malformed input.

The grammar::

    value   := dict | list | tuple | paren | string | integer | 'True' | 'False' | 'None'
    dict    := '{' [ value ':' value ( ',' value ':' value )* [','] ] '}'
    list    := '[' [ value ( ',' value )* [','] ] ']'
    tuple   := '(' ')' | '(' value ',' ')' | '(' value ( ',' value )+ [','] ')'
    paren   := '(' value ')'                       # just the value, as in Python
    string  := ['u' | 'U'] ( "'" ... "'" | '"' ... '"' )   # one line, no triple quotes
    integer := ['+' | '-'] digits ['L' | 'l']       # decimal only, no leading zeros

Whitespace (space, tab, ``\\n``, ``\\r``, ``\\f``, ``\\v``) may surround any token. The parser
is iterative, so the nesting limit, not the interpreter's stack, bounds the depth, and it runs in
time linear in the length of the text.
"""

from __future__ import annotations

import ast
import re
from typing import TypeAlias, cast

from npystore.errors import FormatError

__all__ = ["LiteralKey", "LiteralValue", "parse_literal"]

LiteralKey: TypeAlias = "str | int | bool | tuple[LiteralKey, ...] | None"
"""A parsed value that can be a dict key: a scalar or a tuple of keys."""

LiteralValue: TypeAlias = (
    "dict[LiteralKey, LiteralValue] | list[LiteralValue] | tuple[LiteralValue, ...]"
    " | str | int | bool | None"
)
"""A value returned by :func:`parse_literal`, nested to any depth up to the limit."""

_SPACES = " \t\n\r\f\v"
_WHITESPACE = re.compile(f"[{_SPACES}]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Everything that looks like the start of a number literal, so that floats, hex, underscores
# and the like are reported as one unsupported token rather than as stray characters.
_NUMBER = re.compile(r"[+-]?[0-9][0-9A-Za-z_.]*")
_INTEGER = re.compile(r"([+-]?)([0-9]+)[lL]?")
_VALID_ESCAPE = "\n\r\\'\"abfnrtv01234567xNuU"
# The body of a string up to (not including) the closing quote, a bad escape or a line break.
# The alternatives are disjoint, so matching never backtracks: linear time.
_STRING_BODY = {
    quote: re.compile(rf"(?:[^\\\r\n{quote}]+|\\(?:\r\n|[{re.escape(_VALID_ESCAPE)}]))*")
    for quote in "'\""
}
# Bodies that ast.literal_eval would return unchanged: no escapes, no NUL, no lone surrogates.
_PLAIN_BODY = re.compile("[^\\\\\x00\ud800-\udfff]*")
_CONSTANTS: dict[str, LiteralValue] = {"True": True, "False": False, "None": None}
_CLOSERS = {"[": "]", "(": ")", "{": "}"}
_MAX_SHOWN = 24


def parse_literal(text: str, *, max_depth: int = 64, max_int_digits: int = 32) -> LiteralValue:
    """Parse the Python literal in ``text`` without evaluating any code.

    Parameters
    ----------
    text : str
        The literal, for example the decoded header of a ``.npy`` file. Whitespace around it
        (including the padding and newline that end a header) is ignored.
    max_depth : int, optional
        The largest number of brackets that may be open at once (dicts, lists, tuples and
        parenthesised values all count). Keep it modest: Python's own ``hash``, ``==`` and
        ``repr`` recurse into what is returned.
    max_int_digits : int, optional
        The largest number of digits an integer literal may have.

    Returns
    -------
    LiteralValue
        The parsed value: a dict, list, tuple, str, int, bool or None, nested. Equal to what
        :func:`ast.literal_eval` returns for the same text, except that Python 2 long literals
        such as ``3L`` are accepted (as ``int``).

    Raises
    ------
    FormatError
        If ``text`` is not a single literal of the supported grammar, nests deeper than
        ``max_depth``, has an integer longer than ``max_int_digits`` digits, or has a dict key
        that is not hashable. The message names what was found and its character position.
    ValueError
        If ``max_depth`` is negative or ``max_int_digits`` is less than one.

    Examples
    --------
    >>> parse_literal("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }")
    {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4)}
    >>> parse_literal("(5L,)")
    (5,)
    """
    if max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, got {max_depth}")
    if max_int_digits < 1:
        raise ValueError(f"max_int_digits must be >= 1, got {max_int_digits}")
    return _Parser(text, max_depth, max_int_digits).parse()


class _Frame:
    """A container whose opening bracket has been read and whose closing one has not."""

    __slots__ = ("comma", "items", "key", "mapping", "opener", "start", "want_key")

    def __init__(self, opener: str, start: int) -> None:
        self.opener = opener
        self.start = start
        self.items: list[LiteralValue] = []
        self.mapping: dict[LiteralKey, LiteralValue] = {}
        self.want_key = True
        self.key: LiteralKey = None
        self.comma = False

    def finish(self) -> LiteralValue:
        """Return the value of the container once its closing bracket has been read."""
        if self.opener == "{":
            return self.mapping
        if self.opener == "[":
            return self.items
        if len(self.items) == 1 and not self.comma:
            return self.items[0]  # "(a)" is just a
        return tuple(self.items)


class _Parser:
    """One parse of one text; see :func:`parse_literal`."""

    __slots__ = ("max_depth", "max_int_digits", "n", "text")

    def __init__(self, text: str, max_depth: int, max_int_digits: int) -> None:
        self.text = text
        self.n = len(text)
        self.max_depth = max_depth
        self.max_int_digits = max_int_digits

    def parse(self) -> LiteralValue:
        """Parse the whole text as one value and return it."""
        text = self.text
        stack: list[_Frame] = []
        pos = self._skip(0)
        while True:
            # Read one value at ``pos``, or open a container and go round for its first item.
            start = pos
            opener = text[pos] if pos < self.n else ""
            closer = _CLOSERS.get(opener)
            value: LiteralValue
            if closer is not None:
                if len(stack) >= self.max_depth:
                    raise FormatError(
                        f"nesting deeper than {self.max_depth} levels at position {pos}"
                    )
                pos = self._skip(pos + 1)
                if not text.startswith(closer, pos):
                    stack.append(_Frame(opener, start))
                    continue
                pos += 1
                value = {} if opener == "{" else [] if opener == "[" else ()
            else:
                value, pos = self._scalar(pos, stack)
            # Attach the value to the innermost open container, closing containers as it goes.
            while True:
                pos = self._skip(pos)
                if not stack:
                    if pos < self.n:
                        raise self._error("end of input", pos, stack)
                    return value
                frame = stack[-1]
                closer = _CLOSERS[frame.opener]
                found = text[pos] if pos < self.n else ""
                if frame.opener == "{" and frame.want_key:
                    frame.key = self._key(value, start)
                    frame.want_key = False
                    if found != ":":
                        raise self._error("':'", pos, stack)
                    pos = self._skip(pos + 1)
                    break
                if frame.opener == "{":
                    frame.mapping[frame.key] = value
                    frame.want_key = True
                else:
                    frame.items.append(value)
                if found == ",":
                    frame.comma = True
                    pos = self._skip(pos + 1)
                    if not text.startswith(closer, pos):
                        break
                elif found != closer:
                    raise self._error(f"',' or {closer!r}", pos, stack)
                stack.pop()
                pos += 1
                start = frame.start
                value = frame.finish()

    def _skip(self, pos: int) -> int:
        """Return the position of the first non-whitespace character at or after ``pos``."""
        if pos < self.n and self.text[pos] not in _SPACES:
            return pos  # the common case, without the cost of a regex call
        match = _WHITESPACE.match(self.text, pos)
        return pos if match is None else match.end()

    def _scalar(self, pos: int, stack: list[_Frame]) -> tuple[LiteralValue, int]:
        """Parse a string, integer or constant at ``pos``; return it and the position after."""
        text = self.text
        if pos >= self.n:
            raise self._error("a value", pos, stack)
        char = text[pos]
        if char in "'\"":
            return self._string(pos, pos)
        name = _NAME.match(text, pos)
        if name is not None:
            word = name.group()
            end = name.end()
            if end < self.n and text[end] in "'\"":
                if word in ("u", "U"):
                    return self._string(pos, end)
                raise FormatError(
                    f"unsupported string prefix {_shorten(word)!r} at position {pos}"
                    " (only 'u' is allowed)"
                )
            if word in _CONSTANTS:
                return _CONSTANTS[word], end
            raise FormatError(f"unexpected name {_shorten(word)!r} at position {pos}")
        number = _NUMBER.match(text, pos)
        if number is not None:
            return self._integer(number.group(), pos), number.end()
        raise self._error("a value", pos, stack)

    def _integer(self, token: str, pos: int) -> int:
        """Convert a number-like token found at ``pos`` that must be a decimal integer."""
        match = _INTEGER.fullmatch(token)
        if match is None:
            raise FormatError(
                f"unsupported number literal {_shorten(token)!r} at position {pos}"
                " (only decimal integers are allowed)"
            )
        sign, digits = match.groups()
        if len(digits) > self.max_int_digits:
            raise FormatError(
                f"integer literal of {len(digits)} digits at position {pos}"
                f" (at most {self.max_int_digits} allowed)"
            )
        if digits[0] == "0" and digits.strip("0"):
            raise FormatError(
                f"integer literal {_shorten(token)!r} with leading zeros at position {pos}"
            )
        try:
            value = int(digits)
        except ValueError as exc:  # only past sys.get_int_max_str_digits()
            raise FormatError(f"integer literal too long at position {pos}: {exc}") from exc
        return -value if sign == "-" else value

    def _string(self, start: int, quote_pos: int) -> tuple[str, int]:
        """Parse the string literal that starts at ``start`` and whose quote is at ``quote_pos``."""
        text = self.text
        quote = text[quote_pos]
        if text.startswith(quote * 3, quote_pos):
            raise FormatError(f"triple-quoted string at position {start} is not supported")
        body = _STRING_BODY[quote].match(text, quote_pos + 1)
        end = quote_pos + 1 if body is None else body.end()
        if end >= self.n:
            raise FormatError(f"unterminated string starting at position {start}")
        stop = text[end]
        if stop == "\\":
            bad = text[end : end + 2]
            raise FormatError(f"invalid escape sequence {bad!r} at position {end}")
        if stop != quote:
            raise FormatError(
                f"line break at position {end} inside the string starting at position {start}"
            )
        inner = text[quote_pos + 1 : end]
        if _PLAIN_BODY.fullmatch(inner) is not None:
            return inner, end + 1
        # The token is a single, fully scanned string literal with valid escape letters, so
        # literal_eval can only decode it or complain about it (bad \x, \N{...}, NUL, ...).
        token = text[start : end + 1]
        try:
            value = ast.literal_eval(token)
        except Exception as exc:
            raise FormatError(f"invalid string literal at position {start}: {exc}") from exc
        if not isinstance(value, str):
            raise FormatError(f"invalid string literal at position {start}")
        return value, end + 1

    def _key(self, value: LiteralValue, pos: int) -> LiteralKey:
        """Return ``value`` as a dict key, or fail if it is not hashable."""
        try:
            hash(value)
        except (TypeError, RecursionError):
            raise FormatError(
                f"unhashable dict key of type {type(value).__name__} at position {pos}"
            ) from None
        # A hashable parsed value holds no list or dict at any depth, so it is a LiteralKey.
        return cast(LiteralKey, value)

    def _error(self, expected: str, pos: int, stack: list[_Frame]) -> FormatError:
        """Return a FormatError saying what was expected at ``pos`` and what was found."""
        if pos < self.n:
            found = repr(self.text[pos])
        elif stack:
            frame = stack[-1]
            found = f"end of input ({frame.opener!r} at position {frame.start} is not closed)"
        else:
            found = "end of input"
        return FormatError(f"expected {expected} at position {pos}, found {found}")


def _shorten(token: str) -> str:
    """Return ``token``, cut short for an error message if it is long."""
    if len(token) <= _MAX_SHOWN:
        return token
    return token[:_MAX_SHOWN] + "..."
