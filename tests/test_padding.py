"""Structured values keep the file's padding bytes on every face, as ``numpy.load`` does
(issue 26 item 7): numpy copies structured values field by field, so a buffer assembled by
copies would hold uninitialised memory between the fields."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

import npystore

#: Fields with gaps: 3 bytes after ``a``, 4 after ``b`` (explicit offsets), and numpy's
#: aligned layout of a nested struct.
GAPS = np.dtype({"names": ["a", "b"], "formats": ["u1", "<i4"], "offsets": [0, 4], "itemsize": 12})
ALIGNED = np.dtype([("x", "u1"), ("y", [("p", "<f8"), ("q", "u1")])], align=True)


def _npy_bytes(dtype: np.dtype, shape: tuple[int, ...], order: str, seed: int) -> bytes:
    """An ``.npy`` file whose every record byte (padding included) is random and non-zero,
    written byte by byte (not through numpy's copies)."""
    n = ref_size(dtype, shape)
    body = np.random.default_rng(seed).integers(1, 256, size=n, dtype=np.uint8).tobytes()
    head = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": order == "F",
              "shape": shape}  # fmt: skip
    np.lib.format.write_array_header_1_0(head, header)
    return head.getvalue() + body


def ref_size(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) * dtype.itemsize


def _records(a: np.ndarray) -> bytes:
    """Every byte of every record, in logical order."""
    return np.ascontiguousarray(a.view(np.dtype((np.void, a.dtype.itemsize)))).tobytes()


@pytest.mark.parametrize(
    ("dtype", "shape", "order"),
    [(GAPS, (300,), "C"), (ALIGNED, (20, 15), "F"), (GAPS, (), "C")],
    ids=["gaps", "aligned-fortran", "0-d"],
)
def test_every_face_gives_the_files_padding_bytes(
    tmp_path: Path, dtype: np.dtype, shape: tuple[int, ...], order: str
) -> None:
    data = _npy_bytes(dtype, shape, order, seed=len(shape))
    npy = tmp_path / "r.npy"
    npy.write_bytes(data)
    for name, method in (
        ("stored.npz", zipfile.ZIP_STORED),
        ("deflated.npz", zipfile.ZIP_DEFLATED),
    ):
        with zipfile.ZipFile(tmp_path / name, "w", compression=method) as z:
            z.writestr("r.npy", data)
    V = np.dtype((np.void, dtype.itemsize))
    stored = np.ndarray(shape, dtype=V, buffer=data, offset=len(data) - ref_size(dtype, shape),
                        order=order)  # fmt: skip
    want = np.ascontiguousarray(stored).tobytes()  # the file's records, in logical order
    ref = np.load(npy)
    assert _records(ref) == want  # numpy.load gives the file's bytes
    chunks = 7 if shape else "auto"
    got: dict[str, np.ndarray] = {
        "load": npystore.load(str(npy)),
        "open_npy": npystore.open_npy(str(npy)).compute(),
        "open_npy chunks": npystore.open_npy(str(npy), chunks=chunks).compute(),
    }
    for name in ("stored.npz", "deflated.npz"):
        url = str(tmp_path / name)
        with npystore.load(url) as z:
            got[f"load {name}"] = z["r"]
        got[f"open_npz {name}"] = npystore.open_npz(url)["r"].compute()
        got[f"open_npz chunks {name}"] = npystore.open_npz(url, chunks=chunks)["r"].compute()
        got[f"NpzFile.load {name}"] = npystore.open_npz(url).load("r")
    for face, value in got.items():
        assert value.dtype == ref.dtype, face
        assert value.shape == ref.shape, face
        assert _records(value) == want, face
    if not shape:
        return
    # slices of the dask face (read by the chunks' own reads), and any index of the
    # layout array itself
    for name in ("r.npy", "stored.npz", "deflated.npz"):
        opened = npystore.open(str(tmp_path / name), chunks=chunks)
        arr = opened if name.endswith(".npy") else opened["r"]
        for key in (np.s_[::3], np.s_[2:9]):
            expected = np.ascontiguousarray(ref.view(V)[key]).tobytes()
            assert _records(arr[key].compute()) == expected, (name, key)
    for name in ("stored.npz", "deflated.npz"):
        array = npystore.open_npz(str(tmp_path / name)).array("r")
        for key in (np.s_[::3], np.s_[::-2], np.s_[[4, 1, 4]], np.s_[np.arange(len(ref)) % 3 > 0]):
            expected = np.ascontiguousarray(ref.view(V)[key]).tobytes()
            assert _records(array[key]) == expected, (name, key)
