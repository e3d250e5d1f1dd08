"""The ``npystore`` command: info, cat, refs, option parsing and errors (convert: test_convert).

Most tests call ``cli.main`` in-process; the oracles are numpy's own header reader,
zipfile, scipy.io (whosmat/loadmat), numpy printing and ``to_kerchunk``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp
import zarr

import npystore
from npystore.tools import cat, cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("pairs", "json_text", "expected"),
    [
        (["anon=true"], None, {"anon": True}),
        (["n=3", "f=1.5", "s=abc", "z=null"], None, {"n": 3, "f": 1.5, "s": "abc", "z": None}),
        (
            ["client_kwargs.endpoint_url=http://127.0.0.1:9000", "client_kwargs.region_name=eu"],
            None,
            {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu"}},
        ),
        (['o={"a": [1, 2]}', "q=x=y"], None, {"o": {"a": [1, 2]}, "q": "x=y"}),
        (["a.b=2"], '{"a": {"c": 1}, "key": "k"}', {"a": {"c": 1, "b": 2}, "key": "k"}),
        ([], '{"anon": false}', {"anon": False}),
        (["key=123abc"], None, {"key": "123abc"}),
    ],
)
def test_storage_options(pairs: list[str], json_text: str | None, expected: Any) -> None:
    assert cli.parse_storage_options(pairs, json_text) == expected


def test_storage_options_from_file(tmp_path: Path) -> None:
    path = tmp_path / "so.json"
    path.write_text('{"anon": true, "client_kwargs": {"region_name": "x"}}')
    got = cli.parse_storage_options(["client_kwargs.verify=false"], f"@{path}")
    assert got == {"anon": True, "client_kwargs": {"region_name": "x", "verify": False}}


@pytest.mark.parametrize(
    ("pairs", "json_text", "match"),
    [
        (["novalue"], None, "expected key=value"),
        (["=1"], None, "expected key=value"),
        (["a..b=1"], None, "expected key=value"),
        (["a=1", "a.b=2"], None, "'a' is already a value"),
        ([], "[1, 2]", "expected an object"),
        ([], "{nope", "not valid JSON"),
        ([], "@/nonexistent/so.json", "No such file"),
    ],
)
def test_storage_options_errors(pairs: list[str], json_text: str | None, match: str) -> None:
    with pytest.raises(cli.CliError, match=match):
        cli.parse_storage_options(pairs, json_text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://bucket/run.npz:x", ("s3://bucket/run.npz", "x")),
        ("s3://bucket/run.NPZ:x.npy", ("s3://bucket/run.NPZ", "x.npy")),
        ("/data/m.mat:s.field", ("/data/m.mat", "s.field")),
        ("m.MAT:s/field/0", ("m.MAT", "s/field/0")),
        ("a.npz:b:c", ("a.npz", "b:c")),  # member names may hold colons
        ("http://host:8080/x.npz:m", ("http://host:8080/x.npz", "m")),
        ("s3://bucket/a.npy", ("s3://bucket/a.npy", None)),
        ("C:\\data\\a.npz", ("C:\\data\\a.npz", None)),
        ("C:/data/a.mat", ("C:/data/a.mat", None)),
        ("a.npz:", ("a.npz:", None)),
        ("dir.npz:/x.npy", ("dir.npz:/x.npy", None)),  # a path, not a member
        ("simplecache::s3://b/a.npz:m", ("simplecache::s3://b/a.npz", "m")),
    ],
)
def test_split_member(text: str, expected: tuple[str, str | None]) -> None:
    assert cli.split_member(text) == expected


@pytest.mark.parametrize(
    ("text", "index"),
    [
        ("10:20,3", np.s_[10:20, 3]),
        ("::2", np.s_[::2]),
        ("...,0", np.s_[..., 0]),
        ("-5:", np.s_[-5:]),
        ("[1:-1:3, ::-1]", np.s_[1:-1:3, ::-1]),
        ("2", np.s_[2]),
        (" 1 , None, : ", np.s_[1, None, :]),
        ("-1,...", np.s_[-1, ...]),
    ],
)
def test_parse_slice_matches_numpy(text: str, index: Any) -> None:
    arr = np.arange(24 * 7).reshape(24, 7)
    np.testing.assert_array_equal(arr[cli.parse_slice(text)], arr[index])


@pytest.mark.parametrize(
    "text", ["", "[]", "1:2:3:4", "a", "1.5", "__import__('os')", "1:x", "...,...", "::0"]
)
def test_parse_slice_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        cli.parse_slice(text)


# ------------------------------------------------------------------------------ info


def numpy_header(path: Path) -> tuple[tuple[int, int], dict[str, Any], int]:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        fmt = np.lib.format
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran, dtype = read(f)
        return version, {"shape": shape, "fortran": fortran, "dtype": dtype}, f.tell()


@pytest.mark.parametrize(
    ("array", "version"),
    [
        (np.arange(12, dtype=">i2").reshape(3, 4), (1, 0)),
        (np.asfortranarray(np.ones((5, 2, 3), dtype="<c16")), (1, 0)),
        (np.zeros(4, dtype=[("a", ">f8"), ("b", "<i2", (2,)), ("s", "S3")]), (2, 0)),
        (np.float32(2.5).reshape(()), (3, 0)),
        (np.zeros((0, 3), dtype="U5"), (1, 0)),
    ],
)
def test_info_npy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], array: np.ndarray, version: tuple[int, int]
) -> None:
    path = tmp_path / "x.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, array, version=version)
    want_version, header, offset = numpy_header(path)
    code, out, err = run(capsys, "info", str(path), "--json")
    assert (code, err) == (0, "")
    facts = json.loads(out)
    assert facts["version"] == f"{want_version[0]}.{want_version[1]}"
    assert np.lib.format.descr_to_dtype(facts["dtype"]) == header["dtype"]
    assert tuple(facts["shape"]) == header["shape"]
    assert facts["order"] == ("F" if header["fortran"] else "C")
    assert facts["data_offset"] == offset
    assert facts["nbytes"] == array.nbytes
    assert facts["file_size"] == path.stat().st_size
    code, out, _ = run(capsys, "info", str(path))
    assert code == 0
    lines = dict(line.strip().split(None, 1) if " " in line.strip() else (line, "")
                 for line in out.splitlines()[1:])  # fmt: skip
    assert str(offset) in out.split("data offset")[1].splitlines()[0]
    assert f"npy {want_version[0]}.{want_version[1]}" in out
    assert str(header["dtype"]) in out
    assert lines


def test_info_npz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.npz"
    arrays = {"a": np.arange(1000), "b": np.eye(3, dtype=">f4"), "long_name_x": np.array(["ab"])}
    np.savez_compressed(path, **arrays)
    with zipfile.ZipFile(path) as z:
        z_infos = {i.filename: i for i in z.infolist()}
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_STORED) as z:
        z.writestr("notes.txt", b"hello")  # a member that is not an .npy file
        z_infos["notes.txt"] = z.getinfo("notes.txt")
    code, out, err = run(capsys, "info", str(path), "--json")
    assert (code, err) == (0, "")
    facts = json.loads(out)
    assert [m["name"] for m in facts["members"]] == [*arrays, "notes.txt"]
    for m in facts["members"]:
        zi = z_infos[m["member"]]
        assert m["storage"] == (
            "deflated" if zi.compress_type == zipfile.ZIP_DEFLATED else "stored"
        )
        assert (m["compressed_size"], m["size"]) == (zi.compress_size, zi.file_size)
        if m["name"] in arrays:
            want = arrays[m["name"]]
            assert np.lib.format.descr_to_dtype(m["dtype"]) == want.dtype
            assert tuple(m["shape"]) == want.shape
        else:
            assert m["dtype"] is m["shape"] is None
    code, out, _ = run(capsys, "info", str(path))
    rows = out.splitlines()
    assert rows[2].split()[:4] == ["Name", "Dtype", "Shape", "Order"]
    assert rows[3].split() == ["a", "<i8", "1000", "C", "deflated",
                               str(z_infos["a.npy"].compress_size),
                               str(z_infos["a.npy"].file_size)]  # fmt: skip
    assert rows[6].split()[:3] == ["notes.txt", "-", "-"]


MAT_DATA: dict[str, Any] = {
    "x": np.arange(6.0).reshape(2, 3),
    "i": np.arange(5, dtype=np.int16),
    "z": np.array([[1 + 2j, 3]]),
    "s": {"a": np.arange(3.0), "name": "hello", "inner": {"deep": np.float64(1.5)}},
    "c": np.array([1.0, "two", np.eye(2)], dtype=object),
    "txt": "hi there",
    "sp": sp.eye(4, format="csc") * 2.0,
}


@pytest.fixture
def mat_v5(tmp_path: Path) -> Path:
    path = tmp_path / "m.mat"
    sio.savemat(path, MAT_DATA, do_compression=True)
    return path


@pytest.fixture
def mat_v73(tmp_path: Path) -> Path:
    hdf5storage = pytest.importorskip("hdf5storage")
    path = tmp_path / "m73.mat"
    data = {k: v for k, v in MAT_DATA.items() if k != "sp"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hdf5storage.savemat(str(path), data, format="7.3", matlab_compatible=True)
    return path


def test_info_mat_v5_tree(mat_v5: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # by default a v5 file lists its variables from their headers alone (contents are data)
    code, out, _ = run(capsys, "info", str(mat_v5), "--json")
    assert code == 0
    assert not any("children" in v for v in json.loads(out)["variables"])
    code, out, err = run(capsys, "info", str(mat_v5), "--json", "--depth", "-1")
    assert (code, err) == (0, "")
    facts = json.loads(out)
    assert facts["version"] == "5"
    whos = {name: (list(size), cls) for name, size, cls in sio.whosmat(mat_v5)}
    # scipy's whosmat gives a char row its length only and calls sparse a class; MATLAB's
    # whos (and npystore) say 1x8 char, and a double with the sparse attribute
    assert whos.pop("txt") == ([1], "char")
    assert whos.pop("sp") == ([4, 4], "sparse")
    whos.update(txt=([1, 8], "char"), sp=([4, 4], "double"))
    got = {v["name"]: (v["size"], v["class"]) for v in facts["variables"]}
    assert got == whos
    by_name = {v["name"]: v for v in facts["variables"]}
    assert by_name["sp"]["sparse"] is True
    assert by_name["z"]["complex"] is True
    assert "complex" not in by_name["x"]
    s = by_name["s"]["children"]
    assert [(c["name"], c["class"], c["size"]) for c in s] == [
        ("a", "double", [1, 3]), ("name", "char", [1, 5]), ("inner", "struct", [1, 1])
    ]  # fmt: skip
    assert s[2]["children"][0] == {"name": "deep", "path": "s/inner/deep", "class": "double",
                                   "size": [1, 1]}  # fmt: skip
    cells = by_name["c"]["children"]
    assert [(c["path"], c["class"]) for c in cells] == [
        ("c/0", "double"), ("c/1", "char"), ("c/2", "double")
    ]  # fmt: skip
    code, out, _ = run(capsys, "info", str(mat_v5), "--json", "--depth", "0")
    assert not any("children" in v for v in json.loads(out)["variables"])
    code, out, _ = run(capsys, "info", str(mat_v5), "--depth", "-1")
    lines = out.splitlines()
    assert lines[0] == str(mat_v5)
    assert lines[1].startswith("MAT-file v5: MATLAB 5.0 MAT-file")
    assert lines[2].split() == ["Name", "Class", "Size", "Attributes"]
    table = {line.strip().split()[0]: line for line in lines[3:]}
    assert table["sp"].split()[1:] == ["double", "4x4", "sparse"]
    assert table["deep"].startswith("    deep")  # two levels below the variable
    assert table["inner"].startswith("  inner")


def test_info_mat_v73(mat_v73: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", str(mat_v73), "--json")
    assert code == 0
    facts = json.loads(out)
    assert facts["version"] == "7.3"
    got = {v["name"]: (v["class"], v["size"]) for v in facts["variables"]}
    assert got["x"] == ("double", [2, 3])
    assert got["i"] == ("int16", [1, 5])
    assert got["s"] == ("struct", [1, 1])
    assert got["c"] == ("cell", [1, 3])
    s = next(v for v in facts["variables"] if v["name"] == "s")
    assert [c["name"] for c in s["children"]] == ["a", "name", "inner"]


# ------------------------------------------------------------------------------ cat


def test_cat_npy_slices_print_like_numpy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "a.npy"
    arr = np.arange(3000.0).reshape(300, 10)
    np.save(path, arr)
    cases = [
        ("10:13", np.s_[10:13]),
        ("...,3", np.s_[..., 3]),
        ("-2:,::4", np.s_[-2:, ::4]),  # "--slice -2:" works: argparse would take it for an option
        ("5,5", np.s_[5, 5]),
    ]
    for text, index in cases:
        code, out, err = run(capsys, "cat", str(path), "--slice", text)
        assert (code, err) == (0, "")
        assert out == str(arr[index]) + "\n"
    code, out, _ = run(capsys, "cat", str(path))
    assert out == str(arr) + "\n"
    assert "..." in out
    code, out, _ = run(capsys, "cat", str(path), "--full")
    with np.printoptions(threshold=sys.maxsize):
        assert out == str(arr) + "\n"
        assert "..." not in out


def test_cat_refuses_huge_selection_without_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.zeros(1000))
    monkeypatch.setattr(cat, "MAX_CAT_BYTES", 1000)
    code, _, err = run(capsys, "cat", str(path))
    assert code == 1
    assert "8000 bytes" in err
    assert "--slice" in err
    code, out, _ = run(capsys, "cat", str(path), "--slice", ":10")
    assert code == 0
    assert out == str(np.zeros(10)) + "\n"


def test_cat_npz_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, a=np.arange(10), b=np.eye(3, dtype=">i2"))
    code, out, _ = run(capsys, "cat", f"{path}:b")
    assert (code, out) == (0, str(np.eye(3, dtype=">i2")) + "\n")
    code, out, _ = run(capsys, "cat", str(path), "--member", "a", "--slice", "::3")
    assert (code, out) == (0, str(np.arange(10)[::3]) + "\n")
    code, out, _ = run(capsys, "cat", f"{path}:a.npy")  # numpy's other spelling
    assert out == str(np.arange(10)) + "\n"
    code, _, err = run(capsys, "cat", str(path))
    assert code == 1
    assert "2 arrays ['a', 'b']" in err
    assert str(path) in err
    code, _, err = run(capsys, "cat", f"{path}:zz")
    assert code == 1
    assert "no member 'zz'" in err
    assert "['a', 'b']" in err
    code, _, err = run(capsys, "cat", f"{path}:a", "--member", "b")
    assert code == 2
    assert "member given twice" in err
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("notes.txt", b"raw \x00 bytes")  # not an .npy member: written as it is
    code, out, _ = run(capsys, "cat", f"{path}:notes.txt")
    assert (code, out) == (0, "raw \x00 bytes")
    one = tmp_path / "one.npz"
    np.savez(one, only=np.arange(3))
    assert run(capsys, "cat", str(one))[:2] == (0, str(np.arange(3)) + "\n")


def test_cat_mat_paths(mat_v5: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = sio.loadmat(mat_v5)
    for member, want in [
        ("x", ref["x"]),
        ("s.a", ref["s"]["a"][0, 0]),
        ("s/a", ref["s"]["a"][0, 0]),
        ("s.inner.deep", ref["s"]["inner"][0, 0]["deep"][0, 0]),
        ("c/2", ref["c"][0, 2]),
    ]:
        code, out, err = run(capsys, "cat", f"{mat_v5}:{member}")
        assert (code, err) == (0, ""), member
        assert out == str(want) + "\n", member
    assert run(capsys, "cat", f"{mat_v5}:txt")[1] == "hi there\n"
    assert run(capsys, "cat", f"{mat_v5}:c/1")[1] == "two\n"
    code, out, _ = run(capsys, "cat", f"{mat_v5}:x", "--slice", "...,0")
    assert out == str(ref["x"][..., 0]) + "\n"
    out = run(capsys, "cat", f"{mat_v5}:s")[1]
    assert out.splitlines() == [
        "struct with fields:",
        "  a: [[0. 1. 2.]]",
        "  name: 'hello'",
        "  inner:",
        "    struct with fields:",
        "      deep: [[1.5]]",
    ]
    out = run(capsys, "cat", f"{mat_v5}:c")[1]
    assert out.splitlines()[:3] == ["cell 1x3", "  [0]: [[1.]]", "  [1]: 'two'"]
    out = run(capsys, "cat", f"{mat_v5}:sp")[1]
    assert out.splitlines()[0] == "<4x4 sparse float64, 4 nonzeros>"
    assert out.splitlines()[1:] == [f"  ({i}, {i})  2.0" for i in range(4)]
    code, _, err = run(capsys, "cat", f"{mat_v5}:s.nope")
    assert code == 1
    assert "s/nope" in err
    assert "['a', 'name', 'inner']" in err
    code, _, err = run(capsys, "cat", f"{mat_v5}:x.y")
    assert code == 1
    assert "x is a double, not a struct or cell" in err
    code, _, err = run(capsys, "cat", f"{mat_v5}:nothere")
    assert code == 1
    assert "no variable 'nothere'" in err


def test_cat_mat_v73(mat_v73: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "cat", f"{mat_v73}:x")[1] == str(MAT_DATA["x"]) + "\n"
    assert run(capsys, "cat", f"{mat_v73}:s/name")[1] == "hello\n"
    assert run(capsys, "cat", f"{mat_v73}:c/2")[1] == str(np.eye(2)) + "\n"


# ------------------------------------------------------------------------------ refs


def test_refs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.npz"
    arrays = {"a": np.arange(5000, dtype=">i4").reshape(50, 100), "b": np.linspace(0, 1, 7)}
    np.savez(path, **arrays)
    target = tmp_path / "refs.json"
    code, out, err = run(capsys, "refs", str(path), "-o", str(target))
    assert (code, out) == (0, "")
    refs = json.loads(target.read_text())
    assert refs == npystore.to_kerchunk(str(path))
    assert f"{len(refs['refs'])} references" in err
    fs = fsspec.filesystem("reference", fo=refs, remote_protocol="file")
    group = zarr.open_group(fs.get_mapper(""), mode="r")
    for key, want in arrays.items():
        np.testing.assert_array_equal(group[key][...], want)
    code, out, _ = run(capsys, "refs", str(path))
    assert json.loads(out) == refs


# ------------------------------------------------------------------------------ errors


def test_errors_are_one_line_with_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.npy"
    code, out, err = run(capsys, "info", str(missing))
    assert (code, out) == (1, "")
    assert err == f"npystore: error: {missing}: no such file or object\n"
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': 'x'")
    for command in ("info", "cat", "refs"):
        code, _, err = run(capsys, command, str(bad))
        assert code == 1
        assert err.startswith(f"npystore: error: {bad}: truncated .npy file"), command
        assert "Traceback" not in err
        assert err.count("\n") == 1
    code, _, err = run(capsys, "--traceback", "info", str(bad))
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert "FormatError" in err
    code, _, err = run(capsys, "info", str(bad), "--traceback")
    assert code == 1
    assert "Traceback" in err
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"garbage" * 30)
    code, _, err = run(capsys, "info", str(garbage))
    assert code == 1
    assert "unknown format" in err
    assert str(garbage) in err


def test_usage_errors_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--version")
    assert (code, out) == (0, f"npystore {npystore.__version__}\n")
    assert run(capsys)[0] == 2
    assert run(capsys, "frobnicate")[0] == 2
    code, _, err = run(capsys, "cat", "x.npy", "--slice", "1:2:3:4")
    assert code == 2
    assert "--slice" in err
    code, _, err = run(capsys, "info", "x.npy", "-s", "novalue")
    assert code == 1
    assert "expected key=value" in err
    assert run(capsys, "--help")[0] == 0


# ------------------------------------------------------------------------------ S3


def test_s3_with_storage_options(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local = tmp_path / "r.npz"
    np.savez_compressed(local, a=np.arange(100).reshape(10, 10), b=np.ones(3))
    url = s3.put_file(local, "dir/r.npz")
    so = s3.storage_options
    region = json.dumps({"client_kwargs": {"region_name": "us-east-1"}})
    opts = ["-s", f"key={so['key']}", "-s", f"secret={so['secret']}",
            "-s", f"client_kwargs.endpoint_url={so['client_kwargs']['endpoint_url']}",
            "--storage-options-json", region]  # fmt: skip
    code, out, err = run(capsys, "info", url, "--json", *opts)
    assert (code, err) == (0, "")
    assert [m["name"] for m in json.loads(out)["members"]] == ["a", "b"]
    code, out, _ = run(capsys, "cat", f"{url}:a", "--slice", "2:4,::3", *opts)
    assert out == str(np.arange(100).reshape(10, 10)[2:4, ::3]) + "\n"
    code, out, _ = run(capsys, "refs", url, *opts)
    assert json.loads(out) == npystore.to_kerchunk(url, storage_options=so)
    code, _, err = run(capsys, "info", s3.url("dir/absent.npy"), *opts)
    assert code == 1
    assert err == f"npystore: error: {s3.url('dir/absent.npy')}: no such file or object\n"


# ------------------------------------------------------------------------------ processes


def test_console_script_and_module(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(6, dtype="<u2").reshape(2, 3))
    script = Path(sys.executable).with_name("npystore")  # the installed console script
    command = [str(script)] if script.exists() else [sys.executable, "-m", "npystore"]
    done = subprocess.run([*command, "info", str(path), "--json"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["shape"] == [2, 3]
    done = subprocess.run([sys.executable, "-m", "npystore", "cat", str(tmp_path / "no.npy")],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("npystore: error: ")
    assert "no.npy" in done.stderr


def test_info_reads_headers_only_over_s3(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A compressed v5 struct holding 2 MB of data: `info` lists it without inflating it."""
    path = tmp_path / "big.mat"
    rng = np.random.default_rng(3)
    sio.savemat(path, {"s": {"m": rng.standard_normal((500, 500))}, "x": np.eye(3)},
                do_compression=True)  # fmt: skip
    url = s3.put_file(path, "big.mat")
    so = s3.storage_options
    opts = ["-s", f"key={so['key']}", "-s", f"secret={so['secret']}",
            "-s", f"client_kwargs.endpoint_url={so['client_kwargs']['endpoint_url']}",
            "-s", f"client_kwargs.region_name={so['client_kwargs']['region_name']}"]  # fmt: skip
    with s3.counter.measure() as m:
        code, out, err = run(capsys, "info", url, "--json", *opts)
    assert (code, err) == (0, "")
    facts = json.loads(out)
    assert {v["name"]: v["class"] for v in facts["variables"]} == {"s": "struct", "x": "double"}
    assert m.bytes < 300 * 1024 < path.stat().st_size / 5


def test_info_npy_over_s3_is_one_request(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The open that sniffs the format also reads the header: one GET, no HEAD."""
    path = tmp_path / "one.npy"
    np.save(path, np.arange(1000.0))
    url = s3.put_file(path, "one.npy")
    so = s3.storage_options
    opts = ["-s", f"key={so['key']}", "-s", f"secret={so['secret']}",
            "-s", f"client_kwargs.endpoint_url={so['client_kwargs']['endpoint_url']}",
            "-s", f"client_kwargs.region_name={so['client_kwargs']['region_name']}"]  # fmt: skip
    with s3.counter.measure() as m:
        code, out, _ = run(capsys, "info", url, "--json", *opts)
    assert code == 0
    assert json.loads(out)["shape"] == [1000]
    assert (m.gets, m.heads) == (1, 0)


# -- first-use fixes: pickles, remote outputs, library warnings --------------------------------


def test_cat_allow_pickle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "o.npy"
    np.save(path, np.array([{"k": 1}, "x"], dtype=object), allow_pickle=True)
    code, _, err = run(capsys, "cat", str(path))
    assert code == 1
    assert "--allow-pickle" in err
    assert "Traceback" not in err
    code, out, err = run(capsys, "cat", str(path), "--allow-pickle")
    assert code == 0, err
    assert "'k': 1" in out
    assert "'x'" in out
    np.savez(tmp_path / "o.npz", a=np.array([1, "y"], dtype=object), b=np.arange(3))
    assert run(capsys, "cat", f"{tmp_path / 'o.npz'}:a")[0] == 1
    code, out, _ = run(capsys, "cat", f"{tmp_path / 'o.npz'}:a", "--allow-pickle")
    assert code == 0
    assert "'y'" in out
    code, out, _ = run(capsys, "cat", f"{tmp_path / 'o.npz'}:b")  # plain members need no flag
    assert code == 0
    assert "[0 1 2]" in out


def test_refs_output_to_any_fsspec_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(10))
    code, _, err = run(capsys, "refs", str(path), "-o", "memory://cli-refs/a.json")
    assert code == 0, err
    assert "-> memory://cli-refs/a.json" in err
    with fsspec.open("memory://cli-refs/a.json", "r") as f:
        refs = json.load(f)
    assert refs == npystore.to_kerchunk(str(path))


def test_refs_zarr_format_and_chunks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.npz"
    arrays = {"a": np.arange(60, dtype="<i4").reshape(20, 3), "b": np.arange(20.0)}
    np.savez(path, **arrays)
    code, out, _ = run(capsys, "refs", str(path), "--chunks", "5")
    assert code == 0
    assert json.loads(out) == npystore.to_kerchunk(str(path), chunks=5)
    assert json.loads(json.loads(out)["refs"]["a/.zarray"])["chunks"] == [5, 3]
    np.save(tmp_path / "a.npy", arrays["a"])
    code, out, _ = run(capsys, "refs", str(tmp_path / "a.npy"), "--chunks", "10,-1",
                       "--zarr-format", "3")  # fmt: skip
    assert code == 0
    refs = json.loads(out)
    assert refs == npystore.to_kerchunk(str(tmp_path / "a.npy"), chunks=(10, -1), zarr_format=3)
    assert sorted(k for k in refs["refs"] if k.startswith("c/")) == ["c/0/0", "c/1/0"]
    code, _, err = run(capsys, "refs", str(path), "--chunks", "10,-1")
    assert code != 0
    assert "chunks=(10, -1) has 2 lengths" in err


def test_refs_reports_zarr_warnings_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # zarr warns that its fixed-length bytes type has no stable v3 spec (zarr 3.1 and 3.4;
    # zarr 3.4's struct has one, so a record is no longer an example)
    path = tmp_path / "s.npy"
    np.save(path, np.array([b"ab", b"cde"], dtype="S5"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing escapes as a raw warning
        code, _, err = run(
            capsys, "refs", str(path), "--zarr-format", "3", "-o", str(tmp_path / "s.json")
        )
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("npystore: warning")]
    assert len(lines) == 1
    assert lines[0].startswith("npystore: warning: UnstableSpecificationWarning: The data type")
    assert "site-packages" not in err


# ------------------------------------------------------------------------- outputs, depth


def test_info_depth_takes_levels_or_minus_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "a.npy", np.arange(3))
    for bad in ("-5", "-2", "x"):
        code, _, err = run(capsys, "info", str(tmp_path / "a.npy"), "--depth", bad)
        assert code == 2
        assert "-1 for all" in err
    for good in ("-1", "0", "3"):
        assert run(capsys, "info", str(tmp_path / "a.npy"), "--depth", good)[0] == 0


@pytest.mark.parametrize("out", ["out.zip", "out.h5", "out.NPZ", "zip::{tmp}/out.zip",
                                 "simplecache::{tmp}/out.zarr"])  # fmt: skip
def test_convert_refuses_outputs_it_cannot_write(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    out: str,
) -> None:
    np.savez(tmp_path / "x.npz", a=np.arange(3))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # a chain used to become a directory named "zip::..." here
    target = out.format(tmp=tmp_path)
    code, _, err = run(capsys, "convert", str(tmp_path / "x.npz"), target, "--no-progress")
    assert code == 1
    assert "convert writes a Zarr group" in err
    assert ".zarr" in err  # what is accepted
    assert ".npz" in err
    assert os.listdir(work) == []
    assert sorted(os.listdir(tmp_path)) == ["cwd", "x.npz"]
    from npystore.tools.convert import ConvertError, convert

    with pytest.raises(ConvertError, match="convert writes a Zarr group"):
        convert(str(tmp_path / "x.npz"), target)
    assert os.listdir(work) == []


@pytest.mark.parametrize("name", ["o.zarr", "o.npy", "o.npz"])
def test_convert_does_not_create_missing_directories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    np.save(tmp_path / "x.npy", np.arange(3))
    out = tmp_path / "missing" / "deeper" / name
    code, _, err = run(capsys, "convert", str(tmp_path / "x.npy"), str(out), "--no-progress")
    assert code == 1
    assert "does not exist" in err
    assert "missing/deeper" in err
    assert sorted(os.listdir(tmp_path)) == ["x.npy"]
    (tmp_path / "missing" / "deeper").mkdir(parents=True)
    assert run(capsys, "convert", str(tmp_path / "x.npy"), str(out), "--no-progress")[0] == 0


def test_convert_to_npz_takes_a_compression_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = np.tile(np.arange(100), 5000)
    np.save(tmp_path / "x.npy", a)
    sizes = {}
    for level in ("1", "9"):
        out = tmp_path / f"l{level}.npz"
        assert run(capsys, "convert", str(tmp_path / "x.npy"), str(out), "--level", level)[0] == 0
        np.testing.assert_array_equal(np.load(out)["x"], a)
        sizes[level] = out.stat().st_size
    assert sizes["9"] != sizes["1"]
    code, _, err = run(capsys, "convert", str(tmp_path / "x.npy"), str(tmp_path / "b.npz"),
                       "--level", "12")  # fmt: skip
    assert code == 1
    assert "1 (fastest) to 9" in err
