"""Member and variable names: numpy's resolution of ``x`` vs ``x.npy``, and node names that
are safe in a Zarr store (no clash with ``zarr.json`` or the conversion manifest, no file
name longer than a file system allows), the same in ``open_store`` and ``convert``.

Oracles: ``numpy.load`` (keys, ``files``, values) and ``scipy.io.loadmat``.
"""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
import scipy.io as sio
import xarray as xr
import zarr

import npystore
from npystore.faces.tree import MAX_NODE_NAME, node_name
from npystore.files.zip import member_key, unique_keys
from npystore.tools import cli
from npystore.tools.convert import MANIFEST_KEY, convert

LONG = "é" * 200  # 400 UTF-8 bytes, 1200 characters percent-encoded


def write_npz(path: Path, members: dict[str, np.ndarray], compressed: bool = False) -> Path:
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        for name, arr in members.items():
            buf = io.BytesIO()
            np.save(buf, arr)
            zf.writestr(name, buf.getvalue())
    return path


CLASHES = {
    "x-first": ["x", "x.npy"],
    "npy-first": ["x.npy", "x"],
    "three": ["x.npy.npy", "x", "x.npy"],
}


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
@pytest.mark.parametrize("case", CLASHES)
def test_x_and_x_npy_read_as_numpy(tmp_path: Path, case: str, compressed: bool) -> None:
    names = CLASHES[case]
    path = write_npz(
        tmp_path / "c.npz", {n: np.arange(3) + 100 * i for i, n in enumerate(names)}, compressed
    )
    z = npystore.open_npz(str(path))
    with np.load(path) as ref:
        assert z.files == ref.files  # duplicates included, as numpy lists them
        assert len(z) == len(ref)
        for key in {*names, *ref.files, "x.npy.npy", "x.npy.npy.npy", "y"}:
            assert (key in z) == (key in ref), key
            if key in ref:
                np.testing.assert_array_equal(z[key].compute(), ref[key], err_msg=key)
                np.testing.assert_array_equal(z.load(key), ref[key], err_msg=key)
            else:
                with pytest.raises(KeyError):
                    z[key]
        # every member gets a key of its own that numpy reads it by
        keys = z.member_keys
        assert sorted(keys) == sorted(names)
        assert len(set(keys.values())) == len(names)
        for member, key in keys.items():
            np.testing.assert_array_equal(z[key].compute(), ref[key])
            assert z.info(key).entry.name == member


@pytest.mark.parametrize("case", CLASHES)
def test_store_xarray_and_convert_keep_every_member(tmp_path: Path, case: str) -> None:
    names = CLASHES[case]
    path = write_npz(tmp_path / "c.npz", {n: np.arange(4) * (i + 1) for i, n in enumerate(names)})
    keys = unique_keys(names)
    with np.load(path) as ref:
        expected = {keys[n]: ref[keys[n]] for n in names}
    group = zarr.open_group(npystore.open_store(str(path)), mode="r")
    assert sorted(group.array_keys()) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(group[key][...], value)
        assert group[key].attrs["npystore"]["key"] == key
    renamed = group.attrs["npystore"]["renamed"]
    assert dict(renamed.items()) == {m: keys[m] for m in names if keys[m] != member_key(m)}
    ds = xr.open_dataset(path, engine="npystore")
    assert sorted(ds.data_vars) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(ds[key].values, value)
    out = tmp_path / "o.zarr"
    result = convert(str(path), str(out))
    assert sorted(result.arrays) == sorted(expected)
    written = zarr.open_group(out, mode="r")
    for key, value in expected.items():
        np.testing.assert_array_equal(written[key][...], value)


# names that used to break convert: the output's own files, a name longer than a file name
# may be, the empty name, "/" and other reserved forms
AWKWARD = [
    "zarr.json",
    ".npystore-convert.json",
    LONG,
    LONG + "x",  # the same 200-character prefix: a distinct node
    "",
    "a/b",
    "ZARR.JSON",
    "__z",
    "~t",
    "%7Et",
    ".zgroup",
    ".",
    "..",
    "c",
]


def test_node_names_are_safe_and_distinct() -> None:
    rng = np.random.default_rng(11)
    alphabet = [*list("abc./_~%é-€ Z0"), "😀"]
    names = set(AWKWARD)
    for _ in range(3000):
        n = int(rng.integers(0, 12))
        names.add("".join(rng.choice(alphabet, n)))
    names |= {"é" * k for k in range(60, 90)}  # shortened near the limit
    nodes = {}
    for name in names:
        node = node_name(name)
        assert node not in nodes, (name, nodes.get(node))
        nodes[node] = name
        assert node.isascii()
        assert 0 < len(node) <= MAX_NODE_NAME
        assert "/" not in node
        assert node not in (".", "..")
        assert not node.startswith((".", "__"))
        assert node.lower() != "zarr.json"
        if "~" not in node:
            assert unquote(node) == name  # decodes back
    assert node_name("plain_name-1.5") == "plain_name-1.5"


def test_convert_awkward_npz_names(tmp_path: Path) -> None:
    members = {f"{n}.npy": np.arange(5) + 10 * i for i, n in enumerate(AWKWARD)}
    path = write_npz(tmp_path / "names.npz", members)
    out = tmp_path / "o.zarr"
    result = convert(str(path), str(out))
    assert len(result.arrays) == len(AWKWARD)
    group = zarr.open_group(out, mode="r")
    renamed = group.attrs["npystore"]["renamed"]
    with np.load(path) as ref:
        for member in members:
            key = member_key(member)
            node = renamed.get(member, key)
            assert node == node_name(key)
            arr = group[node]
            assert arr.attrs["npystore"]["member"] == member
            np.testing.assert_array_equal(arr[...], ref[key])
    assert (out / MANIFEST_KEY).is_file()  # not replaced by a member
    assert (out / "zarr.json").is_file()
    # the read-only store serves the same names
    store_group = zarr.open_group(npystore.open_store(str(path)), mode="r")
    assert sorted(store_group.array_keys()) == sorted(group.array_keys())
    assert store_group.attrs.asdict() == group.attrs.asdict()


def test_convert_awkward_mat_names(tmp_path: Path) -> None:
    path = tmp_path / "names.mat"
    data = {
        "zarr.json": np.eye(2),
        "ok": np.arange(3.0),
        "s": {"zarr.json": np.eye(3), ".hidden": np.arange(2.0), "c": np.zeros(2)},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about names MATLAB would not take
        sio.savemat(path, data)
    ref = sio.loadmat(path)
    out = tmp_path / "m.zarr"
    convert(str(path), str(out))
    group = zarr.open_group(out, mode="r")
    renamed = group.attrs["npystore"]["renamed"]
    assert renamed == {
        "zarr.json": "zarr%2Ejson",
        "s/zarr.json": "s/zarr%2Ejson",
        "s/.hidden": "s/%2Ehidden",
    }
    np.testing.assert_array_equal(group["zarr%2Ejson"][...], ref["zarr.json"])
    np.testing.assert_array_equal(group["s/zarr%2Ejson"][...], ref["s"]["zarr.json"][0, 0])
    np.testing.assert_array_equal(group["s/%2Ehidden"][...], ref["s"][".hidden"][0, 0])
    np.testing.assert_array_equal(group["ok"][...], ref["ok"])
    assert group["zarr%2Ejson"].attrs["matlab_name"] == "zarr.json"


def test_cli_info_lists_every_member(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_npz(tmp_path / "c.npz", {"x.npy": np.arange(3), "x": np.eye(2)})
    assert cli.main(["info", str(path), "--json"]) == 0
    members = json.loads(capsys.readouterr().out)["members"]
    assert [(m["name"], m["member"], m["shape"]) for m in members] == [
        ("x.npy", "x.npy", [3]),
        ("x", "x", [2, 2]),
    ]
