"""Small MAT-files must not cost huge time or memory (issue 14 item 7).

Four files that used to cost far more than scipy does: a 16 KB v5 file holding a 1x100,000
cell of ``[]`` (52 s and 672 MiB: one dask array per element), a 3.5 KB 1x20,000 struct
array, a v7.3 cell of thousands of references, a v5 file of 200,000 variables. Each is
opened and read whole (``m[name]`` and ``m.load(name)``; every variable of the last) in a
fresh interpreter that reports the time and the growth of its peak RSS; the values are
compared with ``scipy.io.loadmat`` (v5) and ``mat73.loadmat`` (v7.3). The bounds only guard
against hangs and blow-ups: the regression itself (a dask array per element) is asserted
on the values' types.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import dask.array as da
import h5py
import numpy as np
import pytest
import scipy.io as sio

import npystore
from npystore import MatStruct

CHILD = r"""
import json, sys, time
import dask.array, h5py, numpy, scipy.io, npystore  # imported before the baseline

def peak_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise SystemExit("no VmHWM")

path, name = sys.argv[1], sys.argv[2]
base = peak_kib()
t0 = time.perf_counter()
m = npystore.open_mat(path)
infos = m.variables
if name == "*":
    loaded = {k: m.load(k) for k in m}
    lazy = m[next(iter(m))]
else:
    lazy = m[name]
    loaded = npystore.open_mat(path).load(name)
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "peak_mib": (peak_kib() - base) / 1024,
                  "variables": len(infos)}))
"""


def cost(path: Path, name: str) -> dict[str, Any]:
    """Open and read ``name`` (``*``: every variable) in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), name],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def check_numpy(ours: Any, theirs: np.ndarray, path: str) -> None:
    """A small value read with its container: a read-only numpy array equal to scipy's."""
    assert isinstance(ours, np.ndarray), path  # not a dask array per element
    assert not isinstance(ours, da.Array), path
    assert not ours.flags.writeable, path
    assert ours.dtype == theirs.dtype.newbyteorder("="), path
    np.testing.assert_array_equal(ours, theirs, err_msg=path, strict=True)


def test_cell_of_100000_empty_values(tmp_path: Path) -> None:
    path = tmp_path / "cell.mat"
    cell = np.empty((1, 100_000), dtype=object)
    for i in range(cell.size):
        cell[0, i] = np.zeros((0, 0))
    sio.savemat(path, {"c": cell}, do_compression=True)
    assert path.stat().st_size < 20_000  # the 16 KB file
    got = cost(path, "c")
    assert got["seconds"] < 10, got  # was 52 s
    assert got["peak_mib"] < 150, got  # was 672 MiB
    theirs = sio.loadmat(path)["c"]
    m = npystore.open_mat(str(path))
    for ours in (m["c"], m.load("c")):
        assert ours.shape == theirs.shape == (1, 100_000)
        assert ours.dtype == object
        for i in (0, 1, 50_000, 99_999):
            check_numpy(ours[0, i], theirs[0, i], f"c{{{i}}}")
        assert all(v.shape == (0, 0) and v.dtype == np.float64 for v in ours.flat)


def test_struct_array_of_20000_elements(tmp_path: Path) -> None:
    path = tmp_path / "struct.mat"
    s = np.zeros((1, 20_000), dtype=[("a", object), ("b", object)])
    for i in range(s.size):
        s[0, i]["a"] = np.zeros((0, 0))
        s[0, i]["b"] = np.array([[float(i)]]) if i % 3 else "text"
    sio.savemat(path, {"s": s}, do_compression=True)
    got = cost(path, "s")
    assert got["seconds"] < 10, got  # was 8.6 s
    assert got["peak_mib"] < 150, got
    theirs = sio.loadmat(path)["s"]
    m = npystore.open_mat(str(path))
    for ours in (m["s"], m.load("s")):
        assert ours.shape == (1, 20_000)
        for i in range(0, 20_000, 997):
            element = ours[0, i]
            assert isinstance(element, MatStruct)
            assert list(element) == ["a", "b"]
            check_numpy(element["a"], theirs[0, i]["a"], f"s({i}).a")
            if i % 3:
                check_numpy(element["b"], theirs[0, i]["b"], f"s({i}).b")
            else:
                assert element["b"] == "text" == str(theirs[0, i]["b"][0])


def test_v5_compressed_variable_is_inflated_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a compressed v5 struct or cell whose leaves are over EAGER_BYTES inflated
    its whole zlib stream again for every such leaf (pymatreader's cell_struct_v7.mat:
    44 ms against scipy's 3.5 ms), and ``load`` of any container inflated it once more to
    find it was no small numeric value. Each variable's stream is inflated once."""
    from npystore.files.mat import v5, v5_source
    from npystore.read import inflate

    rng = np.random.default_rng(0)
    matrices = [rng.random((100, 100)) for _ in range(10)]  # 80 KB each: kept as ranges
    cell = np.empty((1, 5), dtype=object)
    struct = np.zeros((1, 5), dtype=[("m", object), ("s", object)])
    for i in range(5):
        cell[0, i] = {"m": matrices[i], "s": f"x{i}"}
        struct[0, i]["m"], struct[0, i]["s"] = matrices[5 + i], f"y{i}"
    path = tmp_path / "cell_struct_v7.mat"
    sio.savemat(path, {"c": cell, "s": struct}, do_compression=True)
    passes: list[str] = []
    stream, small = inflate.stream, v5._inflate_small

    def counted_stream(reader: Any, member: Any, *args: Any, **kw: Any) -> Any:
        passes.append(member.name)
        return stream(reader, member, *args, **kw)

    def counted_small(data: Any) -> Any:
        passes.append("small")
        return small(data)

    whole = v5_source.inflate_zlib

    def counted_whole(data: Any, size: int, *, source: str, **kw: Any) -> Any:
        passes.append(source.rsplit(":", 1)[1])  # "<url>:<name>"
        return whole(data, size, source=source, **kw)

    monkeypatch.setattr(inflate, "stream", counted_stream)
    monkeypatch.setattr(v5_source, "inflate_zlib", counted_whole)
    monkeypatch.setattr(v5, "_inflate_small", counted_small)
    theirs = sio.loadmat(path)
    m = npystore.open_mat(str(path))
    got_c, got_s = m.load("c"), m.load("s")
    assert passes == ["c", "s"]  # was 13 passes: loaded(), the tree, one per matrix
    for i in range(5):
        np.testing.assert_array_equal(got_c[0, i]["m"], theirs["c"][0, i]["m"][0, 0])
        np.testing.assert_array_equal(got_s[0, i]["m"], theirs["s"][0, i]["m"])
        assert got_s[0, i]["s"] == f"y{i}"


def test_v5_uncompressed_values_of_a_load_are_its_own(tmp_path: Path) -> None:
    """An uncompressed container read for a ``load`` hands its values out as they were read
    (no copy each: the load of a 5 MB file took 1.6x scipy's time): each array is writable,
    shares memory with no other, and a later load, or a second read of the same tree,
    returns other memory (a write to one load's values changes nothing another reads).
    Values over EAGER_BYTES: smaller ones are read-only by design."""
    from npystore.files.mat.tree import EAGER_BYTES, NumericLeaf, StructNode
    from npystore.read.layout import InlineExtent

    rng = np.random.default_rng(1)
    cell = np.empty((1, 6), dtype=object)
    for i in range(6):
        cell[0, i] = rng.random((100, 90)) if i % 2 else rng.integers(0, 9, (150, 120), np.int32)
    struct = {"x": rng.random((120, 100)), "z": (rng.random((150, 60)) + 1j).astype(np.complex64)}
    assert min(v.nbytes for v in [*cell.flat, *struct.values()]) > EAGER_BYTES
    path = tmp_path / "plain.mat"
    sio.savemat(path, {"c": cell, "s": struct}, do_compression=False)
    theirs = sio.loadmat(path)
    m = npystore.open_mat(str(path))
    first = m.load("c"), m.load("s")
    arrays = [first[0][0, i] for i in range(6)] + [first[1]["x"], first[1]["z"]]
    for i in range(6):
        np.testing.assert_array_equal(arrays[i], theirs["c"][0, i])
    np.testing.assert_array_equal(first[1]["x"], theirs["s"]["x"][0, 0])
    np.testing.assert_array_equal(first[1]["z"], theirs["s"]["z"][0, 0])
    assert all(a.flags.writeable for a in arrays)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1 :])
    assert sum(not a.flags.owndata for a in arrays) >= 6  # handed over, not copied
    for a in arrays:
        a[...] = 0
    again = m.load("c"), m.load("s")
    for i in range(6):
        np.testing.assert_array_equal(again[0][0, i], theirs["c"][0, i])
    np.testing.assert_array_equal(again[1]["x"], theirs["s"]["x"][0, 0])
    # one tree read twice: the second read copies
    tree = m._reader.loaded("s")
    assert isinstance(tree, StructNode)
    x = tree.elements[0]["x"]
    assert isinstance(x, NumericLeaf)
    extent = x.array.layout.storage
    assert isinstance(extent, InlineExtent)
    assert extent.handover is not None
    one, two = x.array.read(), x.array.read()
    assert not np.shares_memory(one, two)
    np.testing.assert_array_equal(two, theirs["s"]["x"][0, 0])


def write_v73_cell(path: Path, values: list[np.ndarray]) -> None:
    """A MATLAB v7.3 cell of references, one dataset in #refs# per element."""
    with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
        refs = f.create_group("#refs#")
        out = np.empty((len(values), 1), dtype=h5py.ref_dtype)
        for i, value in enumerate(values):
            d = refs.create_dataset(f"e{i}", data=value.T)  # HDF5 order: MATLAB's reversed
            d.attrs["MATLAB_class"] = np.bytes_("double")
            out[i, 0] = d.ref
        c = f.create_dataset("c", data=out)  # MATLAB 1xN
        c.attrs["MATLAB_class"] = np.bytes_("cell")
    header = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
    with path.open("r+b") as fh:
        fh.write(header.ljust(116) + b" " * 8 + b"\x00\x02IM")


def test_v73_cell_of_references(tmp_path: Path) -> None:
    mat73 = pytest.importorskip("mat73")
    path = tmp_path / "cell73.mat"
    values = [np.array([[float(i), i / 2]]) if i % 2 else np.array([[float(i)]])
              for i in range(3000)]  # fmt: skip
    write_v73_cell(path, values)
    got = cost(path, "c")
    assert got["seconds"] < 10, got
    assert got["peak_mib"] < 60, got  # an open HDF5 dataset per element costs ~18 KB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = mat73.loadmat(str(path))["c"]
    m = npystore.open_mat(str(path))
    for ours in (m["c"], m.load("c")):
        assert ours.shape == (1, 3000)
        for i, value in enumerate(values):
            check_numpy(ours[0, i], value, f"c{{{i}}}")
            # mat73 squeezes: a 1x1 is a float, a 1x2 a 1-d array
            np.testing.assert_array_equal(np.asarray(theirs[i]).reshape(-1), value.reshape(-1))


def test_v73_references_are_followed_once_per_distinct_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell of 100,000 references to one empty dataset (an 807 KB file) was not read in
    minutes: every element opened, checked and parsed the same object again. Each distinct
    object is followed once (counted: the file's references dereferenced), in cells and in
    struct arrays, and the elements share its value."""
    from npystore.files.mat.h5safe import SafeGroup

    n = 5000
    path = tmp_path / "shared.mat"
    with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
        refs = f.create_group("#refs#")
        empty = refs.create_dataset("a", data=np.array([0, 0], np.uint64))
        empty.attrs["MATLAB_class"] = np.bytes_("double")
        empty.attrs["MATLAB_empty"] = np.uint8(1)
        pair = refs.create_dataset("b", data=np.array([[1.5], [2.5]]))  # MATLAB 1x2
        pair.attrs["MATLAB_class"] = np.bytes_("double")
        cell = np.full((n, 1), empty.ref, dtype=h5py.ref_dtype)
        cell[::1000, 0] = pair.ref
        c = f.create_dataset("c", data=cell)  # MATLAB 1xn
        c.attrs["MATLAB_class"] = np.bytes_("cell")
        s = f.create_group("s")  # a 1x3 struct array whose field x refers to a, b, a
        s.attrs["MATLAB_class"] = np.bytes_("struct")
        refs_x = np.array([[empty.ref], [pair.ref], [empty.ref]], dtype=h5py.ref_dtype)
        x = s.create_dataset("x", data=refs_x)
        x.attrs["H5PATH"] = np.bytes_("/s")
    header = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
    with path.open("r+b") as fh:
        fh.write(header.ljust(116) + b" " * 8 + b"\x00\x02IM")
    followed = []
    deref = SafeGroup.deref

    def counting(self: SafeGroup, key: Any, address: int | None) -> Any:
        followed.append(key)
        return deref(self, key, address)

    monkeypatch.setattr(SafeGroup, "deref", counting)
    m = npystore.open_mat(str(path))
    ours = m["c"]
    assert len(followed) == 2  # was one per element: 5,000
    assert ours.shape == (1, n)
    for i in range(n):
        want = np.array([[1.5, 2.5]]) if i % 1000 == 0 else np.zeros((0, 0))
        check_numpy(ours[0, i], want, f"c{{{i}}}")
    assert ours[0, 1] is ours[0, 2]  # one value, shared
    followed.clear()
    assert m["s"].shape == (1, 3)
    assert followed == []  # a and b were parsed for c already: shared across variables
    struct = npystore.open_mat(str(path))["s"]
    assert len(followed) == 2
    assert [e["x"].shape for e in struct.flat] == [(0, 0), (1, 2), (0, 0)]
    with h5py.File(path, "r") as f:  # the oracle: what each reference points to
        names = [f[r].name for r in f["c"][:, 0]]
    assert names.count("/#refs#/b") == n // 1000
    assert [i for i, name in enumerate(names) if name == "/#refs#/b"] == list(range(0, n, 1000))


def test_v5_file_of_200000_variables(tmp_path: Path) -> None:
    path = tmp_path / "many.mat"
    data = {f"v{i}": np.float64(i) if i % 2 else np.array([[i % 999, 7]], np.int16)
            for i in range(200_000)}  # fmt: skip
    sio.savemat(path, data)
    got = cost(path, "*")
    assert got["variables"] == 200_000
    assert got["seconds"] < 20, got  # open was 11.2 s, then a tree per variable
    assert got["peak_mib"] < 400, got
    theirs = sio.loadmat(path)
    m = npystore.open_mat(str(path))
    assert list(m) == list(data)
    for name in list(m)[::9973]:
        ours = m.load(name)
        assert isinstance(ours, np.ndarray)
        np.testing.assert_array_equal(ours, theirs[name], strict=True)
        np.testing.assert_array_equal(m[name].compute(), theirs[name], strict=True)
        assert m.variables[name].dims == theirs[name].shape


@pytest.mark.parametrize("compress", [False, True])
def test_v5_file_pickles_with_its_windows(tmp_path: Path, compress: bool) -> None:
    """A MatFile goes to dask workers: the bytes kept from the open go with it."""
    import pickle

    path = tmp_path / "p.mat"
    cell = np.empty((1, 40), dtype=object)
    for i in range(40):
        cell[0, i] = np.array([[i, 2.5]])
    sio.savemat(path, {"c": cell, "x": np.arange(6.0).reshape(2, 3)}, do_compression=compress)
    m = npystore.open_mat(str(path))
    copy = pickle.loads(pickle.dumps(m))
    assert list(copy) == ["c", "x"]
    np.testing.assert_array_equal(copy.load("x"), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(copy["x"].compute(), m["x"].compute())
    for i in (0, 39):
        np.testing.assert_array_equal(copy["c"][0, i], cell[0, i])


def test_identical_struct_elements_share_one_leaf(tmp_path: Path) -> None:
    """A struct array whose elements hold the same small value (``[]`` in every element:
    what preallocated MATLAB structs hold) keeps one leaf for it, not one per element (the
    1x20000 struct array's tree took 0.8 MiB of leaves)."""
    s = np.zeros((1, 300), dtype=[("a", object), ("b", object)])
    for i in range(300):
        s[0, i]["a"], s[0, i]["b"] = np.zeros((0, 0)), np.float64(i % 3)
    path = tmp_path / "s.mat"
    sio.savemat(path, {"s": s}, do_compression=True)
    node = npystore.open_mat(str(path)).node("s")
    assert len({id(e["a"]) for e in node.elements}) == 1
    got = npystore.open_mat(str(path))["s"]
    assert [got[0, i]["b"] for i in range(300)] == [i % 3 for i in range(300)]
    assert all(got[0, i]["a"].shape == (0, 0) for i in range(300))
