"""npystore's Zarr data types (:mod:`npystore.faces.zarr.dtypes`) against real on-disk Zarr v3
arrays, on the zarr installed (3.1.6 and 3.4.x in CI).

What zarr returns when reading an array written with ``zarr.create_array(dtype=numpy_dtype)``:

- records zarr gets wrong or lacks (``CLAIMED``: the ``struct_*`` records; with zarr 3.1 also
  those with big-endian fields, which zarr 3.2's ``struct`` stores right),
  ``longdouble``/``clongdouble``: npystore's types; the exact dtype (per-field byte order,
  offsets, titles, alignment) in every process;
- every other dtype: zarr's own type; the same dtype in the writing process, the same values
  in little-endian (native) order once reopened, because the byte order is in the ``bytes``
  codec, not in zarr's data type JSON;
- 0-d arrays come back as NumPy scalars, which keep values but not the 6 padding bytes of an
  x87 long double (so those are compared on their 10 significant bytes).
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.core.dtype
from zarr.core.dtype import (
    DataTypeRegistry,
    Structured,
    TimeDelta64,
    data_type_registry,
    get_data_type_from_json,
    get_data_type_from_native_dtype,
    parse_data_type,
)

from npystore.errors import UnsupportedError
from npystore.faces.zarr.dtypes import (
    ZARR_RECORD,
    DataTypeValidationError,
    ExactStructuredGate,
    NpyScalar,
    NpyStructured,
    register_dtypes,
    zarr_dtype_for,
    zarr_structured_is_exact,
)

from npy_cases import DTYPES, assert_same, make_array

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),  # zarr: unstable data type specs
    pytest.mark.filterwarnings("ignore:Stored array in format 3.0:UserWarning"),  # utf8 names
]

ROOT = Path(__file__).resolve().parents[1]
CASES: list[tuple[tuple[int, ...], tuple[int, ...], str]] = [
    ((), (), "C"),
    ((0,), (1,), "C"),
    ((7,), (3,), "C"),
    ((5, 3), (2, 2), "F"),
]
#: dtypes whose raw bytes only npystore's types describe (``zarr_dtype_for``, npystore's store)
NPYSTORE_NAMES = [n for n in DTYPES if n.startswith("struct_") or "longdouble" in n]
#: zarr >= 3.2: the ``struct`` data type, whose ``bytes`` codec keeps fields' byte order
ZARR_HAS_STRUCT = hasattr(zarr.core.dtype, "Struct")
#: packed records with big-endian fields: zarr 3.1 returns them byte-swapped, zarr 3.4 right
BIG_ENDIAN_RECORDS = {"struct_nested", "struct_mixed_order", "struct_utf8_names"}
#: the dtypes npystore's types take when zarr itself picks (``zarr.create_array(dtype=...)``)
CLAIMED = [n for n in NPYSTORE_NAMES if not (ZARR_HAS_STRUCT and n in BIG_ENDIAN_RECORDS)]


def _significant(a: Any) -> bytes:
    """The bytes that carry values (of x87 long doubles: 10 of 16, in little-endian order)."""
    a = np.ascontiguousarray(a).reshape(-1)
    if a.dtype.char in "gG" and np.finfo(np.longdouble).nmant == 63:
        part = a.dtype.itemsize // (2 if a.dtype.char == "G" else 1)
        a = a.astype(a.dtype.newbyteorder("<"))
        return bytes(a.view(np.uint8).reshape(-1, part)[:, :10].tobytes())
    return bytes(a.tobytes())


def check_values(got: Any, expected: Any, exact: bool = False) -> None:
    """Equal values in any byte order; ``exact`` records: the exact dtype (per-field byte
    order, offsets, titles) and every byte."""
    got = np.asarray(got)  # zarr returns NumPy scalars for 0-d arrays
    assert got.shape == expected.shape
    if exact and expected.dtype.names is not None:
        assert_same(got, expected)
        return
    native = expected.dtype.newbyteorder("=")
    assert got.dtype.newbyteorder("=") == native
    assert _significant(got.astype(native)) == _significant(expected.astype(native))


def _write_cases(root: Path, name: str) -> list[tuple[Path, Any, zarr.Array]]:
    """Real Zarr v3 arrays of DTYPES[name] under ``root``, each with an .npy of its values."""
    dtype, out = DTYPES[name], []
    for i, (shape, chunks, order) in enumerate(CASES):
        arr = make_array(dtype, shape, order, seed=i)
        path = root / f"{list(DTYPES).index(name)}-{i}"
        z = zarr.create_array(store=str(path), shape=shape, chunks=chunks, dtype=dtype)
        z[...] = arr
        np.save(path.with_suffix(".npy"), arr)
        out.append((path, arr, z))
    return out


@pytest.mark.parametrize("name", list(DTYPES))
def test_zarr_dtype_for_is_exact(name: str) -> None:
    dtype = DTYPES[name]
    zdtype = zarr_dtype_for(dtype)
    native = zdtype.to_native_dtype()
    assert native == dtype
    assert native.descr == dtype.descr
    assert native.str == dtype.str
    assert native.itemsize == dtype.itemsize
    assert native.isalignedstruct == dtype.isalignedstruct
    if dtype.names is not None:
        for field in dtype.names:  # per-field byte order, recursively through descr
            assert native.fields[field] == dtype.fields[field]
    expected = NpyScalar if "longdouble" in name else NpyStructured
    if name in NPYSTORE_NAMES:
        assert type(zdtype) is expected
    else:
        assert type(zdtype).__module__.startswith("zarr.core.dtype")


@pytest.mark.parametrize("name", list(DTYPES))
def test_registry_matches_npystores_types_where_zarr_is_wrong(name: str) -> None:
    """Handing zarr the NumPy dtype picks npystore's type exactly where zarr's is wrong or
    missing (``CLAIMED``), zarr's own type otherwise; the same as ``zarr_dtype_for`` except for
    records with big-endian fields from zarr 3.2 on (zarr converts them on write, but cannot
    read raw bytes of both byte orders: npystore's store keeps them)."""
    dtype = DTYPES[name]
    ours = zarr_dtype_for(dtype)
    for picked in (get_data_type_from_native_dtype(dtype), parse_data_type(dtype, zarr_format=3)):
        if name in CLAIMED:
            assert type(picked) is type(ours)
            assert type(picked).__module__.startswith("npystore.")
        else:
            assert type(picked).__module__.startswith("zarr.core.dtype")
            assert picked.to_native_dtype() == dtype
            if name not in BIG_ENDIAN_RECORDS:
                assert type(picked) is type(ours)


def test_exact_records_stay_zarrs_own() -> None:
    key = ZARR_RECORD._zarr_v3_name  # "struct" from zarr 3.2, "structured" in zarr 3.1
    assert key == ("struct" if ZARR_HAS_STRUCT else "structured")
    assert data_type_registry.get(key) is ExactStructuredGate
    assert issubclass(ExactStructuredGate, ZARR_RECORD)
    zarrs_keys = {k for k, c in data_type_registry.contents.items() if issubclass(c, Structured)}
    assert zarrs_keys == {key}  # no second record type next to zarr's ("Multiple ... found")
    exact = [
        np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "S3"), ("d", "?")]),
        np.dtype([("a", "<i4"), ("b", [("c", "<u2"), ("d", "<M8[ns]")])]),
    ]
    inexact = [
        np.dtype([("a", "<i4"), ("b", "<i4")], align=True),
        np.dtype({"names": [], "formats": [], "itemsize": 4}),
        np.dtype([("a", "<f16")]),
        np.dtype([(("t", "a"), "<i4")]),
        np.dtype([("a", "<i4", (2,))]),
    ]
    (exact if ZARR_HAS_STRUCT else inexact).append(np.dtype([("a", ">i4"), ("b", "<u2")]))
    for dtype in exact:
        assert zarr_structured_is_exact(dtype)
        zdtype = get_data_type_from_native_dtype(dtype)
        assert type(zdtype) is ZARR_RECORD  # zarr's own class, not the gate
        assert zdtype.to_native_dtype() == dtype
        again = get_data_type_from_json(zdtype.to_json(zarr_format=3), zarr_format=3)
        assert type(again) is ZARR_RECORD
        assert again.to_native_dtype() == dtype.newbyteorder("<")  # JSON has no byte order
    for dtype in inexact:
        assert not zarr_structured_is_exact(dtype)
        assert type(get_data_type_from_native_dtype(dtype)) is NpyStructured


def test_register_dtypes_is_idempotent() -> None:
    before = dict(data_type_registry.contents)
    register_dtypes()
    register_dtypes()
    assert data_type_registry.contents == before
    assert data_type_registry.get("npystore.structured") is NpyStructured
    assert data_type_registry.get("npystore.scalar") is NpyScalar


def test_object_dtypes_are_unsupported() -> None:
    for dtype in (
        np.dtype(object),
        np.dtype([("a", "<i4"), ("o", "O")]),
        np.dtype([("a", [("o", "O", (2,))])]),
    ):
        with pytest.raises(UnsupportedError, match="Python objects"):
            zarr_dtype_for(dtype)
    with pytest.raises(UnsupportedError, match="zero-size"):
        zarr_dtype_for(np.dtype("V0"))
    with pytest.raises(DataTypeValidationError):
        NpyStructured.from_numpy(np.dtype([("o", "O")]))


@pytest.mark.parametrize("name", list(DTYPES))
def test_real_zarr_arrays_round_trip(tmp_path: Path, name: str) -> None:
    exact = name in CLAIMED
    for path, arr, written in _write_cases(tmp_path, name):
        for z in (written, zarr.open_array(str(path), mode="r")):  # this process, zarr.json
            got = np.asarray(z[...])
            check_values(got, arr, exact)
            if arr.ndim == 0 and arr.dtype.names is None:
                continue  # a NumPy scalar: no byte order
            if exact:
                assert_same(got, arr)  # every byte, long double padding included
            elif z is written:
                assert got.dtype.str == arr.dtype.str
            else:  # zarr's own types: the byte order is in the bytes codec, reads are native
                assert got.dtype.str == arr.dtype.newbyteorder("=").str


def test_writing_process_keeps_byte_order(tmp_path: Path) -> None:
    """In the writing process zarr's own types keep the byte order they were created with."""
    arr = np.arange(6, dtype=">i4")
    z = zarr.create_array(store=str(tmp_path / "be"), shape=(6,), chunks=(4,), dtype=arr.dtype)
    z[...] = arr
    assert_same(z[...], arr)
    assert z.metadata.codecs[0].to_dict() == {
        "name": "bytes",
        "configuration": {"endian": "little"},
    }
    reopened = zarr.open_array(str(tmp_path / "be"), mode="r")[...]
    assert reopened.dtype == np.dtype("<i4")
    assert np.array_equal(reopened, arr)


@pytest.mark.parametrize("importing", ["npystore", "npystore.faces.zarr.dtypes"])
def test_fresh_process_reads_every_dtype(tmp_path: Path, importing: str) -> None:
    """A new interpreter that imports only ``importing`` (then zarr) reads every array
    back: ``import npystore`` imports no zarr, but registers npystore's data types when
    zarr is imported (zarr 3.1 never loads its ``zarr.data_type`` entry points)."""
    for name in DTYPES:
        _write_cases(tmp_path, name)
    child = "\n".join(
        [
            "import sys, pathlib, warnings",
            "from typing import Any",
            f"sys.path.insert(0, {str(ROOT / 'tests')!r})",
            "warnings.simplefilter('ignore')",
            f"import {importing}",
            "import numpy as np, zarr",
            "from npy_cases import assert_same",
            inspect.getsource(_significant),
            inspect.getsource(check_values),
            f"paths = sorted(pathlib.Path({str(tmp_path)!r}).glob('*.npy'))",
            f"claimed = {sorted(str(list(DTYPES).index(n)) for n in CLAIMED)!r}",
            "for npy in paths:",
            "    got = zarr.open_array(str(npy.with_suffix('')), mode='r')[...]",
            "    check_values(got, np.load(npy), npy.stem.split('-')[0] in claimed)",
            "print(len(paths))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout) == len(DTYPES) * len(CASES)


@pytest.mark.parametrize("name", CLAIMED)
def test_metadata_json_round_trips(tmp_path: Path, name: str) -> None:
    path, arr, _ = _write_cases(tmp_path, name)[2]

    def no_constants(text: str) -> None:
        raise AssertionError(f"non-standard JSON constant {text}")

    meta = json.loads((path / "zarr.json").read_text("utf-8"), parse_constant=no_constants)
    zdtype = zarr_dtype_for(arr.dtype)
    assert meta["data_type"] == json.loads(json.dumps(zdtype.to_json(zarr_format=3)))
    assert meta["data_type"]["name"] == type(zdtype)._zarr_v3_name
    assert meta["codecs"][0] == {"name": "bytes"}  # no endianness: chunks are exact bytes
    again = type(zdtype).from_json(meta["data_type"], zarr_format=3)
    assert again == zdtype
    assert hash(again) == hash(zdtype)
    assert get_data_type_from_json(meta["data_type"], zarr_format=3) == zdtype
    fill = zdtype.from_json_scalar(meta["fill_value"], zarr_format=3)
    assert zdtype.to_json_scalar(fill, zarr_format=3) == meta["fill_value"]
    assert base64.b64decode(meta["fill_value"]) == bytes(arr.dtype.itemsize)  # zeros
    value = arr.reshape(-1)[0]
    text = zdtype.to_json_scalar(value, zarr_format=3)
    back = zdtype.from_json_scalar(text, zarr_format=3)
    assert zdtype.to_json_scalar(back, zarr_format=3) == text
    check_values(np.asarray(back, dtype=arr.dtype), np.asarray(value, dtype=arr.dtype), True)


def test_structured_mixed_byte_order(tmp_path: Path) -> None:
    """zarr 3.1.6's own Structured type silently returns byte-swapped values for big-endian
    fields once reopened, so npystore's type takes such records there; zarr 3.4's Struct
    converts them on write and returns them right (in native order), so zarr keeps them."""
    dtype = DTYPES["struct_mixed_order"]
    arr = np.zeros(4, dtype)
    arr["le"] = arr["be"] = [1.5, -2.0, 3.25, 1e300]
    arr["s"] = ["ab", "c", "", "zz"]
    zarrs = zarr.create_array(
        store=str(tmp_path / "zarr"), shape=(4,), dtype=ZARR_RECORD.from_native_dtype(dtype)
    )
    zarrs[...] = arr
    assert_same(zarrs[...], arr)  # right in the writing process, whose type has byte order
    ours = zarr.create_array(store=str(tmp_path / "ours"), shape=(4,), dtype=dtype)
    ours[...] = arr

    reopened = zarr.open_array(str(tmp_path / "zarr"), mode="r")[...]
    assert reopened.dtype["be"] == np.dtype("<f8")  # the byte order is not in the JSON
    assert np.array_equal(reopened["le"], arr["le"])
    if ZARR_HAS_STRUCT:
        assert np.array_equal(reopened["be"], arr["be"])  # zarr >= 3.2: right
        assert type(ours.metadata.data_type) is ZARR_RECORD
        check_values(zarr.open_array(str(tmp_path / "ours"), mode="r")[...], arr)
    else:  # zarr 3.1: the values are lost
        assert not np.array_equal(reopened["be"], arr["be"])
        assert np.array_equal(reopened["be"], np.ascontiguousarray(arr["be"]).view("<f8"))
        assert type(ours.metadata.data_type) is NpyStructured
        assert_same(zarr.open_array(str(tmp_path / "ours"), mode="r")[...], arr)


def test_generic_datetime(tmp_path: Path) -> None:
    """zarr 3.1's own type for unit-less datetime64 writes a fill value it cannot read back, so
    ``zarr_dtype_for`` takes npystore's there; zarr 3.4's reads it (unit-less timedelta64
    works in both)."""
    assert type(zarr_dtype_for(np.dtype(">m8"))) is TimeDelta64
    for i, text in enumerate(("<M8", ">M8")):
        dtype = np.dtype(text)
        zdtype = zarr_dtype_for(dtype)
        assert type(zdtype).__module__.startswith("zarr." if ZARR_HAS_STRUCT else "npystore.")
        nat = np.full(3, np.iinfo(np.int64).min, dtype=f"{text[0]}i8")
        arr = np.frombuffer(nat.tobytes(), dtype=dtype)  # NaT, byte order kept
        path = tmp_path / f"generic{i}"
        zarr.create_array(store=str(path), shape=(3,), dtype=zdtype)[...] = arr
        got = zarr.open_array(str(path), mode="r")[...]
        # numpy makes unit-less datetime arrays native-endian (and its astype would not swap)
        assert np.array_equal(got.view(f"{got.dtype.str[0]}i8"), nat)
    broken = tmp_path / "broken"
    zarr.create_array(store=str(broken), shape=(3,), dtype=np.dtype("<M8"))
    if ZARR_HAS_STRUCT:
        assert np.isnat(zarr.open_array(str(broken), mode="r")[...]).all()
    else:
        with pytest.raises(TypeError, match="fill_value"):
            zarr.open_array(str(broken), mode="r")


def test_longdouble_format_is_checked() -> None:
    if np.dtype(np.longdouble).itemsize != 16:
        pytest.skip("long double is not 16 bytes here")
    zdtype = NpyScalar(descr="<f16")
    meta = zdtype.to_json(zarr_format=3)
    assert meta["configuration"]["longdouble"]["nmant"] == np.finfo(np.longdouble).nmant
    alien = {"name": "npystore.scalar", "configuration": {"dtype": "<f16", "longdouble": {}}}
    with pytest.raises(UnsupportedError, match="long doubles"):
        get_data_type_from_json(alien, zarr_format=3)
    record = zarr_dtype_for(np.dtype([("x", "<f16", (2,)), ("y", ">i4")]))
    assert "longdouble" in record.to_json(zarr_format=3)["configuration"]


@pytest.mark.parametrize(
    "config",
    [
        {"fields": [{"name": "a", "title": None, "offset": 0, "dtype": "|O"}], "itemsize": 8},
        {"fields": [{"name": "a", "title": None, "offset": 0, "dtype": "<i4"}], "itemsize": 2},
        {"fields": [{"name": "a", "title": None, "offset": -1, "dtype": "<i4"}], "itemsize": 4},
        {"fields": [{"name": "a", "offset": 0, "dtype": "<i4"}], "itemsize": 4},
        {"fields": [{"name": "a", "title": None, "offset": 0, "dtype": "nonsense"}], "itemsize": 4},
        {"fields": "a", "itemsize": 4},
    ],
)
def test_malformed_metadata_is_rejected(config: dict[str, Any]) -> None:
    data = {"name": "npystore.structured", "configuration": {**config, "aligned": False}}
    with pytest.raises(DataTypeValidationError):
        NpyStructured.from_json(data, zarr_format=3)


@pytest.mark.parametrize("text", ["O", "i4,f8", "(2,)f4", "nonsense", 4])
def test_malformed_scalar_metadata_is_rejected(text: object) -> None:
    data = {"name": "npystore.scalar", "configuration": {"dtype": text}}
    with pytest.raises(DataTypeValidationError):
        NpyScalar.from_json(data, zarr_format=3)
    with pytest.raises(ValueError, match="No Zarr data type"):
        get_data_type_from_json(data, zarr_format=3)


def test_zarr_v2_only_where_exact(tmp_path: Path) -> None:
    arr = make_array(DTYPES["struct_mixed_order"], (6,), "C")
    z = zarr.create_array(
        store=str(tmp_path / "v2"), shape=(6,), chunks=(4,), dtype=arr.dtype, zarr_format=2
    )
    z[...] = arr
    assert_same(zarr.open_array(str(tmp_path / "v2"), mode="r")[...], arr)
    with pytest.raises(ValueError, match="v2"):
        zarr.create_array(
            store=str(tmp_path / "no"), shape=(2,), dtype=DTYPES["struct_subarray"], zarr_format=2
        )


def test_entry_points_load_the_types() -> None:
    """pyproject's ``zarr.data_type`` entry points, loaded the way zarr's registry would."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    declared = project["entry-points"]["zarr.data_type"]
    points = [EntryPoint(key, value, "zarr.data_type") for key, value in declared.items()]
    registry = DataTypeRegistry()
    registry._lazy_load_list.extend(points)
    registry._lazy_load()
    assert registry.contents == {"npystore.structured": NpyStructured, "npystore.scalar": NpyScalar}


_CROSS = """
import json, pathlib, sys, warnings
import numpy as np, zarr
import npystore
from npy_cases import DTYPES, assert_same, make_array
warnings.simplefilter("ignore")
mode, root, NAMES = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]
out = {"zarr": zarr.__version__}
for i, name in enumerate(DTYPES):
    if name not in NAMES:
        continue
    path = root / str(i)
    if mode == "write":
        arr = make_array(DTYPES[name], (7,), "C", seed=i)
        z = zarr.create_array(store=str(path), shape=(7,), chunks=(3,), dtype=arr.dtype)
        z[...] = arr
        np.save(path.with_suffix(".npy"), arr)
        out[name] = z.metadata.to_dict()["data_type"]
        continue
    want = np.load(path.with_suffix(".npy"))
    try:
        got = zarr.open_array(str(path), mode="r")[...]
    except Exception as exc:  # what zarr refuses: a data type this zarr lacks
        out[name] = "refused: " + type(exc).__name__
        continue
    native = want.dtype.newbyteorder("=")
    same = got.dtype.newbyteorder("=") == native and (
        got.astype(native).tobytes() == want.astype(native).tobytes()
    )
    try:
        assert_same(got, want)  # dtype (byte order, offsets), values (padding aside)
        exact = True
    except AssertionError:
        exact = False
    out[name] = "exact" if exact else "values" if same else "WRONG"
print(json.dumps(out))
"""


#: records, long doubles and some of zarr's own types
CROSS_NAMES = [*NPYSTORE_NAMES, "bool", ">i4", "<f8", "<U3", "S5", "V7", "<M8[ns]"]


def _cross(python: str, mode: str, root: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    done = subprocess.run(
        [python, "-c", _CROSS, mode, str(root), *CROSS_NAMES],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("NPYSTORE_OTHER_PYTHON"),
    reason="NPYSTORE_OTHER_PYTHON (a Python with another zarr and npystore) is not set; "
    "CI's newest leg sets it to the oldest leg's",
)
def test_arrays_cross_zarr_versions(tmp_path: Path) -> None:
    """Arrays zarr writes (``zarr.create_array(dtype=...)``, npystore imported) under one zarr
    version reopen under the other, in new processes: npystore's data types exactly (the
    same JSON in every version); zarr's own types with their values, or refused where that
    zarr lacks the data type (zarr 3.1 has no ``struct``); never with other values."""
    other = os.environ["NPYSTORE_OTHER_PYTHON"]
    for writer, reader in ((other, sys.executable), (sys.executable, other)):
        root = tmp_path / f"{Path(writer).parent.parent.name}-to-{Path(reader).parent.parent.name}"
        written, read = _cross(writer, "write", root), _cross(reader, "read", root)
        assert written["zarr"] != read["zarr"], "NPYSTORE_OTHER_PYTHON has this zarr"
        for name in CROSS_NAMES:
            kind = written[name] if isinstance(written[name], str) else written[name]["name"]
            outcome = read[name]
            assert outcome != "WRONG", (name, kind, written["zarr"], read["zarr"])
            if kind.startswith("npystore."):
                assert outcome == "exact", (name, kind, outcome)
            elif kind == "struct":  # zarr >= 3.2's record type: zarr 3.1 lacks it
                assert outcome == "values" or outcome.startswith("refused"), (name, outcome)
            else:
                assert outcome in ("exact", "values"), (name, kind, outcome)


#: record dtypes zarr stores exactly on some versions and not on others (structured.py's list)
RECORDS = {
    "packed": "[('a', '<i4'), ('b', '<f8'), ('c', 'S3'), ('d', '?')]",
    "packed_nested": "[('a', '<i4'), ('b', [('c', '<u2'), ('d', '<M8[ns]')])]",
    "deep": "[('l1', [('l2', [('v', '<i8')])]), ('w', '<c8')]",
    "one_byte": "[('a', 'u1'), ('b', 'S2'), ('c', '?'), ('d', 'i1')]",
    "leaves": "[('h', '<f2'), ('z', '<c16'), ('u', '<U3'), ('v', 'V3'), ('t', '<m8[us]')]",
    "utf8_names": "[('\\u00e9t\\u00e9', '<i4'), ('\\u2603', '<f8')]",
    "big_endian": "[('a', '>i4')]",
    "mixed_order": "[('le', '<f8'), ('be', '>f8'), ('s', '<U2')]",
    "nested_big_endian": "[('a', '<i4'), ('b', [('c', '>f8'), ('d', 'S3')])]",
    "unitless_datetime": "[('t', '<M8')]",
    "unitless_timedelta": "[('t', '<m8')]",
    "aligned": "np.dtype([('a', 'u1'), ('b', '<f8')], align=True)",
    "offsets": "{'names': ['a', 'b'], 'formats': ['<i2', '<f4'], 'offsets': [0, 8], "
    "'itemsize': 16}",
    "trailing_pad": "{'names': ['a'], 'formats': ['<i2'], 'offsets': [0], 'itemsize': 4}",
    "titles": "[(('Title', 't'), '<i4'), ('u', '<u2')]",
    "subarray": "[('x', '<f4', (2, 3)), ('y', 'u1')]",
    "no_fields": "{'names': [], 'formats': [], 'itemsize': 4}",
    "long_double": "[('g', '<f16')]",
}

_ZARR_RECORDS = """
import json, os, pathlib, sys, warnings
import numpy as np, zarr
from zarr.core.dtype import data_type_registry
mode, root = sys.argv[1], pathlib.Path(sys.argv[2])
if mode == "with":
    import npystore
else:  # zarr alone: without npystore's entry points, which zarr 3.4 would load
    lazy = data_type_registry._lazy_load_list
    lazy[:] = [e for e in lazy if not e.value.startswith("npystore")]
from npy_cases import assert_same, make_array
warnings.simplefilter("ignore")
RECORDS = json.loads(os.environ["NPYSTORE_RECORDS"])

def outcome(got, want):
    try:
        assert_same(got, want)
        return "exact"
    except AssertionError:
        pass
    native = want.dtype.newbyteorder("=")
    if got.dtype.newbyteorder("=") == native and (
        got.astype(native).tobytes() == want.astype(native).tobytes()
    ):
        return "values"
    return "other: " + str(got.dtype)

out = {}
for name, text in RECORDS.items():
    dtype = np.dtype(eval(text)) if not text.startswith("np.") else eval(text)
    path = root / mode / name
    if mode in ("alone", "with"):
        want = make_array(dtype, (5,), "C", seed=1)
        try:
            z = zarr.create_array(store=str(path), shape=(5,), chunks=(2,), dtype=dtype)
            z[...] = want
        except Exception as exc:
            out[name] = {"refused": type(exc).__name__}
            continue
        np.save(path.with_suffix(".npy"), want)
        meta = json.loads((path / "zarr.json").read_text())
        out[name] = {
            "meta": {k: meta[k] for k in ("data_type", "codecs", "fill_value")},
            "read": outcome(z[...], want),
        }
    else:  # reopen both in this process
        for side in ("alone", "with"):
            where = root / side / name
            if not where.with_suffix(".npy").exists():
                continue
            want = np.load(where.with_suffix(".npy"))
            try:
                out[side + "/" + name] = outcome(zarr.open_array(str(where), mode="r")[...], want)
            except Exception as exc:
                out[side + "/" + name] = "refused: " + type(exc).__name__
assert mode == "with" or "npystore" not in sys.modules, "npystore was imported"
print(json.dumps(out))
"""


def _records(mode: str, root: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", _ZARR_RECORDS, mode, str(root)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**env, "NPYSTORE_RECORDS": json.dumps(RECORDS)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.slow
def test_npystore_never_changes_what_zarr_does_with_records_it_stores_exactly(
    tmp_path: Path,
) -> None:
    """Per record dtype, on the zarr installed: zarr alone (a process without npystore) and
    zarr with npystore imported write the same metadata and read the same values wherever
    zarr alone stores the record exactly (reopened in a new process without npystore, too);
    npystore takes exactly the others, and those round-trip exactly with npystore."""
    alone, with_npystore = _records("alone", tmp_path), _records("with", tmp_path)
    reopened = _records("reopen", tmp_path)  # a new process without npystore
    for name, text in RECORDS.items():
        dtype = eval(text) if text.startswith("np.") else np.dtype(eval(text))
        mine, theirs = with_npystore[name], alone[name]
        zarr_exact = "meta" in theirs and reopened.get(f"alone/{name}") in ("exact", "values")
        assert zarr_structured_is_exact(dtype) is zarr_exact, (name, theirs, reopened)
        if zarr_exact:
            assert mine == theirs, name  # the same data type, codecs, fill value, values
            assert reopened[f"with/{name}"] == reopened[f"alone/{name}"], name
        else:
            assert mine["meta"]["data_type"]["name"] == "npystore.structured", (name, mine)
            assert mine["read"] == "exact", (name, mine)
            got = zarr.open_array(str(tmp_path / "with" / name), mode="r")[...]
            assert_same(got, np.load(tmp_path / "with" / f"{name}.npy"))
    keeps_byte_order = {n for n in ("big_endian", "mixed_order") if alone[n].get("read")}
    assert ZARR_HAS_STRUCT is (reopened["alone/mixed_order"] == "values"), keeps_byte_order
