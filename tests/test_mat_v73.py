"""MAT v7.3 (HDF5) files read by npystore.files.mat.v73 over npystore.formats.mat73.

Oracles: mat73.loadmat on the real MATLAB corpus (wherever it returns data; the cases where
it is wrong each have a test of their own), hdf5storage.savemat round trips (its defaults
compress arrays > 16 KiB with gzip + shuffle + fletcher32), h5py for hand-built files
(sparse matrices, which hdf5storage cannot write, and hostile files), and the v5 reader for
the files the corpus holds in both versions.
"""

from __future__ import annotations

import csv
import math
import time
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

import mat_corpus
import npystore
from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import RangeReader, open_reader
from npystore.files.mat.tree import (
    CellNode,
    CharLeaf,
    MatNode,
    NumericLeaf,
    ObjectLeaf,
    SparseLeaf,
    StructNode,
    ValueLeaf,
    to_value,
)
from npystore.files.mat.v73 import Mat73File

mat73 = pytest.importorskip("mat73")
hdf5storage = pytest.importorskip("hdf5storage")

CORPUS = mat_corpus.CORPUS


def corpus_v73() -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with manifest.open() as f:
        return [r["local_path"] for r in csv.DictReader(f, delimiter="\t")
                if r["mat_version"] == "7.3"]  # fmt: skip


needs_corpus = pytest.mark.skipif(not corpus_v73(), reason=f"no MAT corpus at {CORPUS}")


def open73(path: Path | str, **kw: Any) -> Mat73File:
    return Mat73File(open_reader(str(path)), **kw)


def value(node: MatNode) -> Any:
    return to_value(node, numeric=lambda leaf: leaf.array.read())


def read_leaf(node: MatNode) -> np.ndarray:
    """The values of a numeric leaf: lazy (read now) or read with its container."""
    if isinstance(node, ValueLeaf):
        assert not node.value.flags.writeable
        return node.value
    assert isinstance(node, NumericLeaf), node
    return node.array.read()


def load_mat73(path: Path) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mat73.loadmat(str(path), use_attrdict=False, verbose=False)


# ----------------------------------------------------------- agreement with mat73


def m73_squeeze(arr: np.ndarray) -> np.ndarray:
    """mat73's own shape rule: a 2-D array with a length-1 axis loses it."""
    if arr.ndim == 2 and 1 in arr.shape:
        return arr.reshape([n for n in arr.shape if n > 1])
    return arr


def m73_grid(items: list[Any], dims: tuple[int, ...]) -> Any:
    """Column-major items laid out as mat73 lays out cells: rows of columns, one row flat."""
    r, c = dims
    rows = [[items[i + r * j] for j in range(c)] for i in range(r)]
    return rows[0] if r == 1 else rows


def agree(node: MatNode, theirs: Any, path: str, known: list[tuple[str, str]]) -> None:
    """Check a node against mat73's value; log the documented mat73 shortcomings."""
    if theirs is None:
        if isinstance(node, NumericLeaf | ValueLeaf) and read_leaf(node).size == 0:
            return known.append((path, "empty as None"))
        assert isinstance(node, ObjectLeaf), f"{path}: mat73 None, we have {node}"
        return known.append((path, "object as None"))
    if isinstance(node, NumericLeaf | ValueLeaf):
        ours = read_leaf(node)
        assert ours.shape == node.dims
        if isinstance(theirs, bool):
            assert ours.dtype == np.bool_
            assert bool(ours.reshape(-1)[0]) is theirs, path
            return None
        np.testing.assert_array_equal(m73_squeeze(ours), theirs, err_msg=path, strict=True)
        return None
    if isinstance(node, CharLeaf):
        # mat73 joins the code units column-major, one chr each
        assert theirs == "".join(map(chr, node.units.reshape(-1, order="F"))), path
        if node.dims[0] > 1 or any(0xD800 <= u <= 0xDFFF for u in node.units.ravel()):
            return known.append((path, "char rows or surrogates mixed"))
        assert node.value == theirs, path
        return None
    if isinstance(node, SparseLeaf):
        ours = node.load()
        if theirs.dtype.names is not None:
            return known.append((path, "complex sparse as records"))
        if ours.dtype == np.bool_ and theirs.dtype != np.bool_:
            known.append((path, "logical sparse as uint8"))
        np.testing.assert_array_equal(ours.toarray(), theirs.toarray(), err_msg=path)
        return None
    if isinstance(node, CellNode):
        return agree_items(list(node.cells), node.dims, theirs, path, known)
    if isinstance(node, StructNode):
        return agree_struct(node, theirs, path, known)
    assert isinstance(node, ObjectLeaf)
    return known.append((path, f"{node.matlab_class} decoded by mat73"))


def agree_items(
    items: list[Any], dims: tuple[int, ...], theirs: Any, path: str, known: list[tuple[str, str]]
) -> None:
    assert isinstance(theirs, list), f"{path}: mat73 gave {type(theirs)}"
    if math.prod(dims) == 0:
        return known.append((path, f"empty {dims} as nested lists"))
    grid = m73_grid(items, dims)
    flat_ours = grid if dims[0] == 1 else [x for row in grid for x in row]
    flat_theirs = theirs if dims[0] == 1 else [x for row in theirs for x in row]
    assert len(flat_ours) == len(flat_theirs), path
    for i, (a, b) in enumerate(zip(flat_ours, flat_theirs, strict=True)):
        agree_any(a, b, f"{path}[{i}]", known)
    return None


def agree_any(item: Any, theirs: Any, path: str, known: list[tuple[str, str]]) -> None:
    if isinstance(item, dict):  # one struct element
        assert isinstance(theirs, dict), path
        assert set(item) == set(theirs), path
        for f in item:
            agree(item[f], theirs[f], f"{path}.{f}", known)
    else:
        agree(item, theirs, path, known)


def agree_struct(node: StructNode, theirs: Any, path: str, known: list[tuple[str, str]]) -> None:
    if not node.elements or not node.fields:
        assert isinstance(theirs, list | dict), path
        return known.append((path, f"struct {node.dims} without values"))
    if len(node.elements) == 1 and isinstance(theirs, dict):
        assert set(theirs) == set(node.fields), path
        for f in node.fields:
            agree(node.elements[0][f], theirs[f], f"{path}.{f}", known)
        return None
    if isinstance(theirs, dict):  # a struct array at top level: field -> cell-like list
        assert set(theirs) == set(node.fields), path
        for f in node.fields:
            column = [e[f] for e in node.elements]
            agree_items(column, node.dims, theirs[f], f"{path}.{f}", known)
        return None
    known.append((path, "struct array as a list of dicts"))
    if len(node.elements) == 1:  # mat73 turns a 1x1 struct of equal-length cells into a list
        cells = {f: node.elements[0][f] for f in node.fields}
        assert all(isinstance(c, CellNode) for c in cells.values()), path
        for i, d in enumerate(theirs):
            for f, c in cells.items():
                assert isinstance(c, CellNode)
                agree(c.cells[i], d[f], f"{path}.{f}{{{i}}}", known)
        return None
    agree_items([dict(e) for e in node.elements], node.dims, theirs, path, known)
    return None


@needs_corpus
@pytest.mark.parametrize("rel", corpus_v73())
def test_corpus_opens_and_agrees_with_mat73(rel: str) -> None:
    path = CORPUS / rel
    theirs = load_mat73(path)
    with h5py.File(path, "r") as f:
        names = [n for n in f if n not in ("#refs#", "#subsystem#")]
    known: list[tuple[str, str]] = []
    with open73(path) as m:
        assert m.version == "7.3"
        assert m.header_text.startswith("MATLAB 7.")
        infos = m.infos()
        assert list(infos) == names
        for name, info in infos.items():
            node = m.node(name)
            assert node.matlab_class == info.matlab_class, name
            assert tuple(node.dims) == info.dims or info.dims == (), name
            value(node)  # every leaf reads
            agree(node, theirs[name], name, known)


# ------------------------------------------------------- where mat73 is wrong (corpus)


@needs_corpus
def test_empty_arrays_keep_their_dims_mat73_gives_none() -> None:
    path = CORPUS / "MAT.jl/v7.3_array.mat"
    assert load_mat73(path)["empty"] is None
    with open73(path) as m:
        node = m.node("empty")
        assert isinstance(node, NumericLeaf)
        assert node.dims == (0, 0)
        assert node.array.read().shape == (0, 0)
        assert node.array.dtype == np.float64
    path = CORPUS / "MAT.jl/v7.3_empty_struct_arrays.mat"
    assert load_mat73(path)["s01"] == []  # 0x1 and 0x0 look the same there
    with open73(path) as m:
        for name, dims in (("s00", (0, 0)), ("s01", (0, 1)), ("s10", (1, 0))):
            node = m.node(name)
            assert isinstance(node, StructNode)
            assert (node.dims, node.fields, node.elements) == (dims, ("a", "b", "c"), ())
    path = CORPUS / "MAT.jl/v7.3_empty_cells.mat"
    assert load_mat73(path)["empty_cells"][0] is None
    with open73(path) as m:
        node = m.node("empty_cells")
        assert isinstance(node, CellNode)
        empty = node.cells[0]
        assert isinstance(empty, ValueLeaf)  # MATLAB's "canonical empty": [], read with the cell
        assert (empty.matlab_class, empty.dims) == ("double", (0, 0))
        assert empty.value.dtype == np.float64


@needs_corpus
def test_row_and_column_vectors_keep_their_shape_mat73_squeezes() -> None:
    path = CORPUS / "MAT.jl/v7.3_array.mat"
    theirs = load_mat73(path)
    assert theirs["a1x2"].shape == theirs["a2x1"].shape == (2,)
    with open73(path) as m:
        assert m.node("a1x2").array.read().shape == (1, 2)
        assert m.node("a2x1").array.read().shape == (2, 1)
    with open73(CORPUS / "MAT.jl/v7.3_simple.mat") as m:
        assert m.node("double").array.read().shape == (1, 1)


@needs_corpus
def test_nd_char_rows_and_surrogate_pairs_mat73_mixes_them() -> None:
    path = CORPUS / "MAT.jl/v7.3_char_unicode.mat"
    theirs = load_mat73(path)
    with h5py.File(path, "r") as f:
        raw = f["f"][()]  # HDF5 (2, 8, 3) = MATLAB 3x8x2
        e_raw = f["e"][()]
    expected = np.empty((3, 2), dtype=object)
    for i in range(3):
        for k in range(2):
            expected[i, k] = raw[k, :, i].astype("<u2").tobytes().decode("utf-16-le")
    assert "\ud83d" in theirs["f"]  # lone surrogates, rows interleaved
    with open73(path) as m:
        node = m.node("f")
        assert isinstance(node, CharLeaf)
        assert node.dims == (3, 8, 2)
        assert node.value.shape == (3, 2)
        assert node.value.tolist() == expected.tolist()
        assert node.value[0, 0] == "😀𝄞𐍈🚀"
        e = m.node("e")  # 2x2: "AB" and one emoji (a pair of code units)
        assert isinstance(e, CharLeaf)
        assert e.value.tolist() == ["AB", "😀"]
        assert e.units.shape == (2, 2)
        assert e.units.T.reshape(-1).tolist() == e_raw.reshape(-1).tolist()
        assert theirs["e"] == "A\ud83dB\ude00"
        assert m.node("g").value.tolist() == ["ABC", "DEF"]
        assert theirs["g"] == "ADBECF"


@needs_corpus
def test_logical_sparse_is_bool_mat73_gives_uint8() -> None:
    path = CORPUS / "MAT.jl/v7.3_sparse.mat"
    assert load_mat73(path)["sparse_logical"].dtype == np.uint8
    with open73(path) as m:
        node = m.node("sparse_logical")
        assert isinstance(node, SparseLeaf)
        assert node.matlab_class == "logical"
        got = node.load()
        assert got.dtype == np.bool_
        assert (got.toarray() == np.eye(5, dtype=bool)).all()
        assert m.infos()["sparse_logical"].sparse


@needs_corpus
def test_complex_sparse_is_complex_mat73_gives_records() -> None:
    path = CORPUS / "MAT.jl/v7.3_sparse.mat"
    assert load_mat73(path)["sparse_complex"].dtype.names == ("real", "imag")
    with h5py.File(path, "r") as f:
        g = f["sparse_complex"]
        raw, ir, jc = g["data"][()], g["ir"][()], g["jc"][()]
    want = sp.csc_matrix((raw["real"] + 1j * raw["imag"], ir, jc), shape=(3, 3)).toarray()
    with open73(path) as m:
        info = m.infos()["sparse_complex"]
        assert (info.sparse, info.complex, info.dims) == (True, True, (3, 3))
        node = m.node("sparse_complex")
        assert isinstance(node, SparseLeaf)
        assert node.is_complex
        got = node.load()
        assert got.dtype == np.complex128
        np.testing.assert_array_equal(got.toarray(), want)
        empty = m.node("sparse_empty")  # MATLAB_sparse = 0 rows, jc only
        assert isinstance(empty, SparseLeaf)
        assert empty.load().shape == (0, 0)
        zeros = m.node("sparse_zeros")  # no data, no ir
        assert isinstance(zeros, SparseLeaf)
        assert zeros.load().nnz == 0
        assert zeros.load().shape == (20, 20)


@needs_corpus
def test_classdef_objects_are_placeholders_mat73_gives_none() -> None:
    path = CORPUS / "MAT.jl/v7.3_user_defined_classdefs.mat"
    theirs = load_mat73(path)
    with open73(path) as m:
        infos = m.infos()
        assert infos["obj_array"].dims == (2, 2)
        for name in infos:
            assert theirs[name] is None
            node = m.node(name)
            assert isinstance(node, ObjectLeaf)
            assert node.matlab_class.startswith("TestClasses.")
            assert "subsystem" in node.obj.reason
        assert m.node("obj_array").dims == (2, 2)
    with open73(CORPUS / "MAT.jl/v7.3_struct_table_datetime.mat") as m:
        s = m.node("s")
        assert isinstance(s, StructNode)
        classes = {f: s.elements[0][f].matlab_class for f in s.fields}
        assert classes == {
            "testDatetime": "datetime", "testTable": "table", "testDatetimeComplex": "datetime"
        }  # fmt: skip


@needs_corpus
def test_corpus_specifics() -> None:
    with open73(CORPUS / "MAT.jl/v7.3_old_class_array.mat") as m:
        node = m.node("class_arr")  # old-style class: a group with the class name
        assert isinstance(node, StructNode)
        assert (node.matlab_class, node.dims, node.fields) == ("TestClassOld", (1, 2), ("foo",))
        assert value(node)[0, 1].foo == "test"
    with open73(CORPUS / "MAT.jl/v7.3_function_handles.mat") as m:
        node = m.node("sin")
        assert isinstance(node, ObjectLeaf)
        assert (node.matlab_class, node.dims) == ("function_handle", (1, 1))
    with open73(CORPUS / "matio/test_file_hdf5.mat") as m:
        node = m.node("structure")  # 2x3 struct array: fields are reference datasets
        assert isinstance(node, StructNode)
        assert node.dims == (2, 3)
        assert node.fields == ("name", "data", "data_type")  # MATLAB_fields, not HDF5 order
    with open73(CORPUS / "scipy/testhdf5_7.4_GLNX86.mat") as m:  # contiguous dataset
        assert m.header_text.startswith("MATLAB 7.0 MAT-file")  # sic, written by 7.4
        got = m.node("testdouble").array.read()
        np.testing.assert_allclose(got, np.linspace(0, 2 * np.pi, 9)[None, :])
    with open73(CORPUS / "pymatreader/test_raw_h5.set") as m:
        eeg = m.node("EEG")
        assert isinstance(eeg, StructNode)
        reject = eeg.elements[0]["reject"]
        assert isinstance(reject, StructNode)
        assert reject.elements[0]["gcompreject"].dims == (1, 0)


@needs_corpus
@pytest.mark.parametrize("stem", ["string", "cell", "struct", "array", "complex", "sparse"])
def test_v5_and_v73_of_the_same_data_agree(stem: str) -> None:
    from npystore.faces.matfile import open_mat

    v73 = CORPUS / f"MAT.jl/v7.3_{stem}.mat"
    v5 = CORPUS / f"MAT.jl/v7_{stem}.mat"
    if not v5.exists():
        pytest.skip(f"no {v5.name}")
    with open73(v73) as m73, open_mat(str(v5)) as m5:
        common = sorted(set(m73.infos()) & set(m5))
        assert common
        for name in common:
            assert canon(m73.node(name)) == canon(m5.node(name)), name


def canon(node: MatNode) -> Any:
    """A comparable form of a tree (numbers as lists, placeholders by class)."""
    if isinstance(node, NumericLeaf | ValueLeaf):
        arr = read_leaf(node)
        return ("num", node.matlab_class, arr.shape, arr.tolist())
    if isinstance(node, CharLeaf):
        v = node.value
        return ("char", node.dims, v if isinstance(v, str) else v.tolist())
    if isinstance(node, SparseLeaf):
        return ("sparse", node.dims, node.load().toarray().tolist())
    if isinstance(node, CellNode):
        return ("cell", node.dims, [canon(c) for c in node.cells])
    if isinstance(node, StructNode):
        els = [{f: canon(e[f]) for f in node.fields} for e in node.elements]
        return ("struct", node.matlab_class, node.dims, sorted(node.fields), els)
    return ("object", node.matlab_class)


# ------------------------------------------------------------ hdf5storage round trips


def write_sparse(f: h5py.File, name: str, matrix: Any, **kw: Any) -> None:
    """A scipy sparse matrix in MATLAB's layout (hdf5storage cannot write sparse)."""
    m = sp.csc_matrix(matrix)
    m.sort_indices()
    g = f.create_group(name)
    logical = m.dtype == np.bool_
    g.attrs["MATLAB_class"] = np.bytes_("logical" if logical else "double")
    g.attrs["MATLAB_sparse"] = np.uint64(m.shape[0])
    g.create_dataset("jc", data=m.indptr.astype(np.uint64), **kw)
    if m.nnz:
        g.create_dataset("ir", data=m.indices.astype(np.uint64), **kw)
        if m.dtype.kind == "c":
            data = np.empty(m.nnz, dtype=[("real", "<f8"), ("imag", "<f8")])
            data["real"], data["imag"] = m.data.real, m.data.imag
        else:
            data = m.data.astype(np.uint8 if logical else np.float64)
        g.create_dataset("data", data=data, **kw)


def cell(*items: Any) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


RNG = np.random.default_rng(7)
INTS = {
    dt: np.array([[np.iinfo(dt).min, 0, np.iinfo(dt).max], [1, 2, 3]], dtype=dt)
    for dt in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
}
ROUND_TRIP: dict[str, Any] = {
    "double": np.arange(12.0).reshape(3, 4) - 5.5,
    "single": np.float32([[1.5, -2.25, np.inf]]),
    "vector": np.arange(5.0),  # 1-D: MATLAB 1x5
    "scalar": np.float64(3.25),
    "cube": np.arange(24.0).reshape(2, 3, 4),
    **{f"i_{dt}": arr for dt, arr in INTS.items()},
    "logical": np.array([[True, False, True], [False, False, True]]),
    "complex_double": np.array([[1 + 2j, -3.5j], [0, 4]]),
    "complex_single": np.complex64([[1j, 2 - 1j, 3]]),
    "big_double": RNG.random((300, 300)),  # > 16 KiB: gzip + shuffle + fletcher32 chunks
    "big_int16": RNG.integers(-30000, 30000, (200, 150), dtype=np.int16),
    "big_complex": RNG.random((150, 100)) + 1j * RNG.random((150, 100)),
    "big_logical": RNG.random((400, 100)) > 0.5,
    "char_row": "hello, MATLAB",
    "char_matrix": np.array([list("abc"), list("def")]),
    "char_unicode": "naïve ∑ a😀b 𝄞",  # hdf5storage: uint32 code points beyond the BMP
    "cell": cell(1.5, "x", np.arange(3.0), cell(np.int8(7), cell("deep"))),
    "struct": {"a": np.float64(1), "b": "text", "c": cell(1.0, "two")},
    "struct_array": np.array(
        [(1.0, "x"), (2.0, "yy"), (3.0, "")], dtype=[("num", "f8"), ("name", "O")]
    ),
    "empty_double": np.zeros((0, 3)),
    "empty_char": "",
    "empty_cell": np.empty((0,), dtype=object),
}
SPARSE: dict[str, Any] = {
    "sparse_double": sp.random(30, 20, density=0.2, random_state=1, format="csc"),
    "sparse_complex": sp.csc_matrix(np.array([[0, 1j], [2 + 3j, 0], [0, 0]])),
    "sparse_logical": sp.csc_matrix(np.eye(4, dtype=bool)),
    "sparse_empty": sp.csc_matrix((5, 3)),
    "sparse_big": sp.random(2000, 500, density=0.02, random_state=2, format="csc"),
}


@pytest.fixture(scope="module")
def round_trip_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("v73") / "round_trip.mat"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hdf5storage.savemat(str(path), ROUND_TRIP, format="7.3", matlab_compatible=True)
    with h5py.File(path, "a") as f:
        for name, matrix in SPARSE.items():
            kw = {"compression": "gzip", "chunks": True} if matrix.nnz > 1000 else {}
            write_sparse(f, name, matrix, **kw)
    return path


def expect(node: MatNode, want: Any, path: str) -> None:
    """A node equals what hdf5storage was given (numpy shapes are MATLAB's, 1-D -> 1xN)."""
    if isinstance(want, str):
        assert isinstance(node, CharLeaf), path
        assert node.value == want, path
        return
    if isinstance(want, dict):
        assert isinstance(node, StructNode), path
        assert (node.dims, node.fields) == ((1, 1), tuple(want)), path
        for f, v in want.items():
            expect(node.elements[0][f], v, f"{path}.{f}")
        return
    want = np.asarray(want)
    dims = np.atleast_2d(want).shape
    if want.dtype.names is not None:
        assert isinstance(node, StructNode), path
        assert (node.dims, node.fields) == (dims, want.dtype.names), path
        for i, rec in enumerate(np.atleast_2d(want).reshape(-1, order="F")):
            for f in want.dtype.names:
                expect(node.elements[i][f], rec[f], f"{path}({i}).{f}")
        return
    if want.dtype == object:
        assert isinstance(node, CellNode), path
        assert node.dims == dims, path
        items = np.atleast_2d(want).reshape(-1, order="F")
        for i, (c, w) in enumerate(zip(node.cells, items, strict=True)):
            expect(c, w, f"{path}{{{i}}}")
        return
    if want.dtype.kind == "U":
        assert isinstance(node, CharLeaf), path
        assert node.value.tolist() == ["".join(row) for row in want], path
        return
    got = read_leaf(node)
    assert node.dims == dims == got.shape, path
    assert got.dtype == want.dtype, path
    np.testing.assert_array_equal(got, np.atleast_2d(want), err_msg=path)


@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_hdf5storage_round_trip(round_trip_file: Path, name: str) -> None:
    with open73(round_trip_file) as m:
        expect(m.node(name), ROUND_TRIP[name], name)
        info = m.infos()[name]
        assert info.complex == (np.asarray(ROUND_TRIP[name]).dtype.kind == "c")


def test_hdf5storage_compresses_the_big_arrays(round_trip_file: Path) -> None:
    with h5py.File(round_trip_file, "r") as f:
        big = f["big_double"]
        assert (big.compression, big.shuffle, big.fletcher32) == ("gzip", True, True)
        assert big.chunks is not None


@pytest.mark.parametrize("name", list(SPARSE))
def test_sparse_round_trip(round_trip_file: Path, name: str) -> None:
    want = SPARSE[name]
    with open73(round_trip_file) as m:
        info = m.infos()[name]
        assert (info.sparse, info.dims) == (True, want.shape)
        node = m.node(name)
        assert isinstance(node, SparseLeaf)
        assert node.matlab_class == ("logical" if want.dtype == np.bool_ else "double")
        got = node.load()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.toarray(), want.toarray())


# -------------------------------------------------------------------- laziness


class CountingReader(RangeReader):
    """A RangeReader that counts the bytes it is asked for."""

    def __init__(self, base: RangeReader) -> None:
        super().__init__(base.fs, base.path, base.identity)
        self.nbytes = 0

    def read(self, start: int, stop: int) -> bytes:
        self.nbytes += stop - start
        return super().read(start, stop)

    def read_many(self, ranges: Any) -> list[bytes]:
        self.nbytes += sum(b - a for a, b in ranges)
        return super().read_many(ranges)

    def readinto_many(self, requests: Any, *, parallel: bool = False) -> None:
        self.nbytes += sum(v.nbytes for _, v in requests)
        super().readinto_many(requests, parallel=parallel)


def test_listing_and_nodes_do_not_read_numeric_data(tmp_path: Path) -> None:
    path = tmp_path / "big.mat"
    data = {"big": RNG.random((2000, 1000)), "small": np.arange(3.0), "s": "text"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hdf5storage.savemat(str(path), data, format="7.3", matlab_compatible=True)
    size = path.stat().st_size
    reader = CountingReader(open_reader(str(path)))
    with Mat73File(reader) as m:
        assert m.infos()["big"].dims == (2000, 1000)
        leaf = m.node("big")
        assert isinstance(leaf, NumericLeaf)
        assert m.node("s").value == "text"
        before = reader.nbytes
        assert before < size // 4, (before, size)
        np.testing.assert_array_equal(leaf.array[:, 5], data["big"][:, 5])
        np.testing.assert_array_equal(leaf.array.read(), data["big"])


# ------------------------------------------------------------------ hand-built files


def mat_file(path: Path) -> h5py.File:
    return h5py.File(path, "w", userblock_size=512)


def stamp(path: Path) -> None:
    """Write MATLAB's header text into the user block."""
    text = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
    with path.open("r+b") as f:
        f.write(text.ljust(116) + b" " * 8 + b"\x00\x02IM")


def cell_dataset(f: h5py.Group, name: str, refs: list[Any]) -> h5py.Dataset:
    d = f.create_dataset(name, shape=(len(refs), 1), dtype=h5py.ref_dtype)
    d.attrs["MATLAB_class"] = np.bytes_("cell")
    for i, r in enumerate(refs):
        d[i, 0] = r
    return d


def test_self_reference_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "cycle.mat"
    with mat_file(path) as f:
        c = cell_dataset(f, "c", [None])
        c[0, 0] = c.ref
        a = cell_dataset(f, "a", [None])
        b = cell_dataset(f.create_group("#refs#"), "b", [a.ref])
        a[0, 0] = b.ref
    stamp(path)
    with open73(path) as m:
        assert set(m.infos()) == {"a", "c"}
        t0 = time.perf_counter()
        with pytest.raises(FormatError, match=r"cycle.*/c -> /c"):
            m.node("c")
        with pytest.raises(FormatError, match=r"variable a\{0\}\{0\}: reference cycle"):
            m.node("a")
        assert time.perf_counter() - t0 < 2


def test_deep_chain_stops_at_max_depth(tmp_path: Path) -> None:
    path = tmp_path / "deep.mat"
    with mat_file(path) as f:
        refs = f.create_group("#refs#")
        leaf = refs.create_dataset("leaf", data=np.ones((1, 1)))
        leaf.attrs["MATLAB_class"] = np.bytes_("double")
        target = leaf.ref
        for i in range(300):
            target = cell_dataset(refs, f"x{i}", [target]).ref
        cell_dataset(f, "deep", [target])
        cell_dataset(f, "shallow", [refs["x9"].ref])
    stamp(path)
    t0 = time.perf_counter()
    with open73(path) as m:
        with pytest.raises(FormatError, match="max_depth=64"):
            m.node("deep")
        node = m.node("shallow")  # 11 cells, then the double
        for _ in range(11):
            assert isinstance(node, CellNode)
            node = node.cells[0]
        assert isinstance(node, ValueLeaf)  # small: read with its cell
        assert node.value.tolist() == [[1.0]]
    with open73(path, max_depth=256) as m, pytest.raises(FormatError, match="max_depth=256"):
        m.node("deep")
    assert time.perf_counter() - t0 < 5


def test_missing_field_and_malformed_values(tmp_path: Path) -> None:
    path = tmp_path / "bad.mat"
    with mat_file(path) as f:
        s = f.create_group("s")
        s.attrs["MATLAB_class"] = np.bytes_("struct")
        names = cell(*(np.array(list(n), dtype="S1") for n in ("a", "b")))
        s.attrs.create("MATLAB_fields", names, dtype=h5py.vlen_dtype(np.dtype("S1")))
        a = s.create_dataset("a", data=np.ones((1, 1)))
        a.attrs["MATLAB_class"] = np.bytes_("double")
        e = f.create_dataset("e", data=np.array([2, 3], dtype=np.uint64))
        e.attrs["MATLAB_class"] = np.bytes_("double")
        e.attrs["MATLAB_empty"] = np.uint8(1)
        bad = f.create_dataset("bad_dims", data=np.ones(2))
        bad.attrs["MATLAB_class"] = np.bytes_("double")
        bad.attrs["MATLAB_empty"] = np.uint8(1)
        c = f.create_dataset("c", data=np.ones((2, 1)))
        c.attrs["MATLAB_class"] = np.bytes_("char")
        n = f.create_dataset("null", shape=(1, 1), dtype=h5py.ref_dtype)
        n.attrs["MATLAB_class"] = np.bytes_("cell")
        mixed = f.create_group("mixed")
        mixed.attrs["MATLAB_class"] = np.bytes_("struct")
        mixed.create_dataset("x", shape=(2, 1), dtype=h5py.ref_dtype)
        y = mixed.create_dataset("y", data=np.ones((1, 1)))
        y.attrs["MATLAB_class"] = np.bytes_("double")
        big = s.create_dataset("big", data=np.arange(10_000.0).reshape(100, 100))
        big.attrs["MATLAB_class"] = np.bytes_("double")
    stamp(path)
    with open73(path) as m:
        node = m.node("s")
        assert isinstance(node, StructNode)
        assert node.fields == ("a", "b", "big")  # "big" is not in MATLAB_fields
        missing = node.elements[0]["b"]
        assert isinstance(missing, ObjectLeaf)
        assert "missing field" in missing.obj.reason
        infos = m.infos()  # malformed variables are listed; the error comes with node()
        assert infos["e"].dims == (2, 3)
        assert (infos["bad_dims"].matlab_class, infos["bad_dims"].dims) == ("double", ())
        for name, message in (
            ("e", r"variable e: marked MATLAB_empty with dims \(2, 3\)"),
            ("bad_dims", r"variable bad_dims: MATLAB_empty dataset of float64"),
            ("c", r"variable c: char stored as float64"),
            ("null", r"variable null\{0\}: null object reference"),
            ("mixed", r"variable mixed: fields \['x'\] hold one reference per element"),
        ):
            with pytest.raises(FormatError, match=message) as info:
                m.node(name)
            assert str(path) in str(info.value)
        with pytest.raises(KeyError, match="'nope'"):
            m.node("nope")
        with pytest.raises(KeyError, match="#refs#"):
            m.node("#refs#")
        with pytest.raises(KeyError, match="'s/a'"):  # not a path into the file
            m.node("s/a")
        small = node.elements[0]["a"]
        assert isinstance(small, ValueLeaf)  # read with its struct
        assert small.value.tolist() == [[1.0]]
        leaf = node.elements[0]["big"]  # 80 KB: more than EAGER_BYTES, lazy
        assert isinstance(leaf, NumericLeaf)
    np.testing.assert_array_equal(  # leaves read after close
        leaf.array.read(), np.arange(10_000.0).reshape(100, 100).T
    )
    with pytest.raises(ValueError, match="closed"):
        m.node("s")


def test_empty_values_of_dims_numpy_cannot_hold(tmp_path: Path) -> None:
    """MATLAB_empty values whose non-zero dims multiply past numpy's limit are refused when
    read, naming dims, dtype and limit; those numpy holds are read, empty."""
    path = tmp_path / "empty.mat"
    dims = {
        "d": ("double", [0, 2**47, 2**47]),
        "c": ("cell", [2**40, 0, 2**30]),
        "s": ("struct", [2**35, 2**35, 0]),
        "u8": ("uint8", [0, 2**40, 2**22]),
    }
    with mat_file(path) as f:
        for name, (cls, shape) in dims.items():
            d = f.create_dataset(name, data=np.array(shape, dtype=np.uint64))
            d.attrs["MATLAB_class"] = np.bytes_(cls)
            d.attrs["MATLAB_empty"] = np.uint8(1)
    stamp(path)
    t0 = time.perf_counter()
    with open73(path) as m:
        for name, dtype in (("d", "float64"), ("c", "object"), ("s", "object")):
            with pytest.raises(UnsupportedError) as info:
                m.node(name)
            message = str(info.value)
            assert f"variable {name}: numpy cannot make an array of shape" in message
            assert f"and dtype {dtype}, even empty" in message
            assert "more than numpy's limit 9223372036854775807" in message
        leaf = m.node("u8")
        assert isinstance(leaf, NumericLeaf)
        got = leaf.array.read()
        assert (got.shape, got.dtype, got.size) == ((0, 2**40, 2**22), np.dtype(np.uint8), 0)
    assert time.perf_counter() - t0 < 10


def test_plain_hdf5_is_refused_everywhere(tmp_path: Path) -> None:
    """An HDF5 file without the MAT-file header is not read with MATLAB's semantics (its
    100-element dataset would come back 100x1 double): every entry point refuses it, naming
    the file and what to use instead."""
    import xarray as xr

    from npystore.tools.cli import main

    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["v"] = np.arange(100.0)
    expected = r"plain\.h5: a plain HDF5 file, not a MATLAB v7\.3 MAT-file.*h5py"
    for opener in (open73, npystore.open_mat, npystore.open, npystore.open_store):
        with pytest.raises(UnsupportedError, match=expected):
            opener(path if opener is open73 else str(path))
    with pytest.raises(UnsupportedError, match=expected):
        xr.open_dataset(path, engine="npystore")
    assert main(["info", str(path)]) != 0
    # the same bytes behind a MATLAB user block are a MAT-file
    with mat_file(tmp_path / "m.mat") as f:
        f["v"] = np.arange(100.0)
    stamp(tmp_path / "m.mat")
    with open73(tmp_path / "m.mat") as m:
        assert m.infos()["v"].dims == (100, 1)


def test_headerless_hdf5_with_other_user_block_is_not_a_mat_file(tmp_path: Path) -> None:
    path = tmp_path / "ub.h5"
    with mat_file(path) as f:
        f["v"] = np.arange(3.0)
    with pytest.raises(FormatError, match=r"ub\.h5: not a MATLAB v7\.3 MAT-file"):
        open73(path)


def test_global_variables(tmp_path: Path) -> None:
    path = tmp_path / "g.mat"
    with mat_file(path) as f:
        f["v"] = np.arange(5.0)  # no MATLAB_class, 1-D (hdf5storage writes such)
        f["scalar"] = np.int16(4)
        g = f.create_dataset("g", data=np.ones((2, 1)))
        g.attrs["MATLAB_class"] = np.bytes_("double")
        g.attrs["MATLAB_global"] = np.uint8(1)
    stamp(path)
    with open73(path) as m:
        assert m.header_text.startswith("MATLAB 7.3 MAT-file")
        infos = m.infos()
        assert (infos["v"].matlab_class, infos["v"].dims) == ("double", (5, 1))
        assert infos["g"].is_global
        assert not infos["v"].is_global
        assert m.node("v").array.read().tolist() == [[float(i)] for i in range(5)]
        assert m.node("scalar").array.read().tolist() == [[4]]


def test_not_hdf5_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.mat"
    path.write_bytes(b"MATLAB 7.3 MAT-file".ljust(128) + bytes(2000))
    with pytest.raises(FormatError, match=r"junk\.mat"):
        open73(path)


# -------------------------------------------------------------------------- S3


@needs_corpus
def test_s3_corpus_files_equal_local(s3: Any) -> None:
    for rel in ("MAT.jl/v7.3_cell.mat", "pymatreader/v73.mat", "MAT.jl/v7.3_sparse.mat"):
        key = rel.replace("/", "_")
        s3.put_file(str(CORPUS / rel), key)
        remote = Mat73File(open_reader(s3.url(key), s3.storage_options))
        with remote, open73(CORPUS / rel) as local:
            assert remote.header_text == local.header_text
            assert remote.infos() == local.infos()
            for name in local.infos():
                assert canon(remote.node(name)) == canon(local.node(name)), (rel, name)


def test_s3_round_trip(round_trip_file: Path, s3: Any) -> None:
    s3.put_file(str(round_trip_file), "rt.mat")
    with Mat73File(open_reader(s3.url("rt.mat"), s3.storage_options)) as m:
        for name in ("big_double", "big_complex", "cell", "struct_array", "char_unicode"):
            expect(m.node(name), ROUND_TRIP[name], name)
        node = m.node("sparse_big")
        assert isinstance(node, SparseLeaf)
        np.testing.assert_array_equal(node.load().toarray(), SPARSE["sparse_big"].toarray())
