"""npystore's own chunk-index walk (formats/h5index.py, formats/h5chunks.py, h5meta.py): on
files h5py writes, the chunks it finds are exactly the ones libhdf5 reports (the oracle:
``chunk_iter`` on a trusted file) and the values read equal h5py's, for every index type
npystore parses; the others raise UnsupportedError naming the type; over S3 a many-chunk
dataset's index costs one request per B-tree level."""

from __future__ import annotations

import ctypes
import io
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from npystore.errors import FormatError, UnsupportedError
from npystore.fetch import open_reader
from npystore.files.mat.h5meta import H5Meta
from npystore.files.mat.hdf5 import chunk_table, dataset_layout, header_address, open_h5
from npystore.formats import h5chunks, h5index, h5sum
from npystore.read.access import LayoutArray

RNG = np.random.default_rng(11)


def libhdf5_chunks(dset: Any) -> list[tuple[tuple[int, ...], int, int, int]]:
    """(chunk grid coordinates, absolute address, size, filter mask) of every stored chunk,
    as libhdf5 reports them (only ever called on files the test wrote)."""
    out: list[tuple[tuple[int, ...], int, int, int]] = []
    chunks = dset.chunks

    def visit(info: Any) -> None:
        grid = tuple(int(c) // k for c, k in zip(info.chunk_offset, chunks, strict=True))
        out.append((grid, int(info.byte_offset), int(info.size), int(info.filter_mask)))

    dset.id.chunk_iter(visit)
    return sorted(out)


def ours(table: h5chunks.ChunkTable, base: int) -> list[tuple[tuple[int, ...], int, int, int]]:
    return sorted(
        (tuple(int(c) for c in g), int(a) + base, int(s), int(m))
        for g, a, s, m in zip(table.grid, table.addresses, table.sizes, table.masks, strict=True)
    )


def set_istore_k(fcpl: Any, k: int) -> None:
    """``H5Pset_istore_k`` (h5py does not wrap it), called in h5py's own libhdf5."""
    libs = Path(h5py.__file__).parent.parent / "h5py.libs"
    found = list(libs.glob("libhdf5-*.so*")) if libs.is_dir() else []
    if not found:
        pytest.skip("h5py's libhdf5 not found (not a wheel install)")
    lib = ctypes.CDLL(str(found[0]))
    assert lib.H5Pset_istore_k(ctypes.c_int64(fcpl.id), ctypes.c_uint(k)) >= 0


def write_file(path: Path, make: Any, *, libver: Any = "earliest", userblock: int = 0,
               istore_k: int | None = None) -> None:  # fmt: skip
    """``make(f)`` fills a new file (with a B-tree K of ``istore_k`` for chunk indexes)."""
    if istore_k is None:
        with h5py.File(path, "w", libver=libver, userblock_size=userblock) as f:
            make(f)
        return
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    set_istore_k(fcpl, istore_k)
    if userblock:
        fcpl.set_userblock(userblock)
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)
    with h5py.File(fid) as f:
        make(f)


def random_order(f: h5py.File) -> None:
    """A resizable dataset written one chunk at a time in random order, some left out."""
    d = f.create_dataset("x", shape=(100, 30), maxshape=(None, 30), dtype="<f4", chunks=(2, 5),
                         compression="gzip", shuffle=True, fletcher32=True)  # fmt: skip
    for i in RNG.permutation(50 * 6)[:250]:
        r, c = divmod(int(i), 6)
        d[r * 2 : r * 2 + 2, c * 5 : c * 5 + 5] = i


def three_d(f: h5py.File) -> None:
    f.create_dataset("x", data=RNG.standard_normal((13, 17, 19)), chunks=(2, 3, 4),
                     compression="gzip")  # fmt: skip


def edges(f: h5py.File) -> None:
    """Partial edge chunks, a fill value, 1-D."""
    d = f.create_dataset("x", shape=(1000,), dtype="<i8", chunks=(64,), fillvalue=-7)
    d[100:900] = np.arange(800)


def with_attrs(f: h5py.File) -> None:
    """Attributes added after the data: the header continues in another block."""
    d = f.create_dataset("x", data=RNG.standard_normal((300, 400)), chunks=(10, 20),
                         compression="gzip")  # fmt: skip
    for i in range(40):
        d.attrs[f"attribute_{i:03d}"] = np.arange(20.0)


def fixed_paged(f: h5py.File) -> None:
    """A fixed array of 2,000 entries: paged (1,024 per page), a page left unwritten."""
    d = f.create_dataset("x", shape=(100, 2000), dtype="<i2", chunks=(2, 50),
                         compression="gzip")  # fmt: skip
    d[:40] = RNG.integers(0, 1000, (40, 2000))


def fixed_unfiltered(f: h5py.File) -> None:
    d = f.create_dataset("x", shape=(60, 80), maxshape=(100, 100), dtype="<f8", chunks=(4, 5))
    d[3:50, 7:70] = RNG.standard_normal((47, 63))


def single(f: h5py.File) -> None:
    f.create_dataset("x", data=RNG.standard_normal((60, 80)), chunks=(60, 80), compression="gzip")
    f.create_dataset("y", data=RNG.standard_normal((6, 8)), chunks=(6, 8))


def implicit(f: h5py.File) -> None:
    space = h5py.h5s.create_simple((30, 40), (30, 40))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((4, 6))
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    h5py.h5d.create(f.id, b"x", h5py.h5t.NATIVE_DOUBLE, space, dcpl=dcpl)
    f["x"][...] = RNG.standard_normal((30, 40))


CASES = {
    "btree-random-order": (random_order, {}),
    "btree-3d-k4": (three_d, {"istore_k": 4}),
    "btree-edges-userblock": (edges, {"userblock": 512}),
    "btree-continuation": (with_attrs, {"userblock": 512}),
    "btree-superblock-v2": (with_attrs, {"libver": ("v108", "v108")}),
    "fixed-array-paged": (fixed_paged, {"libver": "latest"}),
    "fixed-array-unfiltered": (fixed_unfiltered, {"libver": "latest", "userblock": 512}),
    "single-chunk": (single, {"libver": "latest"}),
    "implicit": (implicit, {"libver": "latest"}),
}
INDEX_TYPES = {
    "btree-random-order": h5index.BTREE_V1,
    "fixed-array-paged": h5index.FIXED_ARRAY,
    "single-chunk": h5index.SINGLE_CHUNK,
    "implicit": h5index.IMPLICIT,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_walk_finds_the_chunks_libhdf5_reports(tmp_path: Path, case: str) -> None:
    make, options = CASES[case]
    path = tmp_path / f"{case}.h5"
    write_file(path, make, **options)
    userblock = options.get("userblock", 0)
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    meta = H5Meta.for_reader(reader)
    with h5py.File(path, "r") as oracle:
        for name in oracle:
            table = chunk_table(h5[name], reader, userblock, name)
            assert ours(table, userblock) == libhdf5_chunks(oracle[name])
            got = LayoutArray(reader, dataset_layout(h5[name], reader)).read()
            np.testing.assert_array_equal(got, oracle[name][()])
            if case in INDEX_TYPES:
                layout = meta.chunk_layout(header_address(h5[name]))
                assert layout is not None
                assert layout.index_type == INDEX_TYPES[case]
    h5.close()


@pytest.mark.parametrize(
    ("maxshape", "kind"), [((None, 80), "extensible array"), ((None, None), "version-2 B-tree")]
)
def test_index_types_not_parsed_are_unsupported(tmp_path: Path, maxshape: Any, kind: str) -> None:
    path = tmp_path / "latest.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("x", data=np.ones((60, 80)), chunks=(4, 5), maxshape=maxshape)
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    with pytest.raises(UnsupportedError, match=rf"latest\.h5:x: chunk index of type {kind}"):
        dataset_layout(h5["x"], reader, source=f"{path}:x")
    h5.close()


def test_never_written_dataset_has_no_chunks(tmp_path: Path) -> None:
    path = tmp_path / "empty.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=(50, 50), chunks=(10, 10), dtype="<f4", fillvalue=2.5)
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    assert len(chunk_table(h5["x"], reader, 0, "x")) == 0
    assert (LayoutArray(reader, dataset_layout(h5["x"], reader)).read() == 2.5).all()
    h5.close()


def test_superblocks_of_every_version(tmp_path: Path) -> None:
    for libver, version in [("earliest", 0), (("v108", "v108"), 2), ("latest", 3)]:
        bio = io.BytesIO()
        with h5py.File(bio, "w", libver=libver) as f:
            f.create_group("g")
        raw = bio.getvalue()
        sb = h5index.parse_superblock(raw[: h5index.SUPERBLOCK_SIZE])
        assert (sb.version, sb.sizeof_addr, sb.sizeof_len) == (version, 8, 8)
        assert 0 < sb.root_header < len(raw)
        if version >= 2:  # the checksum covers the superblock
            bad = bytearray(raw[: h5index.SUPERBLOCK_SIZE])
            bad[12] ^= 1
            with pytest.raises(FormatError, match="checksum"):
                h5index.parse_superblock(bytes(bad))


def test_lookup3_known_values() -> None:
    # Bob Jenkins' published values of hashlittle(..., 0)
    assert h5sum.lookup3(b"") == 0xDEADBEEF
    assert h5sum.lookup3(b"Four score and seven years ago") == 0x17770551


def test_k_values_from_the_superblock_extension(tmp_path: Path) -> None:
    """Superblock version 2 with a chunk B-tree K of 4: its extension holds the K values,
    and nodes of 8 entries are walked (not read as 64-entry nodes)."""
    path = tmp_path / "k.h5"
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    set_istore_k(fcpl, 4)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_V18, h5py.h5f.LIBVER_V18)
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    with h5py.File(fid) as f:
        three_d(f)
    reader = open_reader(str(path))
    h5 = open_h5(reader)
    sb = H5Meta.for_reader(reader).superblock()
    assert (sb.version, sb.chunk_k) == (2, 4)
    with h5py.File(path, "r") as oracle:
        assert ours(chunk_table(h5["x"], reader, 0, "x"), 0) == libhdf5_chunks(oracle["x"])
    h5.close()


def test_s3_many_chunk_index_costs_a_request_per_level(s3: Any, tmp_path: Path) -> None:
    """3,000 chunks and a B-tree of two levels whose leaves are scattered among the chunks:
    the walk fetches each level in one batch, no node twice, and nothing else is asked of
    the object for the index."""
    path = tmp_path / "many.mat"
    data = RNG.standard_normal((300, 2000))
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("x", data=data, chunks=(10, 20), compression="gzip")  # 3000 chunks
        f.create_dataset("pad", data=RNG.standard_normal((1100, 1000)))  # > whole-file limit
    url = s3.put_file(path, "many.mat")
    reader = open_reader(url, s3.storage_options)
    h5 = open_h5(reader)
    blockfile = H5Meta.for_reader(reader).blockfile()
    assert blockfile is not None
    before = blockfile.fetches
    with s3.counter.measure() as m:
        layout = dataset_layout(h5["x"], reader)
    levels = blockfile.fetches - before
    assert levels <= 3  # the root (cached with the header, or one batch), one per level
    # the leaves in one concurrent batch: 47 with libhdf5 2.0, 71 with 1.14 (whose splits
    # leave leaves half full); a B-tree leaf holds at least K = 32 of the 3,000 chunks
    assert m.requests <= 3000 // 32 + 2, m
    np.testing.assert_array_equal(LayoutArray(reader, layout).read(), data)
    h5.close()
