"""Malformed, truncated and hostile .npy files: FormatError naming the URL, never bad data."""

from __future__ import annotations

import io
import struct
import sys
import time
import tokenize
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npystore
from npystore import FormatError, UnsupportedError
from npystore.formats import npy, npy_descr


def _npy_bytes(arr: Any, version: tuple[int, int] | None = None) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def _header_file(path: Path, header: str, data: bytes = b"", version: int = 1) -> str:
    text = header.encode("latin1" if version < 3 else "utf8")
    if version == 1:
        pre = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text))
    else:
        pre = b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(text))
    path.write_bytes(pre + text + data)
    return str(path)


def _all_entry_points(url: str) -> list[Any]:
    return [
        lambda: npystore.read_header(url),
        lambda: npystore.open_npy(url).compute(),
        lambda: npystore.load(url),
        lambda: npystore.open(url).compute(),
    ]


def test_truncated_data_is_format_error(tmp_path: Path) -> None:
    good = _npy_bytes(np.arange(100, dtype="<f8"))
    path = tmp_path / "t.npy"
    path.write_bytes(good[:-1])
    for call in _all_entry_points(str(path))[1:]:
        with pytest.raises(FormatError, match=r"t\.npy.*truncated.*800 bytes"):
            call()


@pytest.mark.parametrize("cut", [0, 3, 6, 8, 9, 11, 50, 127])
def test_truncated_header_is_format_error(tmp_path: Path, cut: int) -> None:
    good = _npy_bytes(np.arange(3, dtype="<f8"))
    path = tmp_path / "h.npy"
    path.write_bytes(good[:cut])
    for call in _all_entry_points(str(path)):
        with pytest.raises(FormatError, match=r"h\.npy"):
            call()


def test_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    path.write_bytes(b"\x93NUMPZ\x01\x00" + b"x" * 200)
    with pytest.raises(FormatError, match=r"x\.npy: not an \.npy file: expected magic"):
        npystore.read_header(str(path))
    with pytest.raises(FormatError, match="unknown format"):
        npystore.open(str(path))


def test_unknown_version_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "v.npy"
    path.write_bytes(b"\x93NUMPY\x04\x00" + b"\x00" * 200)
    with pytest.raises(UnsupportedError, match=r"version 4\.0"):
        npystore.read_header(str(path))


@pytest.mark.parametrize(
    ("header", "match"),
    [
        ("{'descr': '<f8', 'fortran_order': False}", "keys"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), 'x': 1}", "keys"),
        ("{'descr': '<f8', 'fortran_order': 0, 'shape': (3,)}", "fortran_order"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': [3]}", "shape"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}", "shape"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (True,)}", "shape"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (" + "1," * 65 + ")}", "shape"),
        ("{'descr': 'nonsense', 'fortran_order': False, 'shape': (3,)}", "descr"),
        ("{'descr': 5, 'fortran_order': False, 'shape': (3,)}", "descr"),
        ("{'descr': [('a',)], 'fortran_order': False, 'shape': (3,)}", "descr"),
        ("{'descr': [(1, '<i4')], 'fortran_order': False, 'shape': (3,)}", "descr"),
        ("{'descr': [('a', '<i4'), ('a', '<i4')], 'fortran_order': False, 'shape': (3,)}", "descr"),
        ("{'descr': [('a', '<i4', (-2,))], 'fortran_order': False, 'shape': (3,)}", "descr"),
        ("{'descr': '<U99999999999999999', 'fortran_order': False, 'shape': (3,)}", "descr"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (3,)", "parse"),
        ("__import__('os').system('echo pwned')", "parse"),
        ("[1, 2, 3]", "dict"),
        ("{'descr': '<f8', 'fortran_order': False, 'shape': (2**62,)}", "parse"),
    ],
)
def test_bad_headers(tmp_path: Path, header: str, match: str) -> None:
    url = _header_file(tmp_path / "bad.npy", header, b"\x00" * 64)
    with pytest.raises(FormatError, match=match) as info:
        npystore.read_header(url)
    assert "bad.npy" in str(info.value)


def test_declared_size_beyond_file(tmp_path: Path) -> None:
    url = _header_file(
        tmp_path / "big.npy",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000, 1000000000000), }",
        b"\x00" * 64,
    )
    with pytest.raises(FormatError, match=r"big\.npy: truncated"):
        npystore.open_npy(url)


def test_header_length_beyond_file(tmp_path: Path) -> None:
    path = tmp_path / "hl.npy"
    path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31) + b"{" * 100)
    with pytest.raises(FormatError, match=r"max_header_size"):
        npystore.read_header(str(path))
    with pytest.raises(FormatError, match=r"truncated .npy file: the header ends at byte"):
        npystore.read_header(str(path), max_header_size=2**32)


def test_object_arrays_need_allow_pickle(tmp_path: Path) -> None:
    arr = np.array([{"a": 1}, [1, 2], "x", None], dtype=object)
    path = tmp_path / "o.npy"
    np.save(path, arr, allow_pickle=True)
    with pytest.raises(UnsupportedError, match="allow_pickle"):
        npystore.open_npy(str(path))
    with pytest.raises(UnsupportedError, match="allow_pickle"):
        npystore.load(str(path))
    header = npystore.read_header(str(path))
    assert header.dtype == np.dtype(object)
    got = npystore.open_npy(str(path), allow_pickle=True)
    assert got.chunks == ((4,),)
    assert list(got.compute()) == list(arr)
    assert list(npystore.load(str(path), allow_pickle=True)) == list(arr)
    assert list(got[1:3].compute()) == list(arr[1:3])


def test_structured_with_object_field_needs_pickle(tmp_path: Path) -> None:
    arr = np.array([(1, "x"), (2, [3])], dtype=[("a", "<i4"), ("b", "O")])
    path = tmp_path / "so.npy"
    np.save(path, arr, allow_pickle=True)
    with pytest.raises(UnsupportedError, match="allow_pickle"):
        npystore.open_npy(str(path))
    got = npystore.load(str(path), allow_pickle=True)
    assert got["a"].tolist() == [1, 2]
    assert got["b"].tolist() == ["x", [3]]


def test_header_over_64k_version_2(tmp_path: Path) -> None:
    dtype = np.dtype([(f"field_{i:05d}", "<i2") for i in range(4000)])
    arr = np.zeros(3, dtype=dtype)
    arr["field_01234"] = [1, 2, 3]
    path = tmp_path / "wide.npy"
    np.save(path, arr)
    header = npystore.read_header(str(path))
    assert header.version == (2, 0)
    assert header.data_offset > 65536
    with pytest.raises(ValueError, match="max_header_size"):
        np.load(path)  # numpy refuses it by default; npystore reads it
    expected = np.load(path, max_header_size=10**6)
    got = npystore.load(str(path))
    assert got.dtype == expected.dtype
    assert got["field_01234"].tolist() == [1, 2, 3]
    with pytest.raises(FormatError, match="max_header_size=1000"):
        npystore.read_header(str(path), max_header_size=1000)


def _nested(levels: int, inner: Any = "<f8") -> np.dtype[Any]:
    """A structured dtype ``levels`` deep: one field of one field ... of ``inner``."""
    dtype = np.dtype(inner)
    for _ in range(levels):
        dtype = np.dtype([("a", dtype)])
    return dtype


@pytest.mark.parametrize(
    ("levels", "inner"),
    [
        (32, "<f8"),
        (64, ">i2"),
        (99, "<f8"),  # the deepest numpy.load reads: 199 brackets in the header
        (98, [("x", "<f8", (2,))]),  # deepest around a subarray field: 200 brackets
        (98, {"names": ["x"], "formats": ["<u4"], "titles": ["t"]}),  # around a titled field
    ],
    ids=lambda v: str(v)[:12],
)
def test_deep_structured_dtypes_numpy_writes_and_reads(
    tmp_path: Path, levels: int, inner: Any
) -> None:
    dtype = _nested(levels, inner)
    arr = np.frombuffer(np.random.default_rng(levels).bytes(4 * dtype.itemsize), dtype).copy()
    path = tmp_path / "deep.npy"
    np.save(path, arr)
    expected = np.load(path)
    url = str(path)
    got = npystore.load(url)
    assert got.dtype == expected.dtype
    assert got.tobytes() == expected.tobytes()
    lazy = npystore.open_npy(url)
    assert lazy.dtype == expected.dtype
    assert lazy[1:3].compute().tobytes() == expected[1:3].tobytes()
    assert npystore.read_header(url).dtype == expected.dtype


def test_headers_deeper_than_numpy_reads_are_format_errors(tmp_path: Path) -> None:
    # numpy.save writes 100 levels; numpy.load cannot read them back: 201 brackets. Its
    # header filter tokenizes the text: Python < 3.12's tokenize passes it on to
    # ast.literal_eval, whose SyntaxError numpy turns into "Cannot parse header"; from
    # Python 3.12 on tokenize itself raises TokenError (more than 200 nested brackets), which
    # numpy lets through
    path = tmp_path / "deeper.npy"
    np.save(path, np.zeros(2, _nested(100)))
    if sys.version_info >= (3, 12):
        with pytest.raises(tokenize.TokenError, match="too many nested parentheses"):
            np.load(path)
    else:
        with pytest.raises(ValueError, match="Cannot parse header"):
            np.load(path)
    for call in _all_entry_points(str(path)):
        with pytest.raises(FormatError, match=r"deeper\.npy: .*nesting deeper than 200 levels"):
            call()
    # (descr, shape) pairs nest the dtype 120 levels within 123 brackets: the dtype's limit
    descr = "[('a', " + "(" * 120 + "'<f8'" + ", 1)" * 120 + ")]"
    url = _header_file(
        tmp_path / "pairs.npy", f"{{'descr': {descr}, 'fortran_order': False, 'shape': (1,)}}"
    )
    with pytest.raises(FormatError, match=r"pairs\.npy: .*nests deeper than 99 levels"):
        npystore.read_header(url)
    assert npy.MAX_HEADER_NESTING == 200
    assert npy_descr.MAX_DTYPE_DEPTH == 99


@pytest.mark.timeout(60)
def test_one_mib_header_of_small_dicts_is_refused_within_a_second(tmp_path: Path) -> None:
    """The header of issue 14: 1 MiB of ``[{'\\n': 1}, ...]``. It was 2-3 s to refuse."""
    unit = "{'\\n': 1}, "
    text = "[" + unit * ((npy.DEFAULT_MAX_HEADER_SIZE - 4) // len(unit))
    text = (text + "]").ljust(npy.DEFAULT_MAX_HEADER_SIZE - 1) + "\n"
    raw = text.encode("latin1")
    url = _header_file(tmp_path / "dicts.npy", text, version=2)
    assert len(raw) == npy.DEFAULT_MAX_HEADER_SIZE
    started = time.process_time()
    with pytest.raises(FormatError, match=r"dicts\.npy: .npy header is a list, expected a dict"):
        npystore.read_header(url)
    assert time.process_time() - started < 1.0


def test_python2_header_with_long_suffix(tmp_path: Path) -> None:
    url = _header_file(
        tmp_path / "py2.npy",
        "{'descr': '<i2', 'fortran_order': False, 'shape': (3L,), }      \n",
        np.arange(3, dtype="<i2").tobytes(),
    )
    assert npystore.load(url).tolist() == [0, 1, 2]


def test_data_offset_not_aligned(tmp_path: Path) -> None:
    # old numpy versions aligned headers to 16 bytes, not 64: the offset comes from HEADER_LEN
    data = np.arange(4, dtype=">i4").tobytes()
    url = _header_file(
        tmp_path / "old.npy", "{'descr': '>i4', 'fortran_order': False, 'shape': (4,)}\n", data
    )
    header = npystore.read_header(url)
    assert header.data_offset % 64 != 0
    assert npystore.load(url).tolist() == [0, 1, 2, 3]
    assert np.load(url).tolist() == [0, 1, 2, 3]


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_files_raise_only_npystore_errors(tmp_path: Path, data: Any) -> None:
    base = _npy_bytes(
        np.zeros((3, 2), dtype=[("a", "<i4"), ("b", ">f8", (2,))]),
        version=data.draw(st.sampled_from([(1, 0), (2, 0), (3, 0)])),
    )
    blob = bytearray(base)
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = data.draw(st.integers(0, max(0, len(blob) - 1)))
        if op == "flip" and blob:
            blob[pos] = data.draw(st.integers(0, 255))
        elif op == "insert":
            blob[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and blob:
            del blob[pos : pos + data.draw(st.integers(1, 8))]
        else:
            del blob[pos:]
    path = tmp_path / "m.npy"
    path.write_bytes(bytes(blob))
    try:
        got = npystore.load(str(path))
    except (FormatError, UnsupportedError) as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        assert "m.npy" in message
        return
    # whatever parses must agree with numpy on the same bytes
    expected = np.load(path)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
