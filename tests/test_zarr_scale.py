"""The Zarr store over archives of many small members (issue 24 item 8): an archive of
50,000 members took 7.3 s to open, 24 s and 680 MiB to list through zarr.

Opening reads the central directory only; a member's header is read, and its node and
``zarr.json`` made, when zarr asks for them; past ``CONSOLIDATED_MAX`` nodes the root has
no consolidated metadata (zarr lists the store instead of parsing every document at
once); nodes and documents kept are bounded. Oracle: numpy.load.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import npystore
from npystore.files.zip import ZipArchive

zarr = pytest.importorskip("zarr")


def many_members(path: Path, count: int) -> dict[str, np.ndarray]:
    """An archive as numpy.savez writes it (stored members), of ``count`` tiny arrays, one
    of them an object array (a pickle: not served) and one not an .npy file."""
    arrays = {f"a{i}": np.arange(i % 5, dtype="<i4") + i for i in range(count)}
    arrays["f"] = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for key, value in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, value)
            z.writestr(f"{key}.npy", buf.getvalue())
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array([{"x": 1}], dtype=object))
        z.writestr("objects.npy", buf.getvalue())
        z.writestr("notes.txt", b"not an array")
    return arrays


def test_opening_reads_no_member_and_listing_matches_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from npystore.faces.tree import build
    from npystore.faces.zarr import store as zarr_store

    path = tmp_path / "many.npz"
    arrays = many_members(path, 150)
    headers: list[int] = []
    read_many = ZipArchive._read_many

    def spy(self: ZipArchive, ranges: Any) -> Any:
        headers.append(len(ranges))
        return read_many(self, ranges)

    monkeypatch.setattr(ZipArchive, "_read_many", spy)
    monkeypatch.setattr(build, "KEPT_NODES", 50, raising=False)
    monkeypatch.setattr(zarr_store, "KEPT_DOCUMENTS", 50, raising=False)
    monkeypatch.setattr(zarr_store, "CONSOLIDATED_MAX", 100, raising=False)  # 1,000
    store = npystore.open_store(str(path))
    assert headers == []  # was one header read per member (153) before anything was asked
    one = zarr.open_array(store, path="a7", mode="r")
    assert sum(headers) == 1  # that member's header only
    np.testing.assert_array_equal(one[...], arrays["a7"])
    group = zarr.open_group(store, mode="r")
    assert group.metadata.consolidated_metadata is None  # 153 nodes: zarr lists instead
    skipped = group.attrs["npystore"]["skipped"]  # the root names what it does not serve
    assert set(skipped) == {"objects.npy", "notes.txt"}
    with np.load(path, allow_pickle=True) as theirs:
        expected = sorted(k for k in theirs.files if k not in ("objects", "notes.txt"))
        names = sorted(group.array_keys())
        assert names == expected
        for name in ("a0", "a149", "f"):
            np.testing.assert_array_equal(group[name][...], theirs[name])
    assert len(store._metadata) <= 50  # documents kept: bounded, made again when asked
    assert len(store._nodes._kept) <= 50  # nodes kept built: bounded


def test_documents_made_from_templates_are_zarrs_own(tmp_path: Path) -> None:
    """The ``zarr.json`` of an array (made from a kept document of an array of the same
    kind) is byte for byte what zarr's metadata class writes."""
    from zarr.core.buffer import default_buffer_prototype

    from npystore.faces.zarr.store import _array_metadata

    path = tmp_path / "kinds.npz"
    np.savez(
        path,
        c=np.arange(12.0).reshape(3, 4),
        f=np.asfortranarray(np.arange(12, dtype=">i2").reshape(3, 4)),
        s=np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8")]),
        e=np.zeros((2, 0)),
        b=np.array([True, False]),
        c2=np.arange(12.0).reshape(3, 4) + 1,
    )
    proto = default_buffer_prototype()
    for indent in (2, None, 0, 4):  # zarr's json_indent (2 by default)
        store = npystore.open_store(str(path))
        with warnings.catch_warnings(), zarr.config.set({"json_indent": indent}):
            warnings.simplefilter("ignore")  # zarr: the structured type has no v3 specification
            for name in ("c", "f", "s", "e", "b", "c2", "c"):
                node = store._nodes[name]
                ours = store._metadata_bytes(name)
                theirs = _array_metadata(node).to_buffer_dict(proto)["zarr.json"].to_bytes()
                assert ours == theirs
                assert json.loads(ours)["attributes"]["npystore"]["key"] == name


@pytest.mark.slow
def test_50000_members_open_in_bounded_memory(tmp_path: Path) -> None:
    """open_store, the root group and one member of a 50,000-member archive, in a fresh
    interpreter: peak RSS grows by far less than the 680 MiB listing it once cost."""
    path = tmp_path / "huge.npz"
    many_members(path, 50_000)
    child = textwrap.dedent(
        f"""
        import json, sys
        import numpy, zarr, npystore
        import npystore.faces.stores, npystore.faces.zarr.store

        def peak():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024

        base = peak()
        store = npystore.open_store({str(path)!r})
        opened = peak() - base
        group = zarr.open_group(store, mode="r")
        value = group["a49999"][...].tolist()
        kept = len(store._nodes._kept)
        print(json.dumps({{"opened": opened, "total": peak() - base, "value": value,
                          "kept": kept}}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["value"] == (np.arange(4) + 49999).tolist()
    assert got["kept"] == 1  # one node built: the member asked for
    assert got["opened"] < 60, got  # the directory: about 0.4 KB per member
    assert got["total"] < 150, got  # and every member's header (the root lists skipped ones)
