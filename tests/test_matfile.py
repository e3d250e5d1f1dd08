"""open_mat over MAT v5/v6/v7 and v4 files: values, laziness, requests.

The pure parser (tests/test_mat5.py) is checked against scipy on the real MATLAB corpus;
here every variable read through open_mat (range reads, lazy inflate, dask) must equal
what that parser decodes from the whole file, and savemat round trips must give back the
original values, locally and over S3.
"""

from __future__ import annotations

import csv
import io
import math
import warnings
import zlib
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp

import mat_corpus
import npystore
from npystore import FormatError, MatlabObject, MatStruct
from npystore.files.mat.tree import CharLeaf, NumericLeaf
from npystore.formats import mat4, mat5

CORPUS = mat_corpus.CORPUS


def corpus(versions: tuple[str, ...]) -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with manifest.open() as f:
        return [r["local_path"] for r in csv.DictReader(f, delimiter="\t")
                if r["mat_version"] in versions]  # fmt: skip


# ---------------------------------------------------------------- plain values


def plain(value: Any) -> Any:
    """A value of open_mat as plain Python/numpy, for deep comparison."""
    if isinstance(value, da.Array):
        return ("array", value.compute())
    if isinstance(value, np.ndarray) and value.dtype != object:
        return ("array", value)
    if isinstance(value, MatStruct):
        return ("struct", value.matlab_class, {k: plain(v) for k, v in value.items()})
    if isinstance(value, np.ndarray):
        return ("objects", value.shape, [plain(v) for v in value.reshape(-1, order="F")])
    if sp.issparse(value):
        return ("sparse", value.dtype, value.shape, value.toarray())
    if isinstance(value, MatlabObject):
        return ("object", value.matlab_class)
    if isinstance(value, str):
        return value
    raise AssertionError(f"unexpected value {value!r}")


def char_value(arr: np.ndarray) -> Any:
    if arr.size == 1:
        return str(arr.reshape(-1)[0])
    if arr.size == 0 and arr.ndim <= 1:
        return ""
    return ("objects", arr.shape, list(arr.reshape(-1, order="F")))


def plain_ref(node: Any, buf: bytes) -> Any:
    """What the pure v5 parser decodes, in open_mat's conventions."""
    if isinstance(node, mat5.NumericArray):
        return ("array", node.decode(buf, 0))
    if isinstance(node, mat5.CharArray):
        return char_value(node.decode(buf, 0, as_strings=True))
    if isinstance(node, mat5.SparseArray):
        m = node.decode(buf, 0)
        return ("sparse", m.dtype, m.shape, m.toarray())
    if isinstance(node, mat5.CellArray):
        return ("objects", node.dims, [plain_ref(c, buf) for c in node.cells])
    if isinstance(node, mat5.StructArray):
        elements = [
            ("struct", node.matlab_class, {f: plain_ref(v, buf) for f, v in
                                           node.element(i).items()})
            for i in range(node.numel)
        ]  # fmt: skip
        if node.numel == 1:
            return elements[0]
        return ("objects", node.dims, elements)
    if isinstance(node, mat5.OpaqueObject):
        return ("object", node.matlab_class)
    raise AssertionError(node)


def assert_same(a: Any, b: Any, path: str = "") -> None:
    assert type(a) is type(b), (path, a, b)
    if isinstance(a, tuple | list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, np.ndarray):
        assert (a.shape, a.dtype) == (b.shape, b.dtype), (path, a.shape, a.dtype, b.shape, b.dtype)
        np.testing.assert_array_equal(a, b, err_msg=path)
    else:
        assert a == b, (path, a, b)


def reference(data: bytes) -> dict[str, Any]:
    """Every user variable of a v5 file decoded by the pure parser from the whole file."""
    header = mat5.parse_header(data[:128], source="ref", file_size=len(data))
    entries, _ = mat5.scan_elements(
        data[header.data_start :], header.data_start, len(data), header.byte_order,
        source="ref", subsys_offset=header.subsys_offset,
    )  # fmt: skip
    out: dict[str, Any] = {}
    for e in entries:
        if e.is_subsystem:
            continue
        if e.compressed:
            buf = zlib.decompress(data[e.data_offset : e.end])
            var = mat5.parse_variable(buf, 0, header.byte_order, source="ref", inflated=True)
        else:
            buf = data
            var = mat5.parse_variable(data[e.offset : e.end], e.offset, header.byte_order,
                                      source="ref")  # fmt: skip
        out[var.name] = plain_ref(var.value, buf)
    return out


# ---------------------------------------------------------------- the real corpus


@pytest.mark.skipif(not corpus(("5",)), reason=f"no MAT corpus at {CORPUS}")
@pytest.mark.parametrize("rel", corpus(("5",)))
def test_corpus_v5_equals_the_parser(rel: str) -> None:
    path = CORPUS / rel
    m = npystore.open_mat(str(path))
    assert m.version == "5"
    assert isinstance(npystore.open(str(path)), npystore.MatFile)
    ref = reference(path.read_bytes())
    assert list(m) == list(ref)
    for name in m:
        assert_same(plain(m[name]), ref[name], f"{rel}:{name}")
        info = m.variables[name]
        assert info.name == name


@pytest.mark.skipif(not corpus(("4",)), reason=f"no MAT corpus at {CORPUS}")
@pytest.mark.parametrize("rel", corpus(("4",)))
def test_corpus_v4_equals_scipy(rel: str) -> None:
    path = CORPUS / rel
    m = npystore.open(str(path))
    assert isinstance(m, npystore.MatFile)
    assert m.version == "4"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sio.loadmat(str(path))
    for name in m:
        mine = m[name]
        ref = theirs[name]
        if sp.issparse(ref):
            assert sp.issparse(mine)
            np.testing.assert_array_equal(mine.toarray(), ref.toarray())
            assert m.variables[name].dims == ref.shape
        elif isinstance(mine, da.Array):
            np.testing.assert_array_equal(mine.compute(), ref)
            assert mine.dtype == ref.dtype.newbyteorder("=")
        else:
            assert list(np.atleast_1d(mine)) == list(ref), name


def test_corpus_specifics_v5() -> None:
    """Where scipy answers otherwise, on real MATLAB files (see tests/test_mat5.py)."""
    if not CORPUS.exists():
        pytest.skip("no corpus")
    sparse = npystore.open_mat(str(CORPUS / "MAT.jl/v7_sparse.mat"))
    logical = sparse["sparse_logical"]
    assert logical.dtype == np.bool_  # scipy: uint8 when declared miUINT8
    complex_ = sparse["sparse_complex"]
    assert complex_.dtype == np.complex128
    arrays = npystore.open_mat(str(CORPUS / "MAT.jl/v7_array.mat"))
    assert arrays["a1x2"].shape == (1, 2)  # MATLAB sizes, never squeezed by default
    assert arrays["a2x2x2"].shape == (2, 2, 2)
    empty = arrays["empty"]
    assert isinstance(empty, da.Array)
    assert empty.shape == tuple(arrays.variables["empty"].dims)
    assert 0 in empty.shape
    handles = npystore.open_mat(str(CORPUS / "MAT.jl/v7_function_handles.mat"))
    assert all(isinstance(handles[k], MatlabObject) for k in handles)
    assert handles["sin"].matlab_class == "function_handle"
    table = npystore.open_mat(str(CORPUS / "MAT.jl/v7_struct_table_datetime.mat"))
    s = table["s"]
    assert isinstance(s, MatStruct)
    assert any(isinstance(v, MatlabObject) for v in s.values())
    unicode = npystore.open_mat(str(CORPUS / "scipy/testunicode_7.4_GLNX86.mat"))
    assert isinstance(unicode["testunicode"], str)


# ---------------------------------------------------------------- savemat round trips


def rich_vars() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    return {
        "d": rng.standard_normal((7, 5)),
        "small_ints_as_double": np.arange(12.0).reshape(3, 4),
        "f": rng.standard_normal((4, 3)).astype(np.float32),
        **{f"i_{t}": np.arange(6, dtype=t).reshape(2, 3) for t in
           ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")},
        "logical": np.array([[True, False, True]]),
        "z": (rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))),
        "zf": (np.ones((2, 2)) - 2j).astype(np.complex64),
        "row": "hello",
        "rows": np.array(["abc", "xyz"]),
        "uni": "añ€😀",
        "cell": np.array([[np.arange(3.0), "text", np.array([[1, 2]], dtype=np.int16)]],
                         dtype=object),
        "nested": {"a": np.eye(2), "b": {"c": "deep", "d": np.array([[5.0]])}},
        "sarr": np.array([[(1.0, "x"), (2.0, "yy")]], dtype=[("v", object), ("w", object)]),
        "sparse": sp.random(20, 10, density=0.2, random_state=1, format="csc"),
        "sparse_c": sp.csc_matrix(np.array([[0, 1 + 2j], [3j, 0]])),
        "sparse_l": sp.csc_matrix(np.array([[True, False], [False, True]])),
        "empty": np.zeros((0, 3)),
        "big": rng.standard_normal((300, 200)),
    }  # fmt: skip


def expected(name: str, value: Any) -> Any:
    """The original value in open_mat's conventions (MATLAB shapes: at least 2-D)."""
    if sp.issparse(value):
        dtype = value.dtype
        return ("sparse", dtype, value.shape, value.toarray())
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return ("struct", "struct", {k: expected(k, v) for k, v in value.items()})
    arr = np.asarray(value)
    if arr.dtype.kind == "U":
        return ("objects", (arr.shape[0],), [str(s) for s in arr])
    if arr.dtype.names:
        elements = [("struct", "struct", {f: expected(f, arr[i][f]) for f in arr.dtype.names})
                    for i in np.ndindex(arr.shape)]  # fmt: skip
        return ("objects", arr.shape, elements)
    if arr.dtype == object:
        return ("objects", arr.shape, [expected(name, v) for v in arr.reshape(-1, order="F")])
    arr = np.atleast_2d(arr)
    return ("array", arr)


@pytest.mark.parametrize("compress", [False, True])
def test_savemat_round_trip(tmp_path: Path, compress: bool) -> None:
    data = rich_vars()
    path = tmp_path / "rich.mat"
    sio.savemat(path, data, do_compression=compress)
    m = npystore.open_mat(str(path))
    assert list(m) == list(data)
    for name, value in data.items():
        got = plain(m[name])
        assert_same(got, expected(name, value), name)
    assert m.variables["sparse"].sparse
    assert m.variables["z"].complex
    assert m.variables["big"].dims == (300, 200)
    assert m.variables["cell"].matlab_class == "cell"
    assert m.variables["logical"].matlab_class == "logical"


def test_v4_round_trip(tmp_path: Path) -> None:
    data = {"a": np.arange(6.0).reshape(2, 3), "t": "text", "s": sp.csc_matrix(np.eye(3))}
    path = tmp_path / "v4.mat"
    sio.savemat(path, data, format="4")
    m = npystore.open(str(path))
    assert m.version == "4"
    np.testing.assert_array_equal(m["a"].compute(), data["a"])
    assert m["t"] == "text"
    np.testing.assert_array_equal(m["s"].toarray(), np.eye(3))


def test_squeeze_and_load(tmp_path: Path) -> None:
    path = tmp_path / "sq.mat"
    sio.savemat(path, {"v": np.arange(5.0), "x": np.array([[3.0]])})
    m = npystore.open_mat(str(path), squeeze=True)
    assert m["v"].shape == (5,)
    assert m["x"].shape == ()
    assert npystore.open_mat(str(path))["v"].shape == (1, 5)
    loaded = npystore.open_mat(str(path)).load("v")
    assert isinstance(loaded, np.ndarray)
    assert loaded.shape == (1, 5)
    text = npystore.open_mat(str(path)).describe()
    assert "v" in text
    assert "1x5" in text
    assert "double" in text


def test_large_compressed_variable_stays_in_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compressed variable above INFLATE_WHOLE: leaves read from the zlib stream."""
    from npystore.files.mat import v5 as mat_v5

    monkeypatch.setattr(mat_v5, "INFLATE_WHOLE", 2**20)
    rng = np.random.default_rng(0)
    n = int(math.sqrt(mat_v5.INFLATE_WHOLE / 8)) + 64
    big = np.round(rng.standard_normal((n, n)), 2)
    z = big + 1j * big[::-1]
    path = tmp_path / "bigz.mat"
    sio.savemat(path, {"big": big, "z": z}, do_compression=True)
    m = npystore.open_mat(str(path))
    leaf = m.node("big")
    assert isinstance(leaf, NumericLeaf)
    assert type(leaf.array.layout.storage).__name__ == "DeflatedExtent"
    np.testing.assert_array_equal(m["big"][:, 5].compute(), big[:, 5])
    np.testing.assert_array_equal(m["big"].compute(), big)
    np.testing.assert_array_equal(m["z"][n - 3 :, :4].compute(), z[n - 3 :, :4])


def test_char_leaf_units(tmp_path: Path) -> None:
    path = tmp_path / "c.mat"
    sio.savemat(path, {"c": np.array(["ab", "cd"])})
    node = npystore.open_mat(str(path)).node("c")
    assert isinstance(node, CharLeaf)
    assert node.units.shape == (2, 2)
    assert "".join(map(chr, node.units[0])) == "ab"


def test_listing_does_not_read_data(tmp_path: Path) -> None:
    big = np.ones((1000, 1000))
    path = tmp_path / "l.mat"
    sio.savemat(path, {"a": big, "b": big * 2}, do_compression=True)
    from npystore import fetch

    reader = fetch.open_reader(str(path))
    calls: list[tuple[int, int]] = []
    original = reader.read_many

    def spy(ranges: Any) -> Any:
        calls.extend(ranges)
        return original(ranges)

    reader.read_many = spy  # type: ignore[method-assign]
    from npystore.faces.matfile import mat_from_reader

    m = mat_from_reader(reader, reader.read(0, 128))
    assert m.variables["a"].dims == (1000, 1000)
    assert sum(b - a for a, b in calls) < 64 * 1024


def test_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.mat"
    sio.savemat(path, {"a": np.arange(3.0)})
    sio.savemat(tmp_path / "good.mat", {"a": np.arange(3.0)})
    data = bytearray(path.read_bytes())
    data[128] = 99  # the first tag's type
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"bad\.mat"):
        npystore.open_mat(str(path))
    with pytest.raises(KeyError, match="nope"):
        npystore.open_mat(str(path.with_name("good.mat")))["nope"]
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world, not a mat file at all" * 10)
    with pytest.raises(FormatError):
        npystore.open(str(junk))


# ---------------------------------------------------------------- S3


@pytest.mark.parametrize("compress", [False, True])
def test_s3_round_trip(tmp_path: Path, s3: Any, compress: bool) -> None:
    data = rich_vars()
    path = tmp_path / "rich.mat"
    sio.savemat(path, data, do_compression=compress)
    s3.put_file(path, "rich.mat")
    m = npystore.open_mat(s3.url("rich.mat"), storage_options=s3.storage_options)
    for name, value in data.items():
        assert_same(plain(m[name]), expected(name, value), name)


def test_s3_open_and_describe_requests(tmp_path: Path, s3: Any) -> None:
    path = tmp_path / "two.mat"
    rng = np.random.default_rng(1)
    sio.savemat(path, {"a": rng.standard_normal((500, 500)), "b": "x"}, do_compression=True)
    s3.put_file(path, "two.mat")
    with s3.counter.measure() as m:
        f = npystore.open_mat(s3.url("two.mat"), storage_options=s3.storage_options)
        text = f.describe()
    assert "500x500" in text
    assert m.requests <= 4
    assert m.bytes < 300 * 1024


def test_s3_first_column_of_compressed_matrix(tmp_path: Path, s3: Any) -> None:
    """v5: one zlib stream per variable; a leading column is a short inflate from the
    start (later columns need the stream up to them, or an index)."""
    path = tmp_path / "col.mat"
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2000, 2000))
    sio.savemat(path, {"x": x}, do_compression=True)
    size = path.stat().st_size
    s3.put_file(path, "col.mat")
    f = npystore.open_mat(s3.url("col.mat"), storage_options=s3.storage_options)
    with s3.counter.measure() as m:
        col = f["x"][:, 0].compute()
    np.testing.assert_array_equal(col, x[:, 0])
    assert m.bytes < 0.25 * size


def test_open_dispatch_from_bytes_of_v5_header(tmp_path: Path) -> None:
    path = tmp_path / "hdr.mat"
    buf = io.BytesIO()
    sio.savemat(buf, {"q": np.arange(4.0)})
    path.write_bytes(buf.getvalue())
    assert npystore.sniff(buf.getvalue()[:128]) == "mat"
    v4 = io.BytesIO()
    sio.savemat(v4, {"q": np.arange(4.0)}, format="4")
    assert npystore.sniff(v4.getvalue()[:128]) == "mat"
    assert mat4 is not None


def with_latency(s3: Any, seconds: float, fn: Any) -> tuple[float, Any]:
    """Run ``fn`` with ``seconds`` added before every request of the sandbox's client."""
    import asyncio
    import time

    s3.fs.ls(s3.bucket)  # connect the client
    client = s3.fs.s3

    async def sleep(**_: Any) -> None:
        await asyncio.sleep(seconds)

    client.meta.events.register("before-send.s3", sleep, unique_id="test-latency")
    try:
        t0 = time.perf_counter()
        result = fn()
        return time.perf_counter() - t0, result
    finally:
        client.meta.events.unregister("before-send.s3", unique_id="test-latency")


@pytest.mark.parametrize("compress", [False, True])
def test_s3_open_and_describe_with_30ms_latency(tmp_path: Path, s3: Any, compress: bool) -> None:
    """Issue 5: over S3 with 30 ms per request, open and describe a two-variable file in
    under 1 s (moto's own CPU time per request included)."""
    path = tmp_path / "two.mat"
    rng = np.random.default_rng(4)
    sio.savemat(path, {"signal": rng.standard_normal((3000, 400)), "label": "trial"},
                do_compression=compress)  # fmt: skip
    url = s3.put_file(path, "two.mat")

    def open_and_describe() -> str:
        return npystore.open_mat(url, storage_options=s3.storage_options).describe()

    elapsed, text = with_latency(s3, 0.030, open_and_describe)
    assert "3000x400" in text
    assert "label" in text
    assert elapsed < 1.0, f"{elapsed:.2f} s"


def _savemat73(path: Path, data: dict[str, Any]) -> None:
    hdf5storage = pytest.importorskip("hdf5storage")
    hdf5storage.savemat(str(path), data, format="7.3", matlab_compatible=True)


def test_s3_v73_first_column_of_compressed_matrix(tmp_path: Path, s3: Any) -> None:
    """Issue 5, v7.3: one column of a 2000x2000 compressed double matrix (hdf5storage:
    deflate + shuffle + fletcher32, chunked) moves less than 25% of the file."""
    path = tmp_path / "col73.mat"
    rng = np.random.default_rng(5)
    x = np.round(rng.standard_normal((2000, 2000)), 3)
    _savemat73(path, {"x": x})
    size = path.stat().st_size
    url = s3.put_file(path, "col73.mat")
    f = npystore.open_mat(url, storage_options=s3.storage_options)
    for j in (0, 1234):
        with s3.counter.measure() as m:
            col = f["x"][:, j].compute()
        np.testing.assert_array_equal(col, x[:, j])
        assert m.bytes < 0.25 * size, (j, m.bytes, size)


def test_s3_v73_open_and_describe_with_30ms_latency(tmp_path: Path, s3: Any) -> None:
    """Issue 5, v7.3: open and describe a two-variable file over S3 with 30 ms per
    request in under 1 s."""
    path = tmp_path / "two73.mat"
    rng = np.random.default_rng(6)
    _savemat73(path, {"signal": rng.standard_normal((3000, 400)), "label": "trial"})
    url = s3.put_file(path, "two73.mat")

    def open_and_describe() -> str:
        return npystore.open_mat(url, storage_options=s3.storage_options).describe()

    elapsed, text = with_latency(s3, 0.030, open_and_describe)
    assert "3000x400" in text
    assert "label" in text
    assert elapsed < 1.0, f"{elapsed:.2f} s"


# ------------------------------------------------------- error texts, invalid UTF-8, graphs


def _invalid_utf8_file(path: Path, compress: bool) -> None:
    """scipy writes chars as miUTF8; each "é" (2 bytes) becomes 0xFF 0xA9: invalid UTF-8."""
    sio.savemat(
        path,
        {"s": "abcé", "c": np.array([["xé", "yy"]], dtype=object), "ok": "fine"},
        do_compression=False,
    )
    data = path.read_bytes()
    assert data.count("é".encode()) == 2
    path.write_bytes(data.replace("é".encode(), b"\xff\xa9"))
    if compress:  # the same elements, each in a miCOMPRESSED element
        raw = bytearray(path.read_bytes())
        out = bytearray(raw[:128])
        pos = 128
        while pos < len(raw):
            size = int.from_bytes(raw[pos + 4 : pos + 8], "little")
            element = bytes(raw[pos : pos + 8 + size])
            packed = zlib.compress(element)
            out += (15).to_bytes(4, "little") + len(packed).to_bytes(4, "little") + packed
            pos += 8 + size
        path.write_bytes(bytes(out))


@pytest.mark.parametrize("compress", [False, True])
def test_invalid_utf8_strict_names_the_file_and_replace_matches_scipy(
    tmp_path: Path, compress: bool
) -> None:
    path = tmp_path / "u8.mat"
    _invalid_utf8_file(path, compress)
    m = npystore.open_mat(str(path))
    assert m["ok"] == "fine"
    with pytest.raises(FormatError, match=r"u8\.mat:s: char variable 's': invalid UTF-8 at byte 3"):
        m["s"]
    with pytest.raises(FormatError, match=r"u8\.mat:c\{0\}: .*char_errors='replace'"):
        m.load("c")
    oracle = sio.loadmat(path)
    r = npystore.open_mat(str(path), char_errors="replace")
    assert r["s"] == oracle["s"][0] == "abc\ufffd"
    cells = r.load("c")
    assert [cells[0, 0], cells[0, 1]] == [oracle["c"][0, 0][0], oracle["c"][0, 1][0]]
    with pytest.raises(ValueError, match="char_errors='ignore'"):
        npystore.open_mat(str(path), char_errors="ignore")  # type: ignore[arg-type]


def test_corrupt_zlib_stream_names_the_mat_element(tmp_path: Path) -> None:
    """A corrupt stream that inflates to more than the variable's tag says: the message
    names the miMATRIX tag, not a ZIP directory."""
    a = np.random.default_rng(0).random((300, 200))
    path = tmp_path / "cz.mat"
    sio.savemat(path, {"a": a}, do_compression=True)
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 40):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError) as info:
        npystore.open_mat(str(path))["a"].compute()
    text = str(info.value)
    assert text.startswith(f"{path}:a: ")
    assert "ZIP" not in text
    assert "miMATRIX tag inside the miCOMPRESSED element at offset 128" in text or (
        "corrupt deflate data" in text
    )


@pytest.mark.parametrize("nbytes", [10 * 2**20, 100 * 2**10])
def test_compressed_values_stay_out_of_the_graph(tmp_path: Path, nbytes: int) -> None:
    """A compressed variable inflated whole at open (up to INFLATE_WHOLE) is read inside
    the tasks: its graph holds where the values are, not the values (it held 10 MB)."""
    import pickle

    from npystore.files.mat import v5 as mat_v5

    n = nbytes // 8
    assert nbytes <= mat_v5.INFLATE_WHOLE
    a = np.random.default_rng(1).random((n // 250, 250))
    path = tmp_path / "g.mat"
    sio.savemat(path, {"a": a, "cell": np.array([[a[:300], np.ones(3)]], dtype=object)},
                do_compression=True)  # fmt: skip
    m = npystore.open_mat(str(path), chunks=(n // 1000, -1))
    x = m["a"]
    graph = pickle.dumps(dict(x.__dask_graph__()))
    assert len(graph) < 64 * 2**10, len(graph)
    np.testing.assert_array_equal(x.compute(), a)
    # a copy (what a worker gets) re-inflates what it reads
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(x))[5:9].compute(), a[5:9])
    np.testing.assert_array_equal(m.load("a"), a)
    cell = m["cell"]
    np.testing.assert_array_equal(cell[0, 0].compute(), a[:300])
    assert len(pickle.dumps(cell[0, 0])) < 64 * 2**10
