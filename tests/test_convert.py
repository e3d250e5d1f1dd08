"""``npystore convert``: Zarr v3 stores equal to their sources, chunking, compressors, S3,
and resuming after a real interruption (SIGINT and SIGKILL of a subprocess).

Oracles: numpy.load (npy, npz), scipy.io.loadmat (MAT v5), the data given to hdf5storage
(MAT v7.3), and the read-only store npystore.open_store serves for the same file (hierarchy,
attributes, values).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp
import zarr
from zarr.core.dtype import parse_data_type

import npystore
from npystore.tools import cli, convert
from npystore.tools.convert import plan as convert_plan

MANIFEST = convert.MANIFEST_KEY


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["convert", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def is_partial(path: Path) -> bool:
    return path.name.endswith(".partial")


def chunk_files(root: Path) -> dict[str, tuple[int, int]]:
    """Every chunk file of a local store: relative path -> (inode, mtime_ns). Not chunks:
    zarr.json, the manifest, and a ``.partial`` chunk a killed writer left behind."""
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and path.name != "zarr.json" and rel != MANIFEST and not is_partial(path):
            st = path.stat()
            out[rel] = (st.st_ino, st.st_mtime_ns)
    return out


def assert_same_tree(got: zarr.Group, src: str, **open_kw: Any) -> None:
    """``got`` holds what npystore.open_store serves for ``src``: nodes, attributes, values."""
    ref = zarr.open_group(npystore.open_store(src, **open_kw), mode="r")
    ref_nodes = dict(ref.members(max_depth=None))
    got_nodes = dict(got.members(max_depth=None))
    assert sorted(got_nodes) == sorted(ref_nodes)
    assert got.attrs.asdict() == ref.attrs.asdict()
    for path, node in ref_nodes.items():
        other = got_nodes[path]
        assert type(other) is type(node), path
        assert other.attrs.asdict() == node.attrs.asdict(), path
        if isinstance(node, zarr.Array):
            assert (other.shape, other.dtype) == (node.shape, node.dtype), path
            names = (other.metadata.dimension_names, node.metadata.dimension_names)
            assert names[0] == (names[1] or None), path  # zarr stores () as None
            np.testing.assert_array_equal(other[...], node[...], err_msg=path)


# ------------------------------------------------------------------------------ npy


NPY_CASES = {
    "c2d": (np.arange(600.0).reshape(60, 10), "7", (7, 10)),
    "f3d": (np.asfortranarray(np.arange(120, dtype=">i4").reshape(4, 5, 6)), "2,-1,4", (2, 5, 4)),
    "scalar": (np.array(3.5, dtype="<f4"), "5", ()),
    "empty": (np.zeros((0, 5), dtype="<i2"), "3", (1, 5)),
    "bool": (np.arange(50) % 3 == 0, "100", (50,)),
    "complex": (np.arange(20).reshape(4, 5) * (1 - 2j), "3,2", (3, 2)),
    "unicode": (np.array(["a", "bcd", "", "xyzw"]), "3", (3,)),
    "record": (
        np.array(
            [(1.5, [1, 2], b"ab"), (-2.0, [3, 4], b"c")],
            dtype=[("x", ">f8"), ("y", "<i2", (2,)), ("s", "S2")],
        ),
        "1",
        (1,),
    ),
}


@pytest.mark.parametrize("case", NPY_CASES)
def test_npy(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    arr, spec, chunks = NPY_CASES[case]
    src = tmp_path / f"{case}.npy"
    np.save(src, arr)
    out = tmp_path / "out.zarr"
    code, stdout, err = run(capsys, str(src), str(out), "--chunks", spec, "--no-progress")
    assert code == 0, err
    group = zarr.open_group(out, mode="r")
    z = group[case]
    assert (z.shape, z.chunks) == (arr.shape, chunks)
    np.testing.assert_array_equal(z[...], np.load(src))
    assert z.dtype == (arr.dtype if arr.dtype.names else arr.dtype.newbyteorder("="))
    assert group.attrs["npystore"] == {"source": str(src), "format": "npy"}
    grid = [-(-n // c) for n, c in zip(arr.shape, chunks, strict=True)]
    assert f"{int(np.prod(grid))} chunks ({int(np.prod(grid))} written now, 0 before)" in stdout
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["complete"] is True
    assert manifest["source"]["size"] == src.stat().st_size


def test_npy_name_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "data.NPY"
    np.save(src, np.arange(10))
    src = src.with_suffix(".NPY.npy")  # np.save appends .npy
    code, _, err = run(capsys, str(src), str(tmp_path / "a.zarr"), "--name", "x", "--no-progress")
    assert code == 0, err
    assert list(zarr.open_group(tmp_path / "a.zarr", mode="r").array_keys()) == ["x"]
    assert run(capsys, str(src), str(tmp_path / "b.zarr"), "--no-progress")[0] == 0
    assert list(zarr.open_group(tmp_path / "b.zarr", mode="r").array_keys()) == ["data.NPY"]
    npz = tmp_path / "z.npz"
    np.savez(npz, a=np.arange(3))
    code, _, err = run(capsys, str(npz), str(tmp_path / "c.zarr"), "--name", "x")
    assert code == 1
    assert "--name applies to .npy sources only" in err
    assert str(npz) in err
    code, _, err = run(capsys, str(src), str(tmp_path / "d.zarr"), "--chunks", "data.NPY=1,2")
    assert code == 1
    assert "2 lengths, but the array has shape (10,)" in err
    code, _, err = run(capsys, str(src), str(tmp_path / "e.zarr"), "--chunks", "0")
    assert code == 1
    assert "axis 0 length 0" in err
    code, _, err = run(capsys, str(src), str(tmp_path / "f.zarr"), "--chunks", "lots")
    assert code == 1
    assert "expected a size" in err
    code, _, err = run(capsys, str(npz), str(tmp_path / "g.zarr"), "--chunks", "b=2")
    assert code == 1
    assert "chunks given for ['b'], the arrays are ['a']" in err
    code, _, err = run(capsys, str(src), str(tmp_path / "h.zarr"), "--compressor", "none",
                       "--level", "3")  # fmt: skip
    assert code == 1
    assert "level 3 given with compressor 'none'" in err
    code, _, err = run(capsys, str(src), str(tmp_path / "i.zarr"), "--level", "99")
    assert code == 1
    assert "zstd level 99: expected 1..22" in err
    code, _, err = run(capsys, str(src), str(tmp_path / "k.zarr"), "--workers", "0")
    assert code == 2
    assert "'0' is not a positive integer" in err
    code, _, err = run(capsys, str(tmp_path / "missing.npy"), str(tmp_path / "j.zarr"))
    assert code == 1
    assert "missing.npy: no such file or object" in err


def test_default_chunks_are_the_dask_chunks_capped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "a.npy"
    np.save(src, np.arange(200_000, dtype="<f8").reshape(20_000, 10))  # 1.6 MB
    with dask.config.set({"array.chunk-size": "256KiB"}):
        assert run(capsys, str(src), str(tmp_path / "d.zarr"), "--no-progress")[0] == 0
        want = npystore.open_npy(str(src)).chunks
    z = zarr.open_group(tmp_path / "d.zarr", mode="r")["a"]
    assert z.chunks == tuple(c[0] for c in want)
    assert z.chunks[0] < 20_000
    monkeypatch.setattr(convert_plan, "DEFAULT_CHUNK_LIMIT", 64 * 1024)  # the cap wins over dask's
    assert run(capsys, str(src), str(tmp_path / "c.zarr"), "--no-progress")[0] == 0
    z = zarr.open_group(tmp_path / "c.zarr", mode="r")["a"]
    assert z.chunks[1] == 10
    assert 6000 < z.chunks[0] * 80 <= 64 * 1024
    assert (
        run(capsys, str(src), str(tmp_path / "s.zarr"), "--chunks", "16KiB", "--no-progress")[0]
        == 0
    )
    z = zarr.open_group(tmp_path / "s.zarr", mode="r")["a"]
    assert z.chunks[1] == 10
    assert 1000 < z.chunks[0] * 80 <= 16 * 1024
    np.testing.assert_array_equal(z[...], np.load(src))


# ------------------------------------------------------------------------------ npz


def npz_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "f8": rng.random((70, 30)),
        "be_i2": rng.integers(-9, 9, (40, 3)).astype(">i2"),
        "fortran": np.asfortranarray(rng.random((9, 8, 7)).astype("<f4")),
        "mask": rng.random(333) > 0.5,
        "c8": (rng.random(50) + 1j).astype("<c8"),
        "text": np.array(["alpha", "b", "gamma"]),
        "dates": np.arange("2024-01", "2024-07", dtype="datetime64[M]"),
        "rec": np.zeros(5, dtype=[("a", ">f8"), ("b", "<u2", (3,))]),
        "0d": np.array(7, dtype="<u8"),
        "dir/with space": np.arange(4),
    }


# the oracle (open_store's metadata of the "<U5" member) warns that zarr's string type has no
# v3 spec; convert itself reports it as one line (asserted below)
@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
@pytest.mark.parametrize(
    ("saver", "compressor", "codec"),
    [
        ("savez", "zstd", {"name": "zstd", "configuration": {"level": 3, "checksum": False}}),
        ("savez_compressed", "blosc", None),
        ("savez_compressed", "gzip", {"name": "gzip", "configuration": {"level": 5}}),
        ("savez", "none", None),
    ],
)
def test_npz(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], saver: str, compressor: str, codec: Any
) -> None:
    arrays = npz_arrays()
    src = tmp_path / "a.npz"
    getattr(np, saver)(src, **arrays)
    out = tmp_path / "o.zarr"
    code, _, err = run(capsys, str(src), str(out), "--chunks", "16", "--chunks", "fortran=2,3",
                       "--compressor", compressor, "--no-progress")  # fmt: skip
    assert code == 0, err
    group = zarr.open_group(out, mode="r")
    for key, want in arrays.items():
        z = group[npystore.faces.tree.node_name(key)]
        np.testing.assert_array_equal(z[...], want, err_msg=key)
        assert z.attrs["npystore"]["key"] == key
    assert group["f8"].chunks == (16, 30)
    assert group["fortran"].chunks == (2, 3, 7)
    compressors = list(group["f8"].metadata.to_dict()["codecs"][1:])
    if compressor == "none":
        assert compressors == []
    elif compressor == "blosc":
        assert compressors[0]["name"] == "blosc"
        assert compressors[0]["configuration"]["clevel"] == 5
    else:
        assert compressors == [codec]
    assert_same_tree(group, str(src))
    # zarr 3.1 warns that its fixed-length string type has no v3 spec (zarr 3.4 does not):
    # convert reports zarr's warnings on one line each
    with warnings.catch_warnings(record=True) as zarr_warned:
        warnings.simplefilter("always")
        parse_data_type(np.dtype("<U5"), zarr_format=3).to_json(zarr_format=3)
    assert ("UTF32" in err) is bool(zarr_warned)
    assert "Traceback" not in err
    assert "v3_unstable_dtype_warning" not in err


def test_npz_skips_what_zarr_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "a.npz"
    objects = np.array([{"a": 1}, None], dtype=object)
    np.savez(src, ok=np.arange(5), objects=objects, nothing=np.zeros(3, dtype=[]))
    out = tmp_path / "o.zarr"
    code, stdout, err = run(capsys, str(src), str(out), "--no-progress")
    assert code == 0, err
    assert "skipping 'objects.npy': object array" in err
    assert "skipping 'nothing': no Zarr data type" in err
    assert "zero-size items" in err
    assert stdout.strip().endswith("2 skipped")
    group = zarr.open_group(out, mode="r")
    assert list(group.array_keys()) == ["ok"]
    np.testing.assert_array_equal(group["ok"][...], np.arange(5))
    assert sorted(group.attrs["npystore"]["skipped"]) == ["nothing", "objects.npy"]


# ------------------------------------------------------------------------------ MATLAB


MAT_DATA: dict[str, Any] = {
    "x": np.arange(600.0).reshape(20, 30),
    "i16": np.arange(-50, 50, dtype=np.int16).reshape(10, 10),
    "z": np.array([[1 + 2j, 3, -1j]]),
    "flag": np.array([[True, False, True]]),
    "s": {"a": np.arange(3.0), "name": "hello", "inner": {"deep": np.float64(1.5)}},
    "c": np.array([1.0, "two", np.eye(2)], dtype=object),
    "txt": "hi there",
    "rows": np.array(["abc", "def"]),
}


def test_mat_v5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.mat"
    sio.savemat(src, {**MAT_DATA, "sp": sp.random(30, 20, density=0.1, random_state=1,
                                                  format="csc")}, do_compression=True)  # fmt: skip
    out = tmp_path / "o.zarr"
    code, _, err = run(capsys, str(src), str(out), "--chunks", "4", "--no-progress")
    assert code == 0, err
    group = zarr.open_group(out, mode="r")
    ref = sio.loadmat(src)
    classes = {"x": "double", "i16": "int16", "z": "double", "flag": "logical"}
    for name, matlab_class in classes.items():
        np.testing.assert_array_equal(group[name][...], ref[name], err_msg=name)
        assert group[name].attrs["matlab_class"] == matlab_class
    assert group["x"].chunks == (4, 30)
    np.testing.assert_array_equal(group["s/a"][...], ref["s"]["a"][0, 0])
    assert group["s/name"].attrs["matlab_text"] == "hello"
    assert "".join(map(chr, group["txt"][...].ravel())) == "hi there"
    assert group["s"].attrs["matlab_fields"] == ["a", "name", "inner"]
    jc, ir, data = (group[f"sp/{p}"][...] for p in ("jc", "ir", "data"))
    csc = sp.csc_matrix((data[: jc[-1]], ir[: jc[-1]], jc), shape=(30, 20))
    np.testing.assert_array_equal(csc.toarray(), ref["sp"].toarray())
    assert_same_tree(group, str(src))


def test_mat_v73(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    src = tmp_path / "m73.mat"
    data = {**MAT_DATA, "big": np.random.default_rng(1).random((300, 200))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hdf5storage.savemat(str(src), data, format="7.3", matlab_compatible=True)
    out = tmp_path / "o.zarr"
    code, _, err = run(capsys, str(src), str(out), "--compressor", "gzip", "--no-progress")
    assert code == 0, err
    group = zarr.open_group(out, mode="r")
    for name in ("x", "i16", "z", "flag", "big"):
        np.testing.assert_array_equal(group[name][...], data[name], err_msg=name)
    np.testing.assert_array_equal(group["c/2"][...], np.eye(2))
    assert group.attrs["npystore"]["mat_version"] == "7.3"
    assert_same_tree(group, str(src))


# ------------------------------------------------------------------------------ S3


def test_s3_source_and_destination(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local = tmp_path / "a.npz"
    arrays = {"a": np.arange(3000, dtype=">i4").reshape(100, 30), "b": np.linspace(0, 1, 11)}
    np.savez_compressed(local, **arrays)
    url = s3.put_file(local, "in/a.npz")
    out = s3.url("out/a.zarr")
    so = s3.storage_options
    opts = ["-s", "key=testing", "-s", "secret=testing",
            "-s", f"client_kwargs.endpoint_url={so['client_kwargs']['endpoint_url']}",
            "-s", "client_kwargs.region_name=us-east-1",
            "-s", "npystore_read_budget=60"]  # npystore's, kept from the output's  # fmt: skip
    code, _, err = run(capsys, url, out, "--chunks", "30", "--no-progress", *opts)
    assert code == 0, err
    group = zarr.open_group(out, mode="r", storage_options=so)
    for key, want in arrays.items():
        np.testing.assert_array_equal(group[key][...], want)
    assert group["a"].chunks == (30, 30)
    assert s3.fs.exists(f"{out}/{MANIFEST}")
    assert s3.fs.exists(f"{out}/a/c/3/0")
    code, stdout, _ = run(capsys, url, out, "--chunks", "30", "--no-progress", *opts)
    assert code == 0
    assert "(0 written now, 5 before)" in stdout
    manifest = json.loads(s3.fs.cat_file(f"{out}/{MANIFEST}"))
    assert manifest["source"]["url"] == url
    assert manifest["source"]["fields"]


def test_s3_interrupt_exits_at_once_and_resumes(
    s3: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during an S3 conversion: the command exits without waiting for the reads and
    writes in flight (it took ~6 s), and the rerun completes from the manifest."""
    local = tmp_path / "a.npy"
    arr = np.arange(400_000, dtype="<f8").reshape(4000, 100)
    np.save(local, arr)
    url = s3.put_file(local, "in/big.npy")
    out = s3.url("out/big.zarr")
    so = json.dumps(s3.storage_options)
    env = dict(os.environ, **{convert.STOP_AFTER_ENV: "20"})  # SIGINT itself after 20 writes
    args = [sys.executable, "-m", "npystore", "convert", url, out, "--chunks", "40",
            "--workers", "8", "--no-progress", "--storage-options-json", so]  # fmt: skip
    proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    said = ""
    for line in proc.stderr:
        said += line
        if "interrupted" in line:
            break
    start = time.perf_counter()
    code = proc.wait(timeout=60)
    waited = time.perf_counter() - start
    assert "interrupted; run the same command again to resume" in said, said
    assert code == 130
    assert waited < 2.0  # hang guard: no wait for the pool's reads and writes in flight
    manifest = json.loads(s3.fs.cat_file(f"{out}/{MANIFEST}"))
    assert manifest["complete"] is False
    code, stdout, err = run(capsys, url, out, "--chunks", "40", "--no-progress",
                            "--storage-options-json", so)  # fmt: skip
    assert code == 0, err
    assert "done already, resuming" in err
    assert "100 chunks (" in stdout
    group = zarr.open_group(out, mode="r", storage_options=s3.storage_options)
    np.testing.assert_array_equal(group["big"][...], arr)


# ------------------------------------------------------------------------------ resume


def interrupted_run(src: Path, out: Path, how: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **{convert.STOP_AFTER_ENV: how})
    return subprocess.run(
        [sys.executable, "-m", "npystore", "convert", str(src), str(out), "--chunks", "100",
         "--workers", "2", "--checkpoint-interval", "0"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(("how", "returncode"), [("5", 130), ("7:KILL", -9)])
def test_resume_after_interruption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, returncode: int
) -> None:
    src = tmp_path / "big.npy"
    arr = np.arange(30_000, dtype="<f8")
    np.save(src, arr)
    out = tmp_path / "o.zarr"
    done = interrupted_run(src, out, how)
    assert done.returncode == returncode, done.stderr
    if returncode == 130:
        assert "interrupted; run the same command again to resume" in done.stderr
        assert "Traceback" not in done.stderr
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["complete"] is False
    recorded = {i for start, stop in manifest["done"]["big"] for i in range(start, stop)}
    before = chunk_files(out)
    stored = {int(k.split("/")[-1]) for k in before}
    assert len(recorded) >= int(how.partition(":")[0])
    assert recorded <= stored < set(range(300))
    # what zarr leaves when a writer is killed mid-chunk (SIGKILL sometimes lands there)
    missing = min(set(range(300)) - stored)
    (out / "big" / "c" / f"{missing}.{'ab' * 16}.partial").write_bytes(b"half a chunk")
    code, stdout, err = run(capsys, str(src), str(out), "--chunks", "100", "--no-progress")
    assert code == 0, err
    assert f"({len(stored)} done already, resuming)" in err
    assert f"300 chunks ({300 - len(stored)} written now, {len(stored)} before)" in stdout
    after = chunk_files(out)
    assert len(after) == 300
    assert not any(is_partial(p) for p in out.rglob("*"))  # a killed write's leftover is gone
    assert {k: after[k] for k in before} == before  # not one done chunk was rewritten
    np.testing.assert_array_equal(zarr.open_group(out, mode="r")["big"][...], arr)
    assert json.loads((out / MANIFEST).read_text())["done"] == {"big": [[0, 300]]}


def test_refuses_to_mix_sources_or_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "a.npy"
    np.save(src, np.arange(100.0))
    out = tmp_path / "o.zarr"
    assert run(capsys, str(src), str(out), "--chunks", "10", "--no-progress")[0] == 0
    files = chunk_files(out)
    code, _, err = run(capsys, str(src), str(out), "--chunks", "10", "--no-progress")
    assert code == 0
    assert "already complete" in err
    assert chunk_files(out) == files
    code, _, err = run(capsys, str(src), str(out), "--chunks", "20")
    assert code == 1
    assert "holds a finished conversion that differs" in err
    assert "arrays differ: ['a']" in err
    assert "--overwrite" in err
    assert str(src) in err
    code, _, err = run(capsys, str(src), str(out), "--chunks", "10", "--level", "9")
    assert code == 1
    assert "options were {'compressor': 'zstd', 'level': 3}" in err
    np.save(src, np.arange(100.0) + 1)  # the same size, a new mtime
    code, _, err = run(capsys, str(src), str(out), "--chunks", "10")
    assert code == 1
    assert "the source was" in err
    code, _, err = run(capsys, str(src), str(out), "--chunks", "20", "--overwrite", "--no-progress")
    assert code == 0, err
    z = zarr.open_group(out, mode="r")["a"]
    assert z.chunks == (20,)
    np.testing.assert_array_equal(z[...], np.arange(100.0) + 1)
    assert not set(chunk_files(out)) & {"a/c/9"}  # the old grid is gone
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    code, _, err = run(capsys, str(src), str(other))
    assert code == 1
    assert "not empty and holds no .npystore-convert.json" in err
    assert (other / "keep.txt").read_text() == "mine"


def test_progress_bar_and_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "a.npy"
    np.save(src, np.zeros((64, 1024)))  # 512 KiB
    code, stdout, err = run(capsys, str(src), str(tmp_path / "o.zarr"), "--chunks", "8")
    assert code == 0
    assert f"{src} -> {tmp_path / 'o.zarr'}: 1 arrays, 512.0 KiB in 8 chunks" in err
    # stderr is not a terminal here: plain lines (no carriage returns), the last at 100%
    assert "\r" not in err
    assert f"convert {src}: 512.0 KiB of 512.0 KiB (100%), 8 of 8 chunks, " in err
    assert len([line for line in err.splitlines() if line.startswith("convert ")]) <= 2
    assert stdout.startswith(f"{tmp_path / 'o.zarr'}: 1 arrays")
