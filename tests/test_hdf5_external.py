"""MAT v7.3 (HDF5) files that name other files: refused on every path (issue 14, items 2, 6).

An HDF5 file can put a dataset's values in *external storage* (raw files named in its
header, opened by libhdf5 by name whatever opened the HDF5 file), in a *virtual dataset*
(source datasets in other files, or in itself), or behind an *external link* (or a
user-defined link). A .mat read from anywhere (here: a local path, and S3) must never return
the bytes of a local file it names: each crafted case below is refused with
UnsupportedError through open_mat, the Zarr store, to_kerchunk, xarray and the command
line, listed (``info`` does not crash, it says "refused"), and the secret file's bytes
appear in no value, message or output.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import npystore
from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import open_reader
from npystore.files.mat.h5safe import MAX_SOFT_LINKS, safe_root
from npystore.files.mat.hdf5 import open_h5
from npystore.tools import cli

#: The local file the crafted .mat files point at.
SECRET = b"NPYSTORE-SECRET!" * 64


def leaks(text: str) -> list[str]:
    """The renderings of the secret found in ``text`` (ASCII, UTF-16 chars, numbers)."""
    words = np.frombuffer(SECRET[:16], dtype="<u2")
    renderings = {
        "ascii": "SECRET",
        "utf-16": "".join(map(chr, words)),
        "uint8": " ".join(str(b) for b in SECRET[:6]),
        "uint8 list": ", ".join(str(b) for b in SECRET[:6]),
        "uint16": " ".join(str(int(w)) for w in words[:3]),
        "uint64": str(int(np.frombuffer(SECRET[:8], dtype="<u8")[0])),
        "uint32": str(int(np.frombuffer(SECRET[:4], dtype="<u4")[0])),
        "float64": repr(float(np.frombuffer(SECRET[:8], dtype="<f8")[0]))[:12],
        "hex": SECRET[:6].hex(),
    }
    return [name for name, r in renderings.items() if r in text]


def cls(obj: h5py.Dataset | h5py.Group, name: str) -> None:
    obj.attrs["MATLAB_class"] = np.bytes_(name)


def fields(group: h5py.Group, *names: str) -> None:
    vlen = h5py.vlen_dtype(np.dtype("S1"))
    value = np.empty(len(names), dtype=object)
    for i, n in enumerate(names):
        value[i] = np.array(list(n), dtype="S1")
    group.attrs.create("MATLAB_fields", value, dtype=vlen)


def ext(secret: Path, nbytes: int) -> list[tuple[str, int, int]]:
    return [(str(secret), 0, nbytes)]


# Each case writes variable "x" (refused) into a fresh v7.3 file; "ok" is a plain double.
Case = Callable[[h5py.File, Path, Path], None]


def numeric(f: h5py.File, secret: Path, other: Path) -> None:
    cls(f.create_dataset("x", shape=(2, 4), dtype="<f8", external=ext(secret, 64)), "double")


def numeric_relative(f: h5py.File, secret: Path, other: Path) -> None:
    d = f.create_dataset("x", shape=(1, 8), dtype="<f8", external=[(secret.name, 0, 64)])
    cls(d, "double")


def logical(f: h5py.File, secret: Path, other: Path) -> None:
    cls(f.create_dataset("x", shape=(8, 1), dtype="u1", external=ext(secret, 8)), "logical")


def char(f: h5py.File, secret: Path, other: Path) -> None:
    cls(f.create_dataset("x", shape=(8, 1), dtype="<u2", external=ext(secret, 16)), "char")


def empty(f: h5py.File, secret: Path, other: Path) -> None:
    d = f.create_dataset("x", shape=(2,), dtype="<u8", external=ext(secret, 16))
    cls(d, "double")
    d.attrs["MATLAB_empty"] = np.uint8(1)


def mcos_object(f: h5py.File, secret: Path, other: Path) -> None:
    d = f.create_dataset("x", shape=(6, 1), dtype="<u4", external=ext(secret, 24))
    cls(d, "string")
    d.attrs["MATLAB_object_decode"] = np.int32(3)


def struct_field(f: h5py.File, secret: Path, other: Path) -> None:
    s = f.create_group("x")
    cls(s, "struct")
    fields(s, "a", "f")
    cls(s.create_dataset("a", data=np.ones((1, 1))), "double")
    cls(s.create_dataset("f", shape=(4, 1), dtype="<u2", external=ext(secret, 8)), "char")


def struct_array(f: h5py.File, secret: Path, other: Path) -> None:
    refs = f.create_group("#refs#")
    a = refs.create_dataset("a", shape=(1, 2), dtype="<f8", external=ext(secret, 16))
    cls(a, "double")
    b = refs.create_dataset("b", data=np.ones((1, 1)))
    cls(b, "double")
    s = f.create_group("x")
    cls(s, "struct")
    fields(s, "f")
    col = s.create_dataset("f", shape=(2, 1), dtype=h5py.ref_dtype)
    col[0, 0], col[1, 0] = b.ref, a.ref


def cell_element(f: h5py.File, secret: Path, other: Path) -> None:
    refs = f.create_group("#refs#")
    a = refs.create_dataset("a", shape=(4, 1), dtype="<u2", external=ext(secret, 8))
    cls(a, "char")
    c = f.create_dataset("x", shape=(1, 1), dtype=h5py.ref_dtype)
    cls(c, "cell")
    c[0, 0] = a.ref


def cell_references(f: h5py.File, secret: Path, other: Path) -> None:
    """The cell's references themselves are read from the local file."""
    c = f.create_dataset("x", shape=(2, 1), dtype=h5py.ref_dtype, external=ext(secret, 16))
    cls(c, "cell")


def sparse_data(f: h5py.File, secret: Path, other: Path) -> None:
    g = f.create_group("x")
    cls(g, "double")
    g.attrs["MATLAB_sparse"] = np.uint64(3)
    g.create_dataset("data", shape=(2,), dtype="<f8", external=ext(secret, 16))
    g.create_dataset("ir", data=np.array([0, 2], dtype="<u8"))
    g.create_dataset("jc", data=np.array([0, 1, 2], dtype="<u8"))


def sparse_jc(f: h5py.File, secret: Path, other: Path) -> None:
    g = f.create_group("x")
    cls(g, "logical")
    g.attrs["MATLAB_sparse"] = np.uint64(3)
    g.create_dataset("jc", shape=(3,), dtype="<u8", external=ext(secret, 24))


def virtual_other(f: h5py.File, secret: Path, other: Path) -> None:
    layout = h5py.VirtualLayout(shape=(16, 1), dtype="u1")
    layout[:] = h5py.VirtualSource(str(other), "data", shape=(16, 1))
    cls(f.create_virtual_dataset("x", layout), "uint8")


def virtual_char(f: h5py.File, secret: Path, other: Path) -> None:
    layout = h5py.VirtualLayout(shape=(8, 1), dtype="<u2")
    layout[:] = h5py.VirtualSource(str(other), "chars", shape=(8, 1))
    cls(f.create_virtual_dataset("x", layout), "char")


def virtual_same(f: h5py.File, secret: Path, other: Path) -> None:
    src = f.create_dataset("#refs#/src", data=np.arange(4.0).reshape(4, 1))
    layout = h5py.VirtualLayout(shape=(4, 1), dtype="<f8")
    layout[:] = h5py.VirtualSource(".", src.name, shape=(4, 1))
    cls(f.create_virtual_dataset("x", layout), "double")


def external_link(f: h5py.File, secret: Path, other: Path) -> None:
    f["x"] = h5py.ExternalLink(str(other), "/data")


def external_link_field(f: h5py.File, secret: Path, other: Path) -> None:
    s = f.create_group("x")
    cls(s, "struct")
    fields(s, "f")
    s["f"] = h5py.ExternalLink(str(other), "/data")


def soft_to_external(f: h5py.File, secret: Path, other: Path) -> None:
    f["#refs#/ext"] = h5py.ExternalLink(str(other), "/data")
    f["x"] = h5py.SoftLink("/#refs#/ext")


def soft_through_external(f: h5py.File, secret: Path, other: Path) -> None:
    f["#refs#/ext"] = h5py.ExternalLink(str(other), "/")
    f["x"] = h5py.SoftLink("/#refs#/ext/data")


def user_defined_link(f: h5py.File, secret: Path, other: Path) -> None:
    """An external link whose link message is patched to type 65 afterwards."""
    f["x"] = h5py.ExternalLink(str(other), "/data")


CASES: dict[str, tuple[Case, str]] = {
    # name: (builder, message fragment)
    "numeric": (numeric, r"\bx: values in external storage .*secret\.bin"),
    "numeric_relative": (numeric_relative, r"values in external storage"),
    "logical": (logical, "values in external storage"),
    "char": (char, r"variable x: values in external storage"),
    "empty": (empty, r"variable x: values in external storage"),
    "mcos_object": (mcos_object, r"variable x: values in external storage"),
    "struct_field": (struct_field, r"variable x\.f: values in external storage"),
    "struct_array": (struct_array, r"values in external storage"),
    "cell_element": (cell_element, r"variable x\{0\}: values in external storage"),
    "cell_references": (cell_references, r"variable x: values in external storage"),
    "sparse_data": (sparse_data, r"x\.data: values in external storage"),
    "sparse_jc": (sparse_jc, r"x\.jc: values in external storage"),
    "virtual_other": (virtual_other, r"a virtual dataset .*other\.h5"),
    "virtual_char": (virtual_char, r"variable x: a virtual dataset"),
    "virtual_same": (virtual_same, r"a virtual dataset \(values mapped from datasets in '\.'"),
    "external_link": (external_link, r"/x: an external link to '/data' in file .*other\.h5"),
    "external_link_field": (external_link_field, r"/x/f: an external link to '/data'"),
    "soft_to_external": (soft_to_external, r"/#refs#/ext: an external link to '/data'"),
    "soft_through_external": (soft_through_external, r"/#refs#/ext: an external link to '/'"),
    "user_defined_link": (user_defined_link, r"/x: a user-defined HDF5 link \(type 65\)"),
}
#: Cases xarray leaves out without reading them (a cell, a struct array).
XARRAY_SKIPS = {"struct_array", "cell_element"}
#: Cases refused below the variable (a field, an element): listed as readable, refused
#: when the value is built.
DEEP = {"struct_field", "struct_array", "cell_element", "external_link_field"}


def stamp(path: Path) -> None:
    """MATLAB's header text in the user block."""
    text = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
    with path.open("r+b") as f:
        f.write(text.ljust(116) + b" " * 8 + b"\x00\x02IM")


def patch_link_type(path: Path, name: bytes, new_type: int) -> None:
    """Turn the external link ``name`` (link message type 64) into type ``new_type``."""
    raw = bytearray(path.read_bytes())
    at = raw.find(b"\x01\x08\x40" + bytes([len(name)]) + name)
    assert at > 0, "external link message not found"
    raw[at + 2] = new_type
    path.write_bytes(bytes(raw))


def build(tmp_path: Path, case: str) -> Path:
    """The .mat of ``case`` in tmp_path, beside the secret and an HDF5 file holding it."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)
    other = tmp_path / "other.h5"
    if not other.exists():
        with h5py.File(other, "w") as g:
            cls(g.create_dataset("data", data=np.frombuffer(SECRET[:16], "u1").reshape(16, 1)),
                "uint8")  # fmt: skip
            cls(g.create_dataset("chars", data=np.frombuffer(SECRET[:16], "<u2").reshape(8, 1)),
                "char")  # fmt: skip
    path = tmp_path / f"{case}.mat"
    with h5py.File(path, "w", userblock_size=512) as f:
        CASES[case][0](f, secret, other)
        cls(f.create_dataset("ok", data=np.full((1, 1), 7.0)), "double")
    if case == "user_defined_link":
        patch_link_type(path, b"x", 65)
    stamp(path)
    return path


def materialize(value: Any) -> Any:
    """Every value inside ``value`` computed (dask arrays, structs, cells, sparse)."""
    if hasattr(value, "compute"):
        return value.compute()
    if isinstance(value, Mapping):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype == object:
        return [materialize(v) for v in value.ravel()]
    if hasattr(value, "toarray"):
        return value.toarray()
    return value


def assert_no_leak(*texts: str) -> None:
    for text in texts:
        assert not leaks(text), f"secret bytes ({leaks(text)}) in: {text[:2000]}"


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    return request.param, build(tmp_path, request.param)


# --------------------------------------------------------------------------- the faces


def test_open_mat_refuses(case: tuple[str, Path]) -> None:
    name, path = case
    fragment = CASES[name][1]
    with npystore.open_mat(path) as mat:
        assert set(mat) == {"ok", "x"}
        info = mat.variables["x"]
        if name not in DEEP:  # the listing says so; it does not crash
            assert "npystore refuses" in info.refused, info
            assert "refused" in mat.describe()
        assert_no_leak(repr(mat.variables), mat.describe())
        with pytest.raises(UnsupportedError, match=fragment) as exc:
            materialize(mat["x"])
        assert_no_leak(str(exc.value), repr(exc.value.__cause__))
        with pytest.raises(UnsupportedError, match=fragment):
            mat.load("x")
        assert mat.load("ok").tolist() == [[7.0]]  # the rest of the file reads


def test_open_mat_on_s3_refuses_local_files(s3: Any, tmp_path: Path) -> None:
    """The .mat on S3 names files on the machine that reads it: nothing is read."""
    for name in ("numeric", "char", "empty", "external_link", "virtual_other"):
        path = build(tmp_path, name)
        url = s3.put_file(path, f"{name}.mat")
        with npystore.open_mat(url, storage_options=s3.storage_options) as mat:
            assert mat.variables["x"].refused
            with pytest.raises(UnsupportedError, match=CASES[name][1]) as exc:
                materialize(mat["x"])
            assert_no_leak(str(exc.value))
            assert mat.load("ok").tolist() == [[7.0]]
        with pytest.raises(UnsupportedError, match=CASES[name][1]):
            npystore.open_store(url, storage_options=s3.storage_options)


def test_zarr_store_and_kerchunk_refuse(case: tuple[str, Path]) -> None:
    name, path = case
    fragment = CASES[name][1]
    with pytest.raises(UnsupportedError, match=fragment) as exc:
        npystore.open_store(str(path))  # the store is made of every variable's layout
    assert_no_leak(str(exc.value))
    with pytest.raises(UnsupportedError, match=fragment) as exc:
        npystore.to_kerchunk(str(path))
    assert_no_leak(str(exc.value))


def test_xarray_refuses(case: tuple[str, Path]) -> None:
    xr = pytest.importorskip("xarray")
    name, path = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped cells, structs
        if name in XARRAY_SKIPS:  # never read: left out, like every cell or sparse matrix
            tree = xr.open_datatree(str(path), engine="npystore")
            assert "x" not in tree.to_dict()["/"]
            assert_no_leak(repr(tree))
            return
        with pytest.raises(UnsupportedError, match=CASES[name][1]) as exc:
            xr.open_datatree(str(path), engine="npystore").load()
        assert_no_leak(str(exc.value))
        if name.startswith(("struct", "external_link_field")):
            return  # a struct: the root dataset leaves it out
        with pytest.raises(UnsupportedError, match=CASES[name][1]):
            xr.open_dataset(str(path), engine="npystore").load()
        kept = xr.open_dataset(str(path), engine="npystore", drop_variables="x").load()
        assert kept["ok"].values.tolist() == [[7.0]]


def test_cli_cat_refuses_and_info_lists(
    case: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = case
    code = cli.main(["cat", f"{path}:x"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "refuses" in err, err
    assert_no_leak(out, err)
    code = cli.main(["info", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "refused" in out
    assert_no_leak(out, err)
    code = cli.main(["info", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    entry = {v["name"]: v for v in json.loads(out)["variables"]}["x"]
    assert "refuses" in entry["refused"]
    assert_no_leak(out, err)
    code = cli.main(["cat", f"{path}:ok"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "7" in out


def test_case_count() -> None:
    """20 crafted files: 12 external storage (numeric absolute and relative, logical,
    char, empty, object header, struct field, struct array element, cell element, cell
    references, sparse data, sparse jc), 3 virtual (other file, char, same file),
    5 links (external, external struct field, soft to external, soft through external,
    user-defined)."""
    assert len(CASES) == 20


# ------------------------------------------------------------------- defence in depth


def test_libhdf5_alone_opens_no_linked_file(tmp_path: Path) -> None:
    """With the checks bypassed (h5py used directly on the file npystore opened), libhdf5
    still opens no local file for external links and virtual sources: they resolve inside
    the same file (h5py's file-object driver ignores names). The same reads on a file h5py
    opens by path do reach the secret: the setup would show a leak. (External storage is
    opened by name whatever the driver: only the checks stop it.)"""
    for name in ("external_link", "soft_to_external", "virtual_other", "virtual_char"):
        path = build(tmp_path, name)
        with h5py.File(path, "r") as plain:  # the oracle: libhdf5 left to itself leaks
            assert np.ascontiguousarray(plain["x"][()]).tobytes()[:8] == SECRET[:8]
        h5 = open_h5(open_reader(str(path)))
        try:
            if name in ("external_link", "soft_to_external"):
                with pytest.raises(KeyError, match="'data' doesn't exist"):
                    h5["x"]  # bypassing the guard: /data is looked up in this file
                continue
            values = h5["x"][()]  # bypassing the guard: sources read from this file
            assert not np.ascontiguousarray(values).any()
        finally:
            h5.close()


def test_choke_point_guards_every_read(tmp_path: Path) -> None:
    """SafeDataset has no indexing: the MATLAB tree reads values only through read(),
    which checks the storage first."""
    path = build(tmp_path, "char")
    h5 = open_h5(open_reader(str(path)))
    try:
        x = safe_root(h5, "mem")["x"]
        with pytest.raises(TypeError):
            x[()]
        with pytest.raises(UnsupportedError, match="here: values in external storage"):
            x.read("here")
    finally:
        h5.close()


# --------------------------------------------------------------------------- soft links


def test_soft_links_within_the_file(tmp_path: Path) -> None:
    """Soft links inside the file are followed (each hop checked), loops are bounded,
    dangling ones are listed and refused as malformed."""
    path = tmp_path / "soft.mat"
    with h5py.File(path, "w", userblock_size=512) as f:
        cls(f.create_dataset("#refs#/v", data=np.arange(6.0).reshape(3, 2)), "double")
        f["#refs#/hop"] = h5py.SoftLink("v")  # relative: resolved in #refs#
        f["a"] = h5py.SoftLink("/#refs#/hop")
        s = f.create_group("s")
        cls(s, "struct")
        s["f"] = h5py.SoftLink("/#refs#/v")
        f["loop"] = h5py.SoftLink("/loop2")
        f["loop2"] = h5py.SoftLink("/loop")
        f["long"] = h5py.SoftLink("/c0")
        for i in range(MAX_SOFT_LINKS + 1):
            f[f"#refs#/c{i}"] = h5py.SoftLink(f"/#refs#/c{i + 1}")
        f["c0"] = h5py.SoftLink("/#refs#/c0")
        f["dangling"] = h5py.SoftLink("/nowhere")
    stamp(path)
    with npystore.open_mat(path) as mat:
        assert set(mat) == {"a", "s", "loop", "loop2", "long", "c0", "dangling"}
        assert mat.load("a").tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
        assert mat.load("s")["f"].tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
        assert mat.variables["loop"].dims == ()
        with pytest.raises(FormatError, match=f"more than {MAX_SOFT_LINKS} soft links"):
            mat.load("loop")
        with pytest.raises(FormatError, match=f"more than {MAX_SOFT_LINKS} soft links"):
            mat.load("long")
        with pytest.raises(FormatError, match=r"soft link to '/nowhere', which does not resolve"):
            mat.load("dangling")


def test_secret_renderings_are_detected() -> None:
    """The leak detector finds the secret as each reader would have shown it."""
    assert leaks(SECRET.decode()) == ["ascii"]
    assert "utf-16" in leaks("".join(map(chr, np.frombuffer(SECRET[:16], "<u2"))))
    assert "uint8" in leaks(str(np.frombuffer(SECRET[:16], "u1")))
    assert "uint64" in leaks(str(np.frombuffer(SECRET[:16], "<u8").tolist()))
    assert "float64" in leaks(repr(np.frombuffer(SECRET[:8], "<f8")[0].item()))
    assert not leaks(str(Path("/tmp") / "secret.bin"))
