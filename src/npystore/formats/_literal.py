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
time linear in the length of the text: one regular expression cuts the whole text into tokens,
one loop over them builds the value, each distinct scalar token is converted once (strings
with escapes by the ``unicode_escape`` codec), and character positions are worked out only
for an error message. A megabyte of the densest text (a million tokens) takes 0.1-0.4 s.
"""

from __future__ import annotations

import ast
import gc
import itertools
import re
import sys
from typing import Any, TypeAlias, cast

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
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Everything that looks like the start of a number literal, so that floats, hex, underscores
# and the like are reported as one unsupported token rather than as stray characters.
_NUMBER_TOKEN = r"[+-]?[0-9][0-9A-Za-z_.]*"
_NUMBER = re.compile(_NUMBER_TOKEN)
_INTEGER = re.compile(r"([+-]?)([0-9]+)[lL]?")
_CLOSERS = {"[": "]", "(": ")", "{": "}"}
_OPENER_OF = {closer: opener for opener, closer in _CLOSERS.items()}
_BRACKET_TOKENS = frozenset(_CLOSERS) | frozenset(_OPENER_OF)
_VALID_ESCAPE = "\n\r\\'\"abfnrtv01234567xNuU"


def _string_body(quote: str) -> str:
    """The body of a ``quote`` string up to (not including) the closing quote, a bad escape or
    a line break. Possessive, its alternatives disjoint: linear time, no backtracking."""
    return rf"(?:[^\\\r\n{quote}]++|\\(?:\r\n|[{re.escape(_VALID_ESCAPE)}]))*+"


_STRING_BODY = {quote: re.compile(_string_body(quote)) for quote in "'\""}
# One token after optional whitespace: punctuation, a string literal (not the start of a
# triple-quoted one) up to its closing quote or to where it goes wrong (no closing quote:
# an error, see _string_value), a number-like run, a name, any other single character (an
# error), or the end of the text (an empty token). Every character of the text is in exactly
# one token or the whitespace before one, so the tokens cover the text; no alternative
# backtracks or fails after scanning, so tokenizing is linear.
_TOKEN = re.compile(
    f"[{_SPACES}]*+("
    r"[\])}:,]|"  # the most frequent first
    + "".join(f"{re.escape(o)}[{_SPACES}]*+{re.escape(c)}|" for o, c in _CLOSERS.items())
    + rf"[\[({{]|{_NUMBER_TOKEN}"
    + "".join(f"|[uU]?(?!{q * 3}){q}{_string_body(q)}{q}?" for q in "'\"")
    + f"|{_NAME.pattern}+(?![\"'])"  # a name before a quote is a bad string prefix
    + r"|[\s\S]|\Z)"
)
# Bodies that ast.literal_eval would return unchanged: no escapes, no NUL, no lone surrogates.
_PLAIN_BODY = re.compile("[^\\\\\x00\ud800-\udfff]*")
# Characters that make any string literal invalid source for ast.literal_eval.
_BAD_RAW = re.compile("[\x00\ud800-\udfff]")
# The escapes that Python's string literals and the "unicode_escape" codec read differently:
# a backslash before a carriage return (Python reads the line break as "\n", so it is a
# continuation, which the codec only knows before "\n") and octal escapes above 0o377 (the
# codec warns about them). Escaped backslashes are matched whole so that the backslash after
# one is not taken for the start of an escape.
_ESCAPE_FIXES = re.compile(r"\\(\\|\r\n?|[4-7][0-7][0-7])")
_CONSTANTS: dict[str, LiteralValue] = {"True": True, "False": False, "None": None}
_MAX_SHOWN = 24
_MISSING = object()
#: Token counts from which the garbage collector is paused while the value is built.
_GC_PAUSE_TOKENS = 1 << 16


class _Bracket:
    """What an opening bracket, or an empty container (``[]``, ``( )``...), stands for in the
    parser's table of tokens."""

    __slots__ = ("closer", "empty", "opener")

    def __init__(self, opener: str, empty: bool) -> None:
        self.opener = opener
        self.closer = _CLOSERS[opener]
        self.empty = empty


_BRACKETS: dict[str, _Bracket] = {
    **{opener: _Bracket(opener, False) for opener in _CLOSERS},
    **{opener + closer: _Bracket(opener, True) for opener, closer in _CLOSERS.items()},
}


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


class _Parser:
    """One parse of one text; see :func:`parse_literal`.

    The text is cut into tokens by one regular expression (:data:`_TOKEN`), then one loop
    over the tokens builds the value, with the innermost open container in local variables
    and the enclosing ones on a stack. Scalars are converted once per distinct token.
    Character positions are only worked out for an error message.
    """

    __slots__ = ("max_depth", "max_int_digits", "n", "plain_digits", "text", "tokens")

    def __init__(self, text: str, max_depth: int, max_int_digits: int) -> None:
        self.text = text
        self.n = len(text)
        self.max_depth = max_depth
        self.max_int_digits = max_int_digits
        # the most digits int() converts here (Python's own limit, 0 for none, included)
        self.plain_digits = min(max_int_digits, sys.get_int_max_str_digits() or max_int_digits)
        self.tokens: list[str] = []

    def parse(self) -> LiteralValue:
        """Parse the whole text as one value and return it."""
        toks = self.tokens = _TOKEN.findall(self.text)  # ends with "" (the end of the text)
        if len(toks) < _GC_PAUSE_TOKENS or not gc.isenabled():
            return self._build(toks)
        # Every container made is part of the value until the end: the collector's passes
        # over them (a third of the time of a 1 MiB header of small containers) find nothing.
        gc.disable()
        try:
            return self._build(toks)
        finally:
            gc.enable()

    def _build(self, toks: list[str]) -> LiteralValue:
        """The value of the tokens ``toks`` of the text."""
        memo: dict[str, Any] = {**_CONSTANTS, **_BRACKETS}  # token -> value or _Bracket
        max_depth = self.max_depth
        # The innermost open container: its items (a dict's keys and values alternately) and
        # closing bracket, which says what it is ("" at the top level); the enclosing ones
        # are on the stack. Positions are worked out from token indices for messages only.
        items: list[LiteralValue] = []
        closer = ""
        stack: list[tuple[list[LiteralValue], str]] = []
        push = stack.append
        pop = stack.pop
        i = 0
        while True:
            # Read one value at token i, or open a container and go round for its first item.
            found = memo.get(toks[i], _MISSING)
            i += 1
            if found is _MISSING:
                found = memo[toks[i - 1]] = self._scalar_token(i - 1)
            if type(found) is _Bracket:
                if len(stack) >= max_depth:
                    raise FormatError(
                        f"nesting deeper than {max_depth} levels at position "
                        f"{self._position(i - 1)}"
                    )
                if not found.empty:
                    push((items, closer))
                    items = []
                    closer = found.closer
                    continue
                found = [] if found.closer == "]" else () if found.closer == ")" else {}
            value: LiteralValue = found
            # Attach the value to the innermost open container, closing containers as it goes.
            while True:
                sep = toks[i]
                i += 1
                if closer == "]":
                    items.append(value)
                    if sep == ",":
                        if toks[i] != "]":
                            break
                        i += 1
                    elif sep != "]":
                        raise self._error("',' or ']'", i - 1)
                    value = items
                elif closer == ")":
                    items.append(value)
                    if sep == ",":
                        if toks[i] != ")":
                            break
                        i += 1
                        value = tuple(items)
                    elif sep == ")":  # "(a)" is just a
                        value = items[0] if len(items) == 1 else tuple(items)
                    else:
                        raise self._error("',' or ')'", i - 1)
                elif closer:  # a dict
                    if not len(items) % 2:  # a key
                        try:
                            hash(value)
                        except (TypeError, RecursionError):
                            raise FormatError(
                                f"unhashable dict key of type {type(value).__name__} at "
                                f"position {self._position(self._value_start(i - 2))}"
                            ) from None
                        items.append(value)
                        if sep != ":":
                            raise self._error("':'", i - 1)
                        break
                    items.append(value)
                    if sep == ",":
                        if toks[i] != "}":
                            break
                        i += 1
                    elif sep != "}":
                        raise self._error("',' or '}'", i - 1)
                    # A hashable parsed value holds no list or dict, so it is a LiteralKey.
                    keys = cast("list[LiteralKey]", items)
                    if len(items) == 2:
                        value = {keys[0]: items[1]}
                    else:
                        value = dict(zip(keys[::2], items[1::2], strict=True))
                else:
                    if sep:
                        raise self._error("end of input", i - 1)
                    return value
                items, closer = pop()

    def _position(self, index: int) -> int:
        """The character position of token ``index`` (for messages: the tokens before it are
        matched again and dropped)."""
        if not self.tokens[index]:
            return self.n  # the end of the text
        rest = _TOKEN.sub("", self.text, count=index) if index else self.text  # count=0: all
        return self.n - len(rest.lstrip(_SPACES))

    def _unclosed(self, index: int) -> tuple[str, int] | None:
        """The innermost bracket opened before token ``index`` and not closed by then, and
        its token index (for messages)."""
        toks = self.tokens
        opened: list[int] = []
        brackets = itertools.compress(range(index), map(_BRACKET_TOKENS.__contains__, toks))
        for k in brackets:
            if toks[k] in _CLOSERS:
                opened.append(k)
            elif opened:
                opened.pop()
        if not opened:
            return None
        return toks[opened[-1]], opened[-1]

    def _value_start(self, index: int) -> int:
        """The index of the first token of the value whose last token is ``index``."""
        tok = self.tokens[index]
        if tok not in _OPENER_OF:
            return index
        depth = 0
        for k in range(index, -1, -1):
            tok = self.tokens[k]
            if tok in _OPENER_OF:
                depth += 1
            elif tok in _CLOSERS:
                depth -= 1
                if not depth:
                    return k
        return 0  # pragma: no cover - the parser matched the brackets

    def _scalar_token(self, index: int) -> LiteralValue | _Bracket:
        """The value of the string, integer or constant token ``index`` (an empty container
        with space inside: its bracket), or the error that says why it is none of these."""
        tok = self.tokens[index]
        if (  # the common case: a plain integer
            tok.isdecimal()
            and tok.isascii()
            and len(tok) <= self.plain_digits
            and (tok[0] != "0" or not tok.strip("0"))
        ):
            return int(tok)
        first = tok[:1]
        if first in _CLOSERS:
            return _BRACKETS[first + tok[-1]]
        if len(tok) > 1 and (first in ("'", '"') or tok[1] in ("'", '"')):  # a whole string
            value = _string_value(tok)
            if value is not None:
                return value
        elif first.isdigit() or (first in ("+", "-") and tok[1:2].isdigit()):
            try:
                return self._integer(tok, index)
            except FormatError:
                pass  # reported below, with the token's position
        # Not a value: the character-level reader says what is wrong, where.
        self._scalar(self._position(index), index)
        # The tokens and the reader accept the same scalars, so this is not reached; refuse
        # rather than guess if it ever were.
        raise self._error("a value", index)  # pragma: no cover

    def _scalar(self, pos: int, index: int) -> tuple[LiteralValue, int]:
        """Parse a string, integer or constant at character ``pos`` (token ``index``); return
        it and the position after it. Used to report what is wrong with a token that is not
        a value."""
        text = self.text
        if pos >= self.n:
            raise self._error_at("a value", pos, index)
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
        raise self._error_at("a value", pos, index)

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
        token = text[start : end + 1]
        value = _string_value(token)
        if value is not None:
            return value, end + 1
        # The token is a single, fully scanned string literal with valid escape letters, so
        # literal_eval can only decode it or complain about it (bad \x, \N{...}, NUL, ...).
        try:
            value = ast.literal_eval(token)
        except Exception as exc:
            raise FormatError(f"invalid string literal at position {start}: {exc}") from exc
        if not isinstance(value, str):
            raise FormatError(f"invalid string literal at position {start}")
        return value, end + 1

    def _error(self, expected: str, index: int) -> FormatError:
        """Return a FormatError saying what was expected at token ``index``."""
        return self._error_at(expected, self._position(index), index)

    def _error_at(self, expected: str, pos: int, index: int) -> FormatError:
        """Return a FormatError saying what was expected at character ``pos`` (token
        ``index``) and what was found there."""
        opened = self._unclosed(index) if pos >= self.n else None
        if pos < self.n:
            found = repr(self.text[pos])
        elif opened is not None:
            bracket, start = opened
            found = f"end of input ({bracket!r} at position {self._position(start)} is not closed)"
        else:
            found = "end of input"
        return FormatError(f"expected {expected} at position {pos}, found {found}")


def _string_value(token: str) -> str | None:
    """The value of a string token of :data:`_TOKEN` (optional ``u`` prefix, quote, valid
    escape letters), or None if it is not a valid literal: it stops before its closing quote
    (a bad escape, a line break, the end of the text), or holds a bad ``\\x``, ``\\N{...}``
    or ``\\U`` escape, a NUL or a lone surrogate."""
    at = 1 if token[0] in "uU" else 0  # the opening quote
    if len(token) < at + 2 or token[-1] != token[at]:
        return None  # no closing quote
    body = token[at + 1 : -1]
    if (len(body) - len(body.rstrip("\\"))) % 2:
        return None  # the last quote is escaped: no closing quote
    if "\\" not in body:
        return body if _PLAIN_BODY.fullmatch(body) is not None else None
    if _BAD_RAW.search(body) is not None:
        return None
    # What is left are the escapes that Python and the codec read alike; characters above
    # U+00FF pass through the codec as \\u or \\U escapes.
    body = _ESCAPE_FIXES.sub(_fix_escape, body)
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return None


def _fix_escape(match: re.Match[str]) -> str:
    """The replacement of one escape that Python's literals and "unicode_escape" differ on."""
    escape = match.group(1)
    if escape == "\\":
        return "\\\\"
    if escape[0] == "\r":
        return "\\\n"  # the continuation stays in place: it ends an escape before it
    return chr(int(escape, 8))  # above 0o377: a character of its own, as Python reads it


def _shorten(token: str) -> str:
    """Return ``token``, cut short for an error message if it is long."""
    if len(token) <= _MAX_SHOWN:
        return token
    return token[:_MAX_SHOWN] + "..."
