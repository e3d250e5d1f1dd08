"""Limits: each one refuses with a clear error naming the keyword, and raising it works.

Header size (``max_header_size``), member count (``max_members``), MATLAB nesting depth
(``max_depth``, scipy.io.savemat and hand-built v7.3 files) and HDF5 reference cycles, and
chunks per dask graph (``max_chunks``). Oracles: numpy.load, scipy.io.loadmat, h5py.
"""

from __future__ import annotations

import struct
import time
import zipfile
from pathlib import Path
from typing import Any

import dask
import h5py
import numpy as np
import pytest
import scipy.io as sio

import npystore
from npystore import FormatError, UnsupportedError
from npystore.faces.dask import DEFAULT_MAX_CHUNKS
from npystore.fetch import RangeReader
from npystore.files.zip import DEFAULT_MAX_MEMBERS
from npystore.formats import npy

# ----------------------------------------------------------------- header size


def npy_header(descr: str, shape: tuple[int, ...], header_len: int, version: int = 1) -> bytes:
    """Preamble and header of a .npy file; the header (the dict literal padded with spaces
    and ended by a newline, as numpy writes it) is ``header_len`` bytes."""
    raw = repr({"descr": descr, "fortran_order": False, "shape": shape})
    text = raw.ljust(header_len - 1).encode("latin1") + b"\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", header_len) + text
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", header_len) + text


def npy_with_header(arr: np.ndarray, header_len: int) -> bytes:
    """A version 2.0 .npy file of ``arr`` with a ``header_len``-byte header."""
    return npy_header(arr.dtype.str, arr.shape, header_len, version=2) + arr.tobytes()


def test_npy_header_size_limit_and_raising_it(tmp_path: Path) -> None:
    arr = np.arange(10.0)
    path = tmp_path / "long.npy"
    path.write_bytes(npy_with_header(arr, 4084))  # data at byte 4096
    url = str(path)
    np.testing.assert_array_equal(np.load(path), arr)
    for call in (npystore.open_npy, npystore.open, npystore.load, npystore.read_header):
        with pytest.raises(FormatError, match=r"long\.npy.*4084 bytes.*max_header_size=1000"):
            call(url, max_header_size=1000)
    with pytest.raises(FormatError, match="max_header_size=1000"):
        npystore.open_store(url, max_header_size=1000)
    np.testing.assert_array_equal(npystore.open_npy(url, max_header_size=4084).compute(), arr)
    np.testing.assert_array_equal(npystore.load(url, max_header_size=4096), arr)
    assert npystore.read_header(url, max_header_size=4084).data_offset == 4096


def test_hostile_header_length_is_refused_before_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "hostile.npy"
    path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**32 - 1) + b"{" * 100)
    limit = npy.DEFAULT_MAX_HEADER_SIZE
    with pytest.raises(FormatError, match=rf"declares {2**32 - 1} bytes.*max_header_size={limit}"):
        npystore.open_npy(str(path))


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_member_header_size_limit(tmp_path: Path, compression: int) -> None:
    arr = np.arange(7, dtype="<i4")
    path = tmp_path / "m.npz"
    with zipfile.ZipFile(path, "w", compression) as zf:
        zf.writestr("x.npy", npy_with_header(arr, 2036))
        zf.writestr("y.npy", npy_with_header(arr * 2, 116))
    z = npystore.open_npz(str(path), max_header_size=1000)
    np.testing.assert_array_equal(z["y"].compute(), arr * 2)  # members are checked on access
    with pytest.raises(FormatError, match=r"m\.npz:x\.npy.*2036 bytes.*max_header_size=1000"):
        z["x"]
    z = npystore.open(str(path), max_header_size=2036)
    np.testing.assert_array_equal(z["x"].compute(), np.load(path)["x"])


def test_deflated_member_header_above_the_default_limit_reads_when_raised(tmp_path: Path) -> None:
    """A header longer than the 1 MiB default, inside a deflated member: refused by
    default, read in full (not cut at the default) when the limit is raised."""
    arr = np.arange(5.0)
    header_len = npy.DEFAULT_MAX_HEADER_SIZE + 2**20 - 12
    path = tmp_path / "big.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", npy_with_header(arr, header_len))
    with pytest.raises(FormatError, match=rf"{header_len} bytes.*max_header_size="):
        npystore.open_npz(str(path))["x"]
    z = npystore.open_npz(str(path), max_header_size=32 * 2**20)
    np.testing.assert_array_equal(z["x"].compute(), arr)
    assert z.headers["x"].data_offset == 12 + header_len


# --------------------------------------------------------------- member count


_EOCD = struct.Struct("<4s4H2IH")
_LOCATOR = struct.Struct("<4sIQI")
_ZIP64_RECORD = struct.Struct("<4sQ2H2I4Q")


def zip64_end(cd_offset: int, cd_size: int, entries: int) -> bytes:
    """ZIP64 end record + locator + EOCD (sentinels) for a directory ending where they start."""
    record = _ZIP64_RECORD.pack(
        b"PK\x06\x06", _ZIP64_RECORD.size - 12, 45, 45, 0, 0, entries, entries, cd_size, cd_offset
    )
    locator = _LOCATOR.pack(b"PK\x06\x07", 0, cd_offset + cd_size, 1)
    eocd = _EOCD.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return record + locator + eocd


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    read, read_many = RangeReader.read, RangeReader.read_many

    def spy_read(self: RangeReader, start: int, stop: int) -> bytes:
        seen.append((start, stop))
        return read(self, start, stop)

    def spy_read_many(self: RangeReader, ranges: Any, **kw: Any) -> list[bytes]:
        seen.extend(ranges)
        return read_many(self, ranges, **kw)

    monkeypatch.setattr(RangeReader, "read", spy_read)
    monkeypatch.setattr(RangeReader, "read_many", spy_read_many)
    return seen


def test_member_count_limit_and_raising_it(tmp_path: Path) -> None:
    members = {f"m{i:02d}": np.full(3, i, dtype="<i2") for i in range(12)}
    path = tmp_path / "many.npz"
    np.savez(path, **members)
    url = str(path)
    opens = (npystore.open_npz, npystore.open, npystore.open_store, npystore.to_kerchunk)
    for call in opens:
        with pytest.raises(
            UnsupportedError, match=r"many\.npz: the archive declares 12 members.*max_members=5"
        ):
            call(url, max_members=5)
    z = npystore.open_npz(url, max_members=12)
    assert z.files == list(members)
    np.testing.assert_array_equal(z["m07"].compute(), members["m07"])
    assert len(npystore.open(url, max_members=12)) == 12
    assert DEFAULT_MAX_MEMBERS == 100_000


def test_default_member_limit_is_checked_before_the_directory_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ZIP64 archive declaring 100,001 members over a 4.6 MB directory (a sparse file):
    refused from the end records alone; the directory is never read."""
    entries = DEFAULT_MAX_MEMBERS + 1
    cd_size = 46 * entries
    path = tmp_path / "huge.npz"
    with path.open("wb") as f:
        f.seek(cd_size)  # the directory: a hole of zeros
        f.write(zip64_end(0, cd_size, entries))
    seen = _spy_reads(monkeypatch)
    with pytest.raises(
        UnsupportedError,
        match=rf"huge\.npz: the archive declares {entries} members, more than "
        rf"max_members={DEFAULT_MAX_MEMBERS}; pass max_members={entries}",
    ):
        npystore.open_npz(str(path))
    assert sum(stop - start for start, stop in seen) < 300 * 1024
    assert all(stop <= cd_size or start >= cd_size - 300 * 1024 for start, stop in seen)
    seen.clear()
    # raising the limit lets the directory be read: its zeros are no central headers
    with pytest.raises(FormatError, match=r"entry 0 at offset 0: expected signature"):
        npystore.open_npz(str(path), max_members=entries)
    assert (0, cd_size) in seen


@pytest.mark.parametrize("entries", [3, 2**32, 2**64 - 1])
def test_zip64_count_larger_than_the_directory_is_a_format_error(
    tmp_path: Path, entries: int
) -> None:
    """Each central header takes at least 46 bytes: a count the directory cannot hold is
    malformed, whatever max_members says."""
    path = tmp_path / "short.npz"
    np.savez(path, a=np.arange(4))
    data = path.read_bytes()
    cd_offset = data.rindex(b"PK\x01\x02")  # the one member's central header
    eocd = data.rindex(b"PK\x05\x06")
    cd_size = eocd - cd_offset
    assert 46 <= cd_size < 46 * 3
    path.write_bytes(data[:eocd] + zip64_end(cd_offset, cd_size, entries))
    for limit in (DEFAULT_MAX_MEMBERS, 2**64):
        with pytest.raises(
            FormatError, match=rf"counts {entries} members, too many for {cd_size} bytes"
        ):
            npystore.open_npz(str(path), max_members=limit)


def test_eocd_count_larger_than_the_directory_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "eocd.npz"
    np.savez(path, a=np.arange(4), b=np.arange(3))
    data = bytearray(path.read_bytes())
    eocd = data.rindex(b"PK\x05\x06")
    struct.pack_into("<2H", data, eocd + 8, 900, 900)
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"eocd\.npz: the end record counts 900 members, too"):
        npystore.open(str(path))


# ------------------------------------------------------------ MATLAB nesting


def nested_struct(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_cell(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        cell = np.empty((1, 1), dtype=object)
        cell[0, 0] = value
        value = cell
    return value


def unwrap(value: Any) -> tuple[int, Any]:
    """Follow a chain of one-field structs / 1x1 cells to its numeric leaf (a dask array,
    or a numpy one: small values are read with their container)."""
    depth = 0
    while not hasattr(value, "compute") and not (
        isinstance(value, np.ndarray) and value.dtype != object
    ):
        value = value["a"] if isinstance(value, npystore.MatStruct) else value.flat[0]
        depth += 1
    return depth, np.asarray(value)


@pytest.mark.parametrize("compress", [False, True], ids=["v5", "v5-compressed"])
def test_mat_v5_depth_limit_and_raising_it(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "deep.mat"
    leaf = np.arange(6.0).reshape(2, 3)
    data = {"s": nested_struct(70, leaf), "c": nested_cell(70, leaf), "ok": nested_struct(60, 1.0)}
    sio.savemat(path, data, do_compression=compress)
    m = npystore.open_mat(str(path))
    assert sorted(m) == ["c", "ok", "s"]  # listing reads headers only
    assert unwrap(m["ok"]) == (60, np.ones((1, 1)))
    for name, text in (("s", r"'s'\(1\)\.a"), ("c", r"'c'\{1\}\{1\}")):
        with pytest.raises(FormatError, match=rf"deep\.mat.*{text}.*max_depth=64 levels"):
            m[name]
    oracle = sio.loadmat(path)
    deeper = npystore.open(str(path), max_depth=70)
    for name in ("s", "c"):
        depth, got = unwrap(deeper[name])
        assert depth == 70
        np.testing.assert_array_equal(got, leaf)
    want = oracle["s"]
    for _ in range(70):
        want = want["a"][0, 0]
    np.testing.assert_array_equal(want, leaf)
    with pytest.raises(ValueError, match="max_depth must be 0 to 256, got 300"):
        npystore.open_mat(str(path), max_depth=300)["s"]


def _mat73(path: Path) -> h5py.File:
    return h5py.File(path, "w", userblock_size=512)


def _stamp(path: Path) -> None:
    text = b"MATLAB 7.3 MAT-file, Platform: TEST, Created on: never HDF5 schema 1.00 ."
    with path.open("r+b") as f:
        f.write(text.ljust(116) + b" " * 8 + b"\x00\x02IM")


def _struct_group(parent: h5py.Group, name: str) -> h5py.Group:
    g = parent.create_group(name)
    g.attrs["MATLAB_class"] = np.bytes_("struct")
    fields = np.empty(1, dtype=object)
    fields[0] = np.array([b"a"], dtype="S1")
    g.attrs.create("MATLAB_fields", fields, dtype=h5py.vlen_dtype(np.dtype("S1")))
    return g


def _cell(parent: h5py.Group, name: str, target: Any) -> h5py.Dataset:
    d = parent.create_dataset(name, shape=(1, 1), dtype=h5py.ref_dtype)
    d.attrs["MATLAB_class"] = np.bytes_("cell")
    d[0, 0] = target
    return d


def test_mat_v73_depth_limit_and_raising_it(tmp_path: Path) -> None:
    """v7.3 written with h5py: a struct nested 70 groups deep and a cell chain of 70
    references through #refs#."""
    path = tmp_path / "deep73.mat"
    leaf = np.arange(6.0).reshape(3, 2)  # HDF5 order: MATLAB sees 2x3
    with _mat73(path) as f:
        g = _struct_group(f, "s")
        for _ in range(69):
            g = _struct_group(g, "a")
        d = g.create_dataset("a", data=leaf)
        d.attrs["MATLAB_class"] = np.bytes_("double")
        refs = f.create_group("#refs#")
        d = refs.create_dataset("leaf", data=leaf)
        d.attrs["MATLAB_class"] = np.bytes_("double")
        target = d.ref
        for i in range(69):
            target = _cell(refs, f"c{i}", target).ref
        _cell(f, "c", target)
    _stamp(path)
    with h5py.File(path) as f:
        want = f["s" + "/a" * 70][()].T
    m = npystore.open_mat(str(path))
    assert sorted(m) == ["c", "s"]
    for name in ("s", "c"):
        with pytest.raises(FormatError, match=r"deep73\.mat.*max_depth=64"):
            m[name]
    deeper = npystore.open(str(path), max_depth=80)
    for name in ("s", "c"):
        depth, got = unwrap(deeper[name])
        assert depth == 70
        np.testing.assert_array_equal(got, want)


def test_mat_v73_reference_cycle_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "cycle.mat"
    with _mat73(path) as f:
        c = _cell(f, "c", None)
        c[0, 0] = c.ref
    _stamp(path)
    t0 = time.perf_counter()
    m = npystore.open_mat(str(path), max_depth=256)
    with pytest.raises(FormatError, match=r"cycle\.mat.*cycle"):
        m["c"]
    assert time.perf_counter() - t0 < 2


# ------------------------------------------------------------- chunk count


def test_chunk_count_limit_and_raising_it(tmp_path: Path) -> None:
    arr = np.arange(1000, dtype="<i8").reshape(100, 10)
    path = tmp_path / "c.npy"
    np.save(path, arr)
    url = str(path)
    for spec in ((5, 10), {0: 5}, ((5,) * 20, 10)):
        with pytest.raises(
            UnsupportedError,
            match=r"c\.npy: chunks=.* would split shape \(100, 10\) into 20 chunks .*"
            r"more than max_chunks=19; pass larger chunks",
        ):
            npystore.open_npy(url, chunks=spec, max_chunks=19)
    a = npystore.open_npy(url, chunks=(10, 5), max_chunks=20)  # 10 x 2
    assert a.npartitions == 20
    np.testing.assert_array_equal(a.compute(), arr)
    with pytest.raises(UnsupportedError, match=r"into 40 chunks .*max_chunks=19"):
        npystore.open(url, chunks=5, max_chunks=19)
    with pytest.raises(ValueError, match="max_chunks must be at least 1, got 0"):
        npystore.open_npy(url, max_chunks=0)
    assert DEFAULT_MAX_CHUNKS == 1_000_000


def test_default_chunk_limit_fails_fast_on_huge_specs(tmp_path: Path) -> None:
    """chunks=1 on 2,000,000 elements, and on a hostile empty array of shape (2**62, 0):
    refused by arithmetic before dask expands the spec."""
    path = tmp_path / "two_million.npy"
    np.save(path, np.zeros(2_000_000, dtype=np.uint8))
    t0 = time.perf_counter()
    with pytest.raises(UnsupportedError, match=r"into 2_000_000 chunks.*max_chunks=1_000_000"):
        npystore.open_npy(str(path), chunks=1)
    empty = tmp_path / "empty.npy"
    empty.write_bytes(npy_header("|u1", (2**62, 0), 118))
    assert npystore.open_npy(str(empty)).npartitions == 1  # "auto": one empty chunk
    with pytest.raises(UnsupportedError, match=rf"into {2**62:_} chunks"):
        npystore.open_npy(str(empty), chunks=1)
    assert time.perf_counter() - t0 < 2


def test_auto_chunks_count_exactly_after_normalisation(tmp_path: Path) -> None:
    path = tmp_path / "auto.npy"
    arr = np.arange(1000, dtype="<f8")
    np.save(path, arr)
    with dask.config.set({"array.chunk-size": "80B"}):  # 10 elements per "auto" chunk
        with pytest.raises(UnsupportedError, match=r"chunks='auto' .* into 100 chunks"):
            npystore.open_npy(str(path), max_chunks=99)
        a = npystore.open_npy(str(path), max_chunks=100)
    assert a.npartitions == 100
    np.testing.assert_array_equal(a.compute(), arr)


def test_huge_declared_shape_on_a_tiny_file_is_a_format_error(tmp_path: Path) -> None:
    """shape (2**62,) uint8 over 10 bytes of data: refused from the file size, for every
    entry point, whatever the chunks; no graph is built."""
    path = tmp_path / "liar.npy"
    path.write_bytes(npy_header("|u1", (2**62,), 118) + b"x" * 10)
    url = str(path)
    match = rf"liar\.npy: truncated .npy file: shape \({2**62},\) of uint8 needs {2**62} bytes"
    for chunks in ("auto", 1, -1):
        with pytest.raises(FormatError, match=match):
            npystore.open_npy(url, chunks=chunks)
    for call in (npystore.open, npystore.load, npystore.read_header, npystore.open_store):
        with pytest.raises(FormatError, match=match):
            call(url)
    member = tmp_path / "liar.npz"
    with zipfile.ZipFile(member, "w") as zf:
        zf.writestr("x.npy", path.read_bytes())
    with pytest.raises(FormatError, match=rf"liar\.npz:x\.npy: the npy header declares {2**62}"):
        npystore.open_npz(str(member))["x"]


def test_chunk_limit_on_npz_and_mat_members(tmp_path: Path) -> None:
    arr = np.arange(600.0).reshape(30, 20)
    npz = tmp_path / "z.npz"
    np.savez_compressed(npz, x=arr)
    z = npystore.open_npz(str(npz), chunks=(3, 20), max_chunks=9)
    with pytest.raises(UnsupportedError, match=r"z\.npz:x\.npy: chunks=\(3, 20\).* 10 chunks"):
        z["x"]
    z = npystore.open(str(npz), chunks=(3, 20), max_chunks=10)
    np.testing.assert_array_equal(z["x"].compute(), arr)

    v5 = tmp_path / "v5.mat"
    sio.savemat(v5, {"x": arr}, do_compression=True)
    with pytest.raises(UnsupportedError, match=r"v5\.mat.* 600 chunks.*max_chunks=599"):
        npystore.open_mat(str(v5), chunks=1, max_chunks=599)["x"]
    got = npystore.open(str(v5), chunks=1, max_chunks=600)["x"]
    np.testing.assert_array_equal(got.compute(), arr)

    v73 = tmp_path / "v73.mat"
    with _mat73(v73) as f:
        d = f.create_dataset("x", data=arr.T, chunks=(5, 5), compression="gzip")
        d.attrs["MATLAB_class"] = np.bytes_("double")
    _stamp(v73)
    m = npystore.open_mat(str(v73), chunks=(1, 1), max_chunks=100)
    with pytest.raises(UnsupportedError, match=r"v73\.mat.* 600 chunks.*max_chunks=100"):
        m["x"]
    assert npystore.open_mat(str(v73), max_chunks=100)["x"].npartitions <= 100
    got = npystore.open_mat(str(v73), chunks=(5, 5), max_chunks=24)["x"]
    np.testing.assert_array_equal(got.compute(), arr)


def test_pickled_arrays_are_one_chunk_whatever_the_spec(tmp_path: Path) -> None:
    path = tmp_path / "obj.npy"
    arr = np.array([{"a": 1}, [2], "three"] * 10, dtype=object)
    np.save(path, arr, allow_pickle=True)
    a = npystore.open_npy(str(path), chunks=1, allow_pickle=True, max_chunks=1)
    assert a.npartitions == 1
    assert a.compute().tolist() == arr.tolist()


def test_mat_v73_huge_chunk_grid_is_refused_before_allocating(tmp_path: Path) -> None:
    """A small file may declare a dataset of 2**40 chunks: refused, nothing allocated."""
    import tracemalloc

    path = tmp_path / "grid.mat"
    with _mat73(path) as f:
        d = f.create_dataset("x", shape=(2**40, 1), chunks=(1, 1), dtype="<f8")
        d.attrs["MATLAB_class"] = np.bytes_("double")
        d[0, 0] = 1.0  # one written chunk: the dataset has a chunk index
    _stamp(path)
    assert path.stat().st_size < 64 * 1024
    m = npystore.open_mat(str(path))
    tracemalloc.start()
    try:
        with pytest.raises(UnsupportedError, match=r"grid\.mat.*2\*\*40|grid\.mat.*1099511627776"):
            m["x"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_mat_v73_file_pickles_and_reopens(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "p.mat"
    with _mat73(path) as f:
        d = f.create_dataset("x", data=np.arange(12.0).reshape(3, 4))
        d.attrs["MATLAB_class"] = np.bytes_("double")
    _stamp(path)
    m = npystore.open_mat(str(path))
    copy = pickle.loads(pickle.dumps(m))
    assert sorted(copy) == ["x"]
    np.testing.assert_array_equal(copy["x"].compute(), m["x"].compute())
