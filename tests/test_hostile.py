"""Hostile input: property and mutation tests over npystore's pure parsers.

Each target is driven the way the IO layer drives it, over bytes held in memory: the npy
header (``formats/npy.py``, ``npy_descr.py``, ``_literal.py``), the ZIP directory
(``formats/zipdir.py`` with its NeedMoreBytes protocol), deflate indexes
(``formats/deflate.py``), MAT v5 and v4 (``formats/mat5``, ``formats/mat4.py``), the MAT v7.3
semantics over HDF5 objects (``formats/mat73``) and npystore's own HDF5 parsers
(``formats/h5index.py`` object headers and superblocks, ``formats/h5chunks.py`` chunk
indexes: v1 B-trees and fixed arrays, ``formats/h5groups.py`` group symbol tables; seeds and
drivers in ``hostile_h5.py``), plus mutated MAT v7.3 files read end to end through
``open_mat`` in a subprocess (no crash, only npystore's errors). Inputs are generated (valid
values from numpy, zipfile, scipy and h5py writers, and hostile values) or mutated (byte
flips, truncation, insertion, integer fields set to edge values, text edits).

Every input must give a result that satisfies the parser's invariants (offsets and lengths
inside the buffer, non-negative shapes, counts that agree) or raise FormatError or
UnsupportedError; any other exception is a bug. Each input is timed and must take less than
:data:`MAX_SECONDS`; the inputs actually run are counted and checked by the last test of this
module (at least :data:`TOTAL_QUOTA` in all).

The module ends with static checks (no ``eval``/``exec``, unpickling only behind
``allow_pickle``) and files declaring huge lengths, read with ``tracemalloc`` watching.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import itertools
import math
import pickle
import random
import re
import struct
import time
import tracemalloc
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npystore
from hostile_h5 import h5_seeds, run_e2e, walk_dataset, walk_group
from mat_corpus import CORPUS, CORPUS_FOUND
from npystore.errors import FormatError, UnsupportedError
from npystore.files.mat.h5safe import safe_root
from npystore.formats import deflate, h5index, h5sum, mat4, mat5, npy, zipdir
from npystore.formats._literal import parse_literal
from npystore.formats.mat73 import (
    CellArray,
    CharArray,
    Mat73Tree,
    MatNode,
    NumericArray,
    OpaqueObject,
    SparseArray,
    StructArray,
)
from npystore.formats.zipdir import NeedMoreBytes

SRC = "memory://hostile"
#: The errors a parser may raise on bad input; anything else is a bug.
ALLOWED = (FormatError, UnsupportedError)
#: Longest time one input may take.
MAX_SECONDS = 1.0
#: Mutated .mat v7.3 files read end to end in one subprocess (a crash fails, not kills, the
#: test session).
E2E_FILES = 160
#: Inputs each target must run (their sum is checked against TOTAL_QUOTA).
QUOTA = {
    "npy": 3600,
    "npy-text": 450,
    "zip": 2700,
    "deflate": 1350,
    "mat5": 1800,
    "mat4": 600,
    "mat73": 800,
    "mat73-mutated": 700,
    "h5index": 1500,
    "h5groups": 600,
    "h5headers": 600,
    "h5-e2e": E2E_FILES,
}
TOTAL_QUOTA = 14_500
#: Inputs run and the slowest input, per target (filled as the tests run).
COUNTS: Counter[str] = Counter()
SLOWEST: dict[str, float] = {}
#: The fuzz tests that ran to the end in this session.
FINISHED: set[str] = set()

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ],
)


def run_input(target: str, parse: Callable[[], object]) -> BaseException | None:
    """Run one input through ``parse``: count it, time it, let only FormatError and
    UnsupportedError through (returned); any other exception propagates as a bug."""
    COUNTS[target] += 1
    start = time.perf_counter()
    outcome: BaseException | None = None
    try:
        parse()
    except ALLOWED as exc:
        outcome = exc
    elapsed = time.perf_counter() - start
    if outcome is not None:
        assert str(outcome), f"{target}: {type(outcome).__name__} without a message"
    SLOWEST[target] = max(SLOWEST.get(target, 0.0), elapsed)
    assert elapsed < MAX_SECONDS, f"{target}: one input took {elapsed:.3f} s"
    return outcome


# ---------------------------------------------------------------- mutations

#: Integer values that break size and offset arithmetic.
EDGE_INTS = [
    0, 1, 2, 3, 7, 8, 15, 16, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x10000,
    0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFE, 0xFFFF_FFFF, 2**40, 2**48 - 1, 2**63 - 1, 2**64 - 1,
]  # fmt: skip


#: Byte strings inserted by mutations: record signatures of every format, and short runs.
INSERTS = [
    b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07", b"PK\x01\x02", b"PK\x03\x04",
    b"\x93NUMPY", b"TREE", b"OHDR", b"OCHK", b"\x0e\x00\x00\x00", b"\x0f\x00\x00\x00",
    b"\x00" * 8, b"\xff" * 8, b"IM", b"MI",
]  # fmt: skip
#: Mutations: a list of (kind, where, param) triples, interpreted by :func:`mutate`.
MUTATIONS = st.lists(
    st.tuples(st.integers(0, 7), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    min_size=1,
    max_size=3,
)
_DELTAS = [1, -1, 8, -8, 20, -20, 4096, -4096]


def _put(data: bytearray, pos: int, width: int, value: int, order: str) -> None:
    if pos >= 0 and pos + width <= len(data):
        data[pos : pos + width] = (value % (1 << (8 * width))).to_bytes(
            width, "little" if order == "<" else "big"
        )


def mutate(
    data: bytes, ops: list[tuple[int, int, int]], hot: list[int] | None = None, order: str = "<"
) -> bytes:
    """Apply ``ops`` to ``data``.

    Kinds 0-2 set an integer field (at an offset of ``hot``, the integer fields of the
    format, or anywhere) to an edge value, a small value or its old value plus a delta;
    3 flips bits of a byte; 4 truncates; 5 inserts a signature or a few bytes; 6 deletes a
    span; 7 copies a span over another one (duplicated records).
    """
    out = bytearray(data)
    for kind, where, param in ops:
        n = len(out)
        if n == 0:
            break
        if kind <= 2:
            width = (1, 2, 4, 4, 8)[param % 5]
            pos = hot[where % len(hot)] if hot else where % n
            pos = min(pos, max(0, n - width))
            choice, arg = (param // 5) % 4, param // 20
            if choice == 0 and pos + width <= n:
                old = int.from_bytes(out[pos : pos + width], "little" if order == "<" else "big")
                value = old + _DELTAS[arg % len(_DELTAS)]
            elif choice == 3:
                value = arg % 0x10000
            else:
                value = EDGE_INTS[arg % len(EDGE_INTS)]
            _put(out, pos, width, value, order)
        elif kind == 3:
            out[where % n] ^= param % 255 + 1
        elif kind == 4:
            del out[where % n :]
        elif kind == 5:
            pos = where % (n + 1)
            piece = INSERTS[param % len(INSERTS)] if param % 2 else param.to_bytes(4, "little")
            out[pos:pos] = piece[: 1 + (param >> 8) % len(piece)] if param % 4 == 0 else piece
        elif kind == 6:
            pos = where % n
            del out[pos : pos + 1 + param % 64]
        else:
            pos, src = where % n, (param >> 6) % n
            piece = bytes(out[src : src + 1 + param % 64])
            out[pos : pos + len(piece)] = piece
    return bytes(out)


# ---------------------------------------------------------------- npy headers

NPY_SCALARS = [
    "<f8", ">f8", "<f4", "<f2", "|b1", "|i1", "|u1", "<i2", ">u2", "<i4", ">u4", "<i8",
    "<u8", "<c8", ">c16", "|S1", "|S7", "<U1", ">U5", "|V3", "<M8[ns]", ">m8[s]", "<M8[D]",
    "|O",
]  # fmt: skip
NAME_CHARS = st.sampled_from([*list("abcxyz_09 "), "é", "ß", "☃", "日"])
FIELD_NAMES = st.text(NAME_CHARS, min_size=1, max_size=5)
SMALL_SHAPES = st.lists(st.integers(0, 4), max_size=3).map(tuple)


def _struct_dtypes(children: st.SearchStrategy[np.dtype[Any]]) -> st.SearchStrategy[Any]:
    field = st.tuples(FIELD_NAMES, children, SMALL_SHAPES)

    def build(fields: list[tuple[str, np.dtype[Any], tuple[int, ...]]]) -> np.dtype[Any]:
        spec = [(name, dt, shape) if shape else (name, dt) for name, dt, shape in fields]
        return np.dtype(spec)

    plain = st.lists(field, min_size=1, max_size=4, unique_by=lambda f: f[0]).map(build)
    aligned = plain.map(lambda dt: np.dtype(dt.descr, align=True) if dt.names else dt)

    def gapped(fields: list[tuple[str, np.dtype[Any], tuple[int, ...]]]) -> np.dtype[Any]:
        formats = [np.dtype((dt, shape)) if shape else dt for _, dt, shape in fields]
        offsets, at = [], 0
        for dt in formats:  # 8 bytes of padding before each field and at the end
            offsets.append(at + 8)
            at += 8 + dt.itemsize
        return np.dtype(
            {"names": [f[0] for f in fields], "formats": formats, "offsets": offsets,
             "itemsize": at + 8}
        )  # fmt: skip

    offsets = st.lists(field, min_size=1, max_size=3, unique_by=lambda f: f[0]).map(gapped)
    return plain | aligned | offsets


NPY_DTYPES = st.recursive(
    st.sampled_from(NPY_SCALARS).map(np.dtype),
    _struct_dtypes,
    max_leaves=8,
).filter(lambda dt: dt.itemsize < 2**20 and (dt.names is None or dt.itemsize > 0))
NPY_SHAPES = st.lists(st.integers(0, 5) | st.sampled_from([2**31, 2**40, 10**18]), max_size=4).map(
    tuple
)


def _header_text(descr: Any, fortran: Any, shape: Any, extra: str = "") -> str:
    """The dict text as numpy writes it (sorted keys, trailing comma)."""
    return (
        "{'descr': " + repr(descr) + ", 'fortran_order': " + repr(fortran) + ", 'shape': "
        + repr(shape) + ", " + extra + "}"
    )  # fmt: skip


def _wrap_header(text: str, version: int) -> bytes:
    """Preamble + text, padded with spaces and a newline to a multiple of 64 bytes."""
    raw = text.encode("utf8" if version == 3 else "latin1")
    start = 10 if version == 1 else 12
    pad = -(start + len(raw) + 1) % 64
    raw += b" " * pad + b"\n"
    fmt = "<H" if version == 1 else "<I"
    return npy.MAGIC + bytes([version, 0]) + struct.pack(fmt, len(raw)) + raw


def _numpy_header(
    dtype: np.dtype[Any], shape: tuple[int, ...], fortran: bool, version: int
) -> bytes:
    """A header written by numpy itself (v1, v2), or by the same rules for v3 (utf8)."""
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran, "shape": shape}
    if version == 3:
        return _wrap_header(_header_text(d["descr"], fortran, shape), 3)
    fp = io.BytesIO()
    writer = (
        np.lib.format.write_array_header_1_0
        if version == 1
        else (np.lib.format.write_array_header_2_0)
    )
    writer(fp, d)
    return fp.getvalue()


def parse_npy(data: bytes) -> npy.NpyHeader:
    """Preamble and header from the start of an .npy file, as ``api`` reads them."""
    pre = npy.parse_preamble(data, source=SRC)
    assert pre.version in ((1, 0), (2, 0), (3, 0))
    assert pre.header_start in (10, 12)
    assert pre.header_length >= 0
    header = npy.parse_header(pre, data[pre.header_start : pre.data_offset], source=SRC)
    check_npy_header(header, pre)
    return header


def check_npy_header(header: npy.NpyHeader, pre: npy.NpyPreamble) -> None:
    """The invariants of a parsed header."""
    assert header.version == pre.version
    assert header.data_offset == pre.header_start + pre.header_length
    assert isinstance(header.dtype, np.dtype)
    assert header.dtype.subdtype is None
    assert isinstance(header.shape, tuple)
    assert len(header.shape) <= npy.MAX_NDIM
    assert all(type(n) is int and n >= 0 for n in header.shape)
    assert isinstance(header.fortran_order, bool)
    assert header.size == math.prod(header.shape)
    assert header.nbytes == header.size * header.dtype.itemsize


def numpy_reads(data: bytes) -> tuple[tuple[int, ...], bool, np.dtype[Any]] | None:
    """numpy's own reading of a v1/v2 header, or None where numpy refuses it."""
    if len(data) > 20_000 or data[6:7] not in (b"\x01", b"\x02"):
        return None
    fp = io.BytesIO(data[8:])
    read = (
        np.lib.format.read_array_header_1_0
        if data[6] == 1
        else (np.lib.format.read_array_header_2_0)
    )
    try:
        shape, fortran, dtype = read(fp, max_header_size=1 << 30)
    except Exception:  # numpy is only the oracle: whatever it refuses is not compared
        return None
    return shape, fortran, dtype


@given(NPY_DTYPES, NPY_SHAPES, st.booleans(), st.sampled_from([1, 2, 3]))
@settings(FUZZ, max_examples=250)
def test_npy_valid_headers_match_numpy(
    dtype: np.dtype[Any], shape: tuple[int, ...], fortran: bool, version: int
) -> None:
    """Headers numpy writes parse to what numpy reads back from them."""
    try:
        data = _numpy_header(dtype, shape, fortran, version)
    except ValueError:  # numpy cannot write it (e.g. a header too long for version 1.0)
        return
    got: list[npy.NpyHeader] = []
    outcome = run_input("npy", lambda: got.append(parse_npy(data)))
    assert outcome is None, outcome
    header = got[0]
    expected = np.lib.format.descr_to_dtype(np.lib.format.dtype_to_descr(dtype))
    assert header.dtype == expected
    assert header.dtype.descr == expected.descr
    assert header.shape == shape
    assert header.fortran_order is fortran
    assert header.data_offset == len(data)
    oracle = numpy_reads(data)
    if oracle is not None:
        assert oracle == (header.shape, header.fortran_order, header.dtype)


#: Pieces of header text that probe the literal parser and descr_to_dtype.
HOSTILE_TEXT = [
    "(1099511627776,)", "(-1,)", "(3, -4)", "(True,)", "(1.5,)", "(0x10,)", "(1e9,)",
    "9" * 40, "(" + "1," * 70 + ")", "[" * 70, "(" * 70, "{" * 70, "'\\x00'", "'\\xff'",
    "'\\ud800'", "'\\N{SNOWMAN}'", "'\\N{NOPE}'", "'\\q'", "u'<f8'", "b'<f8'", "r'<f8'",
    "'''<f8'''", "'<f8\n'", "True", "None", "__import__('os')", "lambda: 0", "{1: 2}",
    "{[]: 1}", "{(): 1}", "'<U2000000000'", "'|V9999999999999'", "'(2147483647,2147483647)f8'",
    "'O'", "'<M8[xs]'", "'>>f8'", "'f8' 'f8'", "[('a', '<f8', (2147483647, 2147483647))]",
    "[('', '|V8'), ('a', '<i4')]", "[('', '<i4')]", "[('a', '<f8'), ('a', '<f8')]",
    "[(('t', 'a'), '<f8')]", "[(('a', 'a'), '<f8')]", "[((1, 'a'), '<f8')]", "[(1, '<f8')]",
    "[('a',)]", "[('a', '<f8', -1)]", "[('a', '<f8', (2, -2))]", "[('a', '<f8', 'x')]",
    "('<f8', (3,))", "('<f8', 3)", "('<f8',)", "[]", "[('a', [])]", "[('a', [('b', [('c', "
    "'<f8')])])]", "'descr'", ":", ",", ",,", "}", ")", "]", "\\", "'", '"', "#", "\x00",
    "0001", "-0", "+5", "5L", "5l", "1_000",
]  # fmt: skip
HEADER_KEYS = ["'descr'", "'fortran_order'", "'shape'"]


def _random_dtype(rng: np.random.Generator, depth: int = 0) -> np.dtype[Any]:
    """A scalar or (nested, aligned, padded, subarray) structured dtype."""
    if depth >= 3 or rng.random() < 0.5:
        return np.dtype(NPY_SCALARS[rng.integers(len(NPY_SCALARS))])
    n = int(rng.integers(1, 4))
    names = (
        ["a", "bb", "é", "日本", "x y"][:n] if rng.random() < 0.3 else [f"f{i}" for i in range(n)]
    )
    formats = []
    for _ in names:
        dt = _random_dtype(rng, depth + 1)
        if rng.random() < 0.25:
            dt = np.dtype((dt, tuple(int(k) for k in rng.integers(0, 4, rng.integers(1, 3)))))
        formats.append(dt)
    kind = rng.integers(3)
    if kind == 0:
        return np.dtype({"names": names, "formats": formats})
    if kind == 1:
        return np.dtype({"names": names, "formats": formats}, align=True)
    offsets, at = [], 0
    for dt in formats:  # 8 bytes of padding before each field and at the end
        offsets.append(at + 8)
        at += 8 + dt.itemsize
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": at + 8})


@cache
def npy_seeds() -> list[bytes]:
    """Valid headers of every version over random dtypes and shapes, written by numpy."""
    rng = np.random.default_rng(2024)
    seeds = []
    for i in range(300):
        dtype = _random_dtype(rng)
        ndim = int(rng.integers(0, 4))
        shape = tuple(int(n) for n in rng.choice([0, 1, 3, 7, 2**31, 2**40], ndim))
        try:
            seeds.append(_numpy_header(dtype, shape, bool(rng.random() < 0.3), i % 3 + 1))
        except ValueError:
            continue
    return seeds


TEXT_EDITS = st.lists(
    st.tuples(
        st.integers(0, len(HOSTILE_TEXT) + len(HEADER_KEYS) - 1) | st.text(max_size=6),
        st.integers(0, 2**16),
        st.sampled_from([0, 0, 1, 3, 8, 20]),
    ),
    min_size=1,
    max_size=3,
)


def edit_text(data: bytes, edits: list[tuple[int | str, int, int]]) -> bytes:
    """Replace spans of the header's dict text by hostile pieces, fixing the length."""
    version = data[6]
    start = 10 if version == 1 else 12
    text = data[start:].decode("utf8" if version == 3 else "latin1").rstrip()
    pieces = HOSTILE_TEXT + HEADER_KEYS
    for piece, where, cut in edits:
        at = where % (len(text) + 1)
        text = text[:at] + (piece if isinstance(piece, str) else pieces[piece]) + text[at + cut :]
    try:
        return _wrap_header(text, version)
    except UnicodeEncodeError:  # not latin1: a version 3 header then
        return _wrap_header(text, 3)


@given(st.integers(0, 2**16), MUTATIONS, TEXT_EDITS)
@settings(FUZZ, max_examples=600)
def test_npy_mutated_headers(
    seed: int, ops: list[tuple[int, int, int]], edits: list[tuple[int | str, int, int]]
) -> None:
    """Mutated headers (bytes, length field, dict text) parse with every invariant or raise
    FormatError/UnsupportedError; whenever numpy also reads one, both agree. Each example
    mutates three seeds in two ways: six inputs."""
    seeds = npy_seeds()
    for k in range(3):
        seed_bytes = seeds[(seed + 101 * k) % len(seeds)]
        for data in (
            mutate(seed_bytes, ops, hot=[6, 7, 8, 9, 10, 11]),
            edit_text(seed_bytes, edits),
        ):
            got: list[npy.NpyHeader] = []
            outcome = run_input("npy", lambda data=data, got=got: got.append(parse_npy(data)))
            if outcome is None:
                oracle = numpy_reads(data)
                if oracle is not None:
                    header = got[0]
                    assert oracle == (header.shape, header.fortran_order, header.dtype)
    FINISHED.add("npy")


LITERAL_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**40), 10**40)
    | st.text(max_size=8)
    | st.sampled_from(NPY_SCALARS),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=4) | st.integers(), children, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def header_dicts(draw: st.DrawFn) -> str:
    """Dict texts with any literal value under the three keys (and sometimes other keys)."""
    descr = draw(
        LITERAL_VALUES
        | st.lists(
            st.tuples(FIELD_NAMES, st.sampled_from(NPY_SCALARS))
            | st.tuples(FIELD_NAMES, st.sampled_from(NPY_SCALARS), LITERAL_VALUES)
            | st.tuples(st.tuples(FIELD_NAMES, FIELD_NAMES), LITERAL_VALUES),
            max_size=4,
        )
    )
    fortran = draw(st.sampled_from([True, False, 0, 1, None, "True"]))
    shape = draw(st.lists(st.integers(-3, 2**64), max_size=5).map(tuple) | LITERAL_VALUES)
    extra = draw(st.sampled_from(["", "", "'extra': 1, ", "'shape': (), "]))
    text = _header_text(descr, fortran, shape, extra)
    if draw(st.booleans()):
        text = text.replace("'fortran_order'", draw(st.sampled_from(["'fortran'", "1"])))
    return text


@given(header_dicts())
@settings(FUZZ, max_examples=500)
def test_npy_generated_header_dicts(text: str) -> None:
    """Dict literals with arbitrary values under the keys: parsed or refused cleanly, and
    the literal parser agrees with ast.literal_eval on everything it accepts."""
    data = _wrap_header(text, 3)

    def parse() -> None:
        value = parse_literal(text)
        assert value == ast.literal_eval(text)
        parse_npy(data)

    run_input("npy-text", parse)
    FINISHED.add("npy-text")


# ---------------------------------------------------------------- ZIP directory


def _with_zip64_end(data: bytes) -> bytes:
    """The archive with a ZIP64 end record and locator, the EOCD holding sentinels."""
    eocd = data.rfind(b"PK\x05\x06")
    entries, cd_size, cd_offset = struct.unpack_from("<2xH2I", data, eocd + 8)
    record = struct.pack(
        "<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, cd_size, cd_offset
    )
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, eocd, 1)
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 2**32 - 1, 2**32 - 1, 0)
    return data[:eocd] + record + locator + end


def _streamed_zip() -> bytes:
    """Members written to an unseekable stream: flag bit 3, sizes in data descriptors."""

    class Sink(io.RawIOBase):
        def __init__(self) -> None:
            super().__init__()
            self.data = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b: Any) -> int:
            self.data += bytes(b)
            return len(b)

    sink = Sink()
    with zipfile.ZipFile(sink, "w") as zf:
        for i, name in enumerate(["s.npy", "d.npy"]):
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED if i else zipfile.ZIP_STORED
            with zf.open(info, "w") as f:
                f.write(_npy_file(np.arange(5 + i)))
    return bytes(sink.data)


def _npy_file(arr: np.ndarray[Any, Any]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _zip(members: dict[str, bytes], *, method: int = zipfile.ZIP_STORED, **kw: Any) -> bytes:
    buf = io.BytesIO()
    comment = kw.pop("comment", b"")
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for name, data in members.items():
            with zf.open(name, "w", **kw) as f:
                f.write(data)
        zf.comment = comment
    return buf.getvalue()


def _zip_fields(data: bytes) -> list[int]:
    """Offsets of the integer fields of every record of a valid archive: the mutation hot
    spots (EOCD, ZIP64 record and locator, central headers and their extras, local headers)."""
    hot: list[int] = []
    eocd = len(data)
    while (eocd := data.rfind(b"PK\x05\x06", 0, eocd)) >= 0:  # the one the comment ends
        if eocd + 22 + struct.unpack_from("<H", data, eocd + 20)[0] == len(data):
            break
    hot += [eocd + k for k in (4, 6, 8, 10, 12, 16, 20)]
    loc = eocd - 20
    if data[loc : loc + 4] == b"PK\x06\x07":
        (record,) = struct.unpack_from("<Q", data, loc + 8)
        hot += [loc + 4, loc + 8, loc + 16]
        hot += [record + k for k in (4, 12, 14, 16, 20, 24, 32, 40, 48)]
        (count, _cd_size, cd_offset) = struct.unpack_from("<8x3Q", data, record + 24)
    else:
        count, _cd_size, cd_offset = struct.unpack_from("<2xH2I", data, eocd + 8)
    pos = cd_offset
    for _ in range(count):
        n, m, k = struct.unpack_from("<3H", data, pos + 28)
        hot += [pos + f for f in (8, 10, 16, 20, 24, 28, 30, 32, 34, 42)]
        hot += list(range(pos + 46 + n, pos + 46 + n + m, 2))  # extra fields, 2 bytes apart
        (lho,) = struct.unpack_from("<I", data, pos + 42)
        if lho < len(data) - 30:
            hot += [lho + f for f in (6, 8, 14, 18, 22, 26, 28)]
        pos += 46 + n + m + k
    return hot


@cache
def zip_seeds() -> list[tuple[bytes, list[int]]]:
    """Small archives from numpy and zipfile, with the offsets of their integer fields."""
    arrays = {
        "a": np.arange(12.0).reshape(3, 4),
        "b": np.array([(1, 2.0)], dtype=[("x", "<i4"), ("y", ">f8")]),
        "ünï": np.zeros((0, 3), "<U2"),
    }
    plain, packed = io.BytesIO(), io.BytesIO()
    np.savez(plain, **arrays)
    np.savez_compressed(packed, **arrays)
    members = {f"m{i}.npy": _npy_file(np.arange(i)) for i in range(6)}
    archives = [
        plain.getvalue(),
        packed.getvalue(),
        _zip(members, comment=b"a comment PK\x05\x06 with a fake signature"),
        _zip(members, method=zipfile.ZIP_DEFLATED, force_zip64=True),
        _with_zip64_end(plain.getvalue()),
        _with_zip64_end(_zip({"x.npy": _npy_file(np.ones(3))}, method=zipfile.ZIP_DEFLATED)),
        _streamed_zip(),
        _zip({}),
        _zip({"dir/not-npy.txt": b"hello" * 40, "e.npy": b""}),
    ]
    return [(data, _zip_fields(data)) for data in archives]


def _asking(call: Callable[[], Any]) -> tuple[Any, NeedMoreBytes | None]:
    """``call()``, or the NeedMoreBytes it raised."""
    try:
        return call(), None
    except NeedMoreBytes as more:
        return None, more


def _ask(
    buf: bytes, parse: Callable[[bytes, int], Any], data: bytes, start: int, rounds: int = 6
) -> Any:
    """Run a directory parser as ``ZipArchive`` does, reading exactly what it asks for; a
    request must lie inside the archive and not be one it was already given."""
    for _ in range(rounds):
        result, more = _asking(lambda data=data, start=start: parse(data, start))
        if more is None:
            return result
        assert more.needed > 0, more
        assert 0 <= more.offset <= more.offset + more.needed <= len(buf), (more, len(buf))
        given = start <= more.offset and more.offset + more.needed <= start + len(data)
        assert not given, f"asks for [{more.offset}, +{more.needed}), which it was given"
        data, start = buf[more.offset : more.offset + more.needed], more.offset
    raise AssertionError(f"the parser keeps asking for more bytes after {rounds} reads")


def check_end(end: zipdir.EndRecord, size: int) -> None:
    """Invariants of a complete end record."""
    assert not end.zip64_pending
    assert 0 <= end.cd_offset <= end.cd_offset + end.cd_size <= end.eocd_offset
    assert end.eocd_offset + 22 + len(end.comment) + end.trailing_bytes == size
    assert end.trailing_bytes >= 0
    assert end.entries * zipdir.CENTRAL_HEADER_SIZE <= end.cd_size
    if end.zip64_record_offset is not None:
        assert end.zip64_locator_offset is not None
        assert end.cd_offset + end.cd_size <= end.zip64_record_offset
        assert end.zip64_record_offset + 56 <= end.zip64_locator_offset
        assert end.zip64_locator_offset + 20 == end.eocd_offset


def read_zip(buf: bytes, tail: int) -> None:
    """The whole open of an archive as ``ZipArchive`` does it, from a tail of ``tail`` bytes,
    then every member's local header and the npy header at the start of its data."""
    size = len(buf)
    tail_offset = size - min(size, tail)
    end = _ask(
        buf,
        lambda d, s: zipdir.parse_end_record(d, s, size, source=SRC),
        buf[tail_offset:],
        tail_offset,
    )
    if end.zip64_pending:
        record = end.zip64_record_offset
        assert record is not None
        assert record + 56 <= size
        end = _ask(
            buf,
            lambda d, s: zipdir.parse_zip64_end_record(d, s, end, size, source=SRC),
            buf[record : record + 56],
            record,
        )
    check_end(end, size)
    final = end
    directory = _ask(
        buf,
        lambda d, s: zipdir.parse_central_directory(d, s, final, size, source=SRC),
        buf[tail_offset:],
        tail_offset,
    )
    assert directory.end == end
    assert [e.index for e in directory.entries] == list(range(end.entries))
    zipdir.check_members(directory, source=SRC)
    names = [e.name for e in directory.entries]
    assert len(set(names)) == len(names)
    for entry in directory.entries:
        assert zipdir.member_name_problem(entry.name) is None
        assert entry.compressed_size >= 0
        assert entry.uncompressed_size >= 0
        lho = entry.local_header_offset
        want = zipdir.LOCAL_HEADER_SIZE + len(entry.raw_name) + 64
        local = _ask(
            buf,
            lambda d, s, e=entry: zipdir.parse_local_header(
                d, e, size, source=SRC, cd_offset=end.cd_offset
            ),
            buf[lho : lho + want],
            lho,
        )
        name_len = len(entry.raw_name)
        assert local.entry == entry
        assert local.header_offset == lho
        assert local.data_offset == lho + zipdir.LOCAL_HEADER_SIZE + name_len + local.extra_length
        assert local.data_offset + entry.compressed_size <= end.cd_offset
        read_member_header(buf, local)


def read_member_header(buf: bytes, local: zipdir.LocalHeader) -> None:
    """The npy header at the start of a member's data (stored or deflated), as the archive
    layer reads it."""
    entry = local.entry
    raw = buf[local.data_offset : local.data_offset + min(entry.compressed_size, 1 << 16)]
    if entry.method == 8:
        try:
            text = deflate.raw_decompressobj().decompress(raw, 1 << 16)
        except deflate.INFLATE_ERRORS:
            return  # the archive layer's FormatError
    elif entry.method == 0:
        text = raw
    else:
        return
    if not npy.is_npy(text) or len(text) < npy.PREAMBLE_MAX_LEN:
        return
    pre = npy.parse_preamble(text, source=SRC)
    if pre.data_offset <= len(text):
        header = npy.parse_header(pre, text[pre.header_start : pre.data_offset], source=SRC)
        check_npy_header(header, pre)


ZIP_TAILS = st.sampled_from([zipdir.tail_size(2**40), 64, 1024, 2**20])


@given(st.integers(0, 2**16), MUTATIONS, ZIP_TAILS)
@settings(FUZZ, max_examples=1000)
def test_zip_mutated_archives(seed: int, ops: list[tuple[int, int, int]], tail: int) -> None:
    """Mutated archives (integer fields of every record, bytes, spans) open with every
    invariant, or raise FormatError/UnsupportedError; the NeedMoreBytes protocol only asks
    for ranges inside the archive that it was not given. Three seeds per example."""
    seeds = zip_seeds()
    for k in range(3):
        data, hot = seeds[(seed + 5 * k) % len(seeds)]
        buf = mutate(data, ops, hot=hot if ops[0][0] != 1 else None)
        run_input("zip", lambda buf=buf: read_zip(buf, tail))
    FINISHED.add("zip")


# ---------------------------------------------------------------- deflate indexes


class DeflateSeed:
    """A raw deflate stream, its data, its GZIDX export and a checkpoint index of our own."""

    def __init__(self, data: bytes, raw: bytes, gzidx: bytes, own: deflate.DeflateIndex) -> None:
        self.data = data
        self.raw = raw
        self.gzidx = gzidx
        self.own = own
        self.serialized = own.to_bytes()
        self.gzidx_hot = [5, 6, 7, 15, 23, 27, 31]
        version = gzidx[5]
        step = 18 if version == 1 else 17
        (points,) = struct.unpack_from("<I", gzidx, 31)
        for i in range(points):
            self.gzidx_hot += [35 + i * step + f for f in (0, 8, 16, 17)][: 3 + (version == 1)]
        self.serialized_hot = [16, 24, 32]
        pos = 36
        for cp in own.checkpoints:
            self.serialized_hot += [pos, pos + 8, pos + 16]
            pos += 20 + len(cp.window)


@cache
def deflate_seeds() -> list[DeflateSeed]:
    """Streams with full-flush points (our index) and an indexed_gzip export (bit offsets)."""
    import indexed_gzip

    rng = np.random.default_rng(5)
    seeds = []
    for n, level in ((12, 6), (30, 9), (3, 1)):
        pieces = [
            bytes(rng.integers(0, 4 + 60 * (i % 3), 2500 + 700 * i, dtype=np.uint8))
            + bytes(range(256)) * (i % 5)
            for i in range(n)
        ]
        c = zlib.compressobj(level, zlib.DEFLATED, -15)
        raw, data, cps = b"", b"", [deflate.Checkpoint(0, 0, b"")]
        for i, piece in enumerate(pieces):
            raw += c.compress(piece)
            data += piece
            if i % 4 == 3:  # byte aligned, no back-reference across: a checkpoint
                raw += c.flush(zlib.Z_FULL_FLUSH)
                cps.append(
                    deflate.Checkpoint(8 * len(raw), len(data), data[-deflate.WINDOW_SIZE :])
                )
        raw += c.flush()
        own = deflate.DeflateIndex(
            len(raw), len(data), tuple(cps[:-1] if cps[-1].out_offset == len(data) else cps)
        )
        gz = deflate.GZIP_HEADER + raw + deflate.gzip_trailer(zlib.crc32(data), len(data))
        with indexed_gzip.IndexedGzipFile(
            fileobj=io.BytesIO(gz), spacing=65536, window_size=32768, readbuf_size=4096,
            drop_handles=False,
        ) as f:  # fmt: skip
            f.build_full_index()
            exported = io.BytesIO()
            f.export_index(fileobj=exported)
        seeds.append(DeflateSeed(data, raw, exported.getvalue(), own))
    return seeds


def check_deflate_index(index: deflate.DeflateIndex) -> None:
    """Invariants of a deflate index."""
    cps = index.checkpoints
    assert cps[0] == deflate.Checkpoint(0, 0, b"")
    for a, b in itertools.pairwise(cps):
        assert a.out_offset < b.out_offset
        assert a.bit_offset < b.bit_offset
    assert cps[-1].bit_offset <= 8 * index.compressed_size
    assert cps[-1].out_offset <= index.uncompressed_size
    assert all(len(cp.window) <= deflate.WINDOW_SIZE for cp in cps)


def inflate_range(
    index: deflate.DeflateIndex, raw: bytes, start: int, length: int, data: bytes | None
) -> None:
    """Output ``[start, start + length)`` (clipped) from the index's checkpoint: exactly
    ``length`` bytes, equal to ``data``'s when the index and stream are the true ones."""
    stop = min(start + length, index.uncompressed_size)
    start = min(start, stop)
    cp, byte_start, byte_stop = index.locate(start, stop)
    assert cp.out_offset <= start
    assert 0 <= byte_start <= byte_stop <= index.compressed_size
    out = deflate.inflate_from(cp, raw[byte_start:byte_stop], start - cp.out_offset, stop - start)
    assert len(out) == stop - start
    if data is not None:
        assert out == data[start:stop]


@given(st.integers(0, 2**16), MUTATIONS, st.integers(0, 2**20), st.integers(1, 40_000))
@settings(FUZZ, max_examples=500)
def test_deflate_mutated_indexes(
    seed: int, ops: list[tuple[int, int, int]], start: int, length: int
) -> None:
    """Mutated GZIDX exports and serialized indexes load with every invariant (a serialized
    one round-trips) or raise FormatError; any index inflates exactly the bytes asked for
    or raises FormatError, and the true index over a mutated stream does the same."""
    seeds = deflate_seeds()
    s = seeds[seed % len(seeds)]
    start %= len(s.data)

    def gzidx() -> None:
        index = deflate.parse_gzidx(
            mutate(s.gzidx, ops, hot=s.gzidx_hot), header_size=10, compressed_size=len(s.raw)
        )
        check_deflate_index(index)
        inflate_range(index, s.raw, start, length, None)

    def serialized() -> None:
        blob = mutate(s.serialized, ops, hot=s.serialized_hot)
        index = deflate.DeflateIndex.from_bytes(blob)
        check_deflate_index(index)
        assert index.to_bytes() == blob
        inflate_range(index, s.raw, start, length, s.data if blob == s.serialized else None)

    def stream() -> None:
        raw = mutate(s.raw, ops)
        exact = raw == s.raw
        index = (
            s.own
            if seed % 2
            else deflate.parse_gzidx(s.gzidx, header_size=10, compressed_size=len(s.raw))
        )
        inflate_range(index, raw, start, length, s.data if exact else None)

    for run in (gzidx, serialized, stream):
        run_input("deflate", run)
    FINISHED.add("deflate")


def test_deflate_seed_indexes_are_exact() -> None:
    """The seeds' indexes are true: every checkpoint (bit-aligned ones from indexed_gzip
    included, some of which ISA-L alone cannot resume from) gives the right bytes."""
    counts = []
    for s in deflate_seeds():
        gz = deflate.parse_gzidx(s.gzidx, header_size=10, compressed_size=len(s.raw))
        counts.append(len(gz.checkpoints))
        for index in (gz, s.own):
            check_deflate_index(index)
            for cp in index.checkpoints:
                inflate_range(index, s.raw, cp.out_offset, 5000, s.data)
    assert max(counts) > 3


# ---------------------------------------------------------------- MAT v5 and v4


class MatSeed:
    """A MAT-file, its byte order, the offsets of its tag words (mutation hot spots), and
    the inflated element of each miCOMPRESSED variable."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        header = mat5.parse_header(data[:128], source=SRC, file_size=len(data))
        self.order = header.byte_order
        self.version = header.version
        self.inner: list[tuple[mat5.VariableEntry, bytes]] = []
        if header.version == 4:
            self.hot = [
                m.offset + k for m in mat4.parse_v4(data, source=SRC) for k in range(0, 20, 4)
            ]
            return
        entries, _ = mat5.scan_elements(data[128:], 128, len(data), self.order, source=SRC)
        self.hot = list(range(116, len(data) - 3, 4))
        for e in entries:
            if e.compressed:
                self.inner.append((e, zlib.decompress(data[e.data_offset : e.end])))


def _savemat(**kw: Any) -> bytes:
    buf = io.BytesIO()
    fmt = kw.pop("_format", "5")
    compress = kw.pop("_compress", False)
    scipy.io.savemat(buf, kw, format=fmt, do_compression=compress)
    return buf.getvalue()


@cache
def mat_seeds() -> list[MatSeed]:
    """MAT-files from scipy (v5 compressed and not, v4) and small files of the corpus."""
    rng = np.random.default_rng(9)
    sp = scipy.sparse.random(6, 5, density=0.4, random_state=3, format="csc")
    contents: list[dict[str, Any]] = [
        {"d": np.arange(6.0).reshape(2, 3), "i": np.int8([1, -2, 3]), "b": np.array([True, False])},
        {"c": np.array([1 + 2j, 3 - 4j]), "u": np.uint16([[1, 2], [3, 4]]), "e": np.zeros((0, 3))},
        {"s": "hello", "w": "héllo ☃", "m": np.array(["ab", "cd"]), "z": ""},
        {"st": {"a": 1.0, "b": "x", "n": {"deep": np.arange(3)}}},
        {"sa": np.array([(1.0, "x"), (2.0, "y")], dtype=[("p", object), ("q", object)])},
        {"cell": np.array([np.arange(2), "txt", np.zeros((0, 0)), {"f": 1}], dtype=object)},
        {"sp": sp, "spc": sp * (1 + 1j), "spl": sp > 0.5},
        {"big": rng.standard_normal((20, 30)), "r": rng.integers(0, 9, (4, 5, 2))},
        {"es": np.zeros((0, 0), dtype=[("a", object)]), "ec": np.empty((0, 2), dtype=object)},
    ]
    files = []
    for content in contents:
        files.append(_savemat(**content))
        files.append(_savemat(**content, _compress=True))
    for content in (
        {"d": np.arange(6.0).reshape(2, 3), "t": "text", "x": np.float32([[1, 2]])},
        {"sp": sp, "c": np.array([[1 + 1j, 2]]), "m": np.array(["ab", "cd"])},
    ):
        files.append(_savemat(**content, _format="4"))
    if CORPUS_FOUND:
        for path in sorted(CORPUS.glob("*/*.mat")):
            data = path.read_bytes()
            if len(data) <= 64 * 1024 and not mat5.is_v73(data[:128]):
                files.append(data)
    seeds = []
    for data in files:
        try:
            seeds.append(MatSeed(data))
        except (FormatError, UnsupportedError):
            continue  # e.g. a corpus file this parser refuses on purpose
    return seeds


def _check_mat_node(node: mat5.MatNode, lo: int, hi: int) -> None:
    """Invariants of a parsed v5 tree: every node and range inside its parent, sizes that
    agree with the dimensions."""
    assert lo <= node.offset <= node.offset + node.size <= hi, (node.offset, node.size, lo, hi)
    assert len(node.dims) >= 2
    assert all(d >= 0 for d in node.dims)
    start, stop = node.offset, node.offset + node.size
    numel = math.prod(node.dims)
    if isinstance(node, mat5.NumericArray | mat5.CharArray | mat5.SparseArray):
        for ref in node.data_refs():
            assert start + 8 <= ref.offset <= ref.end <= stop
            assert ref.nbytes >= 0
            assert ref.nbytes % ref.stored_dtype.itemsize == 0
    if isinstance(node, mat5.NumericArray):
        assert node.real.count == numel
        assert node.imag is None or node.imag.count == numel
    elif isinstance(node, mat5.SparseArray):
        assert len(node.dims) == 2
        assert node.jc.count >= node.dims[1] + 1
    elif isinstance(node, mat5.CellArray):
        assert len(node.cells) == numel
        for cell in node.cells:
            _check_mat_node(cell, start, stop)
    elif isinstance(node, mat5.StructArray):
        assert len(node.values) == numel * len(node.field_names)
        assert len(set(node.field_names)) == len(node.field_names)
        for value in node.values:
            _check_mat_node(value, start, stop)
    elif isinstance(node, mat5.OpaqueObject) and node.content is not None:
        _check_mat_node(node.content, start, stop)


def _check_decoded(node: mat5.MatNode, value: Any) -> None:
    """The decoded value has the node's MATLAB shape."""
    if isinstance(node, mat5.NumericArray | mat5.CellArray | mat5.StructArray):
        assert value.shape == node.dims
    elif isinstance(node, mat5.CharArray):
        assert value.shape == (node.dims[0], *node.dims[2:])
    elif isinstance(node, mat5.SparseArray):
        assert value.shape == node.dims


def read_variable(element: bytes, base: int, order: str, *, inflated: bool) -> None:
    """Header, tree and values of one variable. ``element`` is complete for a file element
    (no NeedMoreBytes then); an inflated one may be cut short, and may then ask only for
    bytes past its end."""
    header, more = _asking(
        lambda: mat5.parse_matrix_header(element, base, order, source=SRC, inflated=inflated)
    )
    if more is None:
        var, more = _asking(
            lambda: mat5.parse_variable(element, base, order, source=SRC, inflated=inflated)
        )
    if more is not None:
        assert inflated, f"asks for {more.offset}+{more.needed} of a complete element"
        assert more.offset + more.needed > base + len(element), more
        return
    assert var.offset == base
    assert var.inflated is inflated
    assert (header.name, header.dims) == (var.name, var.value.dims)
    _check_mat_node(var.value, base, base + var.size)
    if any(ref.end > base + len(element) for ref in var.data_refs()):
        assert inflated  # the values lie past an inflated prefix
        return
    _check_decoded(var.value, var.decode(element, base))
    if isinstance(var.value, mat5.CharArray):
        grid = var.decode(element, base, as_strings=False)
        assert grid.shape == var.value.dims
    if not inflated and len(element) <= 4096:
        assert _parse_in_pieces(element, base, order) == var


def _parse_in_pieces(element: bytes, base: int, order: str) -> mat5.MatVariable:
    """The NeedMoreBytes protocol as ``mat_v5`` runs it, from the first 16 bytes: every
    request lies inside the element and is new, and the result is the one-shot one."""
    extra: dict[int, bytes] = {}
    end = base + len(element)
    for _ in range(500):
        var, more = _asking(
            lambda: mat5.parse_variable(element[:16], base, order, source=SRC, extra=extra)
        )
        if more is None:
            return var  # type: ignore[no-any-return]
        assert base <= more.offset < more.offset + more.needed <= end, (more, base, end)
        assert more.offset not in extra or len(extra[more.offset]) < more.needed
        stop = min(end, more.offset + max(more.needed, 64))
        extra[more.offset] = element[more.offset - base : stop - base]
    raise AssertionError("more than 500 NeedMoreBytes rounds")


def read_mat(buf: bytes) -> None:
    """A whole MAT-file as ``mat_v5`` reads it: header, element scan, each variable."""
    header = mat5.parse_header(buf[:128], source=SRC, file_size=len(buf))
    assert header.byte_order in ("<", ">")
    if header.version == 4:
        read_v4(buf)
        return
    assert header.version == 5
    assert header.data_start == 128
    entries, nxt = mat5.scan_elements(
        buf[128:], 128, len(buf), header.byte_order, source=SRC, subsys_offset=header.subsys_offset
    )
    assert nxt is None
    pos = 128
    for e in entries:
        assert e.offset == pos
        assert e.total_size >= 8
        pos = e.end
    assert pos == max(128, len(buf))
    for e in entries:
        if e.compressed:
            try:
                inner = zlib.decompressobj().decompress(buf[e.data_offset : e.end], 1 << 20)
            except zlib.error:
                continue  # mat_v5's FormatError
            read_variable(inner, 0, header.byte_order, inflated=True)
        else:
            read_variable(buf[e.offset : e.end], e.offset, header.byte_order, inflated=False)


def read_v4(buf: bytes) -> None:
    """Every Level-4 matrix, back to back to the end of the file, and its value."""
    matrices = mat4.parse_v4(buf, source=SRC)
    pos = 0
    for m in matrices:
        assert m.offset == pos
        assert m.size >= mat4.V4_HEADER_SIZE
        assert m.mrows >= 0
        assert m.ncols >= 0
        for ref in m.data_refs():
            assert m.offset < ref.offset <= ref.end <= m.offset + m.size
            assert ref.count == m.mrows * m.ncols
        pos += m.size
    assert pos == len(buf)
    for m in matrices:
        value = m.decode(buf)
        if m.kind == "full":
            assert value.shape == m.dims
        elif m.kind == "text":
            assert value.shape == (m.mrows,)
        else:
            assert value.ndim == 2


def _mutate_inner(seed: MatSeed, ops: list[tuple[int, int, int]], which: int) -> bytes:
    """Mutate the inflated element of one miCOMPRESSED variable and compress it back."""
    entry, inner = seed.inner[which % len(seed.inner)]
    changed = mutate(inner, ops, hot=list(range(0, max(1, len(inner) - 3), 4)), order=seed.order)
    z = zlib.compress(changed, 1)
    tag = struct.pack(f"{seed.order}II", mat5.MI_COMPRESSED, len(z))
    return seed.data[: entry.offset] + tag + z + seed.data[entry.end :]


@given(st.integers(0, 2**16), MUTATIONS, st.booleans())
@settings(FUZZ, max_examples=1200)
def test_mat_mutated_files(seed: int, ops: list[tuple[int, int, int]], inner: bool) -> None:
    """Mutated MAT-files (tag words, sizes, bytes; inside compressed variables too) parse
    into trees whose ranges and sizes agree, decode to values of their MATLAB shape, or
    raise FormatError/UnsupportedError. Two seeds per example."""
    seeds = mat_seeds()
    for k in range(2):
        s = seeds[(seed + 7 * k) % len(seeds)]
        if inner and s.inner:
            buf = _mutate_inner(s, ops, seed)
        else:
            buf = mutate(s.data, ops, hot=s.hot if ops[0][0] != 1 else None, order=s.order)
        run_input("mat4" if s.version == 4 else "mat5", lambda buf=buf: read_mat(buf))
    FINISHED.add("mat5")


@given(st.integers(0, 2**16), MUTATIONS)
@settings(FUZZ, max_examples=250)
def test_mat4_mutated_files(seed: int, ops: list[tuple[int, int, int]]) -> None:
    """Mutated Level-4 files: matrices back to back with consistent sizes and values of
    their shape, or FormatError/UnsupportedError."""
    seeds = [s for s in mat_seeds() if s.version == 4]
    for k in range(2):
        s = seeds[(seed + k) % len(seeds)]
        order = "<" if s.data[0] == 0 else ">"
        buf = mutate(s.data, ops, hot=s.hot if ops[0][0] != 1 else None, order=order)
        run_input("mat4", lambda buf=buf: read_mat(buf))
    FINISHED.add("mat4")


def test_mat_seeds_read_cleanly() -> None:
    """The unmutated seeds read without any error (so mutations start from valid files)."""
    seeds = mat_seeds()
    assert sum(s.version == 4 for s in seeds) >= 2
    assert sum(bool(s.inner) for s in seeds) >= 9
    for s in seeds:
        read_mat(s.data)


# ---------------------------------------------------------------- MAT v7.3 semantics


class FakeRef:
    """An HDF5 object reference: false when null, resolved by indexing a group."""

    __slots__ = ("target",)

    def __init__(self, target: Any) -> None:
        self.target = target

    def __bool__(self) -> bool:
        return self.target is not None


class FakeAttrs(dict[str, Any]):
    """h5py's AttributeManager: ``get`` and ``in``."""


class FakeDataset:
    """An h5py Dataset as Mat73Tree uses it: reading gives an array of its shape and dtype
    (h5py.Empty for a null dataspace); it hashes by identity, as h5py hashes by address."""

    def __init__(self, name: str, data: Any, attrs: dict[str, Any], shape: Any = ...) -> None:
        self._name = name
        self._data = data
        self._attrs = FakeAttrs(attrs)
        self._shape = data.shape if shape is ... else shape

    @property
    def name(self) -> str:
        return self._name

    @property
    def attrs(self) -> FakeAttrs:
        return self._attrs

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self._shape  # type: ignore[no-any-return]

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._data.dtype  # type: ignore[no-any-return]

    def check(self, where: str) -> None:
        """Fakes hold their values: none is in other files."""

    def read(self, where: str) -> Any:
        if self._shape is None:
            return h5py.Empty(self._data.dtype)
        return self._data[()].copy() if isinstance(self._data, np.ndarray) else self._data

    def reference_keys(self, where: str) -> None:
        """Fakes give no addresses: every reference is followed."""


class FakeGroup:
    """An h5py Group: members by name or path, references resolved by indexing."""

    def __init__(self, name: str, attrs: dict[str, Any]) -> None:
        self._name = name
        self._attrs = FakeAttrs(attrs)
        self.members: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def attrs(self) -> FakeAttrs:
        return self._attrs

    def keys(self) -> list[str]:
        return list(self.members)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.members))

    def __contains__(self, name: object) -> bool:
        try:
            self[name]
        except (KeyError, TypeError, ValueError):
            return False
        return True

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, FakeRef):
            if key.target is None:
                raise ValueError("Invalid HDF5 object reference")
            if key.target == "dangling":
                raise KeyError("Unable to open object (bad object header address)")
            return key.target
        if isinstance(key, bytes):
            key = key.decode("utf-8", "surrogateescape")
        if not isinstance(key, str):
            raise TypeError(f"Accessing a group is done with bytes or str, not {type(key)}")
        obj: Any = self
        for part in key.strip("/").split("/"):
            if not isinstance(obj, FakeGroup) or part not in obj.members:
                raise KeyError(f"Unable to open object (object {key!r} doesn't exist)")
            obj = obj.members[part]
        return obj


def _vlen_names(names: list[bytes]) -> np.ndarray[Any, Any]:
    out = np.empty(len(names), dtype=h5py.vlen_dtype(np.dtype("S1")))
    for i, name in enumerate(names):
        out[i] = np.frombuffer(name, "S1") if name else np.zeros(0, "S1")
    return out


def _vlen_ints(values: list[int]) -> np.ndarray[Any, Any]:
    out = np.empty(2, dtype=h5py.vlen_dtype(np.dtype("<i8")))
    out[0] = np.array(values, "<i8")
    out[1] = np.array([97], "<i8")
    return out


CLASSES73 = [
    None, b"double", b"single", b"int8", b"uint8", b"uint16", b"int64", b"uint64", b"logical",
    b"char", b"cell", b"struct", b"function_handle", b"canonical empty", b"string", b"MyClass",
    "double", np.bytes_(b"cell"), np.array([b"double", b"cell"]), np.array(b"struct"), 5,
    b"\xff\xfe",
]  # fmt: skip
FIELDS73 = [
    None,
    _vlen_names([b"a", b"b"]),
    _vlen_names([b"a", b"a"]),
    _vlen_names([b"\xff\xfe"]),
    _vlen_names([b"x", b""]),
    _vlen_ints([2**40, 1]),
    _vlen_ints([-1]),
    np.array(["a", "b"]),
    np.array([1.5, 2.5]),
    np.array([b"a", 5], dtype=object),
    b"a",
]
FLAGS73 = [None, np.uint8(1), np.uint8(0), 1, np.array([1, 1]), "yes", np.array([]), np.nan]
SPARSE73 = [None, np.uint64(3), np.int64(-1), np.uint64(2**60), np.array([2, 3]), b"3", 3.5]
DTYPES73 = [
    np.dtype("<f8"), np.dtype("<f4"), np.dtype("|u1"), np.dtype("<u2"), np.dtype("<i8"),
    np.dtype("<u8"), np.dtype("<u4"), np.dtype("|b1"), np.dtype("|S3"),
    np.dtype([("real", "<f8"), ("imag", "<f8")]), np.dtype([("real", "<i2"), ("imag", "<i2")]),
    np.dtype([("a", "<f8"), ("b", "<f8")]), np.dtype([("real", "S2"), ("imag", "S2")]),
]  # fmt: skip
SHAPES73: list[Any] = [
    None,
    (),
    (0,),
    (3,),
    (1, 1),
    (2, 3),
    (3, 1, 2),
    (0, 2**40),
    (2**40, 0),
    (1,) * 70,
]
KINDS73 = ["numeric", "char", "empty", "cell", "vlen-cell", "struct", "struct-array", "sparse",
           "object", "group"]  # fmt: skip


def _fill(dtype: np.dtype[Any], shape: tuple[int, ...], values: list[int]) -> np.ndarray[Any, Any]:
    """An array of ``shape`` and ``dtype`` holding ``values`` over and over."""
    size = math.prod(shape)
    flat = np.zeros(size, dtype)
    if size and values:
        ints = np.resize(np.array(values, dtype=np.int64), size)
        if dtype.names:
            for name in dtype.names:
                flat[name] = ints.astype(dtype.fields[name][0]) if dtype.fields else 0
        else:
            with np.errstate(all="ignore"):
                flat[:] = ints.astype(dtype)
    return flat.reshape(shape if len(shape) <= 32 else (size,))  # HDF5: rank 32 at most


@st.composite
def fake_files(draw: st.DrawFn) -> FakeGroup:
    """A root group of variables of every kind MATLAB writes (and hostile variants):
    attributes, dtypes and shapes drawn from edge values; references and hard links into a
    pool of objects, so values are shared, cyclic or dangling."""
    n = draw(st.integers(1, 6))
    pool: list[Any] = []
    links: list[tuple[Any, str, list[int]]] = []
    ints = st.lists(st.integers(-2, 2**16) | st.sampled_from([0x10FFFF + 1, 0xD800, 2**40]),
                    max_size=6)  # fmt: skip
    for i in range(n):
        kind = draw(st.sampled_from(KINDS73))
        attrs: dict[str, Any] = {}
        cls = draw(st.sampled_from(CLASSES73))
        if cls is not None:
            attrs["MATLAB_class"] = cls
        for key, choices in (("MATLAB_empty", FLAGS73), ("MATLAB_global", FLAGS73),
                             ("MATLAB_fields", FIELDS73), ("MATLAB_sparse", SPARSE73)):  # fmt: skip
            if draw(st.integers(0, 5)) == 0:
                value = draw(st.sampled_from(choices))
                if value is not None:
                    attrs[key] = value
        if draw(st.integers(0, 5)) == 0:
            attrs["MATLAB_object_decode"] = draw(st.sampled_from([1, 2, 3]))
        name = f"/#refs#/o{i}"
        shape = draw(st.sampled_from(SHAPES73))
        obj: Any
        if kind in ("numeric", "char", "object"):
            dtype = draw(st.sampled_from(DTYPES73))
            if kind == "char":
                dtype = draw(
                    st.sampled_from([np.dtype("<u2"), np.dtype("<u4"), np.dtype("<i4"), dtype])
                )
            values = draw(ints)
            if kind == "object":  # a classdef object header: [magic, ndims, dims, ids, class]
                dtype, values = np.dtype("<u4"), [3707764736, 2, 1, 1, 7, 1, *values]
                shape = (len(values),)
            data = _fill(dtype, shape if shape is not None else (), values)
            obj = FakeDataset(name, data, attrs, shape)
        elif kind == "empty":
            attrs["MATLAB_empty"] = np.uint8(1)
            dims = draw(st.lists(st.sampled_from([0, 1, 2, 2**48, 2**63]), max_size=4))
            dtype = draw(st.sampled_from([np.dtype("<u8"), np.dtype("<f8")]))
            obj = FakeDataset(name, np.array(dims, dtype=dtype), attrs)
        elif kind in ("cell", "vlen-cell"):
            targets = draw(st.lists(st.integers(-2, 2**8), max_size=6))
            if kind == "vlen-cell":
                data = np.empty(len(targets), dtype=h5py.vlen_dtype(np.dtype("<i4")))
                for j, t in enumerate(targets):
                    data[j] = np.arange(abs(t) % 4, dtype="<i4")
                obj = FakeDataset(name, data, attrs)
            else:
                data = np.empty(len(targets), dtype=h5py.ref_dtype)
                obj = FakeDataset(
                    name, data, attrs, draw(st.sampled_from([data.shape, (1, len(targets)), None]))
                )
                links.append((obj, "refs", targets))
        elif kind in ("struct", "group", "sparse", "struct-array"):
            obj = FakeGroup(name, attrs)
            if kind == "sparse":
                attrs.setdefault("MATLAB_sparse", draw(st.sampled_from(SPARSE73[1:])))
                for part in draw(st.lists(st.sampled_from(["data", "ir", "jc"]), unique=True)):
                    dtype = draw(st.sampled_from(DTYPES73))
                    data = _fill(
                        dtype, draw(st.sampled_from([(0,), (3,), (4,), (2, 2)])), draw(ints)
                    )
                    obj.members[part] = FakeDataset(f"{name}/{part}", data, {})
            elif kind == "struct-array":
                field_shape = draw(st.sampled_from([(2,), (1, 2), (0,)]))
                for field in draw(
                    st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3)
                ):
                    shape_f = field_shape if draw(st.integers(0, 4)) else (3,)
                    data = np.empty(shape_f, dtype=h5py.ref_dtype)
                    member = FakeDataset(f"{name}/{field}", data, {})
                    obj.members[field] = member
                    links.append(
                        (
                            member,
                            "refs",
                            draw(st.lists(st.integers(-2, 2**8), min_size=3, max_size=3)),
                        )
                    )
            else:
                fields = draw(
                    st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True, max_size=3)
                )
                links.append((obj, "members", [draw(st.integers(-2, 2**8)) for _ in fields]))
                obj.members.update(dict.fromkeys(fields))
        pool.append(obj)
    for obj, how, targets in links:
        if how == "refs":
            flat = obj._data.reshape(-1)
            for j in range(flat.size):
                t = targets[j % len(targets)] if targets else -1
                flat[j] = FakeRef(None if t == -1 else "dangling" if t == -2 else pool[t % n])
        else:
            for field, t in zip(list(obj.members), targets, strict=True):
                obj.members[field] = (
                    pool[t % n]
                    if t >= 0
                    else FakeDataset(
                        f"{obj.name}/{field}", np.zeros((1, 1)), {"MATLAB_class": b"double"}
                    )
                )
    root = FakeGroup("/", {})
    refs = FakeGroup("/#refs#", {})
    refs.members.update({f"o{i}": obj for i, obj in enumerate(pool)})
    root.members["#refs#"] = refs
    for j in draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True)):
        root.members[f"v{j}"] = pool[j]
    return root


def check_mat73_node(node: MatNode, seen: set[int]) -> None:
    """Invariants of a v7.3 tree: non-negative dims that agree with what holds the values."""
    if id(node) in seen:
        return
    seen.add(id(node))
    assert isinstance(node.dims, tuple)
    assert all(isinstance(d, int) and d >= 0 for d in node.dims), node.dims
    if isinstance(node, NumericArray):
        assert len(node.dims) >= 2
        assert node.dtype.kind in "biufc"
    elif isinstance(node, CharArray):
        assert node.units.shape == node.dims
    elif isinstance(node, SparseArray):
        assert len(node.dims) == 2
    elif isinstance(node, CellArray):
        assert len(node.cells) == math.prod(node.dims)
        for cell in node.cells:
            check_mat73_node(cell, seen)
    elif isinstance(node, StructArray):
        assert len(node.elements) == math.prod(node.dims)
        assert len(set(node.fields)) == len(node.fields)
        for element in node.elements:
            assert list(element) == list(node.fields)
            for value in element.values():
                check_mat73_node(value, seen)
    else:
        assert isinstance(node, OpaqueObject)


def read_mat73(root: FakeGroup) -> None:
    """List and parse every variable as ``mat_v73`` does."""
    tree = Mat73Tree(root, source=SRC)
    names = tree.names()
    assert "#refs#" not in names
    for name in names:
        info = tree.info(name)
        assert info.name == name
        assert all(isinstance(d, int) and d >= 0 for d in info.dims)
    for name in names:
        check_mat73_node(tree.parse(name), set())


@pytest.mark.slow
@given(fake_files())
@settings(FUZZ, max_examples=900)
def test_mat73_generated_trees(root: FakeGroup) -> None:
    """Generated HDF5 object trees (every MATLAB kind, hostile attributes, dtypes, shapes,
    shared, cyclic, dangling and null references, hard-link loops) give trees whose dims
    agree with their contents, or FormatError/UnsupportedError."""
    run_input("mat73", lambda: read_mat73(root))
    FINISHED.add("mat73")


def _from_h5(f: Any) -> FakeGroup:
    """A copy of an h5py file as fakes: attributes, shapes, dtypes, values, hard links and
    object references (as links between the copies) kept."""
    copies: dict[Any, Any] = {}

    def convert(obj: Any) -> Any:
        key = h5py.h5o.get_info(obj.id).addr
        if key in copies:
            return copies[key]
        attrs = {name: obj.attrs[name] for name in obj.attrs}
        if isinstance(obj, h5py.Group):
            group = copies[key] = FakeGroup(obj.name or "", attrs)
            for name in obj:
                group.members[name] = convert(obj[name])
            return group
        if obj.shape is None:
            copies[key] = FakeDataset(obj.name or "", np.zeros(0, obj.dtype), attrs, None)
            return copies[key]
        data = np.asarray(obj[()])
        dset = copies[key] = FakeDataset(obj.name or "", data.copy(), attrs)
        if h5py.check_dtype(ref=obj.dtype) is not None:
            flat = dset._data.reshape(-1)
            for i, ref in enumerate(data.reshape(-1)):
                flat[i] = FakeRef(convert(f[ref]) if ref else None)
        return dset

    return convert(f)  # type: ignore[no-any-return]


@cache
def mat73_seeds() -> list[FakeGroup]:
    """Small v7.3 files of the MATLAB corpus and hand-built ones, copied into fakes."""
    paths = []
    if CORPUS_FOUND:
        paths = [p for p in sorted(CORPUS.glob("*/*.mat")) if p.stat().st_size <= 64 * 1024]
    seeds = []
    for path in paths:
        with path.open("rb") as fh:
            if not mat5.is_v73(fh.read(128)):
                continue
        with h5py.File(path, "r") as f:
            seeds.append(_from_h5(f))
    bio = io.BytesIO()
    with h5py.File(bio, "w") as f:  # what the corpus may lack: sparse, struct arrays, empties
        sp = f.create_group("sp")
        sp.attrs["MATLAB_class"] = np.bytes_("double")
        sp.attrs["MATLAB_sparse"] = np.uint64(4)
        sp["data"], sp["ir"], sp["jc"] = np.ones(3), np.uint64([0, 2, 3]), np.uint64([0, 1, 3])
        e = f.create_dataset("e", data=np.uint64([0, 3]))
        e.attrs["MATLAB_class"], e.attrs["MATLAB_empty"] = np.bytes_("struct"), np.uint8(1)
        refs = f.create_group("#refs#")
        a, b = (
            refs.create_dataset("a", data=np.ones((2, 1))),
            refs.create_dataset("b", data=np.uint16([[104, 105]])),
        )
        a.attrs["MATLAB_class"], b.attrs["MATLAB_class"] = np.bytes_("double"), np.bytes_("char")
        c = f.create_dataset("c", data=np.array([[a.ref, b.ref]]).T, dtype=h5py.ref_dtype)
        c.attrs["MATLAB_class"] = np.bytes_("cell")
        s = f.create_group("s")
        s.attrs["MATLAB_class"] = np.bytes_("struct")
        s.attrs.create("MATLAB_fields", _vlen_names([b"x"]))
        s.create_dataset("x", data=np.array([[a.ref], [b.ref]]), dtype=h5py.ref_dtype)
    with h5py.File(bio, "r") as f:
        seeds.append(_from_h5(f))
    return seeds


def _objects(root: FakeGroup) -> list[Any]:
    """Every object under ``root`` once, in a fixed order."""
    found: dict[int, Any] = {}
    todo: list[Any] = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in found:
            continue
        found[id(obj)] = obj
        if isinstance(obj, FakeGroup):
            todo.extend(reversed(list(obj.members.values())))
        elif obj.dtype.kind == "O":
            todo.extend(
                r.target
                for r in obj._data.reshape(-1)
                if isinstance(r, FakeRef) and isinstance(r.target, FakeGroup | FakeDataset)
            )
    return list(found.values())


def _clone(root: FakeGroup) -> FakeGroup:
    """A copy of the tree that can be mutated (data arrays copied, links re-pointed)."""
    copies: dict[int, Any] = {}
    old = _objects(root)
    for obj in old:
        if isinstance(obj, FakeGroup):
            copies[id(obj)] = FakeGroup(obj.name, dict(obj.attrs))
        else:
            copies[id(obj)] = FakeDataset(obj.name, obj._data.copy(), dict(obj.attrs), obj._shape)
    for obj in old:
        new = copies[id(obj)]
        if isinstance(obj, FakeGroup):
            new.members = {k: copies[id(v)] for k, v in obj.members.items()}
        elif obj.dtype.kind == "O" and (obj.dtype.metadata or {}).get("ref") is not None:
            flat = new._data.reshape(-1)
            for i, ref in enumerate(obj._data.reshape(-1)):
                target = ref.target
                flat[i] = FakeRef(
                    copies[id(target)] if isinstance(target, FakeGroup | FakeDataset) else target
                )
    return copies[id(root)]  # type: ignore[no-any-return]


ATTR_EDITS = [("MATLAB_class", CLASSES73), ("MATLAB_empty", FLAGS73), ("MATLAB_fields", FIELDS73),
              ("MATLAB_sparse", SPARSE73), ("MATLAB_global", FLAGS73),
              ("MATLAB_object_decode", [None, 1, 2, 3])]  # fmt: skip


def mutate73(root: FakeGroup, edits: list[tuple[int, int, int, int]]) -> FakeGroup:
    """Semantic mutations of a copy of ``root``: attributes set or removed, dtypes and
    shapes changed, references re-pointed (null, dangling, anywhere), members removed or
    hard-linked elsewhere."""
    root = _clone(root)
    objects = _objects(root)
    for kind, which, arg, value in edits:
        obj = objects[which % len(objects)]
        other = objects[value % len(objects)]
        if kind == 0:
            name, choices = ATTR_EDITS[arg % len(ATTR_EDITS)]
            choice = choices[value % len(choices)]
            if choice is None:
                obj.attrs.pop(name, None)
            else:
                obj.attrs[name] = choice
        elif isinstance(obj, FakeGroup):
            names = list(obj.members)
            if names and kind == 1:
                del obj.members[names[arg % len(names)]]
            elif names:
                obj.members[names[arg % len(names)]] = other
            else:
                obj.members[f"m{arg % 4}"] = other
        elif kind == 1:
            shape = SHAPES73[arg % len(SHAPES73)]
            obj._shape = shape
            obj._data = _fill(
                obj._data.dtype if obj.dtype.kind != "O" else np.dtype("<f8"), shape or (), [value]
            )
        elif kind == 2:
            obj._data = _fill(DTYPES73[arg % len(DTYPES73)], obj._data.shape, [value % 70000, 65])
        elif obj.dtype.kind == "O" and obj._data.size:
            flat = obj._data.reshape(-1)
            flat[arg % flat.size] = FakeRef((None, "dangling", other)[value % 3])
    return root


MAT73_EDITS = st.lists(
    st.tuples(
        st.integers(0, 3), st.integers(0, 2**16), st.integers(0, 2**16), st.integers(0, 2**16)
    ),
    min_size=1,
    max_size=3,
)


@given(st.integers(0, 2**16), MAT73_EDITS)
@settings(FUZZ, max_examples=400)
def test_mat73_mutated_files(seed: int, edits: list[tuple[int, int, int, int]]) -> None:
    """MATLAB-written v7.3 files (and hand-built ones), copied and mutated at the level the
    semantics read: attributes, dtypes, shapes, references, links. Two seeds per example."""
    seeds = mat73_seeds()
    for k in range(2):
        root = mutate73(seeds[(seed + 3 * k) % len(seeds)], edits)
        run_input("mat73-mutated", lambda root=root: read_mat73(root))
    FINISHED.add("mat73-mutated")


def test_mat73_seeds_parse_cleanly() -> None:
    """The unmutated seeds parse (apart from what the corpus holds on purpose: objects)."""
    seeds = mat73_seeds()
    assert len(seeds) >= 1 + 10 * CORPUS_FOUND
    for root in seeds:
        read_mat73(root)


# ---------------------------------------------------------------- HDF5 structures


def test_h5_seeds_walk_cleanly() -> None:
    """The unmutated seeds' chunk indexes and groups are walked (mutations start there)."""
    kinds = set()
    for s in h5_seeds():
        sb = h5index.parse_superblock(s.data[s.base : s.base + h5index.SUPERBLOCK_SIZE])
        for t in s.datasets:
            assert walk_dataset(s.data, s.base, t) > 0, t
            read = lambda a, b, s=s: s.data[s.base + a : s.base + b]  # noqa: E731
            messages = h5index.object_header_messages(read, 0, t.address, sb.sizeof_addr)
            layout = h5index.chunk_layout(messages, sb)
            assert layout is not None
            kinds.add(layout.index_type)
        for g in s.groups:
            walk_group(s.data, s.base, g)
    assert kinds == {h5index.BTREE_V1, h5index.FIXED_ARRAY, h5index.SINGLE_CHUNK}
    assert {s.data[s.base + 8] for s in h5_seeds()} == {0, 2, 3}  # superblock versions


@given(st.integers(0, 2**16), MUTATIONS, st.integers(0, 2**32 - 1))
@settings(FUZZ, max_examples=500)
def test_h5index_mutated_files(seed: int, ops: list[tuple[int, int, int]], address: int) -> None:
    """Mutated superblocks, object headers, v1 B-tree nodes (chunk keys, levels, entries,
    children), fixed array headers, data blocks and pages, and wrong header addresses: each
    chunk-index walk gives a checked table (hostile_h5.walk_dataset) or FormatError /
    UnsupportedError."""
    seeds = h5_seeds()
    s = seeds[seed % len(seeds)]
    buf = mutate(s.data, ops, hot=s.hot if ops[0][0] != 1 else None)
    for t in s.datasets[:4]:
        run_input("h5index", lambda t=t: walk_dataset(buf, s.base, t))
    wrong = dataclasses.replace(s.datasets[0], address=address % len(s.data))
    run_input("h5index", lambda: walk_dataset(s.data, s.base, wrong))
    FINISHED.add("h5index")


@given(st.integers(0, 2**16), MUTATIONS)
@settings(FUZZ, max_examples=300)
def test_h5groups_mutated_files(seed: int, ops: list[tuple[int, int, int]]) -> None:
    """Mutated group B-trees (type 0), symbol-table nodes and local heaps: each group walk
    gives links inside the file or FormatError."""
    seeds = h5_seeds()
    for k in range(2):
        s = seeds[(seed + k) % len(seeds)]
        buf = mutate(s.data, ops, hot=s.hot if ops[0][0] != 1 else None)
        for g in s.groups[:2]:
            run_input("h5groups", lambda g=g, s=s, buf=buf: walk_group(buf, s.base, g))
    FINISHED.add("h5groups")


#: An object header message: type, body, flags (attributes, layouts, anything: the header
#: parser keeps bodies as they are).
H5_MESSAGES = st.lists(
    st.tuples(
        st.sampled_from([0x01, 0x03, 0x05, 0x08, 0x0C, 0x0C, 0x11, 0x12, 0x15, 0x16]),
        st.binary(max_size=80),
        st.integers(0, 3),
    ),
    max_size=12,
)


def _header_v1(messages: list[tuple[int, bytes, int]]) -> bytes:
    body = b"".join(
        struct.pack("<HHB3x", kind, len(data), flags) + data + bytes(-len(data) % 8)
        for kind, data, flags in messages
    )
    return struct.pack("<BxHII4x", 1, len(messages), 1, len(body)) + body


def _header_v2(messages: list[tuple[int, bytes, int]], flags: int, ochk: bool = False) -> bytes:
    order = bool(flags & 0x04)
    body = b"".join(
        struct.pack("<BHB", kind, len(data), mflags) + (struct.pack("<H", i) if order else b"")
        + data
        for i, (kind, data, mflags) in enumerate(messages)
    )  # fmt: skip
    if ochk:
        block = b"OCHK" + body
    else:
        width = 1 << (flags & 3)
        times = bytes(16) if flags & 0x20 else b""
        phase = struct.pack("<HH", 8, 6) if flags & 0x10 else b""
        block = b"OHDR\x02" + bytes([flags]) + times + phase + len(body).to_bytes(width, "little")
        block += body
    return block + struct.pack("<I", h5sum.lookup3(block))


@given(H5_MESSAGES, H5_MESSAGES, st.integers(0, 1), st.integers(0, 0x37), MUTATIONS)
@settings(FUZZ, max_examples=300)
def test_h5_generated_object_headers(
    first: list[tuple[int, bytes, int]],
    second: list[tuple[int, bytes, int]],
    version: int,
    flags: int,
    ops: list[tuple[int, int, int]],
) -> None:
    """Generated version-1 and version-2 object headers (attribute, layout, datatype and
    other messages, a continuation block): parsed back message for message; then mutated:
    messages or FormatError only."""
    flags = (flags & 0x34) | 2  # 4-byte chunk size; times, phase change, creation order
    if version == 0:
        second_block = b"".join(
            struct.pack("<HHB3x", k, len(d), f) + d + bytes(-len(d) % 8) for k, d, f in second
        )
    else:
        second_block = _header_v2(second, flags, ochk=True)
    at = 4096  # where the continuation block goes
    cont = struct.pack("<QQ", at, len(second_block))
    messages = [*first, (0x10, cont, 0)]
    header = _header_v1(messages) if version == 0 else _header_v2(messages, flags)
    buf = header + bytes(at - len(header)) + second_block
    expected = [(k, d) for k, d, _ in messages] + [(k, d) for k, d, _ in second]

    def parse(data: bytes) -> tuple[tuple[int, bytes], ...]:
        return h5index.object_header_messages(lambda a, b: data[a:b], 0, 0, 8)

    got = run_input("h5headers", lambda: parse(buf))
    assert got is None
    assert list(parse(buf)) == expected
    hot = list(range(min(len(header), 64))) + list(range(at, at + 32))
    run_input("h5headers", lambda: parse(mutate(buf, ops, hot=hot if ops[0][0] != 1 else None)))
    FINISHED.add("h5headers")


def test_h5_mutated_mat_files_end_to_end(tmp_path: Path) -> None:
    """Mutated MAT v7.3 files (B-trees, symbol nodes, heaps, object headers) through
    open_mat: every variable listed and read, in a subprocess that must not die of a signal;
    only npystore's errors."""
    rnd = random.Random(14)
    seeds = [s for s in h5_seeds() if s.base == 512]
    paths = []
    for i in range(E2E_FILES):
        s = seeds[i % len(seeds)]
        ops = [(rnd.randrange(8), rnd.randrange(2**32), rnd.randrange(2**32))
               for _ in range(rnd.randint(1, 3))]  # fmt: skip
        buf = mutate(s.data, ops, hot=s.hot if ops[0][0] != 1 else None)
        path = tmp_path / f"m{i:03d}.mat"
        path.write_bytes(buf[:128] if len(buf) < 128 else s.data[:128] + buf[128:])
        paths.append(path)
    pristine = tmp_path / "pristine.mat"
    pristine.write_bytes(seeds[0].data)
    for record in run_e2e(pristine, paths):
        COUNTS["h5-e2e"] += 1
        SLOWEST["h5-e2e"] = max(SLOWEST.get("h5-e2e", 0.0), record["seconds"])
        assert not record["outcome"].startswith("BAD"), record
        assert record["seconds"] < MAX_SECONDS, record
    FINISHED.add("h5-e2e")


# ---------------------------------------------------------------- no eval, no unpickling

SRC_ROOT = Path(npystore.__file__).parent


def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(SRC_ROOT)): path.read_text() for path in sorted(SRC_ROOT.rglob("*.py"))
    }


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    """Calls of ``name`` (a bare name or the last part of an attribute) under ``node``."""
    found = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                found.append(call)
    return found


def test_no_eval_or_exec_in_the_package() -> None:
    """No ``eval(``, ``exec(`` or ``compile(`` anywhere in src/npystore (text and syntax
    tree); ``ast.literal_eval`` only in the literal parser, on one scanned string token."""
    text = re.compile(r"(?<![\w.])(eval|exec|compile)\s*\(")
    sources = _sources()
    assert len(sources) > 30
    for name, source in sources.items():
        assert not text.search(source), f"{name}: {text.search(source)}"
        tree = ast.parse(source)
        for builtin in ("eval", "exec", "compile"):
            bare = [c for c in _calls(tree, builtin) if isinstance(c.func, ast.Name)]
            assert not bare, f"{name}: calls {builtin}()"
        if name != "formats/_literal.py":
            assert not _calls(tree, "literal_eval"), f"{name}: calls literal_eval"
    literal = ast.parse(sources["formats/_literal.py"])
    (only,) = _calls(literal, "literal_eval")
    owner = [f.name for f in _functions(literal) if only in _calls(f, "literal_eval")]
    assert owner == ["_string"]


def test_unpickling_only_behind_allow_pickle() -> None:
    """``pickle`` is imported by read/access.py and write/stack.py alone (the latter only
    dumps dask's ``info``) and loaded in ``_load_pickled`` alone,
    which only runs for object dtypes; every function that lays out a pickled array takes
    ``allow_pickle`` and raises ``pickle_refused`` without it; nothing passes
    ``allow_pickle=True`` on its own."""
    sources = _sources()
    for name, source in sources.items():
        tree = ast.parse(source)
        forced = [
            kw
            for call in ast.walk(tree)
            if isinstance(call, ast.Call)
            for kw in call.keywords
            if kw.arg == "allow_pickle" and isinstance(kw.value, ast.Constant) and kw.value.value
        ]
        assert not forced, f"{name} passes allow_pickle=True itself"
        imports = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        unpicklers = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve"}
        if name in ("read/access.py", "write/stack.py"):
            assert imports & unpicklers == {"pickle"}
        else:
            assert not imports & unpicklers, f"{name} imports {imports & unpicklers}"
        for loader in ("load", "loads", "Unpickler"):
            calls = [
                c
                for c in _calls(tree, loader)
                if isinstance(c.func, ast.Attribute) and getattr(c.func.value, "id", "") == "pickle"
            ]
            if name != "read/access.py":
                assert not calls, f"{name} calls pickle.{loader}"
    access = ast.parse(sources["read/access.py"])
    functions = {f.name: f for f in _functions(access)}
    assert [f.name for f in _functions(access) if _calls(f, "loads")] == ["_load_pickled"]
    guarded = 0
    for function in functions.values():
        for node in ast.walk(function):
            if isinstance(node, ast.If) and "hasobject" in ast.unparse(node.test):
                guarded += sum(len(_calls(stmt, "_load_pickled")) for stmt in node.body)
    everywhere = sum(
        len(_calls(f, "_load_pickled")) for f in functions.values() if f.name != "_load_pickled"
    )
    assert everywhere == guarded >= 2
    layouts = 0
    for name, source in sources.items():
        for function in _functions(ast.parse(source)):
            body = ast.unparse(function)
            if ("is_pickled" in body or "PickledExtent(" in body) and "ArrayLayout(" in body:
                layouts += 1
                args = [a.arg for a in function.args.args + function.args.kwonlyargs]
                assert "allow_pickle" in args, f"{name}:{function.name}"
                assert "pickle_refused(" in body, f"{name}:{function.name}"
    assert layouts >= 2  # api._layout (.npy) and ZipArchive.layout (.npz)


TRIPPED: list[str] = []


def _tripwire() -> np.ndarray[Any, Any]:
    """What the hostile pickles below call when they are unpickled."""
    TRIPPED.append("unpickled")
    return np.empty(2, dtype=object)


class _Trap:
    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _tripwire, ()


def _pickle_npy() -> bytes:
    return _numpy_header(np.dtype(object), (2,), False, 1) + pickle.dumps(_Trap(), protocol=2)


def test_object_arrays_are_not_unpickled_without_allow_pickle(tmp_path: Path) -> None:
    """.npy and .npz (stored and deflated) object arrays whose pickle would run code: every
    entry point refuses them with UnsupportedError and nothing is unpickled; with
    ``allow_pickle=True`` the pickle runs (so the files are live traps)."""
    npy_path = tmp_path / "trap.npy"
    npy_path.write_bytes(_pickle_npy())
    npz_paths = []
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        path = tmp_path / f"trap{method}.npz"
        path.write_bytes(
            _zip({"trap.npy": _pickle_npy(), "ok.npy": _npy_file(np.ones(2))}, method=method)
        )
        npz_paths.append(path)
    TRIPPED.clear()
    url = str(npy_path)
    for call in (npystore.open_npy, npystore.load, npystore.open):
        with pytest.raises(UnsupportedError, match="allow_pickle"):
            call(url)
    for path in npz_paths:
        z = npystore.open_npz(str(path))
        assert z["ok"].compute().tolist() == [1.0, 1.0]
        with pytest.raises(UnsupportedError, match="allow_pickle"):
            z["trap"]
        with pytest.raises(UnsupportedError, match="allow_pickle"):
            z.load("trap")
    assert TRIPPED == []
    npystore.load(url, allow_pickle=True)
    for path in npz_paths:
        npystore.open_npz(str(path), allow_pickle=True).load("trap")
    assert TRIPPED == ["unpickled"] * 3


# ---------------------------------------------------------------- huge declared lengths

#: Most memory reading one small hostile file may take (tracemalloc peak).
PEAK_LIMIT = 8 * 2**20


def _peak(action: Callable[[], Any]) -> tuple[BaseException | None, int, float]:
    """Run ``action`` under tracemalloc: the error it raised, its peak and its time."""
    tracemalloc.start()
    start = time.perf_counter()
    error: BaseException | None = None
    try:
        action()
    except ALLOWED as exc:
        error = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, peak, time.perf_counter() - start


def _raw_zip(name: bytes, payload: bytes, method: int, csize: int, usize: int) -> bytes:
    """One member whose central directory declares ``csize``/``usize`` (ZIP64 extra when
    they do not fit 32 bits), the local header the true ones."""
    crc = zlib.crc32(payload)
    local = struct.pack(
        "<4s5H3I2H", b"PK\x03\x04", 45, 0, method, 0, 0, crc, len(payload), len(payload),
        len(name), 0,
    ) + name  # fmt: skip
    extra = b""
    c32, u32 = min(csize, 0xFFFF_FFFF), min(usize, 0xFFFF_FFFF)
    if 0xFFFF_FFFF in (c32, u32):
        c32 = u32 = 0xFFFF_FFFF
        extra = struct.pack("<2H2Q", 1, 16, usize, csize)
    central = struct.pack(
        "<4s6H3I5H2I", b"PK\x01\x02", 45, 45, 0, method, 0, 0, crc, c32, u32, len(name),
        len(extra), 0, 0, 0, 0, 0,
    ) + name + extra  # fmt: skip
    cd_offset = len(local) + len(payload)
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 1, 1, len(central), cd_offset, 0)
    return local + payload + central + end


def _mat5(*elements: bytes) -> bytes:
    text = b"MATLAB 5.0 MAT-file, Platform: hostile".ljust(116, b" ")
    return text + b"\x00" * 8 + struct.pack("<H", 0x0100) + b"IM" + b"".join(elements)


def _tag(mdtype: int, nbytes: int) -> bytes:
    return struct.pack("<II", mdtype, nbytes)


def _matrix(
    cls: int, dims: tuple[int, ...], name: bytes, body: bytes, size: int | None = None
) -> bytes:
    """A miMATRIX element: flags, dims, name, then ``body``; its tag may claim ``size``."""
    dims_el = _tag(5, 4 * len(dims)) + struct.pack(f"<{len(dims)}i", *dims)
    dims_el += b"\x00" * (-len(dims_el) % 8)
    name_el = _tag(1, len(name)) + name + b"\x00" * (-len(name) % 8)
    content = _tag(6, 8) + struct.pack("<II", cls, 0) + dims_el + name_el + body
    return _tag(14, len(content) if size is None else size) + content


def _hostile_files(tmp: Path) -> dict[str, tuple[Path, Callable[[str], Any]]]:
    """Small files declaring huge lengths, and how each is read."""
    big_npy = _numpy_header(np.dtype("<f8"), (2**40,), False, 1) + b"\x00" * 64
    long_header = npy.MAGIC + b"\x02\x00" + struct.pack("<I", 0xFFFF_FFF0) + b"{" * 64
    npy_member = _npy_file(np.arange(4.0))
    npy_bomb = _numpy_header(np.dtype("<f8"), (2**37 - 16,), False, 1)  # + 128: 2**40
    packed = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = packed.compress(npy_bomb + b"\x00" * 4096) + packed.flush()
    cell = _matrix(1, (1, 1), b"c", _tag(14, 2**31 - 8) + b"\x00" * 64)
    char = _matrix(4, (1, 2**30), b"s", _tag(4, 2**31))
    compressed = zlib.compress(
        _matrix(6, (1, 2**28), b"x", _tag(9, 2**31) + b"\x00" * 512, 2**31 + 64)
    )
    fieldless = _matrix(2, (2**23, 2**24), b"st", _tag(5, 4) + b"\x01\x00\x00\x00" * 2 + _tag(1, 0))
    files = {
        "npy shape (2**40,)": (big_npy, npystore.open_npy),
        "npy header length 4 GiB": (long_header, npystore.open_npy),
        "npy load shape (2**40,)": (big_npy, npystore.load),
        "npz stored member of 2**40 bytes": (
            _raw_zip(b"a.npy", npy_member, 0, 2**40, 2**40),
            lambda url: npystore.open_npz(url)["a"],
        ),
        "npz deflated member inflating to 2**40": (
            _raw_zip(b"a.npy", deflated, 8, len(deflated), 2**40),
            lambda url: npystore.open_npz(url).load("a"),
        ),
        "mat top-level tag of 2**31": (_mat5(_tag(14, 2**31) + b"\x00" * 64), npystore.open_mat),
        "mat cell element of 2**31": (_mat5(cell), lambda url: npystore.open_mat(url)["c"]),
        "mat char data of 2**31": (_mat5(char), lambda url: npystore.open_mat(url)["s"]),
        "mat miCOMPRESSED inflating to 2**31": (
            _mat5(_tag(15, len(compressed)) + compressed),
            lambda url: np.asarray(npystore.open_mat(url)["x"]),
        ),
        "mat struct of 2**47 elements without fields": (
            _mat5(fieldless),
            lambda url: npystore.open_mat(url)["st"],
        ),
    }
    out = {}
    for i, (what, (data, read)) in enumerate(files.items()):
        path = tmp / f"hostile{i}{'.npy' if 'npy' in what else '.npz' if 'npz' in what else '.mat'}"
        path.write_bytes(data)
        out[what] = (path, read)
    return out


HOSTILE_FILES = [
    "npy shape (2**40,)", "npy header length 4 GiB", "npy load shape (2**40,)",
    "npz stored member of 2**40 bytes", "npz deflated member inflating to 2**40",
    "mat top-level tag of 2**31", "mat cell element of 2**31", "mat char data of 2**31",
    "mat miCOMPRESSED inflating to 2**31", "mat struct of 2**47 elements without fields",
]  # fmt: skip


@pytest.mark.parametrize("what", HOSTILE_FILES)
def test_huge_declared_lengths_allocate_nothing(tmp_path: Path, what: str) -> None:
    """A small file declaring a huge length gets a clear FormatError/UnsupportedError in
    well under a second, with a few MiB of memory at most: nothing is sized by the
    declared length before it is checked against what the file can hold."""
    path, read = _hostile_files(tmp_path)[what]
    assert path.stat().st_size < 10_000
    error, peak, seconds = _peak(lambda: read(str(path)))
    assert error is not None, f"{what}: read without an error"
    assert str(path) in str(error), error
    assert peak < PEAK_LIMIT, f"{what}: peak {peak / 2**20:.1f} MiB ({error})"
    assert seconds < MAX_SECONDS, f"{what}: {seconds:.2f} s"


def test_h5index_refuses_huge_object_headers() -> None:
    """An object header declaring 4 GiB (v1) or 2**64 bytes (v2) is refused, not read."""
    v1 = b"\x01\x00\x01\x00\x01\x00\x00\x00" + struct.pack("<I", 0xFFFF_FFF0) + b"\x00" * 28
    v2 = b"OHDR\x02\x03" + b"\xff" * 8 + b"\x00" * 26
    for prefix in (v1, v2):
        with pytest.raises(FormatError, match="more than"):
            h5index.header_size(prefix)


def test_compressed_mat_variable_cannot_claim_more_than_deflate_gives(tmp_path: Path) -> None:
    """A miCOMPRESSED variable whose inner tag claims 64 MiB of char data, with 80 KB of real
    stream behind it: reading it must not allocate the claimed size (100-odd bytes of zlib
    data inflate to 104 KB at most)."""
    n = 2**25
    inner = _matrix(4, (1, n), b"s", _tag(4, 2 * n) + b"ab" * 40_000, 2 * n + 64)
    compressed = zlib.compress(inner, 9)
    path = tmp_path / "bomb.mat"
    path.write_bytes(_mat5(_tag(15, len(compressed)) + compressed))
    error, peak, _ = _peak(lambda: npystore.open_mat(str(path))["s"])
    assert isinstance(error, FormatError)
    assert peak < PEAK_LIMIT, f"peak {peak / 2**20:.1f} MiB"


# ---------------------------------------------------------------- the bugs these tests found


def test_zip_empty_directory_needs_no_read() -> None:
    """An end record naming an empty directory outside the bytes given: no request for 0
    bytes (it used to raise NeedMoreBytes(needed=0))."""
    archive = _zip({})
    size = len(archive) + 1000
    end = zipdir.EndRecord(0, 10, 0, size - 22, b"", None, None)
    directory = zipdir.parse_central_directory(archive[-22:], size - 22, end, size, source=SRC)
    assert directory.entries == ()


def test_mat73_hostile_attributes_and_references() -> None:
    """MATLAB_fields names stored as int64 (bytes(np.int64(n)) allocated n bytes, or
    raised ValueError for n < 0) and a cell of variable-length arrays instead of
    references (``not ref`` raised ValueError) are FormatErrors."""
    for values in ([2**40], [-1], [97, 98]):
        group = FakeGroup("/s", {"MATLAB_class": b"struct", "MATLAB_fields": _vlen_ints(values)})
        root = FakeGroup("/", {})
        root.members["s"] = group
        with pytest.raises(FormatError, match="MATLAB_fields"):
            Mat73Tree(root, source=SRC).parse("s")
    cells = np.empty(2, dtype=h5py.vlen_dtype(np.dtype("<i4")))
    cells[0], cells[1] = np.arange(3, dtype="<i4"), np.arange(0, dtype="<i4")
    root = FakeGroup("/", {})
    root.members["c"] = FakeDataset("/c", cells, {"MATLAB_class": b"cell"})
    with pytest.raises(FormatError, match="expected object references"):
        Mat73Tree(root, source=SRC).parse("c")
    plain = np.array([np.arange(2), np.arange(3)], dtype=object)
    root.members["c"] = FakeDataset("/c", plain, {"MATLAB_class": b"cell"})
    with pytest.raises(FormatError, match="where an object reference is expected"):
        Mat73Tree(root, source=SRC).parse("c")


def test_mat73_hard_links_are_parsed_once(tmp_path: Path) -> None:
    """Real HDF5 hard links: 40 struct groups each linking twice to the next (2**40 paths:
    the walk used to visit each) parse in linear time; a group linking to itself is a
    FormatError."""
    path = tmp_path / "links.h5"
    with h5py.File(path, "w") as f:
        prev = f.create_group("dag")
        prev.attrs["MATLAB_class"] = np.bytes_("struct")
        for i in range(40):
            nxt = f.create_group(f"level{i}")
            nxt.attrs["MATLAB_class"] = np.bytes_("struct")
            prev["x"] = nxt
            prev["y"] = nxt
            prev = nxt
        prev.create_dataset("v", data=np.zeros((1, 1)))
        loop = f.create_group("loop")
        loop["self"] = loop
    with h5py.File(path, "r") as f:
        tree = Mat73Tree(safe_root(f, SRC), source=SRC)
        start = time.perf_counter()
        node = tree.parse("dag")
        assert time.perf_counter() - start < MAX_SECONDS
        assert isinstance(node, StructArray)
        assert node.fields == ("x", "y")
        assert node.elements[0]["x"] is node.elements[0]["y"]
        with pytest.raises(FormatError, match="hard link back to an enclosing group"):
            tree.parse("loop")


# ---------------------------------------------------------------- the count


def test_inputs_counted() -> None:
    """The fuzz tests above ran at least their quota of inputs each (at least TOTAL_QUOTA
    in all), none slower than MAX_SECONDS. Skipped when some of them were deselected."""
    missing = set(QUOTA) - FINISHED
    if missing:
        pytest.skip(f"fuzz tests for {sorted(missing)} did not run ({dict(COUNTS)} run)")
    report = ", ".join(f"{t}: {COUNTS[t]} (slowest {SLOWEST[t]:.3f} s)" for t in QUOTA)
    print(f"hostile inputs run: {sum(COUNTS.values())}; {report}")
    for target, quota in QUOTA.items():
        assert COUNTS[target] >= quota, f"{target}: {COUNTS[target]} inputs, quota {quota}"
    assert sum(QUOTA.values()) >= TOTAL_QUOTA
    assert sum(COUNTS.values()) >= TOTAL_QUOTA
    assert max(SLOWEST.values()) < MAX_SECONDS


def test_empty_char_with_huge_row_count_is_refused_without_allocating() -> None:
    """Found by the generated v7.3 trees: a char array of size 2**40 x 0 would be 2**40 empty
    strings with no data behind them."""
    from npystore.formats.mat5._char import chars_from_units

    empty = np.zeros(0, np.uint16)
    with pytest.raises(FormatError, match=r"x\.y: char dims .* empty strings"):
        chars_from_units(empty, (2**40, 0), where="x.y")
    for dims in [(2**40, 2**40, 0), (2**31, 0, 2**31, 3)]:
        with pytest.raises(UnsupportedError, match=r"x\.y: a char array of size .*numpy"):
            chars_from_units(empty, dims, where="x.y")
    # empty, with no strings: shape (2**40, 0), nothing allocated per row
    assert chars_from_units(empty, (2**40, 5, 0)).shape == (2**40, 0)
    assert chars_from_units(empty, (3, 0)).tolist() == ["", "", ""]
    assert chars_from_units(empty, (0, 4)).shape == (0,)
