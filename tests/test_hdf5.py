"""HDF5 datasets as layouts (npystore.files.mat.hdf5) read through a RangeReader, with h5py's own
reads as the oracle: dtypes, shapes, storage layouts, filters, fill values, MATLAB axes,
address checks, hostile files, request counts over S3 and a real MATLAB file."""

from __future__ import annotations

import io
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mat_corpus
from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import RangeReader, open_reader
from npystore.fetch.blockfile import BlockFile
from npystore.files.mat.hdf5 import AddressCheck, dataset_layout, open_h5
from npystore.read.access import LayoutArray, read_selection
from npystore.read.layout import ArrayLayout, ChunkedExtent, InlineExtent, RawExtent

RNG = np.random.default_rng(4236)
CORPUS = mat_corpus.CORPUS
COMPLEX = np.dtype([("real", "<f8"), ("imag", "<f8")])
COMPLEX_I4 = np.dtype([("real", "<i4"), ("imag", "<i4")])
MIXED = np.dtype([("real", "<f8"), ("imag", "<i4")])
HDF5STORAGE = {"compression": "gzip", "shuffle": True, "fletcher32": True}


def _values(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.names:
        out = np.zeros(shape, dtype)
        for name in dtype.names:
            out[name] = _values(shape, dtype[name])
        return out
    if dtype.kind == "b":
        return RNG.random(shape) < 0.3
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)
    return (RNG.standard_normal(shape) * 10).astype(dtype)


def _compact(f: h5py.Group, name: str, data: np.ndarray) -> None:
    space = h5py.h5s.create_simple(data.shape) if data.shape else h5py.h5s.create(h5py.h5s.SCALAR)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    dset = h5py.h5d.create(f.id, name.encode(), h5py.h5t.py_create(data.dtype), space, dcpl=dcpl)
    dset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))


#: name -> (shape, dtype, create_dataset keywords); "compact" builds a compact dataset.
CASES: dict[str, tuple[tuple[int, ...], Any, dict[str, Any]]] = {
    "f8_contiguous": ((20, 30), "<f8", {}),
    "f4_gzip": ((1000,), "<f4", {"chunks": (128,), "compression": "gzip"}),
    "i1": ((33, 7), "i1", {"chunks": (8, 3)}),
    "i2": ((33, 7), "<i2", {"chunks": (8, 3), "shuffle": True}),
    "i4": ((33, 7), "<i4", {"chunks": (8, 3), "compression": "gzip", "compression_opts": 1}),
    "i8": ((33, 7), "<i8", {"chunks": (8, 3), "compression": "gzip", "compression_opts": 9}),
    "u1": ((33, 7), "u1", {"chunks": (32, 7), **HDF5STORAGE}),
    "u2": ((33, 7), "<u2", {"chunks": (8, 3), **HDF5STORAGE}),
    "u4": ((33, 7), "<u4", {"chunks": (8, 3), "fletcher32": True}),
    "u8": ((33, 7), "<u8", {"chunks": (8, 3), "compression": "gzip", "compression_opts": 0}),
    "bool": ((50, 4), "?", {"chunks": (16, 4), "compression": "gzip"}),
    "be_f8": ((40, 6), ">f8", {"chunks": (9, 4), **HDF5STORAGE}),
    "be_contiguous": ((10, 3), ">i4", {}),
    "complex": ((25, 12), COMPLEX, {"chunks": (7, 5), **HDF5STORAGE}),
    "complex_i4": ((25, 12), COMPLEX_I4, {"chunks": (7, 5), "compression": "gzip"}),
    "mixed_compound": ((6,), MIXED, {"compact": True}),
    "scalar": ((), "<f8", {}),
    "scalar_compact": ((), "<i2", {"compact": True}),
    "compact_2d": ((3, 4), "<f8", {"compact": True}),
    "empty": ((0, 5), "<f8", {}),
    "empty_chunked": ((0, 5), "<f8", {"chunks": (2, 5), "maxshape": (None, 5)}),
    "d3": ((17, 9, 5), "<f8", {"chunks": (4, 4, 3), **HDF5STORAGE}),
    "d3_plain": ((17, 9, 5), "<i2", {"chunks": (5, 2, 5)}),
    "one_chunk": ((16, 8), "<f4", {"chunks": (16, 8)}),
}


def build(path: Path, userblock: int = 512) -> None:
    with h5py.File(path, "w", userblock_size=userblock) if userblock else h5py.File(path, "w") as f:
        for name, (shape, dtype, kw) in CASES.items():
            data = _values(shape, dtype)
            if kw.get("compact"):
                _compact(f, name, data)
            else:
                f.create_dataset(name, data=data, **kw)
        # partially written, with a fill value: unwritten chunks read as the fill
        d = f.create_dataset("fill", shape=(10, 12), dtype="<f8", chunks=(3, 5), fillvalue=7.5)
        d[0:3, 0:5] = 1.0
        d[9, 11] = 2.0
        c = f.create_dataset(
            "fill_complex",
            shape=(5,),
            dtype=COMPLEX,
            chunks=(2,),
            fillvalue=np.array((1.0, -1.0), COMPLEX),
        )
        c[0] = (3.0, 4.0)
        f.create_dataset("unwritten", shape=(4, 5), dtype="<i4", fillvalue=-3)
        f.create_dataset("unwritten_big", shape=(3000, 1000), dtype="<f8", fillvalue=1.5)
        f.create_dataset("no_chunks", shape=(7, 3), dtype="<i2", chunks=(2, 2), fillvalue=5)
        f.create_dataset("zeros", data=np.zeros(4096, "u1"), chunks=(1024,))
        f.create_dataset("lzf", data=np.arange(100.0), chunks=(10,), compression="lzf")
        f.create_dataset("vlen", data=["a", "bc"], dtype=h5py.string_dtype())
        f.create_dataset("external", shape=(4,), dtype="<f8", external=[(str(path) + ".x", 0, 32)])


ALL = [*CASES, "fill", "fill_complex", "unwritten", "no_chunks", "zeros"]


@pytest.fixture(scope="module")
def h5file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hdf5") / "cases.mat"
    build(path)
    return path


@pytest.fixture(scope="module")
def opened(h5file: Path) -> Iterator[tuple[RangeReader, h5py.File, h5py.File]]:
    """(reader, file opened with open_h5, the same file opened by h5py directly)."""
    reader = open_reader(str(h5file))
    h5 = open_h5(reader)
    with h5py.File(h5file, "r") as oracle:
        yield reader, h5, oracle
    h5.close()


def expected(oracle: h5py.File, name: str, matlab: bool) -> np.ndarray:
    value = np.asarray(oracle[name][()])
    return value.T if matlab else value


@pytest.mark.parametrize("matlab", [False, True], ids=["hdf5", "matlab"])
@pytest.mark.parametrize("name", ALL)
def test_layout_reads_like_h5py(opened: Any, name: str, matlab: bool) -> None:
    reader, h5, oracle = opened
    layout = dataset_layout(h5[name], reader, matlab=matlab)
    want = expected(oracle, name, matlab)
    assert layout.dtype == oracle[name].dtype
    assert layout.dtype.str == want.dtype.str  # byte order as stored
    assert layout.shape == want.shape
    assert layout.order == ("F" if matlab else "C")
    got = LayoutArray(reader, layout).read()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert got.flags.f_contiguous if matlab else got.flags.c_contiguous


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("f8_contiguous", RawExtent),
        ("be_contiguous", RawExtent),
        ("scalar", RawExtent),
        ("compact_2d", InlineExtent),
        ("scalar_compact", InlineExtent),
        ("mixed_compound", InlineExtent),
        ("empty", InlineExtent),
        ("empty_chunked", InlineExtent),
        ("unwritten", InlineExtent),
        ("d3", ChunkedExtent),
        ("fill", ChunkedExtent),
    ],
)
def test_storage_kind(opened: Any, name: str, kind: type) -> None:
    reader, h5, _ = opened
    assert isinstance(dataset_layout(h5[name], reader).storage, kind)


@pytest.mark.parametrize("name", ["f8_contiguous", "be_contiguous", "scalar"])
def test_contiguous_offsets_hold_the_raw_bytes(opened: Any, name: str) -> None:
    reader, h5, oracle = opened
    storage = dataset_layout(h5[name], reader).storage
    assert isinstance(storage, RawExtent)
    assert storage.offset >= 512  # after the user block
    raw = reader.read(storage.offset, storage.offset + storage.nbytes)
    assert raw == np.ascontiguousarray(oracle[name][()]).tobytes()


@pytest.mark.parametrize("name", ["d3", "complex", "be_f8", "fill", "i8", "u1"])
def test_chunk_offsets_hold_the_raw_chunks(opened: Any, name: str) -> None:
    reader, h5, oracle = opened
    storage = dataset_layout(h5[name], reader).storage
    assert isinstance(storage, ChunkedExtent)
    dset = oracle[name]
    assert storage.chunk_shape == dset.chunks
    written = 0
    for index in np.ndindex(*storage.grid):
        offset = int(storage.offsets[index])
        coords = tuple(i * c for i, c in zip(index, dset.chunks, strict=True))
        if offset < 0:
            with pytest.raises(RuntimeError):  # h5py: the chunk is not allocated
                dset.id.read_direct_chunk(coords)
            continue
        written += 1
        mask, chunk = dset.id.read_direct_chunk(coords)
        assert mask == int(storage.filter_masks[index])
        assert reader.read(offset, offset + int(storage.sizes[index])) == chunk
    assert written == dset.id.get_num_chunks()


def test_filters_and_fill_are_recorded(opened: Any) -> None:
    reader, h5, _ = opened
    storage = dataset_layout(h5["complex"], reader).storage
    assert isinstance(storage, ChunkedExtent)
    assert [(f.id, f.name) for f in storage.filters] == [
        (2, "shuffle"),
        (1, "deflate"),
        (3, "fletcher32"),
    ]
    assert storage.filters[0].client_data == (16,)
    assert storage.filters[0].optional
    assert not storage.filters[2].optional
    fill = dataset_layout(h5["fill"], reader).storage
    assert isinstance(fill, ChunkedExtent)
    assert np.frombuffer(fill.fill, "<f8").tolist() == [7.5]
    assert dataset_layout(h5["d3"], reader).storage.fill == b""  # type: ignore[union-attr]


def test_matlab_axes_are_the_reversed_hdf5_axes(opened: Any) -> None:
    reader, h5, _ = opened
    plain = dataset_layout(h5["d3"], reader)
    mat = dataset_layout(h5["d3"], reader, matlab=True)
    assert mat.shape == plain.shape[::-1] == (5, 9, 17)
    assert isinstance(plain.storage, ChunkedExtent)
    assert isinstance(mat.storage, ChunkedExtent)
    assert mat.storage.chunk_shape == (3, 4, 4)
    np.testing.assert_array_equal(mat.storage.offsets, plain.storage.offsets.T)
    assert mat.storage.offsets.flags.c_contiguous
    np.testing.assert_array_equal(mat.storage.sizes, plain.storage.sizes.T)
    np.testing.assert_array_equal(mat.storage.filter_masks, plain.storage.filter_masks.T)


@st.composite
def hyperslabs(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for n in shape:
        start = draw(st.integers(0, n - 1))
        step = draw(st.integers(1, max(1, n)))
        count = draw(st.integers(0, (n - 1 - start) // step + 1))
        out.append((start, count, step))
    return tuple(out)


@pytest.mark.parametrize("matlab", [False, True], ids=["hdf5", "matlab"])
@pytest.mark.parametrize("name", ["d3", "d3_plain", "fill", "complex", "u1"])
def test_random_hyperslabs(opened: Any, name: str, matlab: bool) -> None:
    reader, h5, oracle = opened
    layout = dataset_layout(h5[name], reader, matlab=matlab)
    whole = expected(oracle, name, matlab)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(hyperslabs(layout.shape))
    def check(selection: tuple[tuple[int, int, int], ...]) -> None:
        got = read_selection(reader, layout, selection)
        index = tuple(slice(s, s + c * k, k) for s, c, k in selection)
        np.testing.assert_array_equal(got, whole[index])
        assert got.shape == tuple(c for _, c, _ in selection)

    check()


def test_file_without_user_block(tmp_path: Path) -> None:
    path = tmp_path / "plain.h5"
    build(path, userblock=0)
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    with h5py.File(path, "r") as oracle:
        for name in ["d3", "f8_contiguous", "fill", "compact_2d"]:
            got = LayoutArray(reader, dataset_layout(h5[name], reader)).read()
            np.testing.assert_array_equal(got, oracle[name][()])
    check = AddressCheck.for_reader(reader)
    assert check.contiguous_shift == 0
    h5.close()


# ---------------------------------------------------------------- unsupported, hostile


def test_unsupported_datasets_and_foreign_filters(opened: Any) -> None:
    reader, h5, _ = opened
    # lzf is not npystore's own: libhdf5's filter decodes it (tests/test_h5decode.py)
    layout = dataset_layout(h5["lzf"], reader)
    np.testing.assert_array_equal(LayoutArray(reader, layout).read(), np.arange(100.0))
    with pytest.raises(UnsupportedError, match=r"cases\.mat:/external: values in external storage"):
        dataset_layout(h5["external"], reader)
    with pytest.raises(UnsupportedError, match=r"cases\.mat:/vlen: .*variable-length"):
        dataset_layout(h5["vlen"], reader)


def corrupt_copy(src: Path, dst: Path, name: str, patch: Callable[[bytearray], None]) -> Path:
    """A copy of ``src`` whose first chunk of ``name`` went through ``patch``."""
    shutil.copy(src, dst)
    with h5py.File(src, "r") as f:  # a trusted file: libhdf5 may walk its index
        first = f[name].id.get_chunk_info(0)
    start, stop = first.byte_offset, first.byte_offset + first.size
    data = bytearray(dst.read_bytes())
    chunk = data[start:stop]
    patch(chunk)
    data[start:stop] = chunk
    dst.write_bytes(bytes(data))
    return dst


def flip_middle(chunk: bytearray) -> None:
    chunk[len(chunk) // 2] ^= 0xFF


@pytest.mark.parametrize(
    ("name", "match"),
    [("d3", "fletcher32 checksum mismatch"), ("u4", "fletcher32"), ("f4_gzip", "corrupt|inflat")],
)
def test_corrupt_chunk_is_a_format_error(
    h5file: Path, tmp_path: Path, name: str, match: str
) -> None:
    path = corrupt_copy(h5file, tmp_path / "bad.mat", name, flip_middle)
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    layout = dataset_layout(h5[name], reader)
    with pytest.raises(FormatError, match=rf"bad\.mat: chunk \([0, ]+\): .*({match})"):
        LayoutArray(reader, layout).read()
    h5.close()


def test_large_unwritten_dataset_is_a_grid_of_unwritten_chunks(opened: Any) -> None:
    reader, h5, _ = opened
    layout = dataset_layout(h5["unwritten_big"], reader, matlab=True)
    assert layout.shape == (1000, 3000)
    assert isinstance(layout.storage, ChunkedExtent)
    assert (layout.storage.offsets == -1).all()
    got = read_selection(reader, layout, ((10, 3, 100), (2990, 10, 1)))
    assert got.shape == (3, 10)
    assert (got == 1.5).all()


class ShiftedId:
    """A dataset id reporting addresses ``shift`` bytes too small (libhdf5 < 1.14.4)."""

    def __init__(self, inner: Any, shift: int) -> None:
        self._inner = inner
        self._shift = shift

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def chunk_iter(self, visit: Callable[[Any], None]) -> None:
        def shifted(info: Any) -> None:
            visit(
                SimpleNamespace(
                    chunk_offset=info.chunk_offset,
                    filter_mask=info.filter_mask,
                    byte_offset=info.byte_offset - self._shift,
                    size=info.size,
                )
            )

        self._inner.chunk_iter(shifted)

    def get_offset(self) -> int | None:
        offset = self._inner.get_offset()
        return None if offset is None else offset - self._shift


class ShiftedDataset:
    def __init__(self, dset: h5py.Dataset, shift: int) -> None:
        self._dset = dset
        self.id = ShiftedId(dset.id, shift)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dset, name)

    def __getitem__(self, key: Any) -> Any:
        return self._dset[key]


def test_addresses_without_the_user_block_are_corrected(opened: Any) -> None:
    reader, h5, oracle = opened
    check = AddressCheck(reader)
    name = "f8_contiguous"
    layout = dataset_layout(ShiftedDataset(h5[name], 512), reader, check=check)
    np.testing.assert_array_equal(LayoutArray(reader, layout).read(), oracle[name][()])
    assert check.contiguous_shift == 512


def test_addresses_that_match_nothing_are_a_format_error(opened: Any) -> None:
    reader, h5, _ = opened
    with pytest.raises(FormatError, match=r"cases\.mat:/.*neither at its reported address"):
        dataset_layout(ShiftedDataset(h5["f8_contiguous"], 24), reader, check=AddressCheck(reader))


def test_not_hdf5_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.mat"
    path.write_bytes(b"MATLAB 5.0 MAT-file" + bytes(1000))
    with pytest.raises(FormatError, match=r"junk\.mat: not a readable HDF5 file"):
        open_h5(open_reader(str(path)))


# ------------------------------------------------------------------------ BlockFile


class CountingReader(RangeReader):
    def __init__(self, base: RangeReader) -> None:
        super().__init__(base.fs, base.path, base.identity)
        self.calls: list[list[tuple[int, int]]] = []

    def read(self, start: int, stop: int) -> bytes:
        self.calls.append([(start, stop)])
        return super().read(start, stop)

    def read_many(self, ranges: Any) -> list[bytes]:
        self.calls.append(list(ranges))
        return super().read_many(ranges)


def test_blockfile_is_a_read_only_seekable_file(tmp_path: Path) -> None:
    data = RNG.bytes(100_000)
    path = tmp_path / "b.bin"
    path.write_bytes(data)
    for limit in (0, 10**6):
        reader = CountingReader(open_reader(str(path)))
        bf = BlockFile(reader, block_size=4096, whole_file_limit=limit, cache_bytes=40_000)
        assert bf.readable()
        assert bf.seekable()
        assert not bf.writable()
        with pytest.raises(io.UnsupportedOperation):
            bf.fileno()
        assert bf.read(10) == data[:10]
        assert bf.seek(5000) == 5000
        assert bf.read(9000) == data[5000:14000]
        assert bf.tell() == 14000
        assert bf.seek(-10, io.SEEK_END) == len(data) - 10
        assert bf.read() == data[-10:]
        assert bf.read(5) == b""
        bf.seek(-100, io.SEEK_CUR)
        assert bf.read(200) == data[-100:]
        buf = bytearray(30_000)
        bf.seek(50_001)
        assert bf.readinto(buf) == 30_000
        assert bytes(buf) == data[50_001:80_001]
        assert bf.read_at(99_990, 100_020) == data[99_990:]
        with pytest.raises(ValueError, match="negative"):
            bf.seek(-1)
        assert bf._cached <= 40_000 + 4 * 4096  # bounded cache (hidden state)
        bf.close()
        with pytest.raises(ValueError, match="closed"):
            bf.read(1)


def test_blockfile_reads_a_small_file_once_and_blocks_of_a_large_one(tmp_path: Path) -> None:
    data = RNG.bytes(200_000)
    path = tmp_path / "b.bin"
    path.write_bytes(data)
    reader = CountingReader(open_reader(str(path)))
    bf = BlockFile(reader)  # small: read whole at construction
    assert reader.calls == [[(0, 200_000)]]
    bf.seek(123_456)
    assert bf.read(1000) == data[123_456:124_456]
    assert len(reader.calls) == 1

    reader = CountingReader(open_reader(str(path)))
    bf = BlockFile(reader, block_size=1000, max_readahead=8000, whole_file_limit=0)
    assert reader.calls == []
    bf.seek(50_500)
    assert bf.read(1600) == data[50_500:52_100]  # blocks 50..52, one range, one call
    assert reader.calls == [[(50_000, 53_000)]]
    assert bf.read(2000) == data[52_100:54_100]  # sequential: the fetch doubles
    assert reader.calls[-1] == [(53_000, 55_000)]
    bf.seek(90_000)
    bf.read(10)  # a far miss: one block again
    assert reader.calls[-1] == [(90_000, 91_000)]
    bf.seek(50_000)
    bf.read(5000)  # cached
    assert len(reader.calls) == 3


def test_blockfile_threads(tmp_path: Path) -> None:
    data = RNG.bytes(300_000)
    path = tmp_path / "b.bin"
    path.write_bytes(data)
    bf = BlockFile(open_reader(str(path)), block_size=3000, whole_file_limit=0, cache_bytes=30_000)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                a = int(rng.integers(0, len(data)))
                b = a + int(rng.integers(0, 10_000))
                assert bf.read_at(a, b) == data[a:b]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ------------------------------------------------------------------ a real MATLAB file


@pytest.mark.parametrize(
    ("relpath", "name"),
    [("MAT.jl/v7.3_partial.mat", "var1"), ("pymatreader/v73.mat", "a_matrix")],
)
def test_real_matlab_file(relpath: str, name: str) -> None:
    path = CORPUS / relpath
    if not path.exists():
        pytest.skip(f"{path} is not available")
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    layout = dataset_layout(h5[name], reader, matlab=True)
    assert isinstance(layout.storage, ChunkedExtent)
    with h5py.File(path, "r") as f:
        want = f[name][()].T
    got = LayoutArray(reader, layout).read()
    np.testing.assert_array_equal(got, want)
    part = read_selection(reader, layout, ((3, 40, 2), (60, 5, 7)))
    np.testing.assert_array_equal(part, want[3:83:2, 60:95:7])
    h5.close()


# --------------------------------------------------------------------------------- S3


def test_s3_layouts_equal_local_and_open_is_one_get(s3: Any, h5file: Path) -> None:
    url = s3.put_file(h5file, "cases.mat")
    remote = open_reader(url, s3.storage_options)
    with s3.counter.measure() as m:
        h5 = open_h5(remote)
        names = list(h5)
    assert names
    assert m.gets == 1
    assert m.heads == 0
    # the whole file in one GET (the first bytes came with the identity at open)
    assert m.ranges == [(len(remote.head), remote.size - 1)]
    local = open_reader(str(h5file))
    lh5 = open_h5(local)
    with s3.counter.measure() as m:
        layouts = {n: dataset_layout(h5[n], remote, matlab=True) for n in ALL}
    assert m.gets == 0  # metadata and the address checks come from the cached file
    for n, layout in layouts.items():
        assert layout == dataset_layout(lh5[n], local, matlab=True), n
    with h5py.File(h5file, "r") as oracle:
        for n in ("d3", "complex", "fill", "f8_contiguous"):
            got = LayoutArray(remote, layouts[n]).read()
            np.testing.assert_array_equal(got, oracle[n][()].T)
    h5.close()
    lh5.close()


def test_s3_eight_neighbouring_chunks_are_one_get(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "eight.mat"
    data = RNG.standard_normal((80, 100))
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("x", data=data, chunks=(10, 100), **HDF5STORAGE)
        f.create_dataset("y", data=data[:8], chunks=(1, 100))  # unfiltered
    url = s3.put_file(path, "eight.mat")
    reader = open_reader(url, s3.storage_options)
    h5 = open_h5(reader)
    for name, rows in (("x", 80), ("y", 8)):
        layout = dataset_layout(h5[name], reader)
        storage = layout.storage
        assert isinstance(storage, ChunkedExtent)
        assert storage.offsets.size == 8
        ends = (storage.offsets + storage.sizes).reshape(-1)
        assert (storage.offsets.reshape(-1)[1:] == ends[:-1]).all()  # back to back
        with s3.counter.measure() as m:
            got = LayoutArray(reader, layout).read()
        np.testing.assert_array_equal(got, data[:rows])
        assert m.gets == 1, m
        assert m.bytes == int(storage.sizes.sum())
    h5.close()


def test_s3_large_file_metadata_is_a_few_gets(s3: Any, tmp_path: Path) -> None:
    path = tmp_path / "large.mat"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("big", data=RNG.standard_normal((1200, 1000)))  # ~9.6 MB contiguous
        f.create_dataset("small", data=np.arange(10.0))
        f.create_dataset("chunked", data=RNG.standard_normal((300, 100)), chunks=(50, 100))
    url = s3.put_file(path, "large.mat")
    reader = open_reader(url, s3.storage_options)
    with s3.counter.measure() as m:
        h5 = open_h5(reader)
        layouts = {n: dataset_layout(h5[n], reader) for n in h5}
    assert 1 <= m.gets <= 5, m
    assert m.bytes < 2 * 2**20, m  # metadata, not the data
    assert isinstance(layouts["big"].storage, RawExtent)
    with h5py.File(path, "r") as oracle:
        got = LayoutArray(reader, layouts["chunked"]).read()
        np.testing.assert_array_equal(got, oracle["chunked"][()])
    h5.close()


def test_layout_equality_is_structural(opened: Any) -> None:
    reader, h5, _ = opened
    a = dataset_layout(h5["d3"], reader)
    b = dataset_layout(h5["d3"], reader)
    assert a == b
    assert hash(a) == hash(b)
    assert isinstance(a, ArrayLayout)
