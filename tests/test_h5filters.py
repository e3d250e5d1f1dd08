"""HDF5 filter decoding (npystore.formats.h5filters) against chunks h5py wrote, a literal
port of libhdf5's Fletcher-32, and hand-built hostile chunks."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.h5filters import decode_chunk, fletcher32, unshuffle, unsupported_filters
from npystore.read.layout import Filter

RNG = np.random.default_rng(20240325)
DEFLATE = Filter(1, "deflate", (6,), True)
FLETCHER = Filter(3, "fletcher32")


def shuffle_filter(size: int) -> Filter:
    return Filter(2, "shuffle", (size,), True)


def fletcher32_reference(data: bytes) -> int:
    """H5_checksum_fletcher32, transcribed line by line from libhdf5's H5checksum.c."""
    length = len(data) // 2
    sum1 = sum2 = 0
    i = 0
    while length:
        tlen = min(length, 360)
        length -= tlen
        for _ in range(tlen):
            sum1 += (data[i] << 8) | data[i + 1]
            i += 2
            sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if len(data) % 2:
        sum1 += data[i] << 8
        sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return (sum2 << 16) | sum1


def shuffle_reference(data: bytes, size: int) -> bytes:
    """H5Z_filter_shuffle's forward direction."""
    n = len(data) // size
    if size <= 1 or n <= 1:
        return data
    out = bytearray()
    for j in range(size):
        out += bytes(data[i * size + j] for i in range(n))
    return bytes(out) + data[n * size :]


# --------------------------------------------------------------------------- fletcher32


@pytest.mark.parametrize("n", [0, 1, 2, 3, 719, 720, 721, 722, 4097, 20000])
@pytest.mark.parametrize("kind", ["random", "ones", "zeros"])
def test_fletcher32_matches_libhdf5_loop(n: int, kind: str) -> None:
    data = {
        "random": RNG.integers(0, 256, n, dtype=np.uint8).tobytes(),
        "ones": b"\xff" * n,
        "zeros": bytes(n),
    }[kind]
    assert fletcher32(data) == fletcher32_reference(data)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000))
def test_fletcher32_matches_libhdf5_loop_on_any_bytes(data: bytes) -> None:
    assert fletcher32(data) == fletcher32_reference(data)


@pytest.mark.parametrize("dtype", ["i1", "<i2", "<f4", ">f8"])
@pytest.mark.parametrize("chunk", [7, 100, 3001])
def test_fletcher32_of_h5py_chunks(tmp_path: Path, dtype: str, chunk: int) -> None:
    path = tmp_path / "f.h5"
    data = (RNG.standard_normal(5000) * 100).astype(dtype)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(chunk,), fletcher32=True)
    with h5py.File(path, "r") as f:
        d = f["x"]
        for start in (0, chunk * ((len(data) - 1) // chunk)):
            mask, raw = d.id.read_direct_chunk((start,))
            assert mask == 0
            assert int.from_bytes(raw[-4:], "little") == fletcher32(raw[:-4])
            got = decode_chunk(
                raw,
                (FLETCHER,),
                0,
                itemsize=data.itemsize,
                nbytes=chunk * data.itemsize,
                source="x",
            )
            assert got == raw[:-4]


def test_fletcher32_mismatch_is_a_format_error() -> None:
    body = RNG.integers(0, 256, 1000, dtype=np.uint8).tobytes()
    good = body + fletcher32(body).to_bytes(4, "little")
    assert decode_chunk(good, (FLETCHER,), 0, itemsize=1, nbytes=1000, source="s") == body
    bad = bytearray(good)
    bad[10] ^= 1
    with pytest.raises(FormatError, match=r"s: fletcher32 checksum mismatch"):
        decode_chunk(bytes(bad), (FLETCHER,), 0, itemsize=1, nbytes=1000, source="s")
    with pytest.raises(FormatError, match="at least 4"):
        decode_chunk(b"ab", (FLETCHER,), 0, itemsize=1, nbytes=0, source="s")


def test_fletcher32_of_hdf5_1_6_2_little_endian_files_is_accepted() -> None:
    body = RNG.integers(0, 256, 64, dtype=np.uint8).tobytes()
    c = fletcher32(body)
    swapped = ((c & 0x00FF00FF) << 8) | ((c >> 8) & 0x00FF00FF)
    chunk = body + swapped.to_bytes(4, "little")
    assert decode_chunk(chunk, (FLETCHER,), 0, itemsize=1, nbytes=64, source="s") == body


# --------------------------------------------------------------------------- shuffle


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("n", [0, 1, 2, 17, 64])
def test_unshuffle_undoes_shuffle_with_leftover_bytes(size: int, n: int) -> None:
    data = RNG.integers(0, 256, n, dtype=np.uint8).tobytes()
    assert unshuffle(shuffle_reference(data, size), size) == data


def test_shuffle_element_size_from_client_data_else_itemsize() -> None:
    data = RNG.integers(0, 256, 48, dtype=np.uint8).tobytes()
    shuffled = shuffle_reference(data, 4)
    assert decode_chunk(shuffled, (shuffle_filter(4),), 0, itemsize=8, nbytes=48, source="s") == (
        data
    )
    no_cd = Filter(2, "shuffle")
    assert decode_chunk(shuffled, (no_cd,), 0, itemsize=4, nbytes=48, source="s") == data


# ------------------------------------------------------------------ h5py pipelines


PIPELINES: dict[str, dict[str, Any]] = {
    "gzip0": {"compression": "gzip", "compression_opts": 0},
    "gzip1": {"compression": "gzip", "compression_opts": 1},
    "gzip9": {"compression": "gzip", "compression_opts": 9},
    "shuffle": {"shuffle": True},
    "gzip+shuffle": {"compression": "gzip", "shuffle": True},
    "hdf5storage": {"compression": "gzip", "shuffle": True, "fletcher32": True},
    "fletcher32": {"fletcher32": True},
}


def pipeline_of(d: h5py.Dataset) -> tuple[Filter, ...]:
    dcpl = d.id.get_create_plist()
    out = []
    for i in range(dcpl.get_nfilters()):
        fid, flags, cd, name = dcpl.get_filter(i)
        out.append(Filter(fid, name.decode(), tuple(cd), bool(flags & h5py.h5z.FLAG_OPTIONAL)))
    return tuple(out)


@pytest.mark.parametrize("pipeline", list(PIPELINES))
@pytest.mark.parametrize("dtype", ["<f8", ">f4", "<i2", "u1", "<u8"])
def test_decode_h5py_chunks(tmp_path: Path, pipeline: str, dtype: str) -> None:
    path = tmp_path / "p.h5"
    data = np.cumsum(RNG.integers(-3, 4, (50, 33)), axis=1).astype(dtype)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 10), **PIPELINES[pipeline])
    with h5py.File(path, "r") as f:
        d = f["x"]
        filters = pipeline_of(d)
        for coords in [(0, 0), (48, 30), (16, 20)]:  # an edge chunk (padded) included
            mask, raw = d.id.read_direct_chunk(coords)
            got = decode_chunk(
                raw, filters, mask, itemsize=data.itemsize, nbytes=160 * data.itemsize, source="x"
            )
            chunk = np.frombuffer(got, dtype=dtype).reshape(16, 10)
            rows, cols = min(16, 50 - coords[0]), min(10, 33 - coords[1])
            want = data[coords[0] : coords[0] + rows, coords[1] : coords[1] + cols]
            np.testing.assert_array_equal(chunk[:rows, :cols], want)


def test_filters_skipped_by_the_mask_are_not_undone() -> None:
    data = np.arange(100, dtype="<u4").tobytes()
    pipeline = (shuffle_filter(4), DEFLATE)
    # the shuffle was skipped for this chunk (bit 0): only deflate was applied
    got = decode_chunk(zlib.compress(data), pipeline, 0b01, itemsize=4, nbytes=400, source="s")
    assert got == data
    # everything skipped: the stored bytes are the data
    assert decode_chunk(data, pipeline, 0b11, itemsize=4, nbytes=400, source="s") == data


def test_fletcher32_applied_before_deflate() -> None:
    data = RNG.integers(0, 256, 1000, dtype=np.uint8).tobytes()
    stored = zlib.compress(data + fletcher32(data).to_bytes(4, "little"))
    pipeline = (FLETCHER, DEFLATE)
    assert decode_chunk(stored, pipeline, 0, itemsize=1, nbytes=1000, source="s") == data


# --------------------------------------------------------------------- hostile chunks


def test_corrupt_deflate_stream() -> None:
    stored = bytearray(zlib.compress(RNG.bytes(4000)))
    stored[20:30] = b"\xff" * 10
    with pytest.raises(FormatError, match=r"^src: "):
        decode_chunk(bytes(stored), (DEFLATE,), 0, itemsize=1, nbytes=4000, source="src")


def test_truncated_deflate_stream() -> None:
    stored = zlib.compress(RNG.bytes(4000))
    with pytest.raises(FormatError, match="ends before its zlib stream"):
        decode_chunk(stored[:-100], (DEFLATE,), 0, itemsize=1, nbytes=4000, source="s")


def test_chunk_inflating_to_more_than_its_size_is_refused_early() -> None:
    bomb = zlib.compress(bytes(50 * 2**20), 9)  # 50 MiB of zeros in ~50 KiB
    assert len(bomb) < 100_000
    with pytest.raises(FormatError, match="more than 1024 bytes"):
        decode_chunk(bomb, (DEFLATE,), 0, itemsize=1, nbytes=1024, source="s")


def test_chunk_inflating_to_less_than_its_size() -> None:
    stored = zlib.compress(bytes(1000))
    with pytest.raises(FormatError, match="inflates to 1000 bytes, expected 1024"):
        decode_chunk(stored, (DEFLATE,), 0, itemsize=1, nbytes=1024, source="s")


def test_unfiltered_chunk_of_the_wrong_size() -> None:
    with pytest.raises(FormatError, match="decodes to 10 bytes, expected 16"):
        decode_chunk(bytes(10), (), 0, itemsize=8, nbytes=16, source="s")


@pytest.mark.parametrize(
    ("fid", "name"),
    [(32000, "lzf"), (4, "szip"), (5, "nbit"), (6, "scaleoffset"), (32001, "blosc"), (999, "")],
)
def test_unsupported_filters_are_named(fid: int, name: str) -> None:
    pipeline = (shuffle_filter(8), Filter(fid, name))
    expected = name or "unknown"
    with pytest.raises(UnsupportedError, match=rf"^file.mat:/x: HDF5 filter {expected} \(id {fid}"):
        decode_chunk(b"abc", pipeline, 0, itemsize=8, nbytes=8, source="file.mat:/x")
    assert unsupported_filters(pipeline) == [f"{expected} ({fid})"]
    # an unsupported optional filter that was skipped for this chunk does not matter
    data = bytes(range(16))
    got = decode_chunk(shuffle_reference(data, 8), pipeline, 0b10, itemsize=8, nbytes=16, source="")
    assert got == data


# ------------------------------------------------------- numcodecs' kernels (read/chunked)


def numcodecs_kernels() -> Any:
    from npystore.read import chunked

    numcodecs = pytest.importorskip("numcodecs")
    return chunked._Numcodecs(numcodecs.Fletcher32, numcodecs.Shuffle)


@settings(max_examples=80, deadline=None)
@given(
    st.binary(min_size=0, max_size=5000),
    st.sampled_from([1, 2, 3, 4, 8, 16]),
    st.sampled_from(["shuffle", "fletcher32", "shuffle+fletcher32", "all"]),
    st.sampled_from(["good", "swapped", "bad"]),
)
def test_numcodecs_kernels_decode_as_numpy_does(
    body: bytes, size: int, pipeline: str, checksum: str
) -> None:
    """numcodecs' Fletcher-32 and unshuffle give the same bytes and the same refusals as
    the numpy ones (odd lengths, trailing bytes, HDF5 1.6.2's swapped checksum, mismatches)."""
    kernels = numcodecs_kernels()
    filters: list[Filter] = []
    data = body
    if pipeline in ("shuffle", "shuffle+fletcher32", "all"):
        filters.append(shuffle_filter(size))
        data = shuffle_reference(data, size)
    if pipeline == "all":
        filters.append(DEFLATE)
        data = zlib.compress(data)
    if pipeline != "shuffle":
        filters.append(FLETCHER)
        c = fletcher32_reference(data)
        if checksum == "swapped":
            c = ((c & 0x00FF00FF) << 8) | ((c >> 8) & 0x00FF00FF)
        elif checksum == "bad":
            c ^= 0x10001
        data += c.to_bytes(4, "little")
    outcomes = []
    for with_kernels in (None, kernels):
        try:
            got = decode_chunk(
                data, filters, 0, itemsize=size, nbytes=len(body), source="s",
                kernels=with_kernels,
            )  # fmt: skip
        except FormatError as exc:
            outcomes.append(("error", str(exc)))
        else:
            outcomes.append(("ok", bytes(got)))
    assert outcomes[0] == outcomes[1]
    if pipeline == "shuffle" or checksum != "bad":
        assert outcomes[1] == ("ok", body)
    else:
        assert outcomes[1][0] == "error"
        assert "fletcher32 checksum mismatch" in outcomes[1][1]


def test_large_reads_use_numcodecs_kernels_small_ones_numpys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that decodes FAST_FILTERS_MIN bytes or more of shuffled, Fletcher-32 chunks
    uses numcodecs' kernels; the values equal h5py's either way."""
    from types import SimpleNamespace

    from npystore.fetch import open_reader
    from npystore.files.mat.hdf5 import dataset_layout
    from npystore.read import chunked
    from npystore.read.access import LayoutArray

    numcodecs_kernels()
    path = tmp_path / "f.h5"
    data = RNG.standard_normal((300, 200))
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(50, 40), shuffle=True, fletcher32=True,
                         compression="gzip")  # fmt: skip
    used: list[Any] = []
    decode = chunked.decode_chunk

    def spy(*args: Any, **kw: Any) -> Any:
        used.append(kw.get("kernels"))
        return decode(*args, **kw)

    monkeypatch.setattr(chunked, "decode_chunk", spy)
    reader = open_reader(str(path))
    with h5py.File(path, "r") as f:
        layout = dataset_layout(f["x"], reader, source="x")
    array = LayoutArray(reader, layout, source="x")
    monkeypatch.setattr(chunked, "sys", SimpleNamespace(modules={}))  # none imported yet
    np.testing.assert_array_equal(array.read(), data)
    assert used
    assert all(k is None for k in used)  # 480 kB: numpy's kernels, numcodecs not imported
    used.clear()
    monkeypatch.setattr(chunked, "FAST_FILTERS_MIN", data.nbytes)
    np.testing.assert_array_equal(array.read(), data)
    assert used
    assert all(isinstance(k, chunked._Numcodecs) for k in used)
