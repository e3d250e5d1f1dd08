"""Datasets of many files: lists, globs, folders (``to_npy_stack`` both ways), manifests,
checks, graph size, and files replaced between open and compute (issue 27)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import npystore
from npystore.errors import ConsistencyError, FormatError, UnsupportedError
from npystore.fetch.many import natural_key
from npystore.formats.npy_write import header_bytes
from npystore.formats.stackinfo import parse_stack_info


def _shards(folder: Path, lengths: list[int], *, prefix: str = "emb_", cols: int = 3) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, n in enumerate(lengths):
        x = (np.arange(n * cols, dtype="<f4").reshape(n, cols) + 1000 * i).astype("<f4")
        np.save(folder / f"{prefix}{i}.npy", x)
        out.append(x)
    return out


def test_natural_order() -> None:
    names = ["emb_10.npy", "emb_2.npy", "emb_1.npy", "emb_1b.npy", "a.npy", "emb_02.npy"]
    assert sorted(names, key=natural_key) == [
        "a.npy", "emb_1.npy", "emb_1b.npy", "emb_02.npy", "emb_2.npy", "emb_10.npy",
    ]  # fmt: skip


def test_glob_concatenates_in_natural_order(tmp_path: Path) -> None:
    xs = _shards(tmp_path, [2, 3, 1, 4, 2, 2, 3, 1, 2, 5, 2, 1])  # emb_0 ... emb_11
    a = npystore.open_npy(str(tmp_path / "emb_*.npy"))
    want = np.concatenate(xs)
    assert a.shape == want.shape
    assert a.dtype == want.dtype
    # chunks never span two files
    assert a.chunks[0] == (2, 3, 1, 4, 2, 2, 3, 1, 2, 5, 2, 1)
    np.testing.assert_array_equal(a.compute(), want)
    np.testing.assert_array_equal(a[3:20:3, 1].compute(), want[3:20:3, 1])
    np.testing.assert_array_equal(a[::-2].compute(), want[::-2])
    np.testing.assert_array_equal(npystore.load(str(tmp_path / "emb_*.npy")), want)


def test_list_keeps_its_order_and_stack(tmp_path: Path) -> None:
    xs = _shards(tmp_path, [3, 3, 3])
    urls = [str(tmp_path / f"emb_{i}.npy") for i in (2, 0, 1)]
    np.testing.assert_array_equal(
        npystore.open_npy(urls).compute(), np.concatenate([xs[2], xs[0], xs[1]])
    )
    s = npystore.open_npy(urls, stack=True, axis=1)
    assert s.chunks[1] == (1, 1, 1)
    np.testing.assert_array_equal(s.compute(), np.stack([xs[2], xs[0], xs[1]], axis=1))
    np.testing.assert_array_equal(npystore.load(urls, stack=True), np.stack([xs[2], xs[0], xs[1]]))
    # concatenation along another axis, one chunk per file
    c = npystore.open_npy(urls, axis=1)
    np.testing.assert_array_equal(c.compute(), np.concatenate([xs[2], xs[0], xs[1]], axis=1))
    np.testing.assert_array_equal(
        npystore.load(urls, axis=-1), np.concatenate([xs[2], xs[0], xs[1]], axis=1)
    )


def test_fortran_and_big_endian_shards_read_exactly(tmp_path: Path) -> None:
    xs = [
        np.asfortranarray((np.arange(12).reshape(4, 3) * (i + 1)).astype(">i4")) for i in range(3)
    ]
    for i, x in enumerate(xs):
        np.save(tmp_path / f"f{i}.npy", x)
    got = npystore.load(str(tmp_path / "f*.npy"))
    assert got.dtype == np.dtype(">i4")
    np.testing.assert_array_equal(got, np.concatenate(xs))
    np.testing.assert_array_equal(
        npystore.open_npy(str(tmp_path / "f*.npy"), chunks=2).compute(), np.concatenate(xs)
    )


def test_chunks_split_large_shards_but_never_span_files(tmp_path: Path) -> None:
    _shards(tmp_path, [10, 7])
    a = npystore.open_npy(str(tmp_path / "*.npy"), chunks=4)
    assert a.chunks[0] == (4, 4, 2, 4, 3)
    b = npystore.open_npy(str(tmp_path / "*.npy"), chunks=((6, 6, 5), (3,)))
    assert b.chunks[0] == (6, 4, 2, 5)  # explicit sizes cut again at the file boundary


def test_mismatches_name_the_first_file_that_differs(tmp_path: Path) -> None:
    _shards(tmp_path, [2, 2, 2])
    np.save(tmp_path / "emb_3.npy", np.zeros((2, 4), "<f4"))
    np.save(tmp_path / "emb_4.npy", np.zeros((2, 5), "<f4"))
    with pytest.raises(FormatError, match=r"emb_3\.npy: shape \(2, 4\) does not fit.*emb_0"):
        npystore.open_npy(str(tmp_path / "*.npy"))
    (tmp_path / "emb_3.npy").unlink()
    (tmp_path / "emb_4.npy").unlink()
    np.save(tmp_path / "emb_5.npy", np.zeros((2, 3), ">f4"))
    with pytest.raises(FormatError, match=r"emb_5\.npy: dtype >f4 differs from <f4"):
        npystore.load(str(tmp_path / "*.npy"))
    np.save(tmp_path / "other.npy", np.zeros((3, 3), "<f4"))
    with pytest.raises(FormatError, match=r"other\.npy: shape \(3, 3\).*the same shape$"):
        npystore.open_npy([str(tmp_path / "emb_0.npy"), str(tmp_path / "other.npy")], stack=True)


def test_empty_glob_and_empty_folder_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no file matches the pattern") as err:
        npystore.open_npy(str(tmp_path / "nothing_*.npy"))
    assert err.value.filename == str(tmp_path / "nothing_*.npy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"holds no \.npy file"):
        npystore.open_npy(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="empty list"):
        npystore.open_npy([])
    with pytest.raises(TypeError, match="many files"):
        npystore.open_npy(str(tmp_path / "x.npy"), stack=True)


def test_to_npy_stack_folder_both_ways(tmp_path: Path) -> None:
    x = da.from_array(np.arange(70, dtype="<i8").reshape(7, 10), chunks=(7, 4))
    da.to_npy_stack(tmp_path / "dask", x, axis=1)  # written along axis 1
    a = npystore.open_npy(str(tmp_path / "dask"))  # axis from info, never unpickled
    assert a.chunks == ((7,), (4, 4, 2))
    np.testing.assert_array_equal(a.compute(), x.compute())
    with pytest.raises(ValueError, match="along axis 1"):
        npystore.open_npy(str(tmp_path / "dask"), axis=0)
    npystore.save_stack(str(tmp_path / "ours"), x, axis=1)
    for name in ("0.npy", "1.npy", "2.npy", "info"):  # byte for byte dask's
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "dask" / name).read_bytes()
    np.testing.assert_array_equal(da.from_npy_stack(tmp_path / "ours").compute(), x.compute())
    # a shorter stack written over a longer one leaves no stale file behind
    npystore.save_stack(str(tmp_path / "ours"), x[:, :5], axis=1)
    assert sorted(os.listdir(tmp_path / "ours")) == ["0.npy", "1.npy", "info"]
    np.testing.assert_array_equal(npystore.load(str(tmp_path / "ours")), x[:, :5].compute())


def test_to_npy_stack_info_is_never_unpickled(tmp_path: Path) -> None:
    folder = tmp_path / "evil"
    folder.mkdir()
    np.save(folder / "0.npy", np.arange(3))
    np.save(folder / "1.npy", np.arange(3))

    class Boom:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {tmp_path}/pwned",))

    (folder / "info").write_bytes(pickle.dumps({"chunks": ((3, 3),), "dtype": Boom(), "axis": 0}))
    np.testing.assert_array_equal(npystore.load(str(folder)), np.r_[np.arange(3), np.arange(3)])
    assert not (tmp_path / "pwned").exists()
    assert parse_stack_info((folder / "info").read_bytes()).axis == 0
    # info disagreeing with the files (a shard replaced): refused
    np.save(folder / "1.npy", np.arange(4))
    with pytest.raises(FormatError, match="info file says"):
        npystore.open_npy(str(folder))
    (folder / "1.npy").unlink()
    np.save(folder / "2.npy", np.arange(3))
    with pytest.raises(FileNotFoundError, match=r"misses 1\.npy"):
        npystore.open_npy(str(folder))


def test_replaced_shard_between_open_and_compute(tmp_path: Path) -> None:
    _shards(tmp_path, [4, 4, 4])
    a = npystore.open_npy(str(tmp_path / "*.npy"))
    target = tmp_path / "emb_1.npy"
    np.save(target, np.full((4, 3), -1, "<f4"))  # same size, new bytes
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(ConsistencyError):
        a.compute()


@pytest.mark.slow  # ~4 s on an idle machine: 10,000 files written, opened, pickled
def test_many_tiny_shards_keep_the_graph_small(tmp_path: Path) -> None:
    n = 10_000
    head = header_bytes(np.dtype("<i4"), (2,), False)
    for i in range(n):  # written raw: numpy.save's bytes, 20x faster than np.save
        with open(tmp_path / f"t_{i}.npy", "wb") as f:
            f.write(head + np.array([i, -i], "<i4").tobytes())
    a = npystore.open_npy(str(tmp_path / "t_*.npy"))
    assert a.shape == (2 * n,)
    assert a.numblocks == (n,)
    graph = dict(a.__dask_graph__())
    assert len(graph) == n + 1  # one task per file, and the sharded array once
    total = len(pickle.dumps(graph))
    array = next(v for k, v in graph.items() if isinstance(k, str))
    per_file = len(pickle.dumps(array)) / n
    per_task = (total - len(pickle.dumps(array))) / n
    assert per_task <= 100, per_task  # the getter and its slices
    assert per_file <= 300, per_file  # the path, its identity, its layout: once per file
    np.testing.assert_array_equal(a[2 * 9_999 :].compute(), [9_999, -9_999])
    np.testing.assert_array_equal(a[::5_000].compute(), [0, 2_500, 5_000, 7_500])


def test_manifest_reopens_without_touching_the_shards(tmp_path: Path) -> None:
    xs = _shards(tmp_path / "d", [3, 5, 2])
    out = tmp_path / "m.json"
    manifest = npystore.to_manifest(str(tmp_path / "d" / "*.npy"), str(out))
    assert [s["offset"] for s in manifest["shards"]] == [128, 128, 128]
    a = npystore.open_npy(str(out))
    np.testing.assert_array_equal(a.compute(), np.concatenate(xs))
    np.testing.assert_array_equal(npystore.load(str(out)), np.concatenate(xs))
    # irregular lengths: kerchunk says why and names the way out
    with pytest.raises(UnsupportedError, match="to_manifest"):
        npystore.to_kerchunk(str(tmp_path / "d" / "*.npy"))
    # a shard changed since the manifest was written: its first read refuses it
    target = tmp_path / "d" / "emb_2.npy"
    np.save(target, np.zeros((2, 3), "<f4"))
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    b = npystore.open_npy(str(out))
    np.testing.assert_array_equal(b[:8].compute(), np.concatenate(xs)[:8])
    with pytest.raises(ConsistencyError):
        b[8:].compute()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "npystore-manifest", "version": 1, "shards": []}))
    with pytest.raises(FormatError, match=r"malformed|no shard"):
        npystore.open_npy(str(bad))


def test_kerchunk_of_equal_shards_with_an_edge(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    fsspec = pytest.importorskip("fsspec")
    xs = _shards(tmp_path, [4, 4, 4, 3])
    refs = npystore.to_kerchunk(str(tmp_path / "*.npy"))
    assert refs["refs"]["data/0.0"][1:] == [128, 48]
    assert isinstance(refs["refs"]["data/3.0"], str)  # the edge shard, inlined padded
    fs = fsspec.filesystem("reference", fo=refs)
    z = zarr.open_array(fs.get_mapper("data"), mode="r", zarr_format=2)
    np.testing.assert_array_equal(z[:], np.concatenate(xs))
    # npystore reopens the references with each shard's identity checked
    path = tmp_path / "refs.json"
    path.write_text(json.dumps(refs))
    np.testing.assert_array_equal(npystore.open_npy(str(path)).compute(), np.concatenate(xs))


def test_s3_glob_opens_in_one_listing_and_one_get_per_file(s3) -> None:
    xs = []
    for i in range(12):
        x = np.arange(6, dtype="<i2").reshape(2, 3) + i
        xs.append(x)
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"npystore_many_{os.getpid()}.npy"
        np.save(path, x)
        s3.put_file(path, f"emb/part_{i}.npy")
    opts = s3.storage_options
    with s3.counter.measure() as m:
        a = npystore.open_npy(s3.url("emb/*.npy"), storage_options=s3.storage_options)
    assert m.by_operation.get("ListObjectsV2", 0) == 1
    assert m.gets == 12
    assert m.max_in_flight > 1  # the opening GETs went out together
    np.testing.assert_array_equal(a.compute(), np.concatenate(xs))
    with s3.counter.measure() as m:
        got = npystore.load(s3.url("emb/"), storage_options=s3.storage_options)
    np.testing.assert_array_equal(got, np.concatenate(xs))
    assert m.gets == 12  # small files: data in the opening answer
    # a manifest on S3: one GET reopens the dataset
    npystore.to_manifest(s3.url("emb/*.npy"), s3.url("emb.json"), storage_options=opts)
    with s3.counter.measure() as m:
        c = npystore.open_npy(s3.url("emb.json"), storage_options=opts)
    assert m.gets == 1
    np.testing.assert_array_equal(c.compute(), np.concatenate(xs))
    # the folder without its trailing "/", and a replaced object
    b = npystore.open_npy(s3.url("emb"), storage_options=s3.storage_options)
    s3.put_bytes(b"\x93NUMPY replaced", "emb/part_3.npy")
    with pytest.raises(ConsistencyError):
        b.compute()
    with pytest.raises(ConsistencyError):  # the manifest's identity too
        c.compute()
    with pytest.raises(FileNotFoundError, match="no file matches"):
        npystore.open_npy(s3.url("emb/x_*.npy"), storage_options=s3.storage_options)
    # save_stack to S3, read back by npystore (and its info as dask wrote it)
    y = da.from_array(np.arange(40, dtype="<i4").reshape(10, 4), chunks=(3, 4))
    npystore.save_stack(s3.url("stack"), y, storage_options=opts)
    assert sorted(k.rsplit("/", 1)[-1] for k in s3.fs.ls(f"{s3.bucket}/stack")) == [
        "0.npy", "1.npy", "2.npy", "3.npy", "info",
    ]  # fmt: skip
    np.testing.assert_array_equal(npystore.load(s3.url("stack/"), storage_options=opts), y)


def test_npz_member_and_mat_variable_across_files(tmp_path: Path) -> None:
    scipy_io = pytest.importorskip("scipy.io")
    xs, ys = [], []
    for i in range(5):
        x, y = np.arange(i + 2) * 1.5, np.eye(3) * i
        xs.append(x)
        ys.append(y)
        save = np.savez_compressed if i % 2 else np.savez
        save(tmp_path / f"t_{i}.npz", x=x, y=y)
        scipy_io.savemat(tmp_path / f"m_{i}.mat", {"x": x[:, None], "y": y}, do_compression=i % 2)
    z = npystore.open_npz(str(tmp_path / "t_*.npz"))
    assert z.files == ["x", "y"]
    np.testing.assert_array_equal(z["x"].compute(), np.concatenate(xs))
    np.testing.assert_array_equal(z.load("y"), np.concatenate(ys))
    stacked = npystore.open_npz(str(tmp_path / "t_*.npz"), stack=True)["y"]
    np.testing.assert_array_equal(stacked.compute(), np.stack(ys))
    m = npystore.open_mat(str(tmp_path / "m_*.mat"))
    np.testing.assert_array_equal(m["x"].compute(), np.concatenate(xs)[:, None])
    np.testing.assert_array_equal(m["y"].compute(), np.concatenate(ys))
    np.savez(tmp_path / "t_9.npz", x=np.arange(3), z=np.arange(3))
    with pytest.raises(KeyError, match=r"'y' is not a file in the archive .*t_9\.npz"):
        npystore.open_npz(str(tmp_path / "t_*.npz"))["y"]


def test_cli_info_and_convert_take_a_glob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from npystore.tools.cli import main

    xs = _shards(tmp_path / "d", [3, 4, 3])
    pattern = str(tmp_path / "d" / "*.npy")
    assert main(["info", pattern, "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["files"] == 3
    assert facts["shape"] == [10, 3]
    assert facts["dtype"] == "<f4"
    assert facts["nbytes"] == 120
    assert main(["info", pattern]) == 0
    assert "3 .npy files" in capsys.readouterr().out
    out = tmp_path / "all.npy"
    assert main(["convert", pattern, str(out)]) == 0
    np.testing.assert_array_equal(np.load(out), np.concatenate(xs))


def test_query_signer_signs_as_botocore() -> None:
    import datetime
    from urllib.parse import urlsplit

    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import ReadOnlyCredentials

    from npystore.fetch.s3many import QuerySigner

    now = datetime.datetime(2026, 11, 28, 9, 1, 2, tzinfo=datetime.UTC)
    urls = [
        "http://127.0.0.1:9000/bucket/a%20b/c~d%C3%A9.npy",
        "https://bucket.s3.amazonaws.com/k%2Bey.npy?versionId=abc",
        "https://s3.amazonaws.com:443/b/x",
    ]
    for token in (None, "tok/en+=x"):
        creds = ReadOnlyCredentials("AKID", "se/cr+et", token)
        signer = QuerySigner(creds, "eu-west-1", 900, now)
        for url in urls:
            p = urlsplit(url)
            ours = signer.sign(p.scheme, p.netloc, p.path, p.query)
            auth = S3SigV4QueryAuth(creds, "s3", "eu-west-1", expires=900)
            request = AWSRequest(method="GET", url=url)
            request.context["timestamp"] = signer.amz_date
            auth._modify_request_before_signing(request)
            canonical = auth.canonical_request(request)
            signature = auth.signature(auth.string_to_sign(request, canonical), request)
            assert ours == f"{request.url}&X-Amz-Signature={signature}"


def test_s3_opening_requests_go_direct_for_odd_keys(s3, tmp_path: Path) -> None:
    from npystore.fetch.many import expand, open_all

    keys = ["odd dir/é 1.npy", "odd dir/a+b=c&d.npy", "odd dir/~tilde (2).npy"]
    xs = []
    for i, key in enumerate(keys):
        x = np.full((2, 2), i, "<u1")
        np.save(tmp_path / "x.npy", x)
        s3.put_file(tmp_path / "x.npy", key)
        xs.append(x)
    urls = [s3.url(k) for k in keys]
    readers = open_all(expand(urls, s3.storage_options).objects, s3.storage_options, head=4096)
    assert all(r.transport._signed is not None for r in readers)  # presigned, derived URLs
    with s3.counter.measure() as m:
        got = npystore.open_npy(urls, storage_options=s3.storage_options).compute()
    np.testing.assert_array_equal(got, np.concatenate(xs))
    assert m.errors == 0
    # the same keys found by a glob (one listing, its keys decoded)
    with s3.counter.measure() as m:
        found = npystore.open_npy(s3.url("odd dir/*.npy"), storage_options=s3.storage_options)
    assert m.by_operation.get("ListObjectsV2", 0) == 1
    from npystore.fetch.many import _s3_glob

    listed = _s3_glob(s3.fs, f"{s3.bucket}/odd dir/*.npy")  # listed over the direct session
    assert listed is not None
    assert sorted(listed) == sorted(f"{s3.bucket}/{k}" for k in keys)
    order = sorted(range(3), key=lambda i: natural_key(f"{s3.bucket}/{keys[i]}"))
    np.testing.assert_array_equal(found.compute(), np.concatenate([xs[i] for i in order]))


def test_xarray_dataset_of_many_files(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    xs = _shards(tmp_path, [3, 4, 3, 2, 2, 2, 2, 2, 2, 2, 5])  # emb_0 ... emb_10
    ds = xr.open_dataset(str(tmp_path / "emb_*.npy"), engine="npystore", chunks={})
    assert ds["data"].dims == ("dim_0", "dim_1")
    assert ds["data"].chunks[0] == (3, 4, 3, 2, 2, 2, 2, 2, 2, 2, 5)
    np.testing.assert_array_equal(ds["data"].values, np.concatenate(xs))
    named = xr.open_dataset(str(tmp_path), engine="npystore", dims={"data": ["row", "col"]})
    np.testing.assert_array_equal(named["data"][5:9, 1].values, np.concatenate(xs)[5:9, 1])
    # many .npz files with open_mfdataset: only the variables along the concatenated
    # dimension are joined, the others taken from the first file
    for i, x in enumerate(xs[:3]):
        np.savez(tmp_path / f"z_{i}.npz", x=x, label=np.arange(2))
    paths = [str(tmp_path / f"z_{i}.npz") for i in range(3)]
    m = xr.open_mfdataset(paths, engine="npystore", combine="nested", concat_dim="x_dim_0",
                          data_vars="minimal", coords="minimal", compat="override")  # fmt: skip
    assert m["label"].dims == ("label_dim_0",)
    np.testing.assert_array_equal(m["x"].values, np.concatenate(xs[:3]))


def test_question_marks_and_brackets_alone_name_one_file(tmp_path: Path) -> None:
    np.save(tmp_path / "a[1].npy", np.arange(3))
    np.save(tmp_path / "a1.npy", np.arange(5))
    assert npystore.open_npy(str(tmp_path / "a[1].npy")).shape == (3,)  # a name, not a class
    assert npystore.open_npy(str(tmp_path / "a*.npy")).shape == (8,)


def test_count_progress_draws_on_a_terminal_only() -> None:
    import io

    from npystore.tools.progress import CountProgress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    pytest.importorskip("tqdm")
    out = Tty()
    with CountProgress("open files", minimum=10, file=out) as progress:
        assert progress.start(5) is None  # too few to be worth a bar
        done = progress.start(20)
        assert done is not None
        for _ in range(20):
            done(1)
    assert "open files" in out.getvalue()
    assert "20/20" in out.getvalue()
    assert CountProgress("x", minimum=1, file=io.StringIO()).start(100) is None  # no terminal


def test_info_file_beside_other_npy_files(tmp_path: Path) -> None:
    (tmp_path / "info").write_text("not dask's")  # an unrelated info: a plain folder
    np.save(tmp_path / "a_2.npy", np.arange(2))
    np.save(tmp_path / "a_10.npy", np.arange(3))
    assert npystore.load(str(tmp_path)).tolist() == [0, 1, 0, 1, 2]
    np.save(tmp_path / "0.npy", np.arange(4))  # numbered shards beside other files
    with pytest.raises(FormatError, match=r"also holds .*a_10\.npy"):
        npystore.open_npy(str(tmp_path))


def test_open_file_objects_are_one_file_not_a_dataset(tmp_path: Path) -> None:
    """An open file object is one archive (the many-files dispatch asks only of paths)."""
    import io

    import scipy.io

    buf = io.BytesIO()
    np.savez(buf, x=np.arange(5))
    buf.seek(0)
    np.testing.assert_array_equal(npystore.open_npz(buf)["x"].compute(), np.arange(5))
    mat = io.BytesIO()
    scipy.io.savemat(mat, {"v": np.arange(3.0)})
    mat.seek(0)
    np.testing.assert_array_equal(np.asarray(npystore.open_mat(mat)["v"]).ravel(), np.arange(3.0))
