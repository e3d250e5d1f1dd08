"""Opening an S3 object costs one request: a ranged GET that also carries its identity."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import npystore
from npystore.api import LOAD_HEAD
from npystore.errors import ConsistencyError, FormatError
from npystore.fetch import REMOTE_PART_SIZE, open_reader


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_open_is_one_get_and_no_head(s3: Any) -> None:
    url = s3.put_bytes(_npy_bytes(np.arange(10_000.0)), "one.npy")
    with s3.counter.measure() as m:
        reader = open_reader(url, s3.storage_options, head=128)
    assert (m.gets, m.heads) == (1, 0)
    assert m.ranges == [(0, 127)]
    assert reader.size == 80_128
    assert reader.head == _npy_bytes(np.arange(10_000.0))[:128]
    fields = dict(reader.identity.fields)
    info = s3.fs.info(url)
    assert fields["ETag"] == str(info["ETag"])  # the same identity HeadObject reports
    with s3.counter.measure() as m:  # inside the head: no request
        assert reader.read(6, 10) == reader.head[6:10]
        assert reader.read_many([(0, 8), (100, 128)]) == [reader.head[:8], reader.head[100:]]
    assert m.requests == 0


def test_data_reads_never_come_from_the_head(s3: Any) -> None:
    """A tiny file fits in the head, but computing it asks S3 (pinned) all the same."""
    url = s3.put_bytes(b"0123456789", "tiny.bin")
    reader = open_reader(url, s3.storage_options, head=4096)
    assert reader.head == b"0123456789"
    s3.put_bytes(b"abcdefghij", "tiny.bin")
    assert reader.read(0, 4) == b"0123"  # the snapshot taken at open
    with pytest.raises(ConsistencyError, match=r"tiny\.bin"):
        reader.readinto_many([(0, memoryview(bytearray(4)))])


def test_empty_object_opens_with_its_identity(s3: Any) -> None:
    url = s3.put_bytes(b"", "empty.npy")
    reader = open_reader(url, s3.storage_options, head=128)
    assert reader.size == 0
    assert reader.head == b""
    with pytest.raises(FormatError, match=r"empty\.npy"):
        npystore.open(url, storage_options=s3.storage_options)


def test_missing_object_is_file_not_found(s3: Any) -> None:
    with pytest.raises(FileNotFoundError):
        open_reader(s3.url("nothing-here.npy"), s3.storage_options, head=128)


def test_mat73_listing_is_one_request(s3: Any, tmp_path: Path) -> None:
    """MATLAB puts the superblock, root group and object headers first: one GET lists them."""
    path = tmp_path / "two.mat"
    with h5py.File(path, "w", userblock_size=512) as h:
        for name, value in (("a", np.arange(6.0).reshape(2, 3)), ("b", np.ones((4, 1)))):
            d = h.create_dataset(name, data=value)
            d.attrs["MATLAB_class"] = np.bytes_("double")
    with path.open("r+b") as f:
        f.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(116) + b"\0" * 8 + b"\x00\x02IM")
    url = s3.put_file(path, "two.mat")
    with s3.counter.measure() as m:
        mat = npystore.open_mat(url, storage_options=s3.storage_options)
        info = mat.variables
    assert sorted(info) == ["a", "b"]
    assert (m.gets, m.heads) == (1, 0)


@pytest.mark.parametrize("members", [3, 400])
def test_open_npz_is_one_suffix_get(s3: Any, tmp_path: Path, members: int) -> None:
    """The archive's tail comes with the identity: listing an archive is one request."""
    path = tmp_path / "z.npz"
    arrays = {f"a{i}": np.full((64,), i, dtype="<f8") for i in range(members)}
    np.savez(path, **arrays)
    url = s3.put_file(path, "z.npz")
    size = path.stat().st_size
    with s3.counter.measure() as m:
        z = npystore.open_npz(url, storage_options=s3.storage_options)
        files = z.files
    assert files == list(arrays)
    assert (m.gets, m.heads) == (1, 0)
    # the last min(size, 256 KiB) bytes, asked for as a suffix range
    assert m.bytes == min(size, 256 * 1024)
    reader = z.archive.reader
    assert reader.size == size
    assert reader.tail == path.read_bytes()[-m.bytes :]
    np.testing.assert_array_equal(z[f"a{members - 1}"].compute(), arrays[f"a{members - 1}"])


def test_load_of_a_small_file_is_one_get(s3: Any) -> None:
    """npystore.load reads the file now: its opening GET asks for 1 MiB, header and data."""
    arr = np.arange(100_000.0).reshape(1000, 100)
    assert len(_npy_bytes(arr)) <= LOAD_HEAD
    data = _npy_bytes(arr)
    url = s3.put_bytes(data, "small.npy")
    with s3.counter.measure() as m:
        got = npystore.load(url, storage_options=s3.storage_options)
    np.testing.assert_array_equal(got, arr)
    assert got.flags.writeable
    assert (m.gets, m.heads, m.bytes) == (1, 0, len(data))


def test_load_of_a_larger_file_reads_the_rest_once(s3: Any) -> None:
    arr = np.random.default_rng(3).random(1_200_000)  # 9.6 MB: the head, then 2 parts
    data = _npy_bytes(arr)
    url = s3.put_bytes(data, "larger.npy")
    with s3.counter.measure() as m:
        got = npystore.load(url, storage_options=s3.storage_options)
    np.testing.assert_array_equal(got, arr)
    assert m.bytes == len(data)  # no byte twice
    part = LOAD_HEAD + REMOTE_PART_SIZE
    assert sorted(m.ranges) == [(0, LOAD_HEAD - 1), (LOAD_HEAD, part - 1), (part, len(data) - 1)]


def test_lazy_arrays_never_read_data_from_the_opening_bytes(s3: Any) -> None:
    arr = np.arange(1000.0)
    url = s3.put_bytes(_npy_bytes(arr), "lazy.npy")
    a = npystore.open_npy(url, storage_options=s3.storage_options)
    with s3.counter.measure() as m:
        np.testing.assert_array_equal(a.compute(), arr)
    assert m.gets == 1  # the data, pinned, although it would fit in a head


@pytest.mark.parametrize("size", [3000, 600_000])
def test_a_refused_suffix_range_is_asked_again_as_a_prefix(
    s3: Any, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """S3 answers a suffix longer than the object with the whole object; rclone and others
    refuse it (416). The open then asks for a prefix of the same length: all of a smaller
    object (which is its tail), else a bounded prefix that serves as no tail."""
    from botocore.exceptions import ClientError

    from npystore.fetch import opening

    data = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8).tobytes()
    url = s3.put_bytes(data, "small.bin")
    real = opening.get_object
    asked: list[str] = []

    async def refusing(fs: Any, bucket: str, key: str, byte_range: str, *a: Any, **k: Any) -> Any:
        asked.append(byte_range)
        if byte_range.startswith("bytes=-"):  # as rclone does for any suffix past the start
            raise ClientError({"Error": {"Code": "InvalidRange"}}, "GetObject")
        return await real(fs, bucket, key, byte_range, *a, **k)

    monkeypatch.setattr(opening, "get_object", refusing)
    with s3.counter.measure() as m:
        reader = open_reader(url, s3.storage_options, tail=262_144)
    assert asked == ["bytes=-262144", "bytes=0-262143"]
    assert (m.gets, m.heads) == (1, 0)  # the refused one never left (this test's server)
    assert reader.size == size
    assert reader.tail == (data if size <= 262_144 else b"")
    assert reader.read_many([(size - 100, size)]) == [data[-100:]]


def test_a_local_open_reads_its_first_bytes_with_its_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local file opens as an S3 object does: its identity (``fstat``) and its first bytes
    from one descriptor. A small MAT-file is then opened and loaded with that one ``open``
    (before: a ``stat``, then one open for the prefix and one for the tags)."""
    import os

    import scipy.io

    path = tmp_path / "a.mat"
    scipy.io.savemat(path, {"x": np.arange(6.0), "c": np.array([[1, "ab"]], object)},
                     do_compression=True)  # fmt: skip
    reader = open_reader(str(path), head=64)
    assert reader.head == path.read_bytes()[:64]
    assert reader.size == path.stat().st_size
    opens: list[str] = []
    real_open = os.open

    def counted(file: Any, *args: Any, **kwargs: Any) -> int:
        opens.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    with npystore.open_mat(str(path)) as m:
        values = {k: m.load(k) for k in m}
    assert opens == [str(path)]
    assert values["x"].tolist() == [list(np.arange(6.0))]
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        open_reader(str(tmp_path), head=64)
    with pytest.raises(FileNotFoundError, match=r"nothing\.npy"):
        open_reader(str(tmp_path / "nothing.npy"), head=64)
    # as on S3: the opening bytes are a snapshot, data is read from the pinned file
    np.save(tmp_path / "b.npy", np.arange(4))
    small = open_reader(str(tmp_path / "b.npy"))
    np.save(tmp_path / "b.npy", np.arange(4)[::-1].copy())  # the same size, a new version
    assert small.read(0, 6) == b"\x93NUMPY"
    with pytest.raises(ConsistencyError, match=r"b\.npy"):
        small.readinto_many([(128, memoryview(bytearray(32)))])
