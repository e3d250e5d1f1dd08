"""Tests of the safe literal parser for .npy headers (npystore.formats._literal)."""

from __future__ import annotations

import ast
import io
import re
import struct
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.lib.format as npformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npystore.errors import FormatError
from npystore.formats._literal import parse_literal

try:  # the writer behind write_array_header_2_0, which also does version 3.0 (utf8)
    from numpy.lib._format_impl import _write_array_header as write_array_header  # type: ignore[attr-defined]
except ImportError:  # numpy < 2
    from numpy.lib.format import _write_array_header as write_array_header  # type: ignore[attr-defined]

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MAX_INT = 10**32 - 1  # the largest magnitude within the default cap of 32 digits

# SyntaxError messages of ast.literal_eval for the few inputs parse_literal accepts on purpose
# although Python 3 does not: Python 2 longs ("3L"), vertical tabs as whitespace, and line
# breaks followed by indentation at the top level.
KNOWN_DEVIATIONS = (
    "invalid decimal literal",
    "invalid non-printable character U+000B",
    "unexpected indent",
)


def same(a: Any, b: Any) -> bool:
    """Return whether ``a`` and ``b`` are equal with equal types at every level.

    Plain ``==`` is not enough: ``True == 1``, ``(1,) != [1]`` only by type at the top, and so
    on. Dicts must have the same items in the same order.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    return bool(a == b)


def literal_eval_quietly(text: str) -> Any:
    """Run ast.literal_eval with warnings (e.g. invalid escape sequences) turned into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return ast.literal_eval(text)


# -- real NumPy headers ----------------------------------------------------------------------

DTYPES = [
    np.dtype("<f8"),
    np.dtype(">i2"),
    np.dtype("?"),
    np.dtype("U7"),
    np.dtype("S3"),
    np.dtype("c16"),
    np.dtype("M8[ns]"),
    np.dtype("O"),
    np.dtype("V5"),
    np.dtype([("a", "<i4"), ("b", [("c", "<f4", (2, 3)), ("d", "S5")]), ("e", "<u2", (4,))]),
    np.dtype([(("title", "name"), "<i4"), ("x", "f8")]),
    np.dtype([(("T\u00eftle \u2603", "n"), "<i4"), ("x", "f8", (1,))]),
    np.dtype([("\u00e9", "<i4"), ("\u2603", "<f8"), ("\U0001f600", "u1")]),
    np.dtype([("it's", "<i4"), ('back\\slash"q', "<f8"), ("tab\there\n", "i1")]),
    np.dtype({"names": ["a", "b"], "formats": ["i1", "i8"], "offsets": [0, 8], "itemsize": 24}),
]
SHAPES = [(3, 4), (), (0,), (7,), (2**40, 1, 5)]


def header_text(header: dict[str, Any]) -> str:
    """Return the header text NumPy writes for ``header`` (version 2.0, or 3.0 if not latin1)."""
    buf = io.BytesIO()
    try:
        npformat.write_array_header_2_0(buf, header)
        encoding = "latin1"
    except UnicodeEncodeError:
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            write_array_header(buf, header, (3, 0))
        encoding = "utf8"
    data = buf.getvalue()
    (length,) = struct.unpack("<I", data[8:12])
    assert len(data) == 12 + length
    return data[12:].decode(encoding)


@pytest.mark.parametrize("fortran_order", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_real_numpy_headers(
    dtype: np.dtype[Any], shape: tuple[int, ...], fortran_order: bool
) -> None:
    header = {
        "descr": npformat.dtype_to_descr(dtype),
        "fortran_order": fortran_order,
        "shape": shape,
    }
    for text in (repr(header), header_text(header)):
        parsed = parse_literal(text)
        assert same(parsed, ast.literal_eval(text))
        assert same(parsed, header)
    parsed = parse_literal(repr(header))
    assert isinstance(parsed, dict)
    assert npformat.descr_to_dtype(parsed["descr"]) == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_header_of_a_real_file_agrees_with_numpys_reader(dtype: np.dtype[Any]) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Stored array in format 3.0"
        npformat.write_array(buf, np.zeros((2, 3), dtype=dtype), allow_pickle=True)
    data = buf.getvalue()
    major = data[6]  # NumPy picks 1.0 if it can, 3.0 (utf8) for non-latin1 field names
    if major == 1:
        (length,) = struct.unpack("<H", data[8:10])
        start = 10
    else:
        (length,) = struct.unpack("<I", data[8:12])
        start = 12
    text = data[start : start + length].decode("utf8" if major == 3 else "latin1")
    loaded = np.load(io.BytesIO(data), allow_pickle=True)
    parsed = parse_literal(text)
    assert isinstance(parsed, dict)
    assert parsed["shape"] == loaded.shape
    assert parsed["fortran_order"] is False
    assert npformat.descr_to_dtype(parsed["descr"]) == loaded.dtype == dtype


def test_python2_header() -> None:
    text = "{'descr': u'<i8', 'fortran_order': False, 'shape': (3L, 4l), u'x': U\"\\xe9\", }\n"
    expected = {"descr": "<i8", "fortran_order": False, "shape": (3, 4), "x": "\u00e9"}
    assert same(parse_literal(text), expected)


# -- exact values of small inputs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("()", ()),
        ("( )", ()),
        ("(1,)", (1,)),
        ("(1, 2)", (1, 2)),
        ("(1, 2,)", (1, 2)),
        ("(1)", 1),
        ("((1))", 1),
        ("(((1),))", (1,)),
        ("([],)", ([],)),
        ("[]", []),
        ("[1,]", [1]),
        ("[[], [()], {}]", [[], [()], {}]),
        ("{}", {}),
        ("{1: 2,}", {1: 2}),
        (
            "{(1, ('a', None)): True, False: [], None: 0}",
            {(1, ("a", None)): True, False: [], None: 0},
        ),
        ("{'a': 1, 'a': 2}", {"a": 2}),
        ("{1: 'a', True: 'b'}", {1: "b"}),
        ("True", True),
        ("False", False),
        ("None", None),
        ("0", 0),
        ("00", 0),
        ("-0", 0),
        ("+7", 7),
        ("-12", -12),
        ("5L", 5),
        ("-5l", -5),
        ("''", ""),
        ('""', ""),
        ("u'x'", "x"),
        ('U"x"', "x"),
        ("'\\N{SNOWMAN}'", "\u2603"),
        ("'a\\\nb'", "ab"),
        ("'a\\\r\nb'", "ab"),
        ("'a\\\rb'", "ab"),
        ("'\\777\\400\\3777'", "\u01ff\u0100\xff7"),
        ("u'\\\\\\\n\\x41'", "\\A"),
        ("'\\x00\\t\\u2603\\U0001f600\\101\\''", "\x00\t\u2603\U0001f600A'"),
        ("'\u00e9\t\x0b'", "\u00e9\t\x0b"),
        (" \t\n\r\f\v[1,\v2]\v\n", [1, 2]),
        ("9" * 32, int("9" * 32)),
        ("-" + "9" * 32, -int("9" * 32)),
    ],
)
def test_values(text: str, expected: Any) -> None:
    assert same(parse_literal(text), expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a value at position 0, found end of input"),
        ("   ", "expected a value at position 3, found end of input"),
        ("{'a': 1} x", "expected end of input at position 9, found 'x'"),
        ("{'a': 1, 'b': 2 x}", "expected ',' or '}' at position 16, found 'x'"),
        ("[1 2]", "expected ',' or ']' at position 3, found '2'"),
        ("(1 2)", "expected ',' or ')' at position 3, found '2'"),
        ("{1 2}", "expected ':' at position 3, found '2'"),
        ("{1, 2}", "expected ':' at position 2, found ','"),
        ("[1,,]", "expected a value at position 3, found ','"),
        ("(,)", "expected a value at position 1, found ','"),
        ("{:1}", "expected a value at position 1, found ':'"),
        ("[1,", "position 3, found end of input ('[' at position 0 is not closed)"),
        ("{'a': [1, 2}", "expected ',' or ']' at position 11, found '}'"),
        ("__import__('os')", "unexpected name '__import__' at position 0"),
        ("[true]", "unexpected name 'true' at position 1"),
        ("1.5", "unsupported number literal '1.5' at position 0"),
        ("[-1e5]", "unsupported number literal '-1e5' at position 1"),
        ("0x10", "unsupported number literal '0x10' at position 0"),
        ("1_000", "unsupported number literal '1_000' at position 0"),
        ("1j", "unsupported number literal '1j' at position 0"),
        ("007", "leading zeros at position 0"),
        ("- 5", "expected a value at position 0, found '-'"),
        ("--5", "expected a value at position 0, found '-'"),
        ("...", "expected a value at position 0, found '.'"),
        ("b'a'", "unsupported string prefix 'b' at position 0"),
        ("r'a'", "unsupported string prefix 'r' at position 0"),
        ("f'{x}'", "unsupported string prefix 'f' at position 0"),
        ("'''a'''", "triple-quoted string at position 0"),
        ('"""a"""', "triple-quoted string at position 0"),
        ("'a' 'b'", 'expected end of input at position 4, found "\'"'),
        ("'abc", "unterminated string starting at position 0"),
        ("['abc\\'", "unterminated string starting at position 1"),
        ("'a\nb'", "line break at position 2 inside the string starting at position 0"),
        ("'a\rb'", "line break at position 2"),
        ("'\\q'", "invalid escape sequence '\\\\q' at position 1"),
        ("'\\x4'", "invalid string literal at position 0"),
        ("'\\x\\\n41'", "invalid string literal at position 0"),  # a continuation ends it
        ("'\\ud80\\\r\n0'", "invalid string literal at position 0"),
        ("True'x'", "unsupported string prefix 'True' at position 0"),
        ('[None"x"]', "unsupported string prefix 'None' at position 1"),
        ("'\\N{no such name}'", "invalid string literal at position 0"),
        ("'\\U00110000'", "invalid string literal at position 0"),
        ("'a\x00b'", "invalid string literal at position 0"),
        ("{[1]: 2}", "unhashable dict key of type list at position 1"),
        ("{0: 0, ([1],): 2}", "unhashable dict key of type tuple at position 7"),
        ("{{}: 2}", "unhashable dict key of type dict at position 1"),
        ("\u00e9", "expected a value at position 0, found '\u00e9'"),
        ("'9' * 2", "expected end of input at position 4, found '*'"),
        ("1 # comment", "expected end of input at position 2, found '#'"),
        ("{1, 2, **x}", "expected ':' at position 2"),
        ("9" * 33, "integer literal of 33 digits at position 0 (at most 32 allowed)"),
        ("9" * 10_000, "integer literal of 10000 digits at position 0"),
        ("[" * 65 + "]" * 65, "nesting deeper than 64 levels at position 64"),
    ],
)
def test_errors(text: str, message: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_literal(text)
    assert message in str(info.value)
    assert len(str(info.value)) < 200


def test_limits_are_inclusive_and_configurable() -> None:
    assert parse_literal("[" * 64 + "]" * 64) is not None
    assert parse_literal("(" * 64 + "1" + ",)" * 64) is not None
    assert parse_literal("[[1]]", max_depth=2) == [[1]]
    with pytest.raises(FormatError, match="nesting deeper than 1 levels at position 1"):
        parse_literal("[[1]]", max_depth=1)
    assert parse_literal("1", max_depth=0) == 1
    with pytest.raises(FormatError):
        parse_literal("()", max_depth=0)
    assert parse_literal("-12345", max_int_digits=5) == -12345
    with pytest.raises(FormatError, match="6 digits"):
        parse_literal("123456L", max_int_digits=5)
    with pytest.raises(ValueError, match="max_depth"):
        parse_literal("1", max_depth=-1)
    with pytest.raises(ValueError, match="max_int_digits"):
        parse_literal("1", max_int_digits=0)


def test_int_beyond_pythons_own_digit_limit_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="too long"):
        parse_literal("9" * 5000, max_int_digits=10**6)


def test_no_recursion_even_with_a_huge_depth_limit() -> None:
    depth = 100_000
    value = parse_literal("[" * depth + "]" * depth, max_depth=depth)
    for _ in range(depth - 1):
        assert isinstance(value, list)
        assert len(value) == 1
        value = value[0]
    assert value == []


@pytest.mark.parametrize(
    "text",
    [
        "[" * 1_000_000,
        "(" * 1_000_000,
        "{" * 1_000_000,
        "{1:" * 500_000,
        "[1," * 333_333,
        "(" * 1_000_000 + ")" * 1_000_000,
        "'" + "a" * 1_000_000,
        "'" + "\\'" * 500_000,
        "a" * 1_000_000,
        "9" * 1_000_000,
        "[" + "1," * 100_000 + "x]",
    ],
    ids=lambda text: repr(text[:8]),
)
def test_large_hostile_inputs_fail_fast(text: str) -> None:
    started = time.perf_counter()
    with pytest.raises(FormatError):
        parse_literal(text)
    assert time.perf_counter() - started < 20.0


def test_long_valid_input_is_linear() -> None:
    items = 20_000
    text = "[" + "('ab\\n', -123, {None: [True]}), " * items + "]"
    started = time.perf_counter()
    value = parse_literal(text)
    assert time.perf_counter() - started < 20.0
    assert isinstance(value, list)
    assert len(value) == items
    assert same(value[-1], ("ab\n", -123, {None: [True]}))


MIB = 2**20


def _fill(unit: str, head: str = "", tail: str = "") -> Callable[[int], str]:
    """A maker of ``head + unit * n + tail`` texts of at most ``size`` characters."""
    return lambda size: head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


def _joined(item: Callable[[int], str], head: str = "[", tail: str = "]") -> Callable[[int], str]:
    """A maker of ``[item(0),item(1),...]`` texts of about ``size`` characters (distinct)."""

    def make(size: int) -> str:
        items: list[str] = []
        length = len(head) + len(tail)
        while length < size - 20:
            items.append(item(len(items)))
            length += len(items[-1]) + 1
        return head + ",".join(items) + tail

    return make


#: The densest text of each kind (a maker of it at a size), and what parse_literal gives for
#: it (None: a value, equal to ast.literal_eval's).
WORST_CASES: dict[str, tuple[Callable[[int], str], str | None]] = {
    "dicts with escaped keys": (_fill("{'\\n': 1}, ", "[", "]"), None),
    "dicts with escaped keys, unclosed": (_fill("{'\\n': 1}, ", "["), "is not closed"),
    "small ints": (_fill("1,", "[", "]"), None),
    "distinct ints": (_joined(str), None),
    "negative ints": (_fill("-1,", "[", "]"), None),
    "one-item tuples": (_fill("(1,),", "[", "]"), None),
    "parenthesised ints": (_fill("(1),", "[", "]"), None),
    "distinct tuples": (_joined(lambda k: f"({k},)"), None),
    "empty lists": (_fill("[],", "[", "]"), None),
    "empty tuples with space": (_fill("( ),", "[", "]"), None),
    "empty dicts": (_fill("{},", "[", "]"), None),
    "lists of lists": (_fill("[[1]],", "[", "]"), None),
    "64 deep, repeated": (_fill("[" * 63 + "]" * 63 + ",", "[", "]"), None),
    "64 open, then ints": (_fill("1,", "[" * 64, "]" * 64), None),
    "dicts of tuple keys": (_fill("(1, 2): None, ", "{", "}"), None),
    "short escaped strings": (_fill("'\\n',", "[", "]"), None),
    "distinct escaped strings": (_joined(lambda k: f"'\\t{k}'"), None),
    "short u strings": (_fill("u'a',", "[", "]"), None),
    "escapes of every kind": (_fill("'\\x41\\u00e9\\N{DEGREE SIGN}\\101\\\n',", "[", "]"), None),
    "one long escaped string": (_fill("\\n", "'", "'"), None),
    "escaped quotes, unterminated": (_fill("\\'", "'"), "unterminated string"),
    "ints, then a name": (_fill("1,", "[", "x]"), "unexpected name 'x'"),
    "ints, then no comma": (_fill("1,", "[", "1 2]"), "expected ',' or ']'"),
    "ints, then too deep": (_fill("1,", "[", "[" * 70 + "]" * 70 + "]"), "nesting deeper"),
    "ints, then unterminated": (_fill("1,", "[", "'abc"), "unterminated string"),
    "int keys, then a list key": (_fill("1: 1, ", "{", "[1]: 2}"), "unhashable dict key"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(WORST_CASES))
def test_one_mib_worst_cases_take_under_a_second(name: str) -> None:
    """The densest 1 MiB texts of each kind parse, or are refused, in well under a second of
    CPU (about 0.1-0.4 s here; the character-level parser this replaced took 0.3-2.3 s)."""
    make, error = WORST_CASES[name]
    text = make(MIB)
    assert MIB - 200 < len(text) <= MIB
    started = time.process_time()
    if error is None:
        parse_literal(text)
    else:
        with pytest.raises(FormatError, match=re.escape(error)) as info:
            parse_literal(text)
        assert len(str(info.value)) < 200
    elapsed = time.process_time() - started
    assert elapsed < 1.0, f"{name}: {elapsed:.2f} s"
    small = make(4096)  # the same kind of text, small enough for ast.literal_eval
    if error is None:
        assert same(parse_literal(small), ast.literal_eval(small))
    else:
        with pytest.raises(FormatError, match=re.escape(error)):
            parse_literal(small)


def test_error_positions_are_character_positions_after_long_input() -> None:
    text = "[" + "'a\\n', " * 1000 + " (1,\n 2) x]"
    with pytest.raises(FormatError, match=f"expected ',' or ']' at position {len(text) - 2}"):
        parse_literal(text)
    text = "{" + "1: 2, " * 100 + "(1, [2]): 3}"
    with pytest.raises(FormatError, match="unhashable dict key of type tuple at position 601"):
        parse_literal(text)
    text = "  [ [ ] , ( ) ,\n" + "{ }, " * 10 + "[ 1 , 2 ,"  # the innermost is named
    inner = text.rindex("[")
    with pytest.raises(FormatError, match=rf"found end of input \('\[' at position {inner} is"):
        parse_literal(text)
    with pytest.raises(FormatError, match=r"found end of input \('\[' at position 2 is not"):
        parse_literal(text + "]")
    text = "[(1, 2), [3, (4, "
    with pytest.raises(FormatError, match=r"'\(' at position 13 is not closed"):
        parse_literal(text)


# -- property tests --------------------------------------------------------------------------

TEXT = st.text(
    alphabet=st.one_of(
        st.characters(),  # all of Unicode except surrogates
        st.sampled_from("'\"\\\n\r\t\x00\x0b\x0c\x7f\x85\u2028\ufeff"),
    ),
    max_size=12,
)
INTS = st.integers(min_value=-MAX_INT, max_value=MAX_INT)
HASHABLE_SCALARS = st.one_of(INTS, TEXT, st.booleans(), st.none())
KEYS = st.recursive(
    HASHABLE_SCALARS, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6
)
VALUES = st.recursive(
    HASHABLE_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(KEYS, inner, max_size=4),
    ),
    max_leaves=25,
)


@FAST
@given(VALUES)
def test_repr_round_trip(value: Any) -> None:
    text = repr(value)
    parsed = parse_literal(text)
    assert same(parsed, value)
    assert same(parsed, ast.literal_eval(text))


@settings(FAST, max_examples=75)
@given(VALUES, st.sampled_from(["", " ", "\n", "  \t "]))
def test_repr_round_trip_with_padding(value: Any, pad: str) -> None:
    text = pad + repr(value) + pad + "\n"
    assert same(parse_literal(text), value)


def check_only_format_error(text: str) -> None:
    """Parse ``text``: a FormatError or a value that agrees with ast.literal_eval."""
    try:
        parsed = parse_literal(text)
    except FormatError:
        return
    error: SyntaxError | None = None
    try:
        expected = literal_eval_quietly(text)
    except SyntaxError as exc:
        error = exc
    if error is not None:
        # Accepted by design though not by Python 3: "3L", "\v" and indented line starts.
        assert any(message in str(error) for message in KNOWN_DEVIATIONS), (text, error)
        return
    assert same(parsed, expected), (text, parsed, expected)


GRAMMAR_CHARS = st.sampled_from(
    [
        *"{}[](),:'\"\\ uUbrL0123456789-+.xe_\n\t\x0b\x0c\r\x00\u00e9",
        "True",
        "False",
        "None",
        "'a'",
        "\\x4",
        "\\N{",
        "\\u2603",
        "1,",
        "'':",
    ]
)


@FAST
@given(st.text(max_size=40))
def test_fuzz_arbitrary_text(text: str) -> None:
    check_only_format_error(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(GRAMMAR_CHARS, max_size=24).map("".join))
def test_fuzz_grammar_soup(text: str) -> None:
    check_only_format_error(text)


REAL_HEADER = header_text(
    {
        "descr": npformat.dtype_to_descr(
            np.dtype([(("t\u00eftle", "a"), "<i4", (2, 3)), ("b", [("c", "S3"), ("d", "?")])])
        ),
        "fortran_order": False,
        "shape": (3, 4),
    }
).encode("latin1")

MUTATION = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "replace"]),
    st.integers(min_value=0, max_value=len(REAL_HEADER)),
    st.integers(min_value=0, max_value=255),
)


@FAST
@given(st.lists(MUTATION, min_size=1, max_size=6))
def test_fuzz_mutated_real_header(mutations: list[tuple[str, int, int]]) -> None:
    data = bytearray(REAL_HEADER)
    for kind, offset, byte in mutations:
        where = min(offset, len(data))
        if kind == "insert":
            data.insert(where, byte)
        elif where < len(data):
            if kind == "flip":
                data[where] ^= 1 << (byte % 8)
            elif kind == "delete":
                del data[where]
            else:
                data[where] = byte
    check_only_format_error(bytes(data).decode("latin1"))
