"""HDF5 chunks with filters npystore does not undo itself are decoded by libhdf5's filters.

Oracle: h5py reading the same dataset (libhdf5 walking the trusted file it just wrote).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import npystore
from npystore.errors import FormatError, UnsupportedError
from npystore.read.h5decode import decode_with_libhdf5
from npystore.read.layout import Filter

HEADER = (
    (
        b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Wed Nov 25 12:00:00 2026 "
        b"HDF5 schema 1.00 ."
    ).ljust(116)
    + bytes(8)
    + b"\x00\x02IM"
)


def write_mat(path: Path, **filters: Any) -> dict[str, np.ndarray[Any, Any]]:
    """A v7.3 MAT-file whose variables are chunked through ``filters``; what h5py reads."""
    rng = np.random.default_rng(5)
    values = {
        "x": np.round(rng.standard_normal((37, 11)), 3),
        "n": rng.integers(-1000, 1000, size=(9, 14), dtype=np.int32),
        "u": rng.integers(0, 255, size=(40,), dtype=np.uint8).reshape(40, 1),
    }
    classes = {"x": "double", "n": "int32", "u": "uint8"}
    with h5py.File(path, "w", userblock_size=512) as f:
        for name, value in values.items():
            chunks = tuple(max(1, s // 3) for s in value.shape)
            d = f.create_dataset(name, data=value, chunks=chunks, **filters)
            d.attrs["MATLAB_class"] = np.bytes_(classes[name])
    with path.open("r+b") as fh:
        fh.write(HEADER)
    with h5py.File(path, "r") as f:  # the oracle: HDF5's (C) order; MATLAB's is reversed
        return {name: f[name][()].T for name in values}


BUILTIN = {
    "lzf": {"compression": "lzf"},
    "lzf+shuffle+fletcher32": {"compression": "lzf", "shuffle": True, "fletcher32": True},
    "scaleoffset-int": {"scaleoffset": 0},
    "scaleoffset+gzip": {"compression": "gzip", "scaleoffset": 2},
    "szip": {"compression": "szip"},
}


@pytest.mark.parametrize("case", sorted(BUILTIN))
def test_libhdf5_builtin_filters(tmp_path: Path, case: str) -> None:
    path = tmp_path / "f.mat"
    old_scaleoffset = case.startswith("scaleoffset") and h5py.version.hdf5_version_tuple < (2,)
    try:
        oracle = write_mat(path, **BUILTIN[case])
    except ValueError as exc:  # szip is optional in libhdf5 builds
        pytest.skip(f"h5py cannot write {case}: {exc}")
    except OSError as exc:
        if not old_scaleoffset:
            raise
        # libhdf5 1.14 cannot read back the integer scale-offset chunks it wrote
        pytest.skip(f"libhdf5 {h5py.version.hdf5_version} cannot read its own {case}: {exc}")
    m = npystore.open_mat(str(path))
    if old_scaleoffset:
        # libhdf5 1.14's scale-offset derives parameters when a pipeline is built, over the
        # file's: npystore's decode through libhdf5 refuses the chunk, naming the pipeline
        with pytest.raises(UnsupportedError, match="cannot build the filter pipeline"):
            m["x"].compute()
        return
    for name, want in oracle.items():
        got = m[name].compute()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(m[name][2:7, 1:].compute(), want[2:7, 1:])
        np.testing.assert_array_equal(m.load(name), want)


def _plugins() -> dict[str, Any]:
    hdf5plugin = pytest.importorskip("hdf5plugin")
    return {
        "zstd": hdf5plugin.Zstd(),
        "blosc": hdf5plugin.Blosc(),
        "blosc2": hdf5plugin.Blosc2(),
        "bitshuffle": hdf5plugin.Bitshuffle(),
        "bitshuffle-lz4": hdf5plugin.Bitshuffle(cname="lz4"),
        "lz4": hdf5plugin.LZ4(),
        "bzip2": hdf5plugin.BZip2(),
    }


@pytest.mark.parametrize(
    "case", ["zstd", "blosc", "blosc2", "bitshuffle", "bitshuffle-lz4", "lz4", "bzip2"]
)
def test_hdf5plugin_filters(tmp_path: Path, case: str) -> None:
    """Plugins' "set local" callbacks derive parameters: the file's are reproduced exactly
    (bitshuffle adds its own a second time when given the stored ones)."""
    path = tmp_path / "p.mat"
    oracle = write_mat(path, **_plugins()[case])
    with npystore.open_mat(str(path)) as m:
        for name, want in oracle.items():
            np.testing.assert_array_equal(m[name].compute(), want)


def test_the_decoder_matches_h5py_on_each_chunk(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset(
            "x", data=np.arange(60, dtype=">i8").reshape(6, 10), chunks=(4, 4), compression="lzf"
        )
        fid, _flags, values, name = d.id.get_create_plist().get_filter(0)
        pipeline = [Filter(int(fid), name.decode(), tuple(int(v) for v in values))]
        for i in range(d.id.get_num_chunks()):
            info = d.id.get_chunk_info(i)
            mask, raw = d.id.read_direct_chunk(info.chunk_offset)
            got = decode_with_libhdf5(
                raw, pipeline, mask, dtype=np.dtype(">i8"), chunk_shape=(4, 4), source="c"
            )
            r, c = info.chunk_offset
            want = np.zeros((4, 4), ">i8")
            part = d[r : r + 4, c : c + 4]
            want[: part.shape[0], : part.shape[1]] = part
            assert got.dtype == np.dtype(">i8")
            np.testing.assert_array_equal(got[: part.shape[0], : part.shape[1]], part)


def test_corrupt_chunk_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.mat"
    write_mat(path, compression="lzf")
    with h5py.File(path, "r") as f:
        info = f["x"].id.get_chunk_info(0)
    data = bytearray(path.read_bytes())
    start = info.byte_offset + (512 if info.byte_offset < 512 else 0)
    for i in range(start + 2, start + info.size - 2):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    m = npystore.open_mat(str(path))
    with pytest.raises(FormatError, match=r"bad\.mat.*chunk.*lzf"):
        m["x"].compute()


def test_a_filter_libhdf5_lacks_is_named(tmp_path: Path) -> None:
    """A chunk written with a filter nobody registered (id 31999): UnsupportedError naming
    the pipeline, whatever plugins are installed."""
    pipeline = [Filter(31999, "made-up", (1, 2), optional=False)]
    expected = r"src: libhdf5 has no decoder for HDF5 filter \[made-up \(31999\)\]"
    with pytest.raises(UnsupportedError, match=expected):
        decode_with_libhdf5(
            b"\x00" * 16, pipeline, 0, dtype=np.dtype("<f8"), chunk_shape=(2,), source="src"
        )


def test_graph_and_pickle_stay_small(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "g.mat"
    oracle = write_mat(path, compression="lzf")
    m = npystore.open_mat(str(path))
    x = pickle.loads(pickle.dumps(m["x"]))
    np.testing.assert_array_equal(x.compute(), oracle["x"])
