"""Declared shapes numpy cannot hold: empty arrays of huge dimensions, zero-itemsize dtypes.

A header may declare a shape whose data takes no bytes (a dimension is 0, or the dtype's items
are 0 bytes) while numpy cannot make the array, or can only loop over its 2**62 elements. Each
case is refused at open with an UnsupportedError naming the shape, the dtype and why (one rule,
``npystore.formats.shapes``), or read through every face equal to what numpy gives, quickly.
"""

from __future__ import annotations

import ast
import io
import struct
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr

import npystore
from npystore import UnsupportedError
from npystore.formats.npy_descr import descr_to_dtype
from npystore.formats.shapes import (
    INTP_MAX,
    MAX_ZERO_ITEMSIZE_ELEMENTS,
    check_shape,
    created_itemsize,
    shape_problem,
)

#: Seconds an open (or an open and a read) of these tiny files may take: they must not loop.
FAST = 5.0


def npy_bytes(descr: str, shape: tuple[int, ...]) -> bytes:
    """A .npy file with a hand-written header (``descr`` as literal text) and no data."""
    text = f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape!r}, }}"
    raw = text.encode("latin1")
    raw += b" " * (-(10 + len(raw) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(raw)) + raw


def npy_file(path: Path, descr: str, shape: tuple[int, ...]) -> str:
    """:func:`npy_bytes` written to ``path``; its URL."""
    path.write_bytes(npy_bytes(descr, shape))
    return str(path)


def npz_of(path: Path, npy: str, compression: int) -> str:
    """A .npz archive holding the file ``npy`` as member ``x.npy``."""
    with zipfile.ZipFile(path, "w", compression) as zf:
        zf.write(npy, "x.npy")
    return str(path)


# -- the rule ---------------------------------------------------------------------------------

#: (shape, descr) of files whose data takes no bytes. numpy holds such an array if np.load
#: reads the file and np.empty makes an array like it (what every copy of it does; numpy
#: makes |S1 and <U1 arrays of |S0 and <U0); the rule must say the same.
NUMPY_ORACLE_CASES = [
    ((2**62, 0), "<f8"),
    ((2**62, 0), "|u1"),
    ((0, 2**63 - 1), "|u1"),
    ((0, 2**63 - 1), "<u2"),
    ((0, 2**63), "|u1"),
    ((0, 2**62), "<f8"),
    ((0, 2**59), "<f8"),
    ((0, 2**60), "<f8"),
    ((2**31, 2**31, 0), "<c16"),
    ((2**40, 2**40, 0), "|u1"),
    ((2**40, 2**40, 0), "[]"),  # np.empty makes it; np.load cannot reshape to it
    ((2**62, 4), "[]"),
    ((2**62,), "|V0"),
    ((0, 2**62), "|S0"),  # numpy makes |S1 of it: 2**62 bytes, representable
    ((0, 2**62), "<U0"),  # numpy makes <U1 of it: 2**64 bytes, not
    ((2**31, 0, 2**31), "<U0"),
    ((2**30, 0, 2**31), "<U0"),
    ((5, 0, 2**61), "<i4"),
]


def _dtype(text: str) -> np.dtype[Any]:
    return np.dtype([]) if text == "[]" else np.dtype(text)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # np.load's
@pytest.mark.parametrize(("shape", "descr"), NUMPY_ORACLE_CASES)
def test_rule_agrees_with_numpy(shape: tuple[int, ...], descr: str) -> None:
    dtype = _dtype(descr)
    text = "[]" if descr == "[]" else repr(descr)
    try:
        loaded = np.load(io.BytesIO(npy_bytes(text, shape)))
        made = np.empty(shape, dtype)  # nothing to allocate: empty or 0-byte items
    except ValueError:
        loaded = made = None
    problem = shape_problem(shape, dtype)
    if loaded is not None and made is not None:
        assert (loaded.shape, loaded.dtype, made.nbytes) == (shape, dtype, 0)
        assert problem is None or "0 bytes" in problem  # only npystore's own element limit
    else:
        assert problem is not None
        assert f"numpy cannot make an array of shape {shape} and dtype {dtype}" in problem
        assert str(INTP_MAX) in problem


def test_rule_messages_and_zero_itemsize_limit() -> None:
    assert shape_problem((3, 4), np.dtype("<f8")) is None
    assert shape_problem((), np.dtype([])) is None
    assert shape_problem((MAX_ZERO_ITEMSIZE_ELEMENTS,), np.dtype([])) is None
    over = shape_problem((MAX_ZERO_ITEMSIZE_ELEMENTS + 1,), np.dtype([]))
    assert over is not None
    assert f"{MAX_ZERO_ITEMSIZE_ELEMENTS + 1} elements of 0 bytes" in over
    assert MAX_ZERO_ITEMSIZE_ELEMENTS == 2**24
    empty = shape_problem((2**62, 0), np.dtype("<f8"))
    assert empty is not None
    assert "even empty: its non-zero dimensions give 36893488147419103232 bytes" in empty
    assert created_itemsize(np.dtype("|S0")) == 1
    assert created_itemsize(np.dtype("<U0")) == 4
    assert created_itemsize(np.dtype("|V0")) == 0
    assert created_itemsize(np.dtype([("a", "S0")])) == 0
    with pytest.raises(UnsupportedError, match=r"^here: numpy cannot make an array"):
        check_shape((0, 2**63), np.dtype("<f8"), source="here")
    check_shape((0, 2**59), np.dtype("<f8"), source="here")


# -- .npy and .npz, every entry point ---------------------------------------------------------

#: Headers refused at open: (descr text, shape, message fragment after the shape and dtype).
REFUSED = [
    ("[]", (2**62,), "has 4611686018427387904 elements of 0 bytes"),
    ("'|S0'", (2**62,), "has 4611686018427387904 elements of 0 bytes"),
    ("'|V0'", (2**62,), "has 4611686018427387904 elements of 0 bytes"),
    ("[('a', [])]", (2**62,), "has 4611686018427387904 elements of 0 bytes"),
    ("'<U0'", (2**31, 2**31), "give 18446744073709551616 bytes (4611686018427387904 elem"),
    ("[]", (MAX_ZERO_ITEMSIZE_ELEMENTS + 1,), "has 16777217 elements of 0 bytes"),
    ("'<f8'", (0, 2**63), "even empty: its non-zero dimensions give 9223372036854775808 el"),
    ("'<f8'", (2**62, 0), "even empty: its non-zero dimensions give 36893488147419103232 b"),
    ("'<f8'", (0, 2**62), "even empty: its non-zero dimensions give 36893488147419103232 b"),
    ("[]", (2**62, 4), "its dimensions give 18446744073709551616 elements"),
    ("'<U0'", (2**31, 0, 2**31), "even empty: its non-zero dimensions give 1844674407370955"),
]


def _entry_points(url: str, npz: str, deflated: str) -> dict[str, Callable[[], Any]]:
    import xarray as xr

    return {
        "read_header": lambda: npystore.read_header(url),
        "load": lambda: npystore.load(url),
        "open_npy": lambda: npystore.open_npy(url),
        "open": lambda: npystore.open(url),
        "open_store": lambda: npystore.open_store(url),
        "xarray": lambda: xr.open_dataset(url, engine="npystore"),
        "npz member": lambda: npystore.open_npz(npz)["x"],
        "npz load": lambda: npystore.open_npz(npz).load("x"),
        "deflated member": lambda: npystore.open_npz(deflated)["x"],
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("descr", "shape", "why"), REFUSED, ids=lambda v: str(v)[:24])
def test_unholdable_shapes_are_refused_at_open(
    tmp_path: Path, descr: str, shape: tuple[int, ...], why: str
) -> None:
    url = npy_file(tmp_path / "big.npy", descr, shape)
    npz = npz_of(tmp_path / "big.npz", url, zipfile.ZIP_STORED)
    deflated = npz_of(tmp_path / "bigz.npz", url, zipfile.ZIP_DEFLATED)
    dtype = descr_to_dtype(ast.literal_eval(descr))
    for name, call in _entry_points(url, npz, deflated).items():
        started = time.perf_counter()
        with pytest.raises(UnsupportedError) as info:
            call()
        assert time.perf_counter() - started < FAST, name
        message = str(info.value)
        where = {"npz member": "big.npz:x.npy", "npz load": "big.npz:x.npy"}.get(
            name, "bigz.npz:x.npy" if name == "deflated member" else "big.npy"
        )
        assert f"{where}: " in message, (name, message)
        assert f"shape {shape} and dtype {dtype}" in message, (name, message)
        assert why in message, (name, message)
        if "0 bytes" in why:
            assert "numpy loops over every element" in message
        if "U0" in descr:
            assert "(numpy makes <U0 arrays as <U1)" in message


#: Headers read as numpy reads them: (descr text, shape).
READ = [
    ("[]", (3,)),
    ("'|V0'", (5,)),
    ("'|S0'", (3,)),
    ("'<U0'", (2, 3)),
    ("[('a', [])]", (4,)),
    ("[]", (MAX_ZERO_ITEMSIZE_ELEMENTS,)),
    ("'|u1'", (2**62, 0)),
    ("'<f8'", (0, 2**59)),
    ("[]", (2**62, 0)),
    ("'|S0'", (0, 2**62)),
    ("'<U0'", (2**29, 0, 2**31)),
    ("'<i4'", (0,)),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("descr", "shape"), READ, ids=lambda v: str(v)[:24])
def test_empty_and_zero_itemsize_arrays_read_as_numpy_reads_them(
    tmp_path: Path, descr: str, shape: tuple[int, ...]
) -> None:
    import xarray as xr

    url = npy_file(tmp_path / "e.npy", descr, shape)
    npz = npz_of(tmp_path / "e.npz", url, zipfile.ZIP_STORED)
    deflated = npz_of(tmp_path / "ez.npz", url, zipfile.ZIP_DEFLATED)
    expected = np.load(url)
    copied = expected.copy()  # what numpy gives from any copy: |S0 and <U0 become |S1 and <U1
    started = time.perf_counter()

    def same(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
        assert type(got) is np.ndarray
        assert got.shape == want.shape
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)

    # read straight into numpy: exactly np.load's array, |S0 and <U0 kept
    same(npystore.load(url), expected)
    same(npystore.open_npz(npz).load("x"), expected)
    same(npystore.open_npz(deflated).load("x"), expected)
    # through dask, which copies its result: numpy's copy of it
    for array in (
        npystore.open_npy(url),
        npystore.open_npz(npz)["x"],
        npystore.open_npz(deflated)["x"],
    ):
        same(array.compute(), copied)
        same(array[1:].compute(), copied[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray on structured dtypes
        ds = xr.open_dataset(url, engine="npystore")
        same(ds[next(iter(ds.data_vars))].values, expected)
    if expected.dtype.itemsize:
        same(zarr.open_array(npystore.open_store(url), mode="r")[...], expected)
    else:  # Zarr v3 has no data type of 0 bytes
        with pytest.raises(UnsupportedError, match="zero-size items"):
            zarr.open_array(npystore.open_store(url), mode="r")
    assert time.perf_counter() - started < 10 * FAST


@pytest.mark.timeout(60)
def test_zero_itemsize_chunk_sizes_take_whole_axes(tmp_path: Path) -> None:
    """dask sizes chunks in bytes and refuses to for 0-byte items: any size holds them all."""
    url = npy_file(tmp_path / "v.npy", "'|V0'", (10, 1000))
    expected = np.load(url)
    for chunks in ("auto", "1 MiB", {0: "auto"}, ("1KiB", "auto"), (5, "auto"), -1):
        array = npystore.open_npy(url, chunks=chunks)
        want = ((5, 5), (1000,)) if chunks == (5, "auto") else ((10,), (1000,))
        assert array.chunks == want, chunks
        np.testing.assert_array_equal(array.compute(), expected)
    assert npystore.open_npy(url, chunks=(2, 300)).chunks == ((2,) * 5, (300,) * 3 + (100,))
    with dask.config.set({"array.chunk-size": "1B"}):
        assert npystore.open_npy(url).chunks == ((10,), (1000,))


def test_numpy_header_of_an_empty_array_round_trips(tmp_path: Path) -> None:
    """What numpy writes for such arrays: read back equal."""
    for arr in (
        np.ndarray((3, 0, 2**40), dtype="<f4"),
        np.ndarray((7,), dtype=[]),
        np.ndarray((2, 2), dtype="S0"),
    ):
        buf = io.BytesIO()
        np.save(buf, arr)
        path = tmp_path / "w.npy"
        path.write_bytes(buf.getvalue())
        got = npystore.load(str(path))
        assert (got.shape, got.dtype) == (arr.shape, arr.dtype)
        np.testing.assert_array_equal(npystore.open_npy(str(path)).compute(), arr.copy())
