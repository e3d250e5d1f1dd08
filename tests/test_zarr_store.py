"""The Zarr face: the read side of zarr's Store contract, writes refused, arrays exact.

zarr's ``zarr.testing.store.StoreTests`` fills stores through writes; a read-only store
cannot be filled, so its read-side tests are mirrored here against stores whose keys and
bytes are known: an ``.npz`` with stored and deflated members (every chunk key's bytes are
computed independently with numpy).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import npystore
from npystore import UnsupportedError
from npystore.faces.zarr.store import LayoutStore, node_name

PROTO = default_buffer_prototype()


async def _collect(it: Any) -> list[str]:
    return [k async for k in it]


@pytest.fixture
def npz_path(tmp_path: Path) -> Path:
    path = tmp_path / "store.npz"
    np.savez(
        path,
        a=np.arange(10, dtype="<i4"),
        f=np.asfortranarray(np.arange(12, dtype=">f8").reshape(3, 4)),
        s=np.array(3.5),
    )
    return path


@pytest.fixture
def store(npz_path: Path) -> LayoutStore:
    return npystore.open_store(str(npz_path))


def test_store_type_and_flags(store: LayoutStore) -> None:
    assert isinstance(store, Store)
    assert store.read_only
    assert not store.supports_writes
    assert not store.supports_deletes
    assert not store.supports_partial_writes
    assert store.supports_listing
    assert "store.npz" in repr(store)


def test_store_eq_and_pickle(store: LayoutStore, npz_path: Path) -> None:
    same = store
    assert store == same
    assert store == npystore.open_store(str(npz_path))
    again = pickle.loads(pickle.dumps(store))
    assert again == store
    assert again.read_only
    assert sync(again.get("a/c/0", PROTO)).to_bytes() == np.arange(10, dtype="<i4").tobytes()


def test_with_read_only(store: LayoutStore) -> None:
    assert store.with_read_only(True) == store
    with pytest.raises(UnsupportedError, match="read-only"):
        store.with_read_only(False)


@pytest.mark.parametrize(
    "byte_range",
    [
        None,
        RangeByteRequest(1, 4),
        OffsetByteRequest(3),
        SuffixByteRequest(5),
        SuffixByteRequest(0),
    ],
)
def test_get_with_every_byte_request(store: LayoutStore, byte_range: Any) -> None:
    full = np.arange(10, dtype="<i4").tobytes()
    got = sync(store.get("a/c/0", PROTO, byte_range=byte_range))
    assert got is not None
    if byte_range is None:
        want = full
    elif isinstance(byte_range, RangeByteRequest):
        want = full[byte_range.start : byte_range.end]
    elif isinstance(byte_range, OffsetByteRequest):
        want = full[byte_range.offset :]
    else:
        want = full[-byte_range.suffix :] if byte_range.suffix else b""
    assert got.to_bytes() == want


def test_get_missing_returns_none(store: LayoutStore) -> None:
    for key in ["nope", "a/c/1", "a/c/0/0", "a/c/x", "../a/c/0", "/a/c/0", "z/zarr.json", "c/0"]:
        assert sync(store.get(key, PROTO)) is None
        assert not sync(store.exists(key))
    with pytest.raises(FileNotFoundError):
        sync(store.getsize("a/c/99"))


def test_get_raises_on_bad_byte_range(store: LayoutStore) -> None:
    with pytest.raises((ValueError, TypeError), match=r"Unexpected byte_range, got.*"):
        sync(store.get("a/c/0", PROTO, byte_range=(0, 2)))  # type: ignore[arg-type]


def test_get_partial_values_and_many(store: LayoutStore) -> None:
    full = np.arange(10, dtype="<i4").tobytes()
    got = sync(
        store.get_partial_values(
            PROTO,
            [("a/c/0", RangeByteRequest(0, 8)), ("missing", None), ("a/c/0", SuffixByteRequest(4))],
        )
    )
    assert got[0] is not None
    assert got[0].to_bytes() == full[:8]
    assert got[1] is None
    assert got[2] is not None
    assert got[2].to_bytes() == full[-4:]

    async def many() -> list[tuple[str, bytes]]:
        out = []
        async for key, buf in store._get_many([("a/c/0", PROTO, None), ("s/c", PROTO, None)]):
            assert buf is not None
            out.append((key, buf.to_bytes()))
        return sorted(out)

    assert sync(many()) == [("a/c/0", full), ("s/c", np.array(3.5).tobytes())]


def test_getsize(store: LayoutStore) -> None:
    assert sync(store.getsize("a/c/0")) == 40
    assert sync(store.getsize("zarr.json")) == len(sync(store.get("zarr.json", PROTO)).to_bytes())
    assert sync(store.getsize_prefix("a")) == 40 + sync(store.getsize("a/zarr.json"))


def test_listing(store: LayoutStore) -> None:
    keys = sorted(sync(_collect(store.list())))
    assert keys == sorted(
        ["zarr.json", "a/zarr.json", "a/c/0", "f/zarr.json", "f/c/0/0", "s/zarr.json", "s/c"]
    )
    assert sorted(sync(_collect(store.list_prefix("f/")))) == ["f/c/0/0", "f/zarr.json"]
    assert sorted(sync(_collect(store.list_prefix("")))) == keys
    assert sorted(sync(_collect(store.list_dir("")))) == ["a", "f", "s", "zarr.json"]
    assert sorted(sync(_collect(store.list_dir("f")))) == ["c", "zarr.json"]
    assert sorted(sync(_collect(store.list_dir("f/")))) == ["c", "zarr.json"]
    assert sync(_collect(store.list_dir("nope"))) == []
    assert not sync(store.is_empty(""))
    assert not sync(store.is_empty("a"))
    assert sync(store.is_empty("nope/"))


def test_metadata_and_chunks_through_the_store_api(store: LayoutStore) -> None:
    def get(key: str) -> bytes:
        found = sync(store.get(key, prototype=PROTO))
        assert found is not None, key
        return bytes(found.to_bytes())

    doc = json.loads(get("zarr.json"))
    assert doc["node_type"] == "group"
    assert set(doc["consolidated_metadata"]["metadata"]) == {"a", "f", "s"}
    assert json.loads(get("a/zarr.json"))["shape"] == [10]
    assert get("a/c/0") == np.arange(10, dtype="<i4").tobytes()


def test_writes_are_refused(store: LayoutStore) -> None:
    buf = PROTO.buffer.from_bytes(b"x")
    for call in (
        lambda: store.set("a/c/0", buf),
        lambda: store.set_if_not_exists("new", buf),
        lambda: store.delete("a/c/0"),
        lambda: store.delete_dir("a"),
        store.clear,
        lambda: store._set_many([("k", buf)]),
    ):
        with pytest.raises(UnsupportedError, match="read-only"):
            sync(call())
    with pytest.raises(UnsupportedError, match="read-only"):
        LayoutStore({}, url="x", read_only=False)
    with pytest.raises((UnsupportedError, ValueError)):
        zarr.open_group(store, mode="a")


def test_zarr_reads_the_group(store: LayoutStore, npz_path: Path) -> None:
    expected = np.load(npz_path)
    group = zarr.open_group(store, mode="r")
    assert sorted(group.array_keys()) == ["a", "f", "s"]
    for key in expected.files:
        got = group[key][...]
        np.testing.assert_array_equal(got, expected[key])
        assert got.dtype == expected[key].dtype.newbyteorder("=")  # zarr: native byte order
        assert group[key].attrs["npystore"]["key"] == key
    meta = json.loads(sync(store.get("f/zarr.json", PROTO)).to_bytes())
    assert [c["name"] for c in meta["codecs"]] == ["transpose", "bytes"]
    assert meta["codecs"][1]["configuration"]["endian"] == "big"


def test_edge_chunks_are_zero_padded(tmp_path: Path) -> None:
    from npystore.faces.tree import nodes as zarr_store

    arr = np.arange(1, 1001, dtype="<u2").reshape(100, 10)
    np.save(tmp_path / "e.npy", arr)
    store = npystore.open_store(str(tmp_path / "e.npy"))
    old = zarr_store.CHUNK_TARGET
    try:
        zarr_store.CHUNK_TARGET = 30 * 20  # 30 rows of 20 bytes: 4 chunks, the last 10 rows
        store = npystore.open_store(str(tmp_path / "e.npy"))
        last = sync(store.get("c/3/0", PROTO)).to_bytes()
    finally:
        zarr_store.CHUNK_TARGET = old
    assert len(last) == 30 * 20
    assert last[: 10 * 20] == arr[90:].tobytes()
    assert last[10 * 20 :] == bytes(20 * 20)


def test_node_names_are_safe() -> None:
    for name in ["../x", "/abs", "a/b", "..", ".", "__reserved", "ok_name", "é"]:
        safe = node_name(name)
        assert "/" not in safe
        assert safe not in ("", ".", "..")
        assert not safe.startswith("__")
    assert node_name("ok_name") == "ok_name"
    assert node_name("a/b") != node_name("a_b")


def test_object_members_are_skipped_and_named(tmp_path: Path) -> None:
    path = tmp_path / "o.npz"
    np.savez(path, o=np.array([None, 1], dtype=object), n=np.arange(2))
    group = zarr.open_group(npystore.open_store(str(path)), mode="r")
    assert list(group.array_keys()) == ["n"]
    assert "o.npy" in group.attrs["npystore"]["skipped"]
