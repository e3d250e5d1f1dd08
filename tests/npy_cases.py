"""The dtype x shape x order matrix of .npy files, shared by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SHAPES: list[tuple[int, ...]] = [(), (0,), (7,), (5, 3), (3, 0, 2), (4, 5, 6)]
ORDERS = ["C", "F"]


def _dtypes() -> dict[str, np.dtype[Any]]:
    d: dict[str, np.dtype[Any]] = {
        "bool": np.dtype("?"),
        "i1": np.dtype("i1"),
        "u1": np.dtype("u1"),
    }
    for kind in ("i", "u"):
        for size in (2, 4, 8):
            for bo in "<>":
                d[f"{bo}{kind}{size}"] = np.dtype(f"{bo}{kind}{size}")
    for code in ("f2", "f4", "f8", "c8", "c16"):
        for bo in "<>":
            d[f"{bo}{code}"] = np.dtype(f"{bo}{code}")
    for bo in "<>":
        d[f"{bo}longdouble"] = np.dtype(np.longdouble).newbyteorder(bo)
        d[f"{bo}clongdouble"] = np.dtype(np.clongdouble).newbyteorder(bo)
        d[f"{bo}U3"] = np.dtype(f"{bo}U3")
    d["S5"] = np.dtype("S5")
    d["V7"] = np.dtype("V7")
    for unit in ("<M8[ns]", ">M8[D]", "<M8[ms]", "<m8[s]", ">m8[us]", "<m8[W]"):
        d[unit] = np.dtype(unit)
    d["struct_nested"] = np.dtype([("a", "<i4"), ("b", [("c", ">f8"), ("d", "S3")])])
    d["struct_subarray"] = np.dtype([("x", "<f4", (2, 3)), ("y", "u1"), ("z", ">i2", (2,))])
    d["struct_aligned"] = np.dtype([("a", "u1"), ("b", "<f8"), ("c", "<i2")], align=True)
    d["struct_offsets"] = np.dtype(
        {"names": ["a", "b"], "formats": ["<i2", ">f4"], "offsets": [0, 8], "itemsize": 16}
    )
    d["struct_titles"] = np.dtype([(("Title", "t"), "<i4"), ("u", ">u2")])
    d["struct_mixed_order"] = np.dtype([("le", "<f8"), ("be", ">f8"), ("s", "<U2")])
    d["struct_deep"] = np.dtype(
        [("l1", [("l2", [("l3", [("v", ">i8", (2,))])]), ("w", "<c8")]), ("pad", "V3")]
    )
    d["struct_utf8_names"] = np.dtype([("\u00e9t\u00e9", "<i4"), ("\u2603", ">f8")])
    return d


DTYPES = _dtypes()


def make_array(dtype: np.dtype[Any], shape: tuple[int, ...], order: str, seed: int = 0) -> Any:
    """Random bytes viewed as ``dtype`` (every bit pattern, padding included)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8).tobytes()
    arr = np.frombuffer(raw, dtype=dtype, count=n).reshape(shape).copy()
    if dtype.kind == "b":  # numpy canonicalises bools on many paths: keep them 0/1
        arr = (arr.view(np.uint8) & 1).astype(bool)
    return np.asfortranarray(arr) if order == "F" else arr


def write_case(directory: Path, name: str, shape: tuple[int, ...], order: str) -> tuple[Path, Any]:
    dtype = DTYPES[name]
    arr = make_array(dtype, shape, order, seed=len(shape) * 31 + len(name))
    safe = name.replace("<", "le").replace(">", "be").replace("[", "_").replace("]", "")
    path = directory / f"{safe}-{'x'.join(map(str, shape)) or 'scalar'}-{order}.npy"
    np.save(path, arr)
    return path, arr


def assert_same(got: Any, expected: Any) -> None:
    """Exact equality: dtype (byte order, fields, offsets), shape and every byte."""
    assert isinstance(got, np.ndarray)
    assert got.dtype == expected.dtype
    assert got.dtype.str == expected.dtype.str
    assert got.dtype.descr == expected.dtype.descr
    assert got.dtype.itemsize == expected.dtype.itemsize
    assert got.shape == expected.shape
    if got.dtype.names is not None:
        # numpy copies structured arrays field by field (padding bytes are not preserved by
        # numpy's own copies), so compare the fields' bytes, recursively
        for field in got.dtype.names:
            assert_same(got[field], expected[field])
        return
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(expected).tobytes()
