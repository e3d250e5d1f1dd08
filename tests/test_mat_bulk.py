"""The MAT v5 fast paths for many small elements (formats/mat5/_bulk.py) agree with the
generic parser.

``parse_variable(..., decode_below=N)`` decodes small leaves of cells and structs while
parsing (one at a time, or numpy over groups of siblings); with ``decode_below=0`` every
leaf is a node decoded afterwards. Both must give the same values, accept the same inputs
and raise the same error types: checked on generated cells of every leaf kind (both byte
orders, the vectorised and the one-by-one paths), on mutated ones, and for the listing
(``quick_header`` against ``parse_matrix_header``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.mat5 import (
    VECTOR_MIN,
    NeedMoreBytes,
    parse_matrix_header,
    parse_variable,
    quick_header,
)

SRC = "memory://bulk.mat"
HOSTILE = (FormatError, UnsupportedError, NeedMoreBytes)
LIMIT = 64 * 2**10
#: numeric data types and their dtype codes
MI = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}


def el(mdtype: int, payload: bytes, order: str, small: bool = False) -> bytes:
    """A data element: full tag, or a small data element, padded to 8 bytes."""
    if small and len(payload) <= 4:
        return struct.pack(f"{order}I", len(payload) << 16 | mdtype) + payload.ljust(4, b"\0")
    return struct.pack(f"{order}II", mdtype, len(payload)) + payload + b"\0" * (-len(payload) % 8)


def matrix(
    cls: int, dims: tuple[int, ...], body: bytes, order: str, name: bytes = b"", flags: int = 0
) -> bytes:
    sub = el(6, struct.pack(f"{order}II", cls | flags << 8, 0), order)
    sub += el(5, struct.pack(f"{order}{len(dims)}i", *dims), order)
    sub += el(1, name, order)
    return struct.pack(f"{order}II", 14, len(sub + body)) + sub + body


def numeric(
    rng: np.random.Generator, order: str, dims: tuple[int, ...], cls: int, mi: int,
    flags: int = 0, small: bool = False, name: bytes = b"",
) -> bytes:  # fmt: skip
    n = int(np.prod(dims))
    dtype = np.dtype(order + MI[mi])
    values = rng.integers(0, 100, n) if dtype.kind in "iu" else rng.normal(0, 50, n)
    if dtype.kind == "f" and n:
        values[rng.random(n) < 0.1] = np.nan  # NaN cast to integer classes
    body = el(mi, values.astype(dtype).tobytes(), order, small)
    if flags & 8:  # complex: an imaginary part
        body += el(mi, rng.integers(0, 9, n).astype(dtype).tobytes(), order, small)
    return matrix(cls, dims, body, order, name, flags)


def chars(order: str, dims: tuple[int, ...], mi: int, text: str, *, blank: bool = False) -> bytes:
    if blank:
        data = b""
    elif mi in (16,):
        data = text.encode("utf-8", "surrogatepass")
    elif mi in (1, 2):
        data = text.encode("latin-1")
    elif mi in (3, 4, 17):
        data = text.encode("utf-16-le" if order == "<" else "utf-16-be", "surrogatepass")
    else:
        data = text.encode("utf-32-le" if order == "<" else "utf-32-be", "surrogatepass")
    return matrix(4, dims, el(mi, data, order), order)


TEXTS = ["a", "hello", "x" * 9, "ab\0c", "abc\0", "naïve", "∑ok", "a😀", "\ud800x", "  "]


def random_leaf(rng: np.random.Generator, order: str, palette: int) -> bytes:
    """One element of a generated cell: mostly a few repeated layouts (groups of the
    vectorised path), sometimes anything."""
    kind = int(rng.integers(0, 12)) if rng.random() < 0.7 else palette
    dims_pool = [(1, 1), (1, 3), (2, 2), (3, 1), (0, 0), (1, 0), (0, 5), (2, 1, 2)]
    dims = dims_pool[int(rng.integers(0, len(dims_pool)))]
    if kind == 0:
        return struct.pack(f"{order}II", 14, 0)  # MATLAB's []
    if kind == 1:  # double stored as narrower types, as MATLAB does
        return numeric(rng, order, (1, 3), 6, int(rng.choice([2, 3, 9])))
    if kind == 2:
        cls = int(rng.integers(6, 16))
        mi = int(rng.choice(list(MI)))
        return numeric(rng, order, dims, cls, mi, small=bool(rng.random() < 0.5))
    if kind == 3:  # logical (with any class, as the flags allow)
        return numeric(rng, order, dims, int(rng.choice([9, 6])), 2, flags=2)
    if kind == 4:  # complex double, single and integer
        return numeric(rng, order, dims, int(rng.choice([6, 7, 10])), 9, flags=8)
    if kind == 5:
        text = TEXTS[int(rng.integers(0, len(TEXTS)))]
        mi = int(rng.choice([16, 1, 2, 17, 4, 18]))
        try:
            return chars(order, (1, len(text)), mi, text)
        except UnicodeEncodeError:
            return chars(order, (1, len(text)), 17, text)
    if kind == 6:
        return chars(order, (1, 4), 16, "", blank=True)
    if kind == 7:
        return chars(order, dims if len(dims) == 2 else (0, 0), 16, "", blank=True)
    if kind == 8:
        return chars(order, (2, 2), 16, "abcd")
    if kind == 9:  # a named element, and a 1x1 double (the commonest)
        return numeric(rng, order, (1, 1), 6, 9, name=b"nm")
    if kind == 10:
        inner = b"".join(numeric(rng, order, (1, 1), 6, 9) for _ in range(2))
        return matrix(1, (1, 2), inner, order)
    names = b"a\0\0\0b\0\0\0"
    body = el(5, struct.pack(f"{order}i", 4), order, True) + el(1, names, order)
    body += numeric(rng, order, (1, 2), 6, 9) + chars(order, (1, 2), 16, "hi")
    return matrix(2, (1, 1), body, order)


def cell_of(elements: list[bytes], order: str, dims: tuple[int, int] | None = None) -> bytes:
    return matrix(1, dims or (1, len(elements)), b"".join(elements), order, b"c")


def plain(value: Any) -> Any:
    """A decoded value in comparable form (types, dtypes and shapes included)."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ("objects", value.shape, [plain(v) for v in value.reshape(-1, order="F")])
        if value.dtype.names is not None:
            rows = [[plain(r[f]) for f in value.dtype.names] for r in value.reshape(-1)]
            return ("records", value.shape, value.dtype.names, rows)
        with np.errstate(invalid="ignore"):
            return ("array", value.dtype.str, value.shape, value.tobytes(order="F"))
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, Mapping):  # a MatStruct element
        return ("struct", [(k, plain(v)) for k, v in value.items()])
    if hasattr(value, "toarray"):  # scipy.sparse
        return ("sparse", value.dtype.str, value.shape, plain(value.toarray()))
    return ("other", type(value).__name__, getattr(value, "matlab_class", None))


def outcome(element: bytes, *, decode_below: int) -> Any:
    """What the parser gives for a variable: its decoded value, or the error's type."""
    try:
        var = parse_variable(element, 0, ORDER[0], source=SRC, decode_below=decode_below)
        return plain(var.decode(element))
    except HOSTILE as exc:
        return ("error", type(exc).__name__)


ORDER = ["<"]  # the byte order of the element given to outcome()


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("seed", range(24))
def test_generated_cells_decode_alike(seed: int, order: str) -> None:
    rng = np.random.default_rng(seed)
    count = int(rng.choice([5, VECTOR_MIN - 1, VECTOR_MIN, 200]))
    palette = int(rng.integers(0, 12))
    elements = [random_leaf(rng, order, palette) for _ in range(count)]
    element = cell_of(elements, order)
    ORDER[0] = order
    generic = outcome(element, decode_below=0)
    fast = outcome(element, decode_below=LIMIT)
    assert fast == generic
    if generic[0] != "error":  # and each element alone, in a cell of its own
        for one in elements[:40]:
            alone = cell_of([one] * VECTOR_MIN, order)
            assert outcome(alone, decode_below=LIMIT) == outcome(alone, decode_below=0)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize(
    ("dims", "cls", "mi", "flags", "small"),
    [
        ((2, 5), 6, 9, 0, False),  # double (pymatreader's cells of 2x5 matrices)
        ((1, 3), 6, 2, 0, False),  # double stored as uint8, as MATLAB does
        ((1, 1), 6, 2, 0, True),  # a small data element
        ((3, 1), 12, 9, 0, False),  # int32 stored as double (NaN: one by one)
        ((2, 2), 9, 2, 2, False),  # logical
        ((1, 4), 7, 7, 0, False),  # single
        ((0, 0), 6, 9, 0, False),  # empty
        ((2, 2), 6, 9, 8, False),  # complex: not this path
    ],
)
def test_cells_of_one_layout_repeated_decode_alike(
    monkeypatch: pytest.MonkeyPatch, order: str, dims: tuple[int, int], cls: int, mi: int,
    flags: int, small: bool,
) -> None:  # fmt: skip
    """Siblings that repeat one layout with their own values (the common cell) are decoded
    as one block: the same values as the generic parser gives, read-only; one sibling
    whose header differs sends the cell back to the other paths."""
    from npystore.formats.mat5 import _vector

    taken: list[bool] = []
    same = _vector._same_layout

    def counted(*args: Any) -> Any:
        got = same(*args)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(_vector, "_same_layout", counted)
    ORDER[0] = order
    rng = np.random.default_rng(7)
    elements = [numeric(rng, order, dims, cls, mi, flags, small) for _ in range(12)]
    element = cell_of(elements, order)
    fast = outcome(element, decode_below=LIMIT)
    assert fast == outcome(element, decode_below=0)
    assert taken == [not flags & 8 and not (cls == 12 and mi == 9)]
    if taken[0]:
        var = parse_variable(element, 0, order, source=SRC, decode_below=LIMIT)
        assert all(not c.flags.writeable for c in var.value.cells)
    odd = numeric(rng, order, (dims[0] + 1, dims[1]), cls, mi, flags, small)
    mixed = cell_of([*elements[:5], odd, *elements[5:]], order)
    taken.clear()
    assert outcome(mixed, decode_below=LIMIT) == outcome(mixed, decode_below=0)
    assert taken == [False]


def test_fast_leaves_are_read_only_and_respect_the_limit() -> None:
    rng = np.random.default_rng(1)
    small = [numeric(rng, "<", (1, 3), 6, 9) for _ in range(VECTOR_MIN)]
    big = numeric(rng, "<", (1, 100), 6, 9)  # 800 bytes
    element = cell_of([*small, big, chars("<", (1, 2), 16, "ok")], "<")
    var = parse_variable(element, 0, "<", source=SRC, decode_below=799)
    cells = var.value.cells
    assert all(isinstance(c, np.ndarray) and not c.flags.writeable for c in cells[:VECTOR_MIN])
    assert type(cells[VECTOR_MIN]).__name__ == "NumericArray"  # over the limit: a node
    assert cells[-1] == "ok"
    var = parse_variable(element, 0, "<", source=SRC, decode_below=800)
    assert isinstance(var.value.cells[VECTOR_MIN], np.ndarray)
    assert parse_variable(element, 0, "<", source=SRC).value.cells[0].__class__.__name__ == (
        "NumericArray"
    )


def test_depth_limit_holds_for_fast_leaves() -> None:
    rng = np.random.default_rng(2)
    leaves = cell_of([numeric(rng, "<", (1, 1), 6, 9)] * VECTOR_MIN, "<")
    with pytest.raises(FormatError, match="max_depth=0"):
        parse_variable(leaves, 0, "<", source=SRC, max_depth=0, decode_below=LIMIT)
    nested = cell_of([leaves], "<")
    with pytest.raises(FormatError, match=r"'c'\{1\}\{1\}: nested more than max_depth=1"):
        parse_variable(nested, 0, "<", source=SRC, max_depth=1, decode_below=LIMIT)
    assert parse_variable(nested, 0, "<", source=SRC, max_depth=2, decode_below=LIMIT)


@pytest.mark.parametrize("order", ["<", ">"])
def test_leaves_over_the_limit_are_the_generic_parsers_nodes(
    monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """A cell's leaves too large to decode with it (a cell of trials: 20 80-KB matrices)
    become their nodes without the generic parser (``quick_leaf`` given ``base``): equal
    to its nodes, offsets and stored types included; anything else still goes to it."""
    from npystore.formats.mat5 import _parse

    rng = np.random.default_rng(5)
    elements = [
        numeric(rng, order, (4, 5), 6, 9),  # double
        numeric(rng, order, (1, 30), 6, 2),  # double stored as uint8
        numeric(rng, order, (3, 3), 7, 7),  # single
        numeric(rng, order, (2, 9), 12, 12),  # int32 stored as int64
        numeric(rng, order, (5, 4), 9, 2, flags=2),  # logical
        numeric(rng, order, (2, 8), 10, 3, flags=4),  # global int16
        numeric(rng, order, (2, 2), 6, 9, flags=8),  # complex: the generic parser's
        numeric(rng, order, (1, 40), 6, 9, name=b"nm"),  # a name: the generic parser's
        numeric(rng, order, (2, 3, 4), 6, 9),  # 3-d: the generic parser's
        chars(order, (1, 12), 16, "twelve chars"),
    ] * 2
    element = cell_of(elements, order)
    generic = parse_variable(element, 0, order, source=SRC).value.cells
    calls: list[int] = []
    child = _parse._parse_child

    def counted(*args: Any) -> Any:
        calls.append(1)
        return child(*args)

    monkeypatch.setattr(_parse, "_parse_child", counted)
    fast = parse_variable(element, 0, order, source=SRC, decode_below=8).value.cells
    assert len(calls) == 6  # complex, named and 3-d, twice (chars: quick_chars); the rest quick
    for g, f in zip(generic, fast, strict=True):
        if type(g).__name__ == "NumericArray":
            assert f == g
    ORDER[0] = order
    assert outcome(element, decode_below=8) == outcome(element, decode_below=0)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_cells_of_large_leaves_decode_alike(data: st.DataObject) -> None:
    """As above, on mutated bytes: the quick node or the generic parser's outcome."""
    order = data.draw(st.sampled_from("<>"))
    rng = np.random.default_rng(11)
    cells = [numeric(rng, order, (3, 4), int(c), int(m)) for c, m in ((6, 9), (7, 7), (6, 2))]
    buf = bytearray(cell_of(cells * 3, order))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(8, len(buf) - 4))
        if data.draw(st.booleans()):
            buf[at] = data.draw(st.integers(0, 255))
        else:
            at -= at % 4
            word = data.draw(st.sampled_from(INTERESTING) | st.integers(0, 2**32 - 1))
            buf[at : at + 4] = struct.pack(f"{order}I", word)
    ORDER[0] = order
    element = bytes(buf)
    assert outcome(element, decode_below=8) == outcome(element, decode_below=0)


def _mutation_target(order: str) -> bytes:
    """A cell whose elements form groups for the vectorised path, and some others."""
    rng = np.random.default_rng(7)
    elements = [numeric(rng, order, (1, 3), 6, 9) for _ in range(12)]
    elements += [numeric(rng, order, (2, 1), 9, 2, flags=2) for _ in range(8)]
    elements += [chars(order, (1, 3), 16, "abc")] * 8 + [chars(order, (1, 2), 17, "xy")] * 6
    elements += [random_leaf(rng, order, 2) for _ in range(8)]
    return cell_of(elements, order)


MUTATED = {order: _mutation_target(order) for order in "<>"}
INTERESTING = [0, 1, 2, 4, 5, 6, 8, 9, 14, 16, 17, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               0x10000, 0x40001, 0x50001, 0x10004]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_cells_decode_alike(data: st.DataObject) -> None:
    order = data.draw(st.sampled_from("<>"))
    buf = bytearray(MUTATED[order])
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["byte", "word", "delete", "insert"]))
        at = data.draw(st.integers(8, len(buf) - 1))
        if op == "byte":
            buf[at] = data.draw(st.integers(0, 255))
        elif op == "word":
            at -= at % 4
            word = data.draw(st.sampled_from(INTERESTING) | st.integers(0, 2**32 - 1))
            buf[at : at + 4] = struct.pack(f"{order}I", word)
        elif op == "delete":
            del buf[at : at + data.draw(st.integers(1, 16))]
        else:
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    ORDER[0] = order
    element = bytes(buf)
    assert outcome(element, decode_below=LIMIT) == outcome(element, decode_below=0)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("seed", range(12))
def test_quick_header_agrees_with_the_listing(seed: int, order: str) -> None:
    rng = np.random.default_rng(100 + seed)
    names = [b"x", b"abcd", b"abcde", b"a_long_variable_name_of_40_characters_xx", "é".encode()]
    for _ in range(60):
        name = names[int(rng.integers(0, len(names)))]
        leaf = random_leaf(rng, order, 2)
        # give the element a name: rebuild its header with one
        _, nbytes = struct.unpack_from(f"{order}II", leaf)
        if nbytes < 48:
            continue
        flags = leaf[8:24]
        dims_tag = struct.unpack_from(f"{order}II", leaf, 24)
        dims_end = 32 + dims_tag[1] + (-dims_tag[1] % 8)
        old_name = struct.unpack_from(f"{order}II", leaf, dims_end)
        name_end = dims_end + 8 + old_name[1] + (-old_name[1] % 8)
        if old_name[0] >> 16:
            name_end = dims_end + 8
        small = len(name) <= 4 and bool(rng.random() < 0.5)
        mi = 16 if rng.random() < 0.2 else 1
        sub = flags + leaf[24:dims_end] + el(mi, name, order, small) + leaf[name_end:]
        element = struct.pack(f"{order}II", 14, len(sub)) + sub
        got = quick_header(element, 0, len(element), order)
        try:
            want = parse_matrix_header(element, 0, order, source=SRC)
        except HOSTILE:
            assert got is None
            continue
        if got is None:
            continue  # an unusual layout: the generic parser's
        assert (got.name, got.matlab_class, got.dims) == (want.name, want.matlab_class, want.dims)
        assert (got.is_complex, got.is_logical, got.is_global, got.is_sparse) == (
            want.is_complex, want.is_logical, want.is_global, want.is_sparse
        )  # fmt: skip
        # a prefix (the first bytes read at open) gives the same header
        assert quick_header(element[:64], 0, len(element), order) in (None, got)


def _headers_alike(element: bytes, order: str) -> None:
    """``_read_header`` (the quick way when the layout is common) and the generic reading
    give the same header and next offset, or the same error type; the same on a prefix."""
    from npystore.formats.mat5 import _meta, _tags

    def read(fn: Any, data: bytes) -> Any:
        try:
            r = _tags._Reader(data, 0, None, order, SRC, False)
            pos, end = r.root()
            return fn(r, pos, end, SRC)
        except HOSTILE as exc:
            return ("error", type(exc).__name__)

    for data in (element, element[:64]):
        assert read(_meta._read_header, data) == read(_meta._read_header_generic, data)


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("seed", range(8))
def test_headers_read_the_quick_way_are_the_generic_ones(seed: int, order: str) -> None:
    rng = np.random.default_rng(300 + seed)
    for _ in range(60):
        leaf = random_leaf(rng, order, int(rng.integers(0, 12)))
        _headers_alike(leaf, order)
        _headers_alike(cell_of([leaf] * 3, order), order)
    for flags in (16, 16 | 2, 16 | 8, 4):  # sparse (MATLAB's bit 12), logical, complex; global
        sparse = matrix(5, (3, 4), b"", order)
        word = struct.pack(f"{order}II", 5 | flags << 8, 7)  # nzmax 7
        _headers_alike(sparse[:16] + word + sparse[24:], order)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_headers_read_alike(data: st.DataObject) -> None:
    order = data.draw(st.sampled_from("<>"))
    rng = np.random.default_rng(data.draw(st.integers(0, 50)))
    buf = bytearray(random_leaf(rng, order, int(rng.integers(0, 12))))
    if len(buf) < 16:
        return
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(4, len(buf) - 1))
        if data.draw(st.booleans()) or at + 4 > len(buf):
            buf[at] = data.draw(st.integers(0, 255))
        else:
            at -= at % 4
            word = data.draw(st.sampled_from(INTERESTING) | st.integers(0, 2**32 - 1))
            buf[at : at + 4] = struct.pack(f"{order}I", word)
    _headers_alike(bytes(buf), order)


# ---------------------------------------------------------------- v7.3: small values with the cell


def test_v73_small_values_are_read_with_their_cell(tmp_path: Any) -> None:
    import h5py

    from npystore.fetch import open_reader
    from npystore.files.mat.tree import CellNode, NumericLeaf, ValueLeaf, to_value
    from npystore.files.mat.v73 import Mat73File

    complex_dtype = np.dtype([("real", "<f8"), ("imag", "<f8")])
    pieces: list[tuple[str, Any, str, dict[str, Any]]] = [
        ("double", np.array([[1.5, -2.0]]), "double", {}),
        ("single", np.array([[1.5]], np.float32), "single", {}),
        ("int16", np.array([[-3, 4, 5]], np.int16), "int16", {}),
        ("logical", np.array([[1, 0]], np.uint8), "logical", {}),
        ("uint64", np.array([[2**63]], np.uint64), "uint64", {}),
        ("complex", np.array([[(1.0, 2.0), (3.0, -1.0)]], complex_dtype), "double", {}),
        ("complex_int", np.array([[(1, 2)]], [("real", "<i2"), ("imag", "<i2")]), "int16", {}),
        ("empty", np.array([0, 0], np.uint64), "double", {"MATLAB_empty": np.uint8(1)}),
        ("empty_0x3", np.array([0, 3], np.uint64), "double", {"MATLAB_empty": np.uint8(1)}),
        ("big", np.arange(9000.0).reshape(1, 9000), "double", {}),  # 72 KB: lazy
    ]
    path = tmp_path / "small73.mat"
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        out = np.empty((len(pieces), 1), dtype=h5py.ref_dtype)
        for i, (name, data, cls, attrs) in enumerate(pieces):
            d = refs.create_dataset(name, data=data if data.ndim == 1 else data.T)
            d.attrs["MATLAB_class"] = np.bytes_(cls)
            for key, value in attrs.items():
                d.attrs[key] = value
            out[i, 0] = d.ref
        c = f.create_dataset("c", data=out)
        c.attrs["MATLAB_class"] = np.bytes_("cell")
    with path.open("r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file".ljust(116) + b" " * 8 + b"\x00\x02IM")
    with Mat73File(open_reader(str(path))) as m:
        node = m.node("c")
        assert isinstance(node, CellNode)
        leaves = dict(zip([p[0] for p in pieces], node.cells, strict=True))
        value = to_value(node, numeric=lambda leaf: leaf.array.read())
    want = {
        "double": np.array([[1.5, -2.0]]),
        "single": np.array([[1.5]], np.float32),
        "int16": np.array([[-3, 4, 5]], np.int16),
        "logical": np.array([[True, False]]),
        "uint64": np.array([[2**63]], np.uint64),
        "complex": np.array([[1 + 2j, 3 - 1j]]),
        "complex_int": np.array([[1 + 2j]]),
        "empty": np.zeros((0, 0)),
        "empty_0x3": np.zeros((0, 3)),
        "big": np.arange(9000.0).reshape(1, 9000),
    }
    lazy = {"complex_int", "empty_0x3", "big"}  # class not told by dtype; dims; size
    for i, (name, _, cls, _) in enumerate(pieces):
        leaf = leaves[name]
        assert isinstance(leaf, NumericLeaf if name in lazy else ValueLeaf), name
        assert leaf.matlab_class == cls, name
        np.testing.assert_array_equal(value[0, i], want[name], strict=True, err_msg=name)
        if name not in lazy:
            assert not value[0, i].flags.writeable, name


# ---------------------------------------------------------------- whole files through open_mat


def _file_seed(compress: bool) -> bytes:
    import io

    import scipy.io as sio

    cell = np.empty((1, 40), dtype=object)
    for i in range(40):
        cell[0, i] = np.array([[i, i + 0.5]]) if i % 4 else f"s{i % 10}"
    rows = np.zeros((1, 36), dtype=[("a", object), ("b", object)])
    for i in range(36):
        rows[0, i]["a"] = np.zeros((0, 0))
        rows[0, i]["b"] = np.int8(i)
    variables: dict[str, Any] = {f"v{i}": np.float64(i) for i in range(12)}
    variables.update(c=cell, s=rows, t="text", u=np.array([[1, 2]], np.uint16))
    buf = io.BytesIO()
    sio.savemat(buf, variables, do_compression=compress)
    return buf.getvalue()


FILE_SEEDS = [_file_seed(False), _file_seed(True)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_files_through_open_mat(data: st.DataObject) -> None:
    """Listing from windows, small variables decoded from them, cells of decoded leaves:
    mutated files raise FormatError/UnsupportedError only, and the quick way of reading a
    variable (``load``) gives what its tree gives."""
    import fsspec

    import npystore
    from npystore.files.mat.tree import to_value

    buf = bytearray(FILE_SEEDS[data.draw(st.integers(0, 1))])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(128, len(buf) - 1))
        op = data.draw(st.sampled_from(["byte", "word", "delete"]))
        if op == "byte":
            buf[at] = data.draw(st.integers(0, 255))
        elif op == "word":
            at -= at % 4
            word = data.draw(st.sampled_from(INTERESTING) | st.integers(0, 2**32 - 1))
            buf[at : at + 4] = struct.pack("<I", word)
        else:
            del buf[at : at + data.draw(st.integers(1, 16))]
    url = f"memory://mutated-{data.draw(st.integers(0, 2**32))}.mat"
    fs = fsspec.filesystem("memory")
    fs.pipe(url, bytes(buf))
    try:
        m = npystore.open_mat(url)
        assert set(m.variables) == set(m)
        for name in m:
            try:
                quick = plain(m.load(name))
            except (FormatError, UnsupportedError):
                quick = None
            try:
                tree = plain(to_value(m.node(name), numeric=lambda leaf: leaf.array.read()))
            except (FormatError, UnsupportedError):
                tree = None
            if quick is not None and tree is not None:
                assert quick == tree, name
    except (FormatError, UnsupportedError):
        pass
    finally:
        fs.rm(url)
