"""The MAT-file parsers (Level 5 and Level 4), checked against scipy.io.loadmat.

Every file is read the way the IO layer will do it: a 128-byte prefix, the top-level tags
from small windows, each uncompressed variable from a short prefix of its element plus the
ranges the parser asks for (NeedMoreBytes), each miCOMPRESSED variable inflated with zlib.
The oracle is ``scipy.io.loadmat(..., mat_dtype=True, squeeze_me=False,
struct_as_record=True)``; every place where the parser deliberately gives another answer is
asserted explicitly in ``compare`` (search for "DIFFERENCE").
"""

from __future__ import annotations

import csv
import io
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mat_corpus
from npystore.errors import FormatError, UnsupportedError
from npystore.formats.mat4 import V4Matrix, parse_v4, scan_v4
from npystore.formats.mat5 import (
    MAX_DEPTH_LIMIT,
    CellArray,
    CharArray,
    MatHeader,
    MatVariable,
    NeedMoreBytes,
    NumericArray,
    OpaqueObject,
    SparseArray,
    StructArray,
    VariableEntry,
    is_v73,
    iter_data_refs,
    parse_header,
    parse_matrix_header,
    parse_variable,
    scan_elements,
)

scipy = pytest.importorskip("scipy")
sio = pytest.importorskip("scipy.io")
sp = pytest.importorskip("scipy.sparse")
from scipy.io.matlab import MatlabFunction, MatlabObject, MatlabOpaque  # noqa: E402

CORPUS = mat_corpus.CORPUS
#: scipy 1.18 reads a top-level opaque object (MATLAB's string, datetime, table, ...) under
#: its name, as fields _TypeSystem, _Class and _ObjectMetadata; before, under 'None', as
#: s0 (the name), s1, s2 (bytes) and arr
SCIPY_READS_OPAQUE = tuple(map(int, scipy.__version__.split(".")[:2])) >= (1, 18)
SRC = "memory://test.mat"
HOSTILE = (FormatError, UnsupportedError, NeedMoreBytes)
T = TypeVar("T")


# ---------------------------------------------------------------- the IO layer, simulated


@dataclass
class Loaded:
    """One variable as the IO layer would hold it: description + bytes its refs point into."""

    name: str
    node: MatVariable | V4Matrix
    buffer: bytes
    entry: VariableEntry | None

    def decode(self, **kwargs: Any) -> Any:
        return self.node.decode(self.buffer, 0, **kwargs)


def inflate(stream: bytes) -> bytes:
    """What the IO layer does with miCOMPRESSED data; a broken stream gives what inflated."""
    d = zlib.decompressobj()
    try:
        return d.decompress(stream, 2**26)
    except zlib.error:
        return b""


def asking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | NeedMoreBytes:
    """``fn(*args, **kwargs)``, or the NeedMoreBytes it raised."""
    try:
        return fn(*args, **kwargs)
    except NeedMoreBytes as need:
        return need


def parse_by_ranges(
    data: bytes, entry: VariableEntry, order: str, prefix: int, reads: list[tuple[int, int]]
) -> MatVariable:
    """Parse an uncompressed variable from a prefix of its element plus the asked ranges
    (appended to ``reads``)."""
    extra: dict[int, bytes] = {}
    first = data[entry.offset : min(entry.end, entry.offset + prefix)]
    for _ in range(100_000):
        result = asking(parse_variable, first, entry.offset, order, source=SRC, extra=extra)
        if isinstance(result, MatVariable):
            return result
        # a request lies inside the element and is new: the loop always makes progress
        assert entry.offset <= result.offset, (result.offset, entry)
        assert result.offset + result.needed <= entry.end, (result.offset, result.needed, entry)
        assert result.offset not in extra or len(extra[result.offset]) < result.needed
        extra[result.offset] = data[result.offset : result.offset + result.needed]
        reads.append((result.offset, result.needed))
    raise AssertionError("parse_variable kept asking for bytes")


def load(
    data: bytes,
    *,
    window: int = 64,
    prefix: int = 48,
    reads: list[tuple[int, int]] | None = None,
    each: Callable[[Loaded], object] | None = None,
) -> tuple[MatHeader, list[Loaded]]:
    """Header, tags by windows, then every variable, handed to ``each`` once parsed."""
    reads = [] if reads is None else reads
    header = parse_header(data[:128], source=SRC, file_size=len(data))
    out: list[Loaded] = []
    if header.version == 4:
        pos: int | None = 0
        while pos is not None:
            chunk = data[pos : pos + window]
            matrices, nxt = scan_v4(chunk, pos, len(data), source=SRC)
            assert nxt is None or nxt > pos or matrices == [], (pos, nxt)
            if nxt == pos:  # the header or name is longer than the window
                matrices, nxt = scan_v4(data[pos : pos + 4096 + 20], pos, len(data), source=SRC)
            pos = nxt
            for m in matrices:
                out.append(Loaded(m.name, m, data, None))
                if each is not None:
                    each(out[-1])
        return header, out
    pos = header.data_start
    while pos is not None:
        found, nxt = scan_elements(
            data[pos : pos + window], pos, len(data), header.byte_order, source=SRC,
            subsys_offset=header.subsys_offset,
        )  # fmt: skip
        if nxt == pos:  # fewer than 8 bytes in the window
            found, nxt = scan_elements(
                data[pos : pos + 8], pos, len(data), header.byte_order, source=SRC,
                subsys_offset=header.subsys_offset,
            )  # fmt: skip
        pos = nxt
        # each variable is parsed as soon as its tag is known, as the IO layer may
        for entry in found:
            out.append(load_entry(data, entry, header.byte_order, prefix, reads))
            if each is not None:
                each(out[-1])
    return header, out


def load_entry(
    data: bytes, entry: VariableEntry, order: str, prefix: int, reads: list[tuple[int, int]]
) -> Loaded:
    if entry.compressed:
        buffer = inflate(data[entry.data_offset : entry.end])
        var = parse_variable(buffer, 0, order, source=SRC, inflated=True)
        assert var.inflated
    else:
        buffer = data
        var = parse_by_ranges(data, entry, order, prefix, reads)
        assert not var.inflated
        assert var.offset == entry.offset
        assert var.size == entry.total_size
    return Loaded(var.name, var, buffer, entry)


# ---------------------------------------------------------------- comparison with scipy


@dataclass
class Oracle:
    """The same value loaded three ways by scipy."""

    a: Any  # mat_dtype=True, chars_as_strings=True: the reference
    b: Any  # mat_dtype=False: keeps the imaginary part that mat_dtype=True drops
    c: Any  # chars_as_strings=False: the char grid

    def __getitem__(self, key: Any) -> Oracle:
        return Oracle(self.a[key], self.b[key], self.c[key])


def scipy_load(data: bytes) -> dict[str, Oracle]:
    def one(**kw: Any) -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(
                sio.loadmat(io.BytesIO(data), squeeze_me=False, struct_as_record=True, **kw)
            )

    a = one(mat_dtype=True, chars_as_strings=True)
    b = one(mat_dtype=False, chars_as_strings=True)
    c = one(mat_dtype=True, chars_as_strings=False)
    keep = [k for k in a if not k.startswith("__") or k == "__function_workspace__"]
    return {k: Oracle(a[k], b[k], c[k]) for k in keep}


def scipy_key(item: Loaded) -> str:
    if item.name == "":
        return "__function_workspace__"
    value = item.node.value if isinstance(item.node, MatVariable) else None
    if isinstance(value, OpaqueObject) and value.kind == "opaque" and not SCIPY_READS_OPAQUE:
        # DIFFERENCE (scipy < 1.18): scipy reads no name for a top-level opaque (its header
        # has no dims/name subelements) and files it under 'None'; we use its first string,
        # as scipy 1.18 does.
        return "None"
    return item.name


def compare_file(data: bytes) -> int:
    """Parse, decode and compare every variable of a file with scipy; return their count."""
    header, items = load(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oracle = scipy_load(data)
        globals_ = [str(g) for g in sio.loadmat(io.BytesIO(data)).get("__globals__", [])]
    for item in items:
        key = scipy_key(item)
        assert key in oracle, (key, sorted(oracle))
        if isinstance(item.node, V4Matrix):
            compare_v4(item, oracle[key])
        else:
            assert item.node.is_global == (item.name in globals_)
            compare(item.node.value, item.buffer, oracle[key], key)
    assert {scipy_key(i) for i in items} == set(oracle)
    if header.version == 5 and header.subsys_offset is not None:
        assert [i.entry.is_subsystem for i in items if i.entry] == [i.name == "" for i in items]
    return len(items)


def fortran_indices(dims: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Indices in column-major order: the order of cells and struct elements."""
    for k in range(int(np.prod(dims))):
        yield tuple(int(i) for i in np.unravel_index(k, dims, order="F"))


def native(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return dtype.newbyteorder("=")


def compare(node: Any, buf: bytes, o: Oracle, path: str) -> None:
    """Decode ``node`` and compare it with scipy's three readings, recursively."""
    mine = node.decode(buf, 0)
    theirs = o.a
    if isinstance(node, NumericArray):
        assert mine.shape == node.dims, path
        assert (mine.dtype, mine.flags.f_contiguous) == (node.dtype, True), path
        if node.size == 8:
            # DIFFERENCE: a miMATRIX of 0 bytes (MATLAB's [] in a cell) is a 0x0 double in
            # MATLAB; scipy gives np.array([[]]), shape (1, 0).
            assert (theirs.shape, theirs.dtype) == ((1, 0), np.float64), path
            assert (mine.shape, mine.dtype) == ((0, 0), np.float64), path
            return
        if node.is_complex:
            # DIFFERENCE: scipy's mat_dtype=True casts complex values to the real class
            # dtype (ndarray.astype), dropping the imaginary part; we keep it.
            assert theirs.dtype.kind != "c", path
            np.testing.assert_array_equal(mine, o.b, err_msg=path)
            assert mine.dtype.kind == "c", path
            return
        # scipy returns the class dtype in the file's byte order; ours is native
        assert native(theirs.dtype) == mine.dtype, (path, theirs.dtype, mine.dtype)
        assert theirs.shape == mine.shape, path
        np.testing.assert_array_equal(mine, theirs, err_msg=path)
    elif isinstance(node, CharArray):
        grid = node.decode(buf, 0, as_strings=False)
        assert (grid.shape, grid.dtype) == (node.dims, np.dtype("<U1")), path
        np.testing.assert_array_equal(grid, o.c, err_msg=path)
        assert (mine.dtype, mine.shape) == (object, (node.dims[0], *node.dims[2:])), path
        rows = ["".join(grid[i, :, *k]) for i in range(node.dims[0])
                for k in np.ndindex(node.dims[2:])]  # fmt: skip
        assert list(mine.reshape(-1, order="C")) == rows or node.dims[0] == 0, path
        if len(node.dims) == 2:
            assert list(mine) == list(theirs), (path, mine, theirs)
        else:
            # DIFFERENCE: for N-d char scipy joins the LAST axis into strings; a MATLAB
            # string (row) runs along the second dimension, which we join, keeping the
            # trailing dimensions: shape (dims[0], dims[2], ...).
            assert theirs.shape == node.dims[:-1], path
    elif isinstance(node, SparseArray):
        assert sp.issparse(mine), path
        assert (mine.format, mine.shape) == ("csc", theirs.shape), path
        assert (mine != theirs).nnz == 0, path
        if node.matlab_class == "logical":
            # DIFFERENCE: logical sparse is bool for us; scipy gives bool only when MATLAB
            # declared the bytes miDOUBLE, uint8 when they are declared miUINT8 (savemat).
            assert mine.dtype == np.bool_, path
            assert theirs.dtype in (np.bool_, np.uint8), path
        else:
            assert mine.dtype == theirs.dtype, path
    elif isinstance(node, CellArray):
        assert (mine.dtype, mine.shape, theirs.shape) == (object, node.dims, node.dims), path
        for k, idx in enumerate(fortran_indices(node.dims)):
            assert mine[idx] is not None
            compare(node.cells[k], buf, o[idx], f"{path}{{{k + 1}}}")
    elif isinstance(node, StructArray):
        assert mine.shape == node.dims, path
        if node.class_name is not None:
            assert isinstance(theirs, MatlabObject)
            assert theirs.classname == node.class_name
        if not node.field_names:
            # DIFFERENCE: a struct without fields is a structured array without fields for
            # us (always a struct array); scipy returns an object array of None.
            assert (mine.dtype.names, theirs.dtype) == ((), object), path
            assert theirs.shape == node.dims, path
            return
        assert mine.dtype.names == node.field_names == theirs.dtype.names, path
        assert theirs.shape == node.dims, path
        nf = len(node.field_names)
        for k, idx in enumerate(fortran_indices(node.dims)):
            for j, f in enumerate(node.field_names):
                sub = Oracle(o.a[idx][f], o.b[idx][f], o.c[idx][f])
                compare(node.values[k * nf + j], buf, sub, f"{path}({k + 1}).{f}")
    elif isinstance(node, OpaqueObject):
        # a placeholder naming the class, never a failure; scipy keeps raw structures
        assert mine is node
        if node.kind == "function_handle":
            assert isinstance(theirs, MatlabFunction)
            assert node.matlab_class == "function_handle"
            sub = Oracle(np.asarray(o.a), np.asarray(o.b), np.asarray(o.c))
            compare(node.content, buf, sub, f"{path} (handle)")
        elif node.kind == "opaque":
            assert isinstance(theirs, MatlabOpaque), path
            if SCIPY_READS_OPAQUE:  # scipy >= 1.18: named fields of str
                names = ("_Class", "_TypeSystem", "_ObjectMetadata")
                assert theirs.dtype.names == (names[1], names[0], names[2]), path
                matlab_class, type_system = theirs[0][names[0]], theirs[0][names[1]]
            else:  # scipy < 1.18: s0 (the name), s1, s2 as bytes, arr
                names = ("s2", "s1", "arr")
                matlab_class, type_system = (theirs[0][n].decode() for n in names[:2])
            assert matlab_class == node.matlab_class, path
            assert type_system == node.type_system, path
            sub = Oracle(o.a[0][names[2]], o.b[0][names[2]], o.c[0][names[2]])
            compare(node.content, buf, sub, f"{path} (opaque)")
    else:  # pragma: no cover
        raise AssertionError(f"{path}: unexpected node {node!r}")


def compare_v4(item: Loaded, o: Oracle) -> None:
    m = item.node
    assert isinstance(m, V4Matrix)
    mine, theirs = item.decode(), o.a
    if m.kind == "full":
        # DIFFERENCE: every v4 matrix is a double to MATLAB; scipy returns the stored
        # precision in the file's byte order (and complex64 for single-stored complex).
        assert mine.dtype == (np.complex128 if m.is_complex else np.float64)
        assert theirs.dtype == (m.real.stored_dtype if not m.is_complex else theirs.dtype)
        assert mine.shape == theirs.shape == m.dims
        np.testing.assert_array_equal(mine, theirs)
    elif m.kind == "text":
        assert list(mine) == list(theirs)
        np.testing.assert_array_equal(item.decode(as_strings=False), o.c)
    else:
        # COO as scipy (a CSC matrix would need an array as long as the claimed columns)
        assert mine.format == "coo"
        assert mine.shape == theirs.shape
        assert (mine != theirs).nnz == 0
        assert mine.dtype == theirs.dtype


# ---------------------------------------------------------------- the real MATLAB corpus


def corpus_files() -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with manifest.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [r["local_path"] for r in rows if r["mat_version"] in ("4", "5")]


def corpus_v73() -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with manifest.open() as f:
        return [r["local_path"] for r in csv.DictReader(f, delimiter="\t")
                if r["mat_version"] == "7.3"][:3]  # fmt: skip


@pytest.mark.skipif(not corpus_files(), reason=f"no MAT corpus at {CORPUS}")
@pytest.mark.parametrize("rel", corpus_files())
def test_corpus_matches_scipy(rel: str) -> None:
    data = (CORPUS / rel).read_bytes()
    assert compare_file(data) >= 1


@pytest.mark.skipif(not corpus_v73(), reason=f"no MAT corpus at {CORPUS}")
@pytest.mark.parametrize("rel", corpus_v73())
def test_corpus_v73_is_refused(rel: str) -> None:
    data = (CORPUS / rel).read_bytes()
    assert is_v73(data[:128])
    assert data[512:520] == b"\x89HDF\r\n\x1a\n"
    with pytest.raises(UnsupportedError, match="HDF5"):
        parse_header(data[:128], source=rel)


@pytest.mark.skipif(not corpus_files(), reason=f"no MAT corpus at {CORPUS}")
def test_corpus_specifics() -> None:
    """What the MATLAB-written files hold, beyond agreeing with scipy."""
    data = (CORPUS / "MAT.jl/v7_sparse.mat").read_bytes()
    _, items = load(data)
    logical = next(i.node.value for i in items if i.name == "sparse_logical")
    assert isinstance(logical, SparseArray)
    assert logical.pr.data_type == 9
    assert logical.pr.stored_dtype == np.uint8  # but one byte per value
    data = (CORPUS / "MAT.jl/v7_struct_table_datetime.mat").read_bytes()
    header, items = load(data)
    s = items[0].node.value
    assert isinstance(s, StructArray)
    classes = [v.matlab_class for v in s.values]
    assert classes == ["datetime", "table", "datetime"]
    assert items[-1].entry is not None
    assert items[-1].entry.is_subsystem
    assert items[-1].entry.offset == header.subsys_offset
    data = (CORPUS / "scipy/testcell_6.1_SOL2.mat").read_bytes()
    header, items = load(data)
    assert header.byte_order == ">"
    assert header.subsys_offset is None
    cell = items[0].node.value
    assert isinstance(cell, CellArray)
    assert isinstance(cell.cells[0], CharArray)
    assert cell.cells[0].encoding == "utf-16"
    assert cell.cells[0].data.data_type == 4


# ---------------------------------------------------------------- synthetic files (savemat)


def savemat_bytes(mdict: dict[str, Any], **kw: Any) -> bytes:
    f = io.BytesIO()
    sio.savemat(f, mdict, **kw)
    return f.getvalue()


def numeric_vars() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    out: dict[str, Any] = {}
    for dt in ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"]:
        info = np.iinfo(dt)
        out[f"n_{dt}"] = np.array([[info.min, 0, 1], [info.max, 7, -1 if info.min else 2]], dt)
    out["n_f4"] = rng.standard_normal((3, 4)).astype("f4")
    out["n_f8"] = np.array([[np.nan, np.inf, -np.inf, 0.5, 2.0, 255.0]])  # 255.0: small ints
    out["n_ints_as_double"] = np.array([[1.0, 2.0, 3.0], [250.0, 0.0, 9.0]])
    out["n_c8"] = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype("c8")
    out["n_c16"] = np.array([[1 + 2j, -3j, 4.0]])
    out["n_bool"] = np.array([[True, False], [False, True]])
    out["n_3d"] = np.arange(24.0).reshape(2, 3, 4)
    out["n_4d_int"] = np.arange(120, dtype="i2").reshape(2, 3, 4, 5)
    out["n_scalar"] = 3.5
    out["n_vector"] = np.arange(5.0)
    for shape in [(0, 0), (0, 3), (3, 0), (2, 0, 4)]:
        out["e_" + "x".join(map(str, shape))] = np.zeros(shape)
    out["e_int"] = np.zeros((0, 2), "i4")
    return out


def rich_vars() -> dict[str, Any]:
    out = numeric_vars()
    out["c_text"] = "hello world"
    out["c_empty"] = ""
    out["c_matrix"] = np.array(["abc", "def"])
    out["c_unicode"] = "naïve \u2013 日本 \U0001f600 ok"  # non-BMP: savemat counts code points
    out["c_3d"] = np.array([["ab", "cd", "ef"], ["gh", "ij", "kl"]])
    inner = np.empty((1, 2), dtype=object)
    inner[0, 0] = np.array([[1.0]])
    inner[0, 1] = "x"
    cells = np.empty((2, 2), dtype=object)
    cells[0, 0] = inner
    cells[1, 0] = np.zeros((0, 0))
    cells[0, 1] = np.array([[1, 2]], "u2")
    cells[1, 1] = {"f": 1.0}
    out["cell_of_cells"] = cells
    out["cell_empty"] = np.empty((0, 3), dtype=object)
    st_arr = np.zeros((2, 3), dtype=[("a", object), ("bb", object)])
    for k, idx in enumerate(np.ndindex(2, 3)):
        st_arr[idx]["a"] = np.array([[float(k)]])
        st_arr[idx]["bb"] = f"s{k}"
    out["struct_array"] = st_arr
    out["struct_nested"] = {"one": 1.0, "two": {"three": "number 3", "four": np.eye(2)}}
    out["struct_nofields"] = {}
    out["struct_empty"] = np.zeros((0, 2), dtype=[("q", object)])
    obj = np.zeros((1, 1), dtype=[("v", object)])
    obj[0, 0]["v"] = np.array([[4.0]])
    out["an_object"] = sio.matlab.MatlabObject(obj, "myclass")
    out["sp_real"] = sp.csc_matrix(np.array([[0, 1.5, 0], [2.0, 0, 0], [0, 0, -3]]))
    out["sp_complex"] = sp.csc_matrix(np.array([[0, 1j, 0], [2.0, 0, 1 - 1j]]))
    out["sp_logical"] = sp.csc_matrix(np.array([[True, False], [False, True], [True, True]]))
    out["sp_empty"] = sp.csc_matrix((4, 5))
    out["sp_nocols"] = sp.csc_matrix((3, 0))
    return out


@pytest.mark.parametrize("compression", [False, True])
def test_savemat_v5_matches_scipy(compression: bool) -> None:
    data = savemat_bytes(rich_vars(), do_compression=compression)
    assert compare_file(data) == len(rich_vars())


@pytest.mark.parametrize("oned_as", ["row", "column"])
def test_savemat_v5_numeric_layouts(oned_as: str) -> None:
    data = savemat_bytes(numeric_vars(), oned_as=oned_as, long_field_names=True)
    assert compare_file(data) == len(numeric_vars())


def v4_vars() -> dict[str, Any]:
    rng = np.random.default_rng(4)
    return {
        "d": rng.standard_normal((3, 4)),
        "s": rng.standard_normal((2, 2)).astype("f4"),
        "i32": np.array([[-5, 7]], "i4"),
        "i16": np.array([[-5], [7]], "i2"),
        "u16": np.array([[65535, 7]], "u2"),
        "u8": np.array([[255, 0, 3]], "u1"),
        "cplx": np.array([[1 + 2j, 3 - 4j]]),
        "cplx_single": np.array([[1 + 2j]], "c8"),
        "txt": "Do nine men interpret",
        "txt_rows": np.array(["ab", "cd"]),
        "empty": np.zeros((0, 0)),
        "sp": sp.csc_matrix(np.array([[0, 1.5, 0], [2.0, 0, 0]])),
        "sp_c": sp.csc_matrix(np.array([[0, 1j], [2.0, 0]])),
    }


def test_savemat_v4_matches_scipy() -> None:
    data = savemat_bytes(v4_vars(), format="4")
    header = parse_header(data[:128], source=SRC)
    assert header.version == 4
    assert header.data_start == 0
    assert compare_file(data) == len(v4_vars())
    assert len(parse_v4(data, source=SRC)) == len(v4_vars())


def test_v4_big_endian() -> None:
    """scipy writes native order; build big-endian matrices by hand."""

    def matrix(name: bytes, values: np.ndarray, mopt: int, imag: np.ndarray | None = None) -> bytes:
        v = np.asarray(values, order="F")
        head = struct.pack(">5i", mopt, v.shape[0], v.shape[1], imag is not None, len(name) + 1)
        body = v.astype(">f8").tobytes(order="F")
        if imag is not None:
            body += np.asarray(imag).astype(">f8").tobytes(order="F")
        return head + name + b"\x00" + body

    a = np.arange(6.0).reshape(2, 3)
    text = np.array([[ord(c) for c in "hi!"]], float)
    data = (matrix(b"a", a, 1000) + matrix(b"c", a, 1000, -a) + matrix(b"t", text, 1001)
            + struct.pack("<5i", 0, 1, 1, 0, 2) + b"x\x00" + struct.pack("<d", 2.5))  # fmt: skip
    header = parse_header(data[:128], source=SRC)
    assert header.version == 4
    assert header.byte_order == ">"
    mats = parse_v4(data, source=SRC)
    assert [m.byte_order for m in mats] == [">", ">", ">", "<"]  # each matrix its own order
    np.testing.assert_array_equal(mats[0].decode(data), a)
    np.testing.assert_array_equal(mats[1].decode(data), a - 1j * a)
    assert list(mats[2].decode(data)) == ["hi!"]
    assert mats[3].decode(data)[0, 0] == 2.5
    assert compare_file(data[: mats[3].offset]) == 3
    # DIFFERENCE: scipy reads every matrix in the byte order of the first one; the format
    # gives each matrix its own (the M digit), which we follow.
    with pytest.raises(ValueError, match="Not enough bytes"):
        sio.loadmat(io.BytesIO(data))


def test_globals() -> None:
    f = io.BytesIO()
    writer = sio.matlab._mio5.MatFile5Writer(f, global_vars=["g"])
    writer.put_variables({"g": np.array([[1.0]]), "h": np.array([[2.0]])})
    assert compare_file(f.getvalue()) == 2
    _, items = load(f.getvalue())
    assert [i.node.is_global for i in items] == [True, False]


# ---------------------------------------------------------------- hand-built elements


def el(mdtype: int, payload: bytes, order: str = "<", small: bool = False) -> bytes:
    """A data element: full tag, or a small data element, padded to 8 bytes."""
    if small:
        assert len(payload) <= 4
        return struct.pack(f"{order}I", len(payload) << 16 | mdtype) + payload.ljust(4, b"\0")
    return struct.pack(f"{order}II", mdtype, len(payload)) + payload + b"\0" * (-len(payload) % 8)


def matrix(
    cls: int, dims: tuple[int, ...], body: bytes = b"", name: bytes = b"", flags: int = 0,
    order: str = "<", nzmax: int = 0,
) -> bytes:  # fmt: skip
    sub = el(6, struct.pack(f"{order}II", cls | flags << 8, nzmax), order)
    sub += el(5, struct.pack(f"{order}{len(dims)}i", *dims), order)
    sub += el(1, name, order)
    return struct.pack(f"{order}II", 14, len(sub + body)) + sub + body


def opaque(name: bytes, system: bytes, cls: bytes, content: bytes, order: str = "<") -> bytes:
    sub = el(6, struct.pack(f"{order}II", 17, 0), order)
    sub += el(1, name, order) + el(1, system, order) + el(1, cls, order) + content
    return struct.pack(f"{order}II", 14, len(sub)) + sub


def matfile(*elements: bytes, order: str = "<", subsys: int | None = None) -> bytes:
    text = b"MATLAB 5.0 MAT-file, Platform: test, Created on: today".ljust(116, b" ")
    sub = b" " * 8 if subsys is None else struct.pack(f"{order}Q", subsys)
    version = struct.pack(f"{order}H", 0x0100)
    return text + sub + version + (b"IM" if order == "<" else b"MI") + b"".join(elements)


def f8(values: Any, order: str = "<") -> bytes:
    return el(9, np.asarray(values, f"{order}f8").tobytes(order="F"), order)


def test_big_endian_v5() -> None:
    o = ">"
    a = np.arange(6.0).reshape(2, 3)
    text = "ab😀"  # MATLAB's char: UTF-16 code units, the emoji is two of them
    units = np.frombuffer(text.encode("utf-16-be"), ">u2")
    data = matfile(
        matrix(6, (2, 3), f8(a, o), b"a", order=o),
        matrix(6, (2, 3), f8(a, o) + el(3, (-a).astype(">i2").tobytes("F"), o), b"c",
               flags=0x08, order=o),
        matrix(4, (1, 4), el(17, units.tobytes(), o), b"s", order=o),
        matrix(9, (1, 3), el(2, b"\x01\x00\x01", o), b"l", flags=0x02, order=o),
        order=o,
    )  # fmt: skip
    header, items = load(data)
    assert header.byte_order == ">"
    values = {i.name: i.decode() for i in items}
    np.testing.assert_array_equal(values["a"], a)
    np.testing.assert_array_equal(values["c"], a - 1j * a)
    assert list(values["s"]) == [text]
    assert values["s"].shape == (1,)
    assert items[2].node.value.dims == (1, 4)
    np.testing.assert_array_equal(values["l"], [[True, False, True]])
    assert compare_file(data[: items[2].node.offset] + data[items[3].node.offset :]) == 3
    # DIFFERENCE: scipy decodes UTF-16 char data as a whole (joining the surrogate pair),
    # then cannot fit 3 characters into the 1x4 char array MATLAB declares.
    with pytest.raises(TypeError, match="buffer is too small"):
        sio.loadmat(io.BytesIO(data))


def test_surrogate_pairs_across_rows() -> None:
    """A 2-row char matrix whose rows hold non-BMP characters: pairs are not adjacent in
    column-major storage, so they must be joined per row, after reshaping."""
    rows = ["a\U0001f600", "\U0001f431b"]  # 3 code units each
    grid = np.array([np.frombuffer(r.encode("utf-16-le"), "<u2") for r in rows])
    data = matfile(matrix(4, (2, 3), el(17, grid.tobytes(order="F")), b"s"))
    _, items = load(data)
    assert list(items[0].decode()) == rows
    assert items[0].decode(as_strings=False).shape == (2, 3)
    # DIFFERENCE: scipy decodes the column-major stream as one UTF-16 string, which pairs
    # the wrong units (here the high surrogate of row 2 with the low one of row 2's first
    # character but after row 1's high one): it fails, or gives replacement characters.
    try:
        theirs = list(scipy_load(data)["s"].a)
    except TypeError as exc:
        theirs = [str(exc)]
    assert theirs != rows
    assert "\ufffd" in theirs[0] or "buffer is too small" in theirs[0]


def test_char_edge_cases() -> None:
    data = matfile(
        matrix(4, (1, 3), el(16, b"a\0b"), b"nul"),  # NULs are characters
        matrix(4, (2, 2), el(16, b""), b"blank"),  # 0 bytes: blanks, as scipy
        matrix(4, (1, 2), el(2, b"\xe9x"), b"latin"),
        matrix(4, (1, 2), el(18, np.array([0x1F600, 0x41], "<u4").tobytes()), b"utf32"),
        matrix(4, (1, 2), el(17, np.array([0xD83D, 0x41], "<u2").tobytes()), b"lone"),
    )  # fmt: skip
    _, items = load(data)
    v = {i.name: i.decode() for i in items}
    assert list(v["nul"]) == ["a\0b"]
    assert list(v["blank"]) == ["  ", "  "]
    assert list(v["latin"]) == ["éx"]
    assert list(v["utf32"]) == ["\U0001f600A"]
    assert list(v["lone"]) == ["\ud83dA"]  # a lone surrogate is kept, not replaced


def test_empty_cell_elements_and_placeholders() -> None:
    """MATLAB's cell(1,2) holds 0-byte miMATRIX elements; opaque objects and unknown
    classes are placeholders, never failures."""
    empty = struct.pack("<II", 14, 0)
    meta = matrix(13, (6, 1), el(6, np.arange(6, dtype="<u4").tobytes()))
    data = matfile(
        matrix(1, (1, 2), empty + empty, b"c"),
        opaque(b"str", b"MCOS", b"string", meta),
        matrix(18, (1, 1), f8([[1.0]]), b"odd"),
    )
    _, items = load(data)
    cell = items[0].node.value
    assert isinstance(cell, CellArray)
    decoded = items[0].decode()
    assert [x.shape for x in decoded.ravel()] == [(0, 0), (0, 0)]
    top = items[1].node.value
    assert isinstance(top, OpaqueObject)
    assert top.name == "str"
    assert top.matlab_class == "string"
    assert top.type_system == "MCOS"
    assert isinstance(top.content, NumericArray)
    assert items[1].decode() is top
    odd = items[2].node.value
    assert isinstance(odd, OpaqueObject)
    assert odd.kind == "unknown"
    assert odd.matlab_class == "<class 18>"
    head = parse_matrix_header(data[128:], 128, "<", source=SRC)
    assert (head.name, head.matlab_class, head.dims) == ("c", "cell", (1, 2))
    # scipy on the first two (it cannot read class 18)
    compare_file(data[: items[2].entry.offset] if items[2].entry else data)


def test_complex_int_and_logical_classes() -> None:
    """Complex integer classes (MATLAB has them, numpy does not) decode to complex128."""
    re = np.array([[1, -2]], "<i1")
    data = matfile(
        matrix(8, (1, 2), el(1, re.tobytes()) + el(1, (-re).tobytes()), b"ci8", flags=0x08),
        matrix(7, (1, 2), el(2, b"\x01\x02") + el(2, b"\x03\x04"), b"cs", flags=0x08),
        matrix(6, (1, 2), el(9, np.array([0.0, 2.0]).tobytes()), b"dl", flags=0x02),
    )  # fmt: skip
    _, items = load(data)
    v = {i.name: i.decode() for i in items}
    assert v["ci8"].dtype == np.complex128
    np.testing.assert_array_equal(v["ci8"], [[1 - 1j, -2 + 2j]])
    assert v["cs"].dtype == np.complex64
    np.testing.assert_array_equal(v["cs"], [[1 + 3j, 2 + 4j]])
    assert v["dl"].dtype == np.bool_
    assert v["dl"].tolist() == [[False, True]]
    assert items[2].node.matlab_class == "logical"


def test_dataref_points_at_the_values() -> None:
    a = np.arange(12.0).reshape(3, 4) * 1.25
    data = savemat_bytes({"a": a, "b": np.array([[1.0 + 2j, 3.5]])})
    _, items = load(data)
    node = items[0].node.value
    assert isinstance(node, NumericArray)
    assert node.real.stored_dtype == np.dtype("<f8")
    ref = node.real
    assert data[ref.offset : ref.end] == a.tobytes(order="F")  # the bytes ARE the values
    assert ref.count == 12
    assert node.imag is None
    # decode from just the element, with base = its offset
    entry = items[0].entry
    assert entry is not None
    np.testing.assert_array_equal(
        items[0].node.decode(data[entry.offset : entry.end], entry.offset), a
    )
    # a chunk of columns is a contiguous range: convert() handles slices
    part = np.frombuffer(data, "<f8", 6, ref.offset + 3 * 8 * 2)
    np.testing.assert_array_equal(node.convert(part).reshape(3, 2, order="F"), a[:, 2:])
    b = items[1].node.value
    assert isinstance(b, NumericArray)
    assert b.imag is not None
    assert data[b.imag.offset : b.imag.end] == np.array([2.0, 0.0]).tobytes()
    assert [r.offset for r in items[1].node.data_refs()] == [b.real.offset, b.imag.offset]
    with pytest.raises(NeedMoreBytes) as info:
        ref.view(data[: ref.offset + 8])
    assert (info.value.offset, info.value.needed) == (ref.offset, ref.nbytes)


def test_partial_reads_never_touch_values() -> None:
    """An uncompressed complex matrix: the parser asks for the imaginary tag, not data."""
    a = np.arange(4000.0).reshape(40, 100)
    data = savemat_bytes({"big": a + 1j * a, "s": {"x": a, "y": "text"}})
    reads: list[tuple[int, int]] = []
    _, items = load(data, window=16, prefix=64, reads=reads)
    refs = [r for i in items for r in iter_data_refs(i.node.value) if r.nbytes > 64]
    assert len(refs) == 3
    for off, n in reads:
        for r in refs:
            assert off + n <= r.offset or off >= r.end, ((off, n), r)
    assert sum(n for _, n in reads) < 600
    np.testing.assert_array_equal(items[0].decode(), a + 1j * a)


def test_scan_windows() -> None:
    data = savemat_bytes(rich_vars(), do_compression=True)
    header = parse_header(data, source=SRC)
    whole, nxt = scan_elements(data[128:], 128, len(data), "<", source=SRC)
    assert nxt is None
    assert len(whole) == len(rich_vars())
    for window in (8, 9, 100, 1000):
        _, items = load(data, window=window)
        assert [i.entry for i in items] == whole
    assert header.subsys_offset is None
    assert all(e.compressed for e in whole)
    first, nxt = scan_elements(data[128:140], 128, len(data), "<", source=SRC)
    assert first == whole[:1]
    assert nxt == whole[1].offset


def test_formats_work_without_scipy() -> None:
    """The parsers import scipy only to build sparse matrices."""
    code = (
        "import sys; sys.modules['scipy'] = None\n"
        "from npystore.formats import mat4, mat5\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "e = mat5.scan_elements(data[128:], 128, len(data), '<', source='x')[0][0]\n"
        "v = mat5.parse_variable(data[e.offset:e.end], e.offset, '<', source='x')\n"
        "print(v.decode(data).tolist())\n"
    )
    with tempfile.NamedTemporaryFile(suffix=".mat") as f:
        f.write(savemat_bytes({"a": np.array([[1.0, 2.0]])}))
        f.flush()
        out = subprocess.run(
            [sys.executable, "-c", code, f.name], capture_output=True, text=True, check=True
        )
    assert out.stdout.strip() == "[[1.0, 2.0]]"


def test_header_errors() -> None:
    good = savemat_bytes({"a": 1.0})
    assert not is_v73(good)
    assert not is_v73(good[:100])
    with pytest.raises(NeedMoreBytes):
        parse_header(good[:100], source=SRC)
    with pytest.raises(FormatError, match="not a MAT-file"):
        parse_header(b"MATLAB", source=SRC, file_size=6)
    with pytest.raises(FormatError, match="endian indicator"):
        parse_header(good[:126] + b"XX", source=SRC)
    with pytest.raises(FormatError, match="version"):
        parse_header(good[:124] + b"\x00\x03IM", source=SRC)
    with pytest.raises(UnsupportedError, match="HDF5"):
        parse_header(good[:124] + b"\x00\x02IM", source=SRC)
    with pytest.raises(FormatError, match=r"not a MAT-file.*v4 matrix type"):
        parse_header(b"\x00\x00\x99\x99" + good[4:], source=SRC)
    with pytest.raises(FormatError, match="not a v4 matrix type"):  # a later matrix
        parse_v4(SMALL_V4 + struct.pack("<i", 1000) + bytes(16), source=SRC)
    with pytest.raises(UnsupportedError, match="VAX"):
        parse_header(struct.pack("<i", 2000) + good[4:], source=SRC)
    packed = savemat_bytes({"a": 1.0}, do_compression=True)
    with pytest.raises(FormatError, match="inflate"):
        parse_variable(packed[128:], 128, "<", source=SRC)
    subsys = matfile(order=">", subsys=4242)
    assert parse_header(subsys, source=SRC).subsys_offset == 4242


# ---------------------------------------------------------------- hostile input


def small_v5(compression: bool) -> bytes:
    cells = np.empty((1, 2), dtype=object)
    cells[0, 0] = np.array([[1, 2]], "u1")
    cells[0, 1] = "ab"
    return savemat_bytes(
        {"x": np.array([[1.5, 2.0]]), "c": cells, "s": {"f": np.array([[1j]]), "g": "h"},
         "t": "hi", "sp": sp.csc_matrix(np.array([[0, 2.0], [1.0, 0]])),
         "b": np.array([[True]]),
         "o": sio.matlab.MatlabObject(np.zeros((1, 1), [("v", object)]), "k")},
        do_compression=compression,
    )  # fmt: skip


SMALL_V5 = small_v5(False)
SMALL_V5Z = small_v5(True)
SMALL_V4 = savemat_bytes(
    {"d": np.array([[1.0, 2.0]]), "t": "hi", "sp": sp.csc_matrix(np.eye(2))}, format="4"
)


def decode_all(item: Loaded) -> None:
    """Decode a variable in every way; its refs must lie inside its buffer."""
    item.decode()
    if isinstance(item.node, MatVariable):
        for ref in item.node.data_refs():
            assert 0 <= ref.offset <= ref.end <= len(item.buffer)
        if isinstance(item.node.value, CharArray):
            item.decode(as_strings=False)


def everything(data: bytes) -> int:
    """The whole pipeline, each variable decoded as soon as it is parsed; their number."""
    _, items = load(data, window=40, prefix=32, each=decode_all)
    return len(items)


@pytest.mark.parametrize("name", ["v5", "v5z", "v4"])
def test_truncation_at_every_cut(name: str) -> None:
    data = {"v5": SMALL_V5, "v5z": SMALL_V5Z, "v4": SMALL_V4}[name]
    total = everything(data)
    outcomes: dict[str, int] = {}
    decoded = 0
    for cut in range(len(data)):
        items: list[Loaded] = []

        def each(item: Loaded, items: list[Loaded] = items) -> None:
            decode_all(item)
            items.append(item)

        try:
            load(data[:cut], window=40, prefix=32, each=each)
            outcomes["ok"] = outcomes.get("ok", 0) + 1
        except HOSTILE as exc:
            outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
        decoded += len(items)
    # only the cuts between variables succeed; the variables before a cut still decode
    assert outcomes.get("ok", 0) <= total + 1, outcomes
    assert decoded > len(data) * total // 4, (decoded, outcomes)


def test_truncated_elements_ask_for_bytes_inside_them() -> None:
    """Given a short element prefix, the parser asks; it never claims the file is bad."""
    data = SMALL_V5
    entries, _ = scan_elements(data[128:], 128, len(data), "<", source=SRC)
    for e in entries:
        for cut in range(e.total_size):
            need = asking(
                parse_variable, data[e.offset : e.offset + cut], e.offset, "<", source=SRC
            )
            if isinstance(need, NeedMoreBytes):
                assert e.offset <= need.offset < need.offset + need.needed <= e.end
            else:
                assert cut >= 8
    data = SMALL_V5Z
    entries, _ = scan_elements(data[128:], 128, len(data), "<", source=SRC)
    for e in entries:
        inner = inflate(data[e.data_offset : e.end])
        for cut in range(len(inner)):
            need = asking(parse_variable, inner[:cut], 0, "<", source=SRC, inflated=True)
            if isinstance(need, NeedMoreBytes):
                assert 0 <= need.offset < need.offset + need.needed <= len(inner)


MUTATION_TARGETS = {
    "v5": SMALL_V5,
    "v5z": SMALL_V5Z,
    "v4": SMALL_V4,
    "inflated": b"".join(
        inflate(SMALL_V5Z[e.data_offset : e.end])
        for e in scan_elements(SMALL_V5Z[128:], 128, len(SMALL_V5Z), "<", source=SRC)[0][:4]
    ),
}
INTERESTING = [0, 1, 2, 4, 5, 6, 7, 8, 9, 14, 15, 16, 17, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               0x10000, 0x40001, 0x50001]  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutations_raise_only_format_errors(data: st.DataObject) -> None:
    target = data.draw(st.sampled_from(sorted(MUTATION_TARGETS)))
    buf = bytearray(MUTATION_TARGETS[target])
    start = 128 if target in ("v5", "v5z") and data.draw(st.booleans()) else 0
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["byte", "word", "delete", "insert"]))
        at = data.draw(st.integers(start, max(start, len(buf) - 1)))
        if op == "byte" and at < len(buf):
            buf[at] = data.draw(st.integers(0, 255))
        elif op == "word":
            at -= at % 4
            word = data.draw(st.sampled_from(INTERESTING) | st.integers(0, 2**32 - 1))
            buf[at : at + 4] = struct.pack("<I", word)
        elif op == "delete":
            del buf[at : at + data.draw(st.integers(1, 16))]
        else:
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    try:
        if target == "inflated":
            var = parse_variable(bytes(buf), 0, "<", source=SRC, inflated=True)
            var.decode(bytes(buf))
        else:
            everything(bytes(buf))
    except HOSTILE:
        pass


def nested_cells(depth: int) -> bytes:
    inner = matrix(6, (1, 1), f8([[7.0]]))
    for _ in range(depth):
        inner = matrix(1, (1, 1), inner)
    return inner


def test_deep_nesting_is_refused_without_recursion_error() -> None:
    element = nested_cells(200)
    with pytest.raises(FormatError, match="max_depth=64"):
        parse_variable(element, 0, "<", source=SRC)
    deep = nested_cells(MAX_DEPTH_LIMIT)
    var = parse_variable(deep, 0, "<", source=SRC, max_depth=MAX_DEPTH_LIMIT)
    value = var.decode(deep)
    for _ in range(MAX_DEPTH_LIMIT):
        value = value[0, 0]
    assert value[0, 0] == 7.0
    with pytest.raises(FormatError, match="max_depth"):
        parse_variable(nested_cells(MAX_DEPTH_LIMIT + 1), 0, "<", source=SRC, max_depth=256)
    with pytest.raises(ValueError, match="max_depth"):
        parse_variable(deep, 0, "<", source=SRC, max_depth=10_000)


def test_absurd_sizes_are_refused_quickly() -> None:
    big = (2**31 - 1, 2**31 - 1)
    cases = {
        "cells": matrix(1, big),
        "numeric": matrix(6, big, f8([[1.0]])),
        "struct": matrix(2, big, el(5, struct.pack("<i", 4), small=True) + el(1, b"abc\0")),
        "dims": matrix(6, (2**31 - 1,) * 3, f8([[1.0]])),
        "neg": matrix(6, (1, -1), f8([[1.0]])),
        "one_dim": matrix(6, (1,), f8([[1.0]])),
        "char": matrix(4, big, el(16, b"")),
        "char_rows": matrix(4, (2**31 - 1, 0), el(16, b"")),  # no data, 2**31 - 1 strings
        "char_pages": matrix(4, (1, 0, 2**31 - 1), el(16, b"")),
        "sparse_jc": matrix(5, (3, 2**31 - 1), el(5, b"") + el(5, b"\0" * 4) + f8([])),
        "name_len": matrix(2, (1, 1), el(5, struct.pack("<i", 3), small=True) + el(1, b"ab")),
        "tag": matrix(6, (1, 1)) + b"\x09\0\0\0\xff\xff\xff\x7f",
        "small_elem": matrix(6, (1, 1), struct.pack("<II", 9 | 8 << 16, 0)),
    }
    t0 = time.perf_counter()
    for name, element in cases.items():
        with pytest.raises(FormatError):  # noqa: PT012 (parse or decode refuses it)
            parse_variable(element, 0, "<", source=SRC).decode(element)
            pytest.fail(name)
    assert time.perf_counter() - t0 < 10.0
    many = matrix(2, (0, 0), el(5, struct.pack("<i", 1), small=True) + el(1, b"a" * 70_000))
    with pytest.raises(UnsupportedError, match="fields"):
        parse_variable(many, 0, "<", source=SRC)
    v4_text = struct.pack("<5i", 1, 2**31 - 1, 0, 0, 2) + b"t\0"
    with pytest.raises(FormatError, match="empty strings"):
        parse_v4(v4_text, source=SRC)
    five = matrix(4, (5, 0), el(16, b""))  # a legitimate 5x0 char: five empty strings
    assert list(parse_variable(five, 0, "<", source=SRC).decode(five)) == [""] * 5
    # a fieldless struct may be large: nothing is stored per element
    nofields = matrix(2, (1000, 1000), el(5, struct.pack("<i", 1), small=True) + el(1, b""))
    assert parse_variable(nofields, 0, "<", source=SRC).decode(nofields).shape == (1000, 1000)


@pytest.mark.timeout(120)
def test_empty_variables_of_dims_numpy_cannot_hold(tmp_path: Any) -> None:
    """Empty variables whose other dims multiply past numpy's limit (2**63 - 1 bytes of the
    class's dtype) are refused when parsed, naming dims, dtype and limit; those numpy can
    hold are read, through the file faces too, as scipy reads them."""
    import npystore

    big = 2**31 - 1
    fields = el(5, struct.pack("<i", 4), small=True) + el(1, b"abc\0")
    refused = {
        "d0": (matrix(6, (0, big, big, big), f8([]), b"d0"), "float64", "elements"),
        "d1": (matrix(6, (big, big, 0), f8([]), b"d1"), "float64", "bytes"),
        "d2": (matrix(6, (0, big, big), f8([]), b"d2"), "float64", "bytes"),
        "u2": (matrix(11, (0, big, big, 3), el(4, b""), b"u2"), "uint16", "elements"),
        "u4": (matrix(13, (0, big, 2**30 + 1, 1), el(6, b""), b"u4"), "uint32", "bytes"),
        "c": (matrix(7, (0, big, big), el(7, b"") * 2, b"c", flags=0x08), "complex64", "b"),
        "cell": (matrix(1, (0, big, big, big), b"", b"cell"), "object", "elements"),
        "char": (matrix(4, (0, big, big), el(16, b""), b"char"), "<U1", "bytes"),
        "st": (matrix(2, (big, 0, big), fields, b"st"), "object", "bytes"),
    }
    readable = {  # 2**62 - 2**32 + 1 elements of one byte: numpy holds it, empty
        "i8": matrix(8, (0, big, big), el(1, b""), b"i8"),
        "lg": matrix(9, (big, big, 0), el(2, b""), b"lg", flags=0x02),
    }
    t0 = time.perf_counter()
    for name, (element, dtype, unit) in refused.items():
        with pytest.raises(UnsupportedError) as info:
            parse_variable(element, 0, "<", source=SRC)
        message = str(info.value)
        assert f"variable {name!r}: numpy cannot make an array of shape" in message
        assert f"and dtype {dtype}, even empty" in message
        assert unit in message
        assert "more than numpy's limit 9223372036854775807" in message
    path = tmp_path / "empty.mat"
    path.write_bytes(matfile(*(e for e, _, _ in refused.values()), *readable.values()))
    theirs = sio.loadmat(str(path), variable_names=list(readable))
    mat = npystore.open_mat(str(path))
    for name in refused:
        with pytest.raises(UnsupportedError, match=rf"empty\.mat: variable {name!r}: numpy"):
            mat[name]
    for name, dtype in (("i8", np.int8), ("lg", np.bool_)):  # scipy: logical as uint8
        ours = mat[name].compute()
        assert (ours.shape, ours.dtype, ours.size) == (theirs[name].shape, np.dtype(dtype), 0)
    assert time.perf_counter() - t0 < 20.0


def test_bad_sparse_indices_are_format_errors() -> None:
    def sparse(ir: list[int], jc: list[int], pr: list[float]) -> bytes:
        body = el(5, np.array(ir, "<i4").tobytes()) + el(5, np.array(jc, "<i4").tobytes())
        return matrix(5, (2, 2), body + f8(pr), nzmax=max(1, len(ir)))

    ok = sparse([0, 1], [0, 1, 2], [1.0, 2.0])
    assert parse_variable(ok, 0, "<", source=SRC).decode(ok).toarray().tolist() == [[1, 0], [0, 2]]
    for bad in (sparse([0, 5], [0, 1, 2], [1.0, 2.0]), sparse([0, 1], [0, 2, 1], [1.0, 2.0]),
                sparse([0, 1], [1, 1, 2], [1.0, 2.0]), sparse([0], [0, 1, 2], [1.0])):  # fmt: skip
        var = parse_variable(bad, 0, "<", source=SRC)
        with pytest.raises(FormatError, match=f"^{SRC}: sparse variable ''"):
            var.decode(bad)
