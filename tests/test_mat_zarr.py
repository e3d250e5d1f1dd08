"""open_store over MATLAB files: the variable tree as a Zarr group, values equal open_mat's."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import dask.array as da
import fsspec
import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp
import zarr

import mat_corpus
import npystore
from npystore import MatlabObject, MatStruct

CORPUS = mat_corpus.CORPUS


def corpus() -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with manifest.open() as f:
        return [r["local_path"] for r in csv.DictReader(f, delimiter="\t")]


def check(group: Any, value: Any, path: str) -> None:
    """The Zarr node at ``path`` holds ``value`` (an open_mat value)."""
    node = group[path] if path else group
    attrs = node.attrs.asdict()
    if isinstance(value, np.ndarray) and value.dtype.names is not None:  # empty struct array
        assert value.size == 0, path
        assert isinstance(node, zarr.Group), path
        assert attrs["matlab_class"] == value.dtype.metadata["matlab_class"], path
        assert attrs["matlab_fields"] == list(value.dtype.names), path
        assert attrs["matlab_dims"] == list(value.shape), path
    elif isinstance(value, da.Array) or (isinstance(value, np.ndarray) and value.dtype != object):
        # dask: a lazy numeric array; numpy: a small one read with its cell or struct
        assert isinstance(node, zarr.Array), path
        assert node.shape == value.shape, path
        np.testing.assert_array_equal(node[...], np.asarray(value), err_msg=path)
        assert node.dtype == value.dtype, path
    elif isinstance(value, str):
        assert attrs["matlab_class"] == "char", path
        assert attrs.get("matlab_text", value) == value, path
    elif isinstance(value, MatStruct):
        assert attrs["matlab_fields"] == list(value), path
        for f, v in value.items():
            check(group, v, f"{path}/{npystore.faces.tree.node_name(f)}")
    elif isinstance(value, MatlabObject):
        assert attrs["matlab_class"] == value.matlab_class, path
        assert "matlab_placeholder" in attrs, path
    elif sp.issparse(value):
        assert attrs["matlab_sparse"] is True, path
        jc = node["jc"][...]
        nnz = int(jc[-1])  # ir/data may hold nzmax >= nnz values, as MATLAB allocates
        parts = (node["data"][...][:nnz], node["ir"][...][:nnz], jc)
        csc = sp.csc_matrix(parts, shape=tuple(attrs["matlab_dims"]))
        np.testing.assert_array_equal(csc.toarray(), value.toarray(), err_msg=path)
    elif isinstance(value, np.ndarray) and value.dtype == object:
        if attrs["matlab_class"] == "char":  # one str per row: shape (dims[0],) + dims[2:]
            assert attrs.get("matlab_text", value.tolist()) == value.tolist(), path
            assert node.shape == tuple(attrs["matlab_dims"]), path
            return
        assert attrs["matlab_dims"] == list(value.shape), path
        for i, item in enumerate(value.reshape(-1, order="F")):
            check(group, item, f"{path}/{i}")
    else:  # pragma: no cover
        raise AssertionError((path, value))


@pytest.mark.skipif(not corpus(), reason=f"no MAT corpus at {CORPUS}")
@pytest.mark.parametrize("rel", corpus())
def test_corpus_store_equals_open_mat(rel: str) -> None:
    path = str(CORPUS / rel)
    try:
        m = npystore.open_mat(path)
    except npystore.UnsupportedError:
        pytest.skip("reader not available")
    store = npystore.open_store(path)
    group = zarr.open_group(store, mode="r")
    assert group.attrs["npystore"]["mat_version"] == m.version
    for name in m:
        check(group, m[name], npystore.faces.tree.node_name(name))


def test_savemat_store(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    data = {
        "a": rng.standard_normal((40, 30)),
        "z": rng.standard_normal((3, 4)) * (1 + 1j),
        "b": np.array([[True, False, True]]),
        "txt": "héllo",
        "s": {"x": np.arange(4, dtype=np.int16), "inner": {"y": "deep"}},
        "c": np.array([[np.eye(2), "two"]], dtype=object),
        "sp": sp.random(8, 6, density=0.3, random_state=2, format="csc"),
        "bad name": np.ones((2, 2)),
    }
    data.pop("bad name")  # savemat refuses invalid names; they are tested on the corpus
    path = tmp_path / "z.mat"
    sio.savemat(path, data, do_compression=True)
    group = zarr.open_group(npystore.open_store(str(path)), mode="r")
    m = npystore.open_mat(str(path))
    for name in m:
        check(group, m[name], name)
    assert group["a"].attrs["matlab_class"] == "double"
    assert group["a"].metadata.codecs[0].to_dict()["name"] == "transpose"
    assert group["b"].dtype == np.bool_
    assert group["txt"].attrs["matlab_text"] == "héllo"
    assert group["s/inner/y"].attrs["matlab_text"] == "deep"


def test_kerchunk_refs_for_uncompressed_mat(tmp_path: Path) -> None:
    x = np.arange(20000.0).reshape(100, 200)
    path = tmp_path / "k.mat"
    sio.savemat(path, {"x": x, "t": "text"})
    refs = npystore.to_kerchunk(str(path))
    json.dumps(refs)
    fs = fsspec.filesystem("reference", fo=refs)
    group = zarr.open_group(fs.get_mapper(""), mode="r")
    np.testing.assert_array_equal(group["x"][...], x)
    # full chunks are byte ranges of the .mat file itself, checked against raw bytes
    ranges = [v for v in refs["refs"].values() if isinstance(v, list)]
    assert ranges
    raw = path.read_bytes()
    _, offset, length = ranges[0]
    assert np.frombuffer(raw[offset : offset + length], "<f8")[0] == x[0, 0]
