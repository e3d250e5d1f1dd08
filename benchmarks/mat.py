"""MATLAB v7.3 benchmarks: one 200 MB variable read whole, npystore vs the tools used today.

The file is laid out as MATLAB writes it (checked on the real corpus): a 512-byte userblock
with MATLAB's header text, the matrix as an HDF5 dataset with reversed dimensions, deflate
level 3, no shuffle, chunks of at most 64 KiB cut by halving the largest dimension, written
back to back in index order. The values are a smooth signal with noise, rounded: about as
compressible as measured data.

- ``mat73-load``: local file, ``npystore.open_mat(path).load("x")`` vs ``mat73.loadmat``.
- ``mat73-s3``: the same file on a loopback S3 server (rclone) with 30 ms added to every
  request, vs ``h5py.File(s3fs_file)`` reading the dataset (s3fs's default 50 MiB read-ahead
  blocks, the usual way to read HDF5 from S3 without downloading first).
- ``mat73-h5py``: 4000 x 4000 doubles saved by ``hdf5storage.savemat`` (its defaults:
  shuffle, gzip 7, Fletcher-32, chunks of about 62 KiB), read whole locally,
  ``open_mat(path).load("x")`` vs ``h5py.File(path)["x"][()]``, for two kinds of values:
  small integers (:func:`small_integers`, a file of about 18.5 MB: the decode is the read)
  and :func:`matrix`'s (about 103 MB).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

#: What MATLAB writes in the userblock.
HEADER = (
    b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Sun Nov 22 00:00:00 2026 "
    b"HDF5 schema 1.00 ."
)
CHUNK_LIMIT = 64 * 2**10


def matlab_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """MATLAB's chunk shape: halve the largest dimension until a chunk fits 64 KiB."""
    chunk = list(shape)
    while math.prod(chunk) * itemsize > CHUNK_LIMIT:
        k = max(range(len(chunk)), key=lambda i: chunk[i])
        chunk[k] = math.ceil(chunk[k] / 2)
    return tuple(chunk)


def write_matlab_v73(path: Path, name: str, value: np.ndarray[Any, Any]) -> None:
    """Write one double matrix as MATLAB's ``save -v7.3`` lays it out."""
    import h5py

    hdf5 = value.T  # MATLAB (m, n) column-major == HDF5 (n, m) row-major
    chunks = matlab_chunks(hdf5.shape, hdf5.dtype.itemsize)
    with h5py.File(path, "w", userblock_size=512, libver="earliest") as f:
        d = f.create_dataset(name, data=hdf5, chunks=chunks, compression="gzip",
                             compression_opts=3)  # fmt: skip
        d.attrs["MATLAB_class"] = np.bytes_(b"double")
    with open(path, "r+b") as fh:
        text = HEADER.ljust(116, b" ")
        fh.write(text + b"\x00" * 8 + (0x0200).to_bytes(2, "little") + b"IM")


def matrix(nbytes: int) -> np.ndarray[Any, Any]:
    """A square-ish double matrix of about ``nbytes``: smooth columns plus rounded noise."""
    n = int(math.sqrt(nbytes / 8))
    rng = np.random.default_rng(7)
    t = np.linspace(0, 20 * np.pi, n)
    cols = np.sin(t)[:, None] * np.linspace(1, 2, n)[None, :]
    return np.round(cols + 0.01 * rng.standard_normal((n, n)), 4)


def small_integers(nbytes: int) -> np.ndarray[Any, Any]:
    """A square-ish double matrix of about ``nbytes``: integers 0..99 (counts, quantised
    measurements); hdf5storage's shuffle + gzip 7 packs them about 7x."""
    n = int(math.sqrt(nbytes / 8))
    return np.random.default_rng(7).integers(0, 100, (n, n)).astype(np.float64)


def write_hdf5storage(path: Path, name: str, value: np.ndarray[Any, Any]) -> None:
    """Write one variable with ``hdf5storage.savemat`` (its defaults), through a temporary
    name (hdf5storage wants a ``.mat`` suffix)."""
    import hdf5storage

    tmp = path.with_name(path.stem + ".partial.mat")
    hdf5storage.savemat(str(tmp), {name: value}, format="7.3")
    tmp.replace(path)


def make_file(workdir: Path, size: int) -> tuple[Path, np.ndarray[Any, Any]]:
    path = workdir / f"matlab_{size >> 20}MiB.mat"
    value = matrix(size)
    if not path.exists():
        write_matlab_v73(path, "x", value)
    return path, value


def check(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> None:
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError("npystore read different values than were written")
