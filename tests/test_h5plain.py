"""Attributes and small plain datasets read from object headers without libhdf5
(formats/h5index/_attributes.py, _dataset.py; files/mat/h5safe.py's SafeAttrs and
PlainSafeDataset): on files h5py writes (every libver, user block or not), what npystore
decodes equals what h5py reads, type and dtype included; what it does not decode it leaves
to h5py (None), never wrong; a crafted header never makes it raise or read past the file."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import npystore
from npystore.fetch import open_reader
from npystore.files.mat.h5meta import H5Meta
from npystore.files.mat.h5safe import (
    Guard,
    PlainSafeDataset,
    SafeDataset,
    object_identity,
    safe_root,
)
from npystore.formats import h5index

LIBVERS = ["earliest", "v108", "latest"]


def _meta(path: Path, userblock: int) -> H5Meta:
    meta = H5Meta.for_reader(open_reader(str(path)))
    meta.attach(None, userblock)
    return meta


def _string(value: bytes, size: int, pad: int) -> tuple[h5py.h5t.TypeID, np.ndarray]:
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(pad)
    return tid, np.array(value, dtype=f"S{size}")


def _attribute_writers() -> list[tuple[str, Any]]:
    """(name, write(obj)) of every attribute kind the tests read back."""
    out: list[tuple[str, Any]] = []

    def plain(name: str, value: Any) -> None:
        out.append((name, lambda obj: obj.attrs.__setitem__(name, value)))

    for dt in ("<u1", "<i1", "<u2", ">i2", "<u4", ">u4", "<i4", "<u8", ">i8"):
        plain(f"int_{dt}", np.array(7, dt))  # 0-d: a scalar dataspace, this byte order
        plain(f"vec_{dt}", np.arange(3, dtype=dt))
    plain("grid", np.arange(6, dtype="<i4").reshape(2, 3))
    plain("empty_vec", np.zeros(0, "<u2"))
    plain("strings", np.array([b"ab", b"c"], dtype="S2"))
    plain("float", 1.5)  # not decoded: h5py reads it
    plain("vlen", "a variable-length string")  # not decoded
    plain("unicode", np.array("é".encode(), dtype="S2"))

    def string(name: str, value: bytes, size: int, pad: int) -> None:
        def write(obj: Any) -> None:
            tid, data = _string(value, size, pad)
            space = h5py.h5s.create(h5py.h5s.SCALAR)
            h5py.h5a.create(obj.id, name.encode(), tid, space).write(data)

        out.append((name, write))

    string("nullterm", b"ab", 5, h5py.h5t.STR_NULLTERM)
    string("nullpad", b"ab", 5, h5py.h5t.STR_NULLPAD)
    string("spacepad", b"ab", 5, h5py.h5t.STR_SPACEPAD)
    string("inner_nul", b"a\0b", 4, h5py.h5t.STR_NULLPAD)  # a NUL inside: libhdf5's call

    def null(obj: Any) -> None:
        h5py.h5a.create(obj.id, b"null", h5py.h5t.STD_I32LE, h5py.h5s.create(h5py.h5s.NULL))

    out.append(("null", null))
    return out


#: Attributes npystore leaves to h5py.
UNDECODED = {"float", "vlen", "null", "spacepad", "inner_nul"}


def _write_attrs(f: h5py.File, prefix: str) -> list[str]:
    """Datasets and groups holding every kind of attribute, at most 8 each (more are kept
    densely by libver v108 and later); their names."""
    writers = _attribute_writers()
    names = []
    for i in range(0, len(writers), 7):
        for kind in ("d", "g"):
            name = f"{prefix}{kind}{i}"
            obj = (
                f.create_dataset(name, data=np.arange(3.0)) if kind == "d" else f.create_group(name)
            )
            obj.attrs["MATLAB_class"] = np.bytes_("double")  # as MATLAB writes it: NUL-terminated
            for _, write in writers[i : i + 7]:
                write(obj)
            names.append(name)
    return names


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, np.ndarray):
        return (
            isinstance(ours, np.ndarray)
            and ours.dtype == theirs.dtype
            and ours.shape == theirs.shape
            and np.array_equal(ours, theirs)
        )
    return type(ours) is type(theirs) and ours == theirs


@pytest.mark.parametrize("libver", LIBVERS)
@pytest.mark.parametrize("userblock", [0, 512])
def test_attributes_decoded_equal_h5py(tmp_path: Path, libver: str, userblock: int) -> None:
    path = tmp_path / "a.h5"
    with h5py.File(path, "w", libver=libver, userblock_size=userblock) as f:
        names = _write_attrs(f, "")
    meta = _meta(path, userblock)
    decoded = 0
    with h5py.File(path, "r") as f:
        for name in names:
            obj = f[name]
            table = meta.attributes(object_identity(obj)[1])
            assert table is not None
            assert set(table.messages) == set(obj.attrs)
            for key in obj.attrs:
                value = table.value(key)
                if value is h5index.UNDECODED:
                    assert key in UNDECODED, key
                    continue
                decoded += 1
                assert _same(value, obj.attrs[key]), (key, value, obj.attrs[key])
            assert "missing" not in table
    assert decoded == 2 * (len(_attribute_writers()) - len(UNDECODED) + len(names) // 2)


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_safe_attributes_answer_as_h5py_for_every_attribute(tmp_path: Path, libver: str) -> None:
    """Through the wrappers the tree uses: decoded or not, every value as h5py's."""
    path = tmp_path / "a.h5"
    with h5py.File(path, "w", libver=libver) as f:
        names = _write_attrs(f, "")
    reader = open_reader(str(path))
    meta = H5Meta.for_reader(reader)
    meta.attach(None, 0)
    with h5py.File(path, "r") as f:
        guard = Guard(reader, object_identity, lambda dset, src: None)
        root = safe_root(f, "a.h5", guard)
        for name in names:
            obj = root[name]
            for key in f[name].attrs:
                assert key in obj.attrs
                theirs = f[name].attrs[key]
                if isinstance(theirs, h5py.Empty):
                    assert isinstance(obj.attrs.get(key), h5py.Empty)
                    continue
                assert _same(obj.attrs.get(key), theirs), key
            assert "absent" not in obj.attrs
            assert obj.attrs.get("absent", 5) == 5


def test_dense_attributes_are_left_to_libhdf5(tmp_path: Path) -> None:
    path = tmp_path / "a.h5"
    with h5py.File(path, "w", libver="latest") as f:
        d = f.create_dataset("d", data=np.arange(3.0))
        for i in range(40):  # past the compact limit (8): a fractal heap
            d.attrs[f"a{i}"] = np.int32(i)
    meta = _meta(path, 0)
    with h5py.File(path, "r") as f:
        assert meta.attributes(object_identity(f["d"])[1]) is None


def test_shared_messages_are_marked_and_not_parsed() -> None:
    """A message flagged shared comes back as type + SHARED: an attribute there makes the
    table unknown, a shared datatype makes a dataset not plain."""
    attr = (0x0C | h5index.SHARED, b"\x00" * 16)
    assert h5index.compact_attributes((attr,), 8, 8) is None
    dtype = (0x03 | h5index.SHARED, b"\x00" * 16)
    assert h5index.plain_dataset(((0x01, b""), dtype, (0x08, b"")), 8, 8) is None


PLAIN_DTYPES = ["<u1", "<i1", "<u2", ">u2", "<i4", ">i4", "<u8", ">i8", "<f4", ">f4", "<f8", ">f8"]


def _datasets(f: h5py.File) -> dict[str, bool]:
    """Datasets of every storage and type; value: whether npystore reads it itself."""
    plain: dict[str, bool] = {}
    for dt in PLAIN_DTYPES:
        f.create_dataset(f"contig_{dt}", data=(np.arange(12) - 3).astype(dt).reshape(3, 4))
        plain[f"contig_{dt}"] = True
        space = h5py.h5s.create_simple((5,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        tid = h5py.h5t.py_create(np.dtype(dt))
        h5py.h5d.create(f.id, f"compact_{dt}".encode(), tid, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.arange(5).astype(dt)
        )
        plain[f"compact_{dt}"] = True
    f.create_dataset("scalar", data=np.float64(2.5))
    plain["scalar"] = True
    f.create_dataset("zero_rows", data=np.zeros((0, 3)))
    plain["zero_rows"] = False  # never written: no address (libhdf5 gives fill values)
    f.create_dataset("unwritten", shape=(4,), dtype="<f8")
    plain["unwritten"] = False
    f.create_dataset("chunked", data=np.arange(10.0), chunks=(5,))
    plain["chunked"] = False
    f.create_dataset("deflated", data=np.arange(10.0), chunks=(5,), compression="gzip")
    plain["deflated"] = False
    f.create_dataset("half", data=np.arange(4, dtype="<f2"))
    plain["half"] = False
    f.create_dataset("complex", data=np.arange(4) * (1 + 1j))
    plain["complex"] = False
    f.create_dataset("text", data=np.array([b"abc"], dtype="S3"))
    plain["text"] = False
    f.create_dataset("refs", data=np.array([f["scalar"].ref], dtype=h5py.ref_dtype))
    plain["refs"] = False
    f.create_dataset("big", data=np.zeros(h5index.PLAIN_MAX_BYTES // 8 + 1))
    plain["big"] = False
    f.create_dataset("null", data=h5py.Empty("<f8"))
    plain["null"] = False
    return plain


@pytest.mark.parametrize("libver", LIBVERS)
@pytest.mark.parametrize("userblock", [0, 512])
def test_plain_datasets_read_equal_h5py(tmp_path: Path, libver: str, userblock: int) -> None:
    path = tmp_path / "p.h5"
    with h5py.File(path, "w", libver=libver, userblock_size=userblock) as f:
        plain = _datasets(f)
        f.create_group("group")
    reader = open_reader(str(path))
    meta = H5Meta.for_reader(reader)
    meta.attach(None, userblock)
    with h5py.File(path, "r") as f:
        guard = Guard(reader, object_identity, lambda dset, src: None)
        root = safe_root(f, "p.h5", guard)
        assert meta.plain_dataset(object_identity(f["group"])[1]) is None
        for name, expected in plain.items():
            theirs = f[name]
            address = object_identity(theirs)[1]
            found = meta.plain_dataset(address)
            assert (found is not None) == expected, name
            got = root.deref(theirs.ref, address)
            assert isinstance(got, PlainSafeDataset) == expected, name
            assert isinstance(got, SafeDataset)
            by_name = root[name]  # a hard link: the same shortcut
            assert isinstance(by_name, PlainSafeDataset) == expected, name
            assert by_name == got
            if not expected:
                continue
            want = theirs[()]
            value = got.read(name)
            assert got.dtype == theirs.dtype, name
            assert got.shape == theirs.shape, name
            assert type(value) is type(want), name
            if isinstance(want, np.ndarray):
                assert value.dtype == want.dtype, name
                assert value.flags.writeable, name
            np.testing.assert_array_equal(value, want)
            # one object, whichever way it was reached
            assert got == root[theirs.ref]
            assert hash(got) == hash(root[theirs.ref])
            assert got.name == f"/{name}"
            assert by_name.name == f"/{name}"
            np.testing.assert_array_equal(by_name.read(name), want)
            assert got.attrs.get("absent") is None


def test_a_plain_dataset_past_the_end_of_the_file_is_left_to_libhdf5() -> None:
    """A contiguous address whose bytes the file does not hold: not plain (libhdf5 then
    reports it), and the parse of any header bytes never raises."""
    datatype = bytes([0x11, 0x20, 0x3F, 0x00]) + struct.pack(
        "<IHHBBBBI", 8, 0, 64, 52, 11, 0, 52, 1023
    )
    dataspace = bytes([1, 1, 0, 0, 0, 0, 0, 0]) + struct.pack("<Q", 4)
    layout = bytes([3, 1]) + struct.pack("<QQ", 10**9, 32)
    found = h5index.plain_dataset(((0x01, dataspace), (0x03, datatype), (0x08, layout)), 8, 8)
    assert found is not None
    assert found.dtype == np.dtype("<f8")
    assert found.shape == (4,)
    assert found.address == 10**9
    assert found.nbytes == 32
    rng = np.random.default_rng(5)
    for _ in range(2000):
        body = [bytearray(m) for m in (dataspace, datatype, layout)]
        for m in body:
            for _ in range(rng.integers(1, 4)):
                m[rng.integers(0, len(m))] = rng.integers(0, 256)
        messages = tuple(zip((0x01, 0x03, 0x08), map(bytes, body), strict=True))
        h5index.plain_dataset(messages, 8, 8)  # a PlainDataset or None, never an error
        attr = bytes(rng.integers(0, 256, rng.integers(0, 64), dtype=np.uint8))
        table = h5index.compact_attributes(((0x0C, b"\x01\x00\x02\x00" + attr),), 8, 8)
        if table is not None:
            for name in table.messages:
                table.value(name)


def test_a_cell_of_plain_values_opens_no_element_through_libhdf5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MATLAB cell of chars and numbers: every element read from its header and bytes
    (none opened by libhdf5), equal to what h5py reads."""
    path = tmp_path / "c.mat"
    rows = ["alpha", "", "\u03b2-\u03b3", "x" * 40]  # beta-gamma: two-byte UTF-16 units
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        made = []
        for i, text in enumerate(rows):
            units = np.array([ord(ch) for ch in text], "<u2").reshape(-1, 1)
            if not text:
                d = refs.create_dataset(f"t{i}", data=np.array([0, 0], np.uint64))
                d.attrs["MATLAB_empty"] = np.uint8(1)
            else:
                d = refs.create_dataset(f"t{i}", data=units)
                d.attrs["MATLAB_int_decode"] = np.int32(2)
            d.attrs["MATLAB_class"] = np.bytes_("char")
            made.append(d.ref)
        for i, value in enumerate(
            (np.arange(6.0).reshape(2, 3), np.int8(-4), np.arange(3, dtype=">u4"))
        ):
            d = refs.create_dataset(f"n{i}", data=value)
            d.attrs["MATLAB_class"] = np.bytes_(
                {"f": "double", "i": "int8", "u": "uint32"}[d.dtype.kind]
            )
            made.append(d.ref)
        c = f.create_dataset("c", data=np.array(made, dtype=h5py.ref_dtype).reshape(-1, 1))
        c.attrs["MATLAB_class"] = np.bytes_("cell")
    with path.open("r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file".ljust(116) + b" " * 8 + b"\x00\x02IM")
    opened = []
    real = PlainSafeDataset.h5obj

    def counting(self: PlainSafeDataset) -> Any:
        opened.append(self)
        return real.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(PlainSafeDataset, "h5obj", property(counting))
    got = npystore.open_mat(str(path))["c"]
    assert opened == []
    assert got.shape == (1, 7)
    assert [str(got[0, i]) for i in range(4)] == rows
    np.testing.assert_array_equal(got[0, 4], np.arange(6.0).reshape(2, 3).T)
    assert got[0, 5].dtype == np.int8
    assert got[0, 5].item() == -4
    assert got[0, 6].dtype == np.uint32
    assert got[0, 6].ravel().tolist() == [0, 1, 2]


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_top_level_plain_variables_are_laid_out_without_libhdf5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, libver: str
) -> None:
    """Small plain numeric variables of a v7.3 file (contiguous, compact, scalar, big-endian,
    empty): their layout comes from the object header, equal to the one libhdf5's answers
    give (:func:`dataset_layout`), and their values equal h5py's; libhdf5 opens none."""
    from npystore.files.mat import hdf5 as mat_hdf5

    path = tmp_path / "v.mat"
    values = {
        "a": np.arange(12.0).reshape(3, 4),
        "b": np.arange(5, dtype=">i4"),
        "s": np.float64(2.5),
        "e": np.zeros((0, 3)),
        "u": np.arange(6, dtype=np.uint8).reshape(2, 3),
    }
    with h5py.File(path, "w", libver=libver, userblock_size=512) as f:
        for name, value in values.items():
            if name == "u":  # compact storage
                space = h5py.h5s.create_simple(value.shape)
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_layout(h5py.h5d.COMPACT)
                tid = h5py.h5t.py_create(value.dtype)
                h5py.h5d.create(f.id, b"u", tid, space, dcpl=dcpl).write(
                    h5py.h5s.ALL, h5py.h5s.ALL, value
                )
                d = f["u"]
            else:
                d = f.create_dataset(name, data=value)
            d.attrs["MATLAB_class"] = np.bytes_(
                {"f": "double", "i": "int32", "u": "uint8"}[value.dtype.kind]
            )
    with path.open("r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file".ljust(116) + b" " * 8 + b"\x00\x02IM")
    laid: list[str] = []
    real = mat_hdf5.dataset_layout

    def counted(dset: Any, *args: Any, **kwargs: Any) -> Any:
        laid.append(dset.name)
        return real(dset, *args, **kwargs)

    monkeypatch.setattr("npystore.files.mat.v73.dataset_layout", counted)
    with npystore.open_mat(str(path)) as m:
        arrays = {name: m[name] for name in values}
        loaded = {name: m.load(name) for name in values}
    with h5py.File(path, "r") as f:
        for name in values:
            want = np.asarray(f[name][()]).T  # MATLAB's axes, at least 2-D
            want = want.reshape(want.shape + (1,) * (2 - want.ndim))
            np.testing.assert_array_equal(arrays[name].compute(), want, err_msg=name)
            np.testing.assert_array_equal(loaded[name], want, err_msg=name)
            assert loaded[name].dtype == want.dtype, name  # as stored, as h5py reads it
    # only the empty one, never written (no address: libhdf5 gives its fill values), is
    # opened by libhdf5 for its layout
    assert laid == ["/e"]
    # the same layouts as libhdf5's answers give
    reader = open_reader(str(path))
    with h5py.File(path, "r") as f:
        meta = H5Meta.for_reader(reader)
        meta.attach(None, 512)
        guard = Guard(reader, object_identity, lambda dset, src: None)
        root = safe_root(f, "v.mat", guard)
        for name in ("a", "b", "s", "u"):
            ours = root[name]
            assert isinstance(ours, PlainSafeDataset), name
            got = mat_hdf5.plain_layout(ours, meta, name)
            want = real(f[name], reader, matlab=True, source=name)
            assert got == want, name
