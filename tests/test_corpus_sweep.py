"""The foreign-file sweep's own MAT comparisons (``benchmarks/corpus.py``, issue 26): where
the sweep and npystore disagreed because the sweep's reference reading or comparison was
wrong, the sweep run here on the file must find every face equal or documented."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import h5py
import numpy as np
import pytest
import scipy.io as sio

from mat_corpus import CORPUS, CORPUS_FOUND

pytest.importorskip("zarr")
pytest.importorskip("xarray")
pytest.importorskip("fsspec")

ROOT = Path(__file__).resolve().parents[1]
V73_HEADER = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
needs_corpus = pytest.mark.skipif(not CORPUS_FOUND, reason=f"no MAT corpus at {CORPUS}")


@pytest.fixture(scope="module")
def corpus() -> ModuleType:
    """``benchmarks/corpus.py`` as a module (the benchmarks are not a package)."""
    spec = importlib.util.spec_from_file_location("npystore_corpus", ROOT / "benchmarks/corpus.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def sweep_file(corpus: ModuleType, path: Path) -> list[dict[str, Any]]:
    """The sweep's comparisons of one MAT-file, every face."""
    out = io.StringIO()
    corpus.Sweep(out, timeout=120).mat(path.name, path)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def bad(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    ok = {"equal", "equal*", "skipped-documented", "refused-documented"}
    return [(r["face"], r["path"], r["status"], r["detail"]) for r in rows if r["status"] not in ok]


def stamp_v73(path: Path) -> None:
    with path.open("r+b") as f:
        f.write(V73_HEADER.ljust(116) + b" " * 8 + b"\x00\x02IM")


def test_canonical_empty_in_a_cell_is_matlab_empty_double(
    corpus: ModuleType, tmp_path: Path
) -> None:
    """MATLAB writes a cell's ``[]`` as a reference to ``#refs#/a``, class ``canonical
    empty``: a 0x0 double. The sweep's h5py reading called it an object, so npystore's
    0x0 double (right) counted as "array != object" on every face."""
    path = tmp_path / "cells.mat"
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        a = refs.create_dataset("a", data=np.array([0, 0], np.uint64))
        a.attrs["MATLAB_class"] = np.bytes_("canonical empty")
        a.attrs["MATLAB_empty"] = np.uint8(1)
        b = refs.create_dataset("b", data=np.array([[7.5]]))
        b.attrs["MATLAB_class"] = np.bytes_("double")
        c = f.create_dataset("c", data=np.array([[a.ref], [b.ref], [a.ref]], dtype=h5py.ref_dtype))
        c.attrs["MATLAB_class"] = np.bytes_("cell")
    stamp_v73(path)
    leaf = corpus.h5_flatten(path)["c/0"]
    assert leaf[0] == "array"
    assert (leaf[1].shape, leaf[1].dtype) == ((0, 0), np.float64)
    rows = sweep_file(corpus, path)
    assert not bad(rows), bad(rows)
    assert {r["path"] for r in rows if r["status"] == "equal"} >= {"c", "c/0", "c/1", "c/2"}


def test_double_sparse_stored_as_uint8_is_double(corpus: ModuleType) -> None:
    """scipy's ``testsparse_6.1_SOL2.mat``: a sparse matrix whose array flags are not
    logical (MATLAB class double) with values stored as miUINT8. MATLAB reads a double
    matrix, npystore float64; scipy keeps the stored uint8 even with ``mat_dtype=True``."""
    path = Path(sio.__file__).parent / "matlab" / "tests" / "data" / "testsparse_6.1_SOL2.mat"
    if not path.is_file():
        pytest.skip("scipy's test data is not installed")
    data = path.read_bytes()
    assert data[126:128] == b"MI"  # big-endian; the flags word of the one variable:
    assert data[136:144] == bytes.fromhex("0000000600000008")  # miUINT32, 8 bytes
    assert data[144:148] == bytes.fromhex("00000005")  # class 5 (sparse), no logical bit
    assert sio.loadmat(path, mat_dtype=True)["testsparse"].dtype == np.uint8
    rows = sweep_file(corpus, path)
    assert not bad(rows), bad(rows)
    for r in rows:
        if r["face"] in ("open", "zarr", "kerchunk2", "kerchunk3"):
            assert (r["status"], r["detail"]) == (
                "equal*",
                "double sparse stored as integers (scipy: the stored type)",
            ), r


def test_invalid_utf8_refusal_is_documented(corpus: ModuleType, tmp_path: Path) -> None:
    """Invalid UTF-8 in a miUTF8 char refuses on every face by default, naming
    ``char_errors='replace'``, which every face takes (tests/test_mat_edge_cases.py)."""
    path = tmp_path / "u8.mat"
    sio.savemat(path, {"s": "abcé", "ok": "fine"}, do_compression=False)
    path.write_bytes(path.read_bytes().replace("é".encode(), b"\xff\xa9"))
    rows = sweep_file(corpus, path)
    assert not bad(rows), bad(rows)
    refused = [(r["face"], r["status"]) for r in rows if r["path"] == "s"]
    assert refused == [(f, "refused-documented") for f in corpus.MAT_FACES]


@needs_corpus
@pytest.mark.parametrize("name", ["MAT.jl/v6_sparse.mat", "MAT.jl/v7_sparse.mat"])
def test_sparse_groups_rebuilt_from_their_first_jc_values(corpus: ModuleType, name: str) -> None:
    """MATLAB keeps one row index for an all-zero sparse matrix (nzmax >= nnz): the Zarr
    group's ``ir`` is longer than ``data``, and the sweep's rebuild from the whole arrays
    raised "indices and data should have the same size" for the whole file."""
    rows = sweep_file(corpus, CORPUS / name)
    assert not bad(rows), bad(rows)
    zarr_rows = {r["path"]: r["status"] for r in rows if r["face"] == "zarr"}
    assert zarr_rows["sparse_zeros"] == zarr_rows["sparse_empty"] == "equal"


@needs_corpus
def test_function_handles_are_one_object_each(corpus: ModuleType) -> None:
    """v7.3 writes a function handle as a group (``MATLAB_class = function_handle``) of
    MATLAB's bookkeeping fields; the sweep's h5py reading took it for a struct, so
    npystore's documented placeholder counted as 15 missing fields and 2 mismatches."""
    path = CORPUS / "MAT.jl/v7.3_function_handles.mat"
    assert corpus.h5_flatten(path) == {
        "anonymous": ("object", "function_handle"),
        "sin": ("object", "function_handle"),
    }
    rows = sweep_file(corpus, path)
    assert not bad(rows), bad(rows)
    assert {r["status"] for r in rows} == {"skipped-documented"}


@needs_corpus
def test_empty_struct_arrays_are_structs_on_every_face(corpus: ModuleType) -> None:
    rows = sweep_file(corpus, CORPUS / "MAT.jl/v7.3_empty_struct_arrays.mat")
    assert not bad(rows), bad(rows)
    assert {r["path"] for r in rows if r["face"] == "open" and r["status"] == "equal"} == {
        "s00",
        "s01",
        "s10",
    }
