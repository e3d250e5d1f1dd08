""".npz archives: members equal numpy.load's, stored and deflated, local and S3; counts; hostile."""

from __future__ import annotations

import io
import pickle
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest

import npystore
from npystore import FormatError, UnsupportedError
from npystore.fetch.cache import ENTRY_MAGIC
from npystore.read import memo

from npy_cases import DTYPES, ORDERS, SHAPES, assert_same, make_array

pytestmark = pytest.mark.filterwarnings("ignore:Stored array in format:UserWarning")


def _matrix_members(names: list[str]) -> dict[str, Any]:
    members = {}
    for name in names:
        for shape in SHAPES:
            for order in ORDERS:
                key = f"{name}|{'x'.join(map(str, shape)) or 'scalar'}|{order}"
                members[key] = make_array(DTYPES[name], shape, order, seed=len(key))
    return members


def _save(path: Path, members: dict[str, Any], compressed: bool) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (np.savez_compressed if compressed else np.savez)(path, **members)
    return path


def _check_archive(url: str, path: Path, **kw: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = np.load(path)
        z = npystore.open_npz(url, **kw)
        assert z.files == expected.files
        headers = z.headers
        for key in expected.files:
            want = expected[key]
            assert headers[key].shape == want.shape
            assert headers[key].dtype == want.dtype
            assert_same(z[key].compute(), want)
            assert_same(z.load(key), want)
            assert z.load(key).flags.f_contiguous == want.flags.f_contiguous


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_matrix_local(tmp_path: Path, compressed: bool) -> None:
    members = _matrix_members(list(DTYPES))
    path = _save(tmp_path / "m.npz", members, compressed)
    _check_archive(str(path), path)


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_matrix_s3(tmp_path: Path, s3: Any, compressed: bool) -> None:
    members = _matrix_members(list(DTYPES))
    path = _save(tmp_path / "m.npz", members, compressed)
    url = s3.put_file(path, "m.npz")
    _check_archive(url, path, storage_options=s3.storage_options)


def test_large_deflated_member_random_access(tmp_path: Path) -> None:
    pytest.importorskip("rapidgzip")
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.standard_normal(6_000_000)).astype("<f8")  # 48 MB, needs an index
    y = np.asfortranarray(rng.integers(0, 9, (300, 2000)).astype(">i4"))
    path = tmp_path / "big.npz"
    np.savez_compressed(path, x=x, y=y)
    z = npystore.open_npz(str(path), chunks=1_000_000)
    assert z.archive.index_slot(z.archive.names[0]).get() is None
    np.testing.assert_array_equal(z["x"][5_999_000:].compute(), x[5_999_000:])
    # a slice of a member with no index builds the index first
    slot = z.archive.index_slot("x.npy")
    assert slot is not None
    assert slot.get() is not None
    assert len(slot.get().checkpoints) > 3
    np.testing.assert_array_equal(z["x"].compute(), x)
    np.testing.assert_array_equal(z["x"][::1000].compute(), x[::1000])
    got = z["y"][10:20, 100:300].compute()
    np.testing.assert_array_equal(got, y[10:20, 100:300])
    assert got.dtype == np.dtype(">i4")
    # the index travels with the pickled graph
    again = pickle.loads(pickle.dumps(z["x"][3_000_000:3_000_010]))
    np.testing.assert_array_equal(again.compute(), x[3_000_000:3_000_010])


def test_build_index_explicitly_and_threads_share_it(tmp_path: Path) -> None:
    pytest.importorskip("rapidgzip")
    x = np.cumsum(np.random.default_rng(1).standard_normal(4_000_000)).astype("<f4")
    path = tmp_path / "i.npz"
    np.savez_compressed(path, x=x, small=np.arange(5))
    z = npystore.open_npz(str(path), chunks=250_000)
    z.build_index()
    slot = z.archive.index_slot("x.npy")
    assert slot is not None
    built = slot.get()
    assert built is not None
    with dask.config.set(scheduler="threads", num_workers=8):
        np.testing.assert_array_equal(z["x"].compute(), x)
    assert slot.get() is built


def test_numpy_compatibility(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    with zipfile.ZipFile(path, "w") as zf:
        buf = io.BytesIO()
        np.save(buf, np.arange(4))
        zf.writestr("a.npy", buf.getvalue())
        zf.writestr("notes.txt", b"not an array")
        zf.writestr("sub/b.npy", buf.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    expected = np.load(path)
    z = npystore.open_npz(str(path))
    assert z.files == expected.files == ["a", "notes.txt", "sub/b"]
    assert z["notes.txt"] == expected["notes.txt"] == b"not an array"
    np.testing.assert_array_equal(z["a.npy"].compute(), expected["a"])
    np.testing.assert_array_equal(z["sub/b"].compute(), expected["sub/b"])
    assert "a" in z
    assert "a.npy" in z
    assert "zzz" not in z
    assert len(z) == 3
    assert list(z) == z.files
    with pytest.raises(KeyError, match="zzz"):
        z["zzz"]
    assert set(z.headers) == {"a", "sub/b"}
    assert npystore.open_npz(str(path))["a"].name == z["a"].name
    with npystore.open_npz(str(path)) as again:
        assert again["a"].shape == (4,)


def test_object_members_need_allow_pickle(tmp_path: Path) -> None:
    path = tmp_path / "o.npz"
    obj = np.array([{"k": 1}, None], dtype=object)
    np.savez_compressed(path, o=obj, n=np.arange(3))
    z = npystore.open_npz(str(path))
    np.testing.assert_array_equal(z["n"].compute(), np.arange(3))
    with pytest.raises(UnsupportedError, match="allow_pickle"):
        z["o"]
    got = npystore.open_npz(str(path), allow_pickle=True)["o"].compute()
    assert list(got) == list(obj)


def test_open_sniffs_npz(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    with path.open("wb") as f:
        np.savez(f, a=np.arange(3))
    z = npystore.open(str(path), chunks=2)
    assert isinstance(z, npystore.NpzFile)
    assert z["a"].chunks == ((2, 1),)


# -- S3 request counts ---------------------------------------------------------------------


def test_open_300_members_in_at_most_4_requests(tmp_path: Path, s3: Any) -> None:
    members = {f"m{i:03d}": np.full(20_000, i, dtype="<f8") for i in range(300)}
    path = tmp_path / "many.npz"
    np.savez(path, **members)
    assert path.stat().st_size > 40 * 2**20  # far larger than the tail read
    url = s3.put_file(path, "many.npz")
    with s3.counter.measure() as m:
        z = npystore.open_npz(url, storage_options=s3.storage_options)
    assert len(z) == 300
    assert m.requests <= 4
    with s3.counter.measure() as m:
        headers = z.headers
    assert len(headers) == 300
    assert all(h.shape == (20_000,) for h in headers.values())
    # one range per member, all in one concurrent batch (members inside the tail read that
    # opened the archive cost nothing)
    assert 290 <= m.gets <= 300
    assert m.bytes < 300 * 1024
    with s3.counter.measure() as m:
        got = z["m123"][100:200].compute()
    np.testing.assert_array_equal(got, np.full(100, 123, dtype="<f8"))
    assert m.gets == 1
    assert m.bytes == 800


def test_stored_slice_moves_only_its_chunk(tmp_path: Path, s3: Any) -> None:
    x = np.arange(2_000_000, dtype="<i8")
    path = tmp_path / "s.npz"
    np.savez(path, x=x, y=np.zeros(10))
    url = s3.put_file(path, "s.npz")
    z = npystore.open_npz(url, chunks=100_000, storage_options=s3.storage_options)
    assert set(z.headers) == {"x", "y"}
    chunk_bytes = 100_000 * 8
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(z["x"][250_000:260_000].compute(), x[250_000:260_000])
    assert m.bytes <= chunk_bytes
    assert m.gets == 1


def test_deflated_slice_after_index_moves_under_half(tmp_path: Path, s3: Any) -> None:
    pytest.importorskip("rapidgzip")
    x = np.cumsum(np.random.default_rng(2).standard_normal(5_000_000)).astype("<f8")
    path = tmp_path / "d.npz"
    np.savez_compressed(path, x=x)
    url = s3.put_file(path, "d.npz")
    z = npystore.open_npz(url, storage_options=s3.storage_options)
    info = z.info("x")
    assert info.compressed
    with s3.counter.measure() as m:
        z.build_index("x")
    assert m.bytes <= 1.01 * info.entry.compressed_size
    with s3.counter.measure() as m:
        got = z["x"][4_990_000:4_995_000].compute()
    np.testing.assert_array_equal(got, x[4_990_000:4_995_000])
    assert m.gets == 0  # the index pass kept the compressed bytes (npystore.read.memo)
    memo.forget()  # as another process with this index would: one checkpoint range
    with s3.counter.measure() as m:
        got = z["x"][4_990_000:4_995_000].compute()
    np.testing.assert_array_equal(got, x[4_990_000:4_995_000])
    assert m.bytes < info.entry.compressed_size / 2
    # one checkpoint range, in requests of at most memo.PART bytes, all in flight together
    assert m.gets == -(-m.bytes // memo.PART) == m.max_in_flight


# -- hostile archives ----------------------------------------------------------------------


def _npy(arr: Any) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_header_declaring_more_than_the_member_holds(tmp_path: Path, method: int) -> None:
    blob = _npy(np.zeros(10, dtype="<f8"))
    header = blob[:128].replace(b"(10,)", b"(10000000000,)"[: len(b"(10,)")])
    # a header claiming 10**12 elements, padded to the same length
    text = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
    header = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + text.ljust(117).encode() + b"\n"
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        zf.writestr("x.npy", header + blob[128:])
    z = npystore.open_npz(str(path))
    with pytest.raises(FormatError, match=r"bomb\.npz:x\.npy.*declares"):
        z["x"]


@pytest.mark.parametrize("name", ["../evil.npy", "/abs.npy", "a/../../b.npy"])
def test_unsafe_member_names(tmp_path: Path, name: str) -> None:
    path = tmp_path / "names.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(name, _npy(np.arange(3)))
    with pytest.raises(FormatError, match=r"names\.npz"):
        npystore.open_npz(str(path))


def _read_everything(url: str) -> None:
    z = npystore.open_npz(url)
    for key in z:
        value = z[key]
        if not isinstance(value, bytes):
            value.compute()


def test_truncated_archives(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    np.savez_compressed(path, a=np.arange(1000), b=np.ones((20, 20)))
    blob = path.read_bytes()
    for cut in range(0, len(blob), max(1, len(blob) // 97)):
        bad = tmp_path / "cut.npz"
        bad.write_bytes(blob[:cut])
        with pytest.raises(FormatError, match=r"cut\.npz"):
            _read_everything(str(bad))


def test_corrupted_member_data_is_format_error(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    np.savez_compressed(path, a=np.cumsum(np.ones(50_000)))
    blob = bytearray(path.read_bytes())
    blob[400:600] = bytes(200)
    path.write_bytes(bytes(blob))
    z = npystore.open_npz(str(path))
    with pytest.raises(FormatError, match=r"c\.npz:a\.npy"):
        z.load("a")


def test_mutations_raise_only_npystore_errors(tmp_path: Path) -> None:
    path = tmp_path / "base.npz"
    np.savez_compressed(path, a=np.arange(300), b=np.eye(4))
    base = path.read_bytes()
    rng = np.random.default_rng(0)
    for i in range(300):
        blob = bytearray(base)
        for _ in range(int(rng.integers(1, 5))):
            pos = int(rng.integers(0, len(blob)))
            blob[pos] = int(rng.integers(0, 256))
        bad = tmp_path / f"mut{i}.npz"
        bad.write_bytes(bytes(blob))
        try:
            _read_everything(str(bad))
        except (FormatError, UnsupportedError) as exc:
            message = str(exc)
        else:
            message = f"mut{i}.npz"
        assert f"mut{i}.npz" in message


def test_300_member_headers_with_30ms_latency(tmp_path: Path, s3: Any) -> None:
    """Round trips dominate on object stores: members' headers are fetched concurrently.

    moto spends ~8 ms of CPU per request on this machine, serially, so the test measures what
    30 ms of added latency per request costs: about one round trip per connection-pool's
    worth of requests (s3fs opens 10 connections by default), not one per member (which would
    add 300 x 30 ms = 9 s). With a real store, opening plus headers take under 1.5 s.
    """
    import asyncio
    import time

    members = {f"m{i:03d}": np.full((50, 40), i, dtype="<f4") for i in range(300)}
    path = tmp_path / "lat.npz"
    np.savez(path, **members)
    url = s3.put_file(path, "lat.npz")
    client = s3.fs.s3
    delay = 0.0

    async def latency(**_: Any) -> None:  # awaited by aiobotocore before each request
        await asyncio.sleep(delay)

    def open_and_describe() -> tuple[float, int]:
        with s3.counter.measure() as m:
            t0 = time.perf_counter()
            z = npystore.open_npz(url, storage_options=s3.storage_options)
            shapes = {k: h.shape for k, h in z.headers.items()}
            elapsed = time.perf_counter() - t0
        assert len(shapes) == 300
        assert set(shapes.values()) == {(50, 40)}
        return elapsed, m.requests

    client.meta.events.register("before-send.s3", latency, unique_id="test-latency")
    try:
        base, requests = open_and_describe()
        delay = 0.030
        slow, _ = open_and_describe()
    finally:
        client.meta.events.unregister("before-send.s3", unique_id="test-latency")
    added = slow - base
    assert requests > 250
    assert added < 1.5, f"30 ms latency added {added:.2f} s over {requests} requests"


def test_stored_member_over_4gib_sparse(tmp_path: Path) -> None:
    """A ZIP64 member larger than 4 GiB, written by hand as a sparse file: its last elements
    are read through 64-bit sizes and offsets (numpy's own header, zeros in the hole)."""
    from test_zipdir import write_zip64  # the hand-written ZIP64 writer of the zipdir tests

    n = 540_000_000  # 4.32 GB of float64
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (n,)}
    )
    tail = np.arange(1.0, 5.0).tobytes()
    path = tmp_path / "huge.npz"
    with path.open("wb") as f:
        # member = npy header + a hole of zeros + 4 known float64s, by seeking in write_zip64
        write_zip64(f, [("small.npy", _npy(np.arange(3))), ("huge.npy", 8 * n + 128)])
    with path.open("r+b") as f:
        z = npystore.open_npz(str(path))
        info = z.info("huge")
        assert info.entry.uncompressed_size > 2**32
        f.seek(info.data_offset)
        f.write(header.getvalue())
        f.seek(info.data_offset + 128 + 8 * n - len(tail))
        f.write(tail)
    z = npystore.open_npz(str(path))
    assert z.headers["huge"].shape == (n,)
    np.testing.assert_array_equal(z["huge"][-4:].compute(), [1.0, 2.0, 3.0, 4.0])
    assert z["huge"][123_456_789].compute() == 0.0
    np.testing.assert_array_equal(z["small"].compute(), np.arange(3))


def test_index_cache_is_reused_across_sessions(tmp_path: Path, s3: Any) -> None:
    pytest.importorskip("rapidgzip")
    x = np.cumsum(np.random.default_rng(3).standard_normal(4_000_000)).astype("<f8")
    path = tmp_path / "cached.npz"
    np.savez_compressed(path, x=x)
    url = s3.put_file(path, "cached.npz")
    cache = tmp_path / "index-cache"
    opts = s3.storage_options
    first = npystore.open_npz(url, storage_options=opts, index_cache=str(cache))
    first.build_index()
    assert len(list(cache.iterdir())) == 1
    second = npystore.open_npz(url, storage_options=opts, index_cache=str(cache))
    compressed = second.info("x").entry.compressed_size
    with s3.counter.measure() as m:
        got = second["x"][-100:].compute()
    np.testing.assert_array_equal(got, x[-100:])
    assert m.bytes < compressed / 2  # the cached index was used: no pass over the member
    # a damaged cache entry is rebuilt, not trusted
    (entry,) = cache.iterdir()
    entry.write_bytes(b"garbage")
    third = npystore.open_npz(url, storage_options=opts, index_cache=str(cache))
    np.testing.assert_array_equal(third["x"][-10:].compute(), x[-10:])  # needs the index
    assert entry.read_bytes().startswith(ENTRY_MAGIC)  # a checksummed entry again
