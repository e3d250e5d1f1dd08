"""Foreign files through every npystore face, against the reference readers (issue 26).

Not part of the test suite: it reads a corpus of files nobody here wrote (the test data that
scipy, numpy, MNE, obspy, dipy, pymatreader ... ship in their wheels and sdists, the MATLAB
corpus in ``shared/testdata/mat``) plus files made here with numpy, ``scipy.io.savemat``,
hdf5storage and h5py, and compares every array each face gives with what the reference
reader gives::

    python benchmarks/corpus.py collect /tmp/corpus     # pip download + unpack (network)
    python benchmarks/corpus.py make /tmp/corpus/made   # files written by numpy, scipy, h5py
    python benchmarks/corpus.py sweep /tmp/corpus --out /tmp/corpus/results.jsonl

Faces, per file kind (one comparison = one array, text, sparse matrix, container or
placeholder of the reference reader, through one face):

========  ====================================================================================
kind      faces
========  ====================================================================================
``.npy``  ``load`` (``npystore.load``), ``open`` (``open_npy(...).compute()``), ``zarr``
          (``open_store`` read by zarr), ``kerchunk2``/``kerchunk3`` (``to_kerchunk`` read by
          fsspec's reference file system + zarr), ``xarray`` (``engine="npystore"``)
``.npz``  the same, per member (``load``: the ``NpzArrays`` mapping; ``open``: ``open_npz``)
``.mat``  ``open`` (``open_mat``), ``zarr``, ``kerchunk2``, ``kerchunk3``, ``xarray``
          (``open_datatree``)
========  ====================================================================================

References: ``numpy.load`` (``allow_pickle``/``encoding`` as the file needs), and for MAT-files
``scipy.io.loadmat`` (v4, v5: ``mat_dtype=True``, no squeezing, the char grid) or h5py
(v7.3: the MATLAB layout read directly, written out below in :func:`h5_flatten`; MATLAB's
``canonical empty`` is ``[]``, a 0x0 double; a function handle one object). A sparse
group of the Zarr faces is rebuilt from the first ``jc[-1]`` entries of ``data`` and ``ir``
(MATLAB stores ``nzmax >= nnz``; docs/howto-matlab.md).

Outcomes: ``equal``; ``equal*`` (equal under a convention the docs state, e.g. npystore's
native byte order through Zarr, logical sparse as ``bool``, MATLAB's ``[]`` as 0x0, a v5
double sparse matrix stored as ``miUINT8`` as ``float64`` where scipy keeps ``uint8``);
``unequal``; ``refused`` (npystore raised: a refusal the docs state is ``refused-documented``,
any other ``refused-unexpected``); ``skipped-documented`` (a face that has no form for the
value, as documented: cells in xarray); ``oracle-failed`` (the reference reader raised;
``both-refused`` when npystore raised too). The summary is printed; every comparison is
one JSON line in ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import hashlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import traceback
import warnings
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: Packages whose wheels or sdists ship .npy/.npz/.mat test data (``collect``).
WHEELS = [
    "scipy",
    "numpy",
    "mne",
    "statsmodels",
    "pymatreader",
    "obspy",
    "dipy",
    "scikit-learn",
    "h5py",
    "xarray",
    "pandas",
    "astropy",
    "nibabel",
    "scikit-image",
    "PyWavelets",
    "nilearn",
    "mat73",
    "hdf5storage",
    "matplotlib",
    "rosettasciio",
    "oct2py",
    "spm1d",
    "neurokit2",
    "tslearn",
]
#: Packages whose test data is only in the sdist.
SDISTS = ("pymatreader", "mat73", "hdf5storage")
EXTENSIONS = (".npy", ".npz", ".mat")

NPY_FACES = ("load", "open", "zarr", "kerchunk2", "kerchunk3", "xarray")
MAT_FACES = ("open", "zarr", "kerchunk2", "kerchunk3", "xarray")

#: Refusals the docs state: (face pattern, message pattern, where it is documented).
DOCUMENTED: list[tuple[str, str, str]] = [
    (
        "kerchunk2",
        r"Zarr v2 (metadata )?cannot hold",
        "to_kerchunk docstring; docs/howto-references.md (Zarr v2 dtypes)",
    ),
    (
        "kerchunk2|kerchunk3",
        r"more than max_inline=",
        "docs/reliability.md (Limits: max_inline); docs/howto-references.md",
    ),
    (
        ".*",
        r"a plain HDF5 file, not a MATLAB v7.3 MAT-file|HDF5 file behind a user block",
        "docs/format-mat.md (v7.3: plain HDF5 refused)",
    ),
    (
        "zarr|kerchunk2|kerchunk3",
        r"object array",
        "docs/howto-zarr.md (object arrays have no Zarr form)",
    ),
    (
        # every face refuses invalid UTF-8 in miUTF8 chars by default, naming the option
        # that reads them as scipy does (open_mat, open_store, to_kerchunk, the xarray
        # engine and the VirtualiZarr parser all take char_errors)
        ".*",
        r"invalid UTF-8 .*char_errors='replace'",
        "docs/format-mat.md (Level 5: invalid UTF-8 in miUTF8 data, char_errors)",
    ),
]


# ------------------------------------------------------------------------------ collect


def collect(dest: Path) -> None:
    """pip-download the packages above (no dependencies) and unpack their data files into
    ``dest/files/<package>/...``, one copy per content; ``dest/files/MANIFEST.tsv`` lists
    package, version, path in the package, size and SHA-256."""
    dl, sd, out = dest / "dl", dest / "sdist", dest / "files"
    for d in (dl, sd, out):
        d.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps"]
    subprocess.run([*pip, "-d", str(dl), *WHEELS], check=True)
    # sdists need their build backend to report metadata; a failure here only loses them
    subprocess.run([*pip, "--no-binary", ":all:", "-d", str(sd), *SDISTS], check=False)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for src in sorted(dl.iterdir()) + sorted(sd.iterdir()):
        match = re.match(r"([A-Za-z0-9_.]+?)-(\d[^-]*?)(?:-|\.tar\.gz$|\.zip$)", src.name)
        package, version = (
            (match.group(1).lower().replace("_", "-"), match.group(2)) if match else (src.name, "?")
        )
        for name, data in _archive_members(src):
            digest = hashlib.sha256(data).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            target = out / package / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            rows.append({"package": package, "version": version, "path": name,
                         "local": str(target.relative_to(dest)), "bytes": len(data),
                         "sha256": digest})  # fmt: skip
    with (out / "MANIFEST.tsv").open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} files:", dict(Counter(r["package"] for r in rows)))


def _archive_members(src: Path) -> Iterator[tuple[str, bytes]]:
    if src.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(src) as z:
            for info in z.infolist():
                if info.filename.lower().endswith(EXTENSIONS) and not info.is_dir():
                    yield info.filename, z.read(info)
    elif src.name.endswith(".tar.gz"):
        with tarfile.open(src) as t:
            for member in t.getmembers():
                if member.isfile() and member.name.lower().endswith(EXTENSIONS):
                    f = t.extractfile(member)
                    if f is not None:
                        yield member.name, f.read()


# ------------------------------------------------------------------------------ make


def make(dest: Path) -> None:
    """Files written by numpy (every dtype of ``tests/npy_cases.py``), ``scipy.io.savemat``
    (v4, v5 compressed and not), hdf5storage and h5py (MATLAB's v7.3 layout, and one plain
    HDF5 file)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import npy_cases

    dest.mkdir(parents=True, exist_ok=True)
    npy = dest / "numpy"
    npy.mkdir(exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        members: dict[str, Any] = {}
        for name, dtype in npy_cases.DTYPES.items():
            for shape in npy_cases.SHAPES:
                for order in npy_cases.ORDERS:
                    if order == "F" and len(shape) < 2:
                        continue
                    npy_cases.write_case(npy, name, shape, order)
            members[re.sub(r"\W", "_", name)] = npy_cases.make_array(dtype, (5, 3), "C")
        members["dir/inner"] = np.arange(12, dtype=">i4").reshape(3, 4)
        members["x"] = np.ones(3)
        members["x.npy"] = np.zeros(2)
        np.savez(dest / "numpy-savez-all.npz", **members)
        np.savez_compressed(dest / "numpy-savez-compressed-all.npz", **members)
        big = np.random.default_rng(0).standard_normal((3000, 700))
        np.savez_compressed(dest / "numpy-big-compressed.npz", big=big, ints=np.arange(10**6))
        np.save(dest / "numpy-big.npy", big)
        np.save(dest / "numpy-big-F.npy", np.asfortranarray(big[:, :300].astype(">f4")))
        obj = np.array([1, "a", None, [1, 2], {"k": 3}], dtype=object)
        np.save(dest / "numpy-object.npy", obj)
        np.savez(dest / "numpy-object.npz", obj=obj, num=np.arange(4))
    _make_savemat(dest / "scipy")
    _make_h5(dest / "h5")


def _mat_values(rng: np.random.Generator) -> dict[str, Any]:
    import scipy.sparse as sp

    values: dict[str, Any] = {
        "double": rng.standard_normal((7, 5)),
        "single": rng.standard_normal((4, 6)).astype(np.float32),
        "nd": rng.standard_normal((3, 4, 5)),
        "big": rng.standard_normal((400, 300)),
        "cplx": rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3)),
        "cplx_single": (rng.standard_normal(4) + 2j).astype(np.complex64),
        "logical": rng.standard_normal((5, 2)) > 0,
        "empty": np.zeros((0, 3)),
        "scalar": 3.5,
        "text": "hello world",
        "texts": np.array(["abc", "def"]),
        "unicode": "h\u00e9llo \u2603",
        "empty_text": "",
        "cell": np.array([[1.0, "x", np.arange(3.0)]], dtype=object),
        "nested_cell": np.array([np.array([1, 2], dtype=object), "z"], dtype=object),
        "struct": {"a": 1.0, "b": "text", "c": {"d": np.arange(4, dtype=np.int16)}},
        "struct_array": np.array(
            [(1.0, "p"), (2.0, "q"), (3.0, "r")], dtype=[("x", object), ("y", object)]
        ),
        "sparse": sp.random(20, 10, density=0.2, format="csc", random_state=1),
        "sparse_bool": sp.csc_matrix(np.eye(4, dtype=bool)),
        "sparse_cplx": sp.csc_matrix(np.eye(3) * (1 + 1j)),
    }
    for t in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"):
        info = np.iinfo(t)
        values[t] = np.array([[info.min, 0, info.max]], dtype=t)
    return values


def _make_savemat(dest: Path) -> None:
    import scipy.io as sio

    dest.mkdir(parents=True, exist_ok=True)
    values = _mat_values(np.random.default_rng(1))
    for compress in (False, True):
        sio.savemat(dest / f"savemat-v5-{'z' if compress else 'raw'}.mat", values,
                    do_compression=compress)  # fmt: skip
        sio.savemat(dest / f"savemat-v5-{'z' if compress else 'raw'}-big-only.mat",
                    {"big": values["big"]}, do_compression=compress)  # fmt: skip
    v4 = {k: values[k] for k in ("double", "single", "big", "cplx", "empty", "text", "sparse")}
    v4["int16"] = values["int16"]
    sio.savemat(dest / "savemat-v4.mat", v4, format="4")
    sio.savemat(dest / "savemat-v5-oned-col.mat", {"v": np.arange(5.0)}, oned_as="column")


def _make_h5(dest: Path) -> None:
    import h5py

    dest.mkdir(parents=True, exist_ok=True)
    try:
        import hdf5storage

        values = _mat_values(np.random.default_rng(2))
        simple = {k: values[k] for k in ("double", "single", "nd", "big", "cplx", "logical",
                                          "text", "texts", "empty", "int8", "uint64")}  # fmt: skip
        simple["struct"] = {"a": np.array(1.0), "b": np.arange(5.0)}
        simple["cell"] = np.array([[np.arange(3.0), np.array([[2.0]])]], dtype=object)
        hdf5storage.savemat(str(dest / "hdf5storage-v73.mat"), simple, format="7.3",
                            matlab_compatible=True)  # fmt: skip
    except Exception as e:
        print(f"hdf5storage: {type(e).__name__}: {e}", file=sys.stderr)
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: corpus.py HDF5 schema 1.00 ."
    rng = np.random.default_rng(3)
    for tag, kw in {
        "gzip-shuffle-fletcher": {"compression": "gzip", "shuffle": True, "fletcher32": True},
        "lzf": {"compression": "lzf"},
        "contiguous": {},
        "compact": {"compact": True},
        "latest-chunked": {"compression": "gzip", "libver": "latest"},
    }.items():
        options = dict(kw)
        libver = options.pop("libver", None)
        compact = options.pop("compact", False)
        path = dest / f"h5py-{tag}.mat"
        with h5py.File(path, "w", userblock_size=512, libver=libver or "earliest") as f:
            for name, arr in {"a": rng.standard_normal((300, 200)),
                              "i": np.arange(1000, dtype=np.int32).reshape(40, 25),
                              "small": np.arange(6.0).reshape(2, 3)}.items():  # fmt: skip
                data = arr.T  # MATLAB's m x n is HDF5's n x m
                if compact and data.nbytes < 60000:  # compact data lives in the header
                    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                    dcpl.set_layout(h5py.h5d.COMPACT)
                    space = h5py.h5s.create_simple(data.shape)
                    tid = h5py.h5t.py_create(data.dtype)
                    h5py.Dataset(h5py.h5d.create(f.id, name.encode(), tid, space, dcpl))[...] = data
                else:
                    chunks = (min(50, data.shape[0]), min(50, data.shape[1])) if options else None
                    f.create_dataset(name, data=data, chunks=chunks, **options)
                f[name].attrs["MATLAB_class"] = np.bytes_(
                    "double" if arr.dtype == np.float64 else "int32"
                )
        with open(path, "r+b") as fh:
            fh.write(header.ljust(116, b" ") + b"\0" * 8 + b"\x00\x02IM")
    with h5py.File(dest / "h5py-plain.h5.mat", "w") as f:
        f["x"] = np.arange(10.0)


# ------------------------------------------------------------------------------ values

#: A leaf of a file's content: ("array", ndarray) | ("text", rows) | ("sparse", csc) |
#: ("container", kind, shape) | ("object", class) | ("bytes", data)
Leaf = tuple[Any, ...]


def _fortran_indices(shape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    for k in range(math.prod(shape)):
        yield tuple(int(i) for i in np.unravel_index(k, shape, order="F"))


def _rows(grid: np.ndarray) -> list[str]:
    """MATLAB rows of a char grid (MATLAB shape, one character per element), in npystore's
    order: shape ``(dims[0],) + dims[2:]``, C order."""
    if grid.ndim < 2:
        grid = grid.reshape(1, -1)
    return [
        "".join(grid[(i, slice(None), *k)].tolist())
        for i in range(grid.shape[0])
        for k in np.ndindex(grid.shape[2:])
    ]


def _units_rows(units: np.ndarray) -> list[str]:
    """MATLAB rows of UTF-16 code units (MATLAB shape)."""
    units = np.asarray(units)
    if units.ndim < 2:
        units = units.reshape(1, -1)
    out = []
    for i in range(units.shape[0]):
        for k in np.ndindex(units.shape[2:]):
            row = units[(i, slice(None), *k)].astype("<u2").tobytes()
            out.append(row.decode("utf-16-le", "surrogatepass"))
    return out


# -- reference readers


def _file_data(raw: bytes) -> tuple[bytes, bool] | None:
    """The data bytes of a ``.npy`` image (as the file holds them: padding included) and
    whether it is Fortran-ordered; None when the header is not numpy's."""
    try:
        f = io.BytesIO(raw)
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = np.lib.format._read_array_header(f, version)
    except Exception:
        return None
    n = math.prod(shape) * dtype.itemsize
    return raw[f.tell() : f.tell() + n], fortran


def npy_oracle(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """numpy.load's array (key ""), the options it needed, and the file's data bytes of a
    structured array (numpy's own copies do not keep padding bytes)."""
    for kw in ({}, {"allow_pickle": True}, {"allow_pickle": True, "encoding": "latin1"}):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = np.load(path, **kw)
        except UnicodeError:  # a Python 2 pickle: latin1 next
            continue
        except ValueError as e:
            if "pickle" not in str(e):
                raise
            continue
        raw = {}
        if isinstance(value, np.ndarray) and value.dtype.names is not None:
            raw[""] = _file_data(path.read_bytes())
        return {"": value}, kw, raw
    raise ValueError("numpy.load fails with every option")


def npz_oracle(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Every member numpy.load's NpzFile gives, keyed by member name (numpy reads a member
    by its exact name first; its ``files`` list can name one member twice: ``x.npy`` reads
    member ``x.npy``, not ``x.npy.npy``), arrays or bytes for non-.npy members."""
    for kw in ({}, {"allow_pickle": True}, {"allow_pickle": True, "encoding": "latin1"}):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with np.load(path, **kw) as z, zipfile.ZipFile(path) as zf:
                    out = {m: z[m] for m in zf.namelist()}
                    raw = {
                        m: _file_data(zf.read(m))
                        for m, v in out.items()
                        if isinstance(v, np.ndarray) and v.dtype.names is not None
                    }
                    return out, kw, raw
        except UnicodeError:  # a Python 2 pickle: latin1 next
            continue
        except ValueError as e:
            if "pickle" not in str(e):
                raise
    raise ValueError("numpy.load fails with every option")


def mat_kind(path: Path) -> str:
    head = path.read_bytes()[:128]
    if len(head) == 128 and head[126:128] in (b"IM", b"MI"):
        version = head[124:126] if head[126:128] == b"IM" else head[125:123:-1]
        if version == b"\x00\x02":
            return "7.3"
        return "5"
    return "4"


def scipy_flatten(path: Path) -> dict[str, Leaf]:
    """Leaves of ``scipy.io.loadmat`` (v4, v5), in npystore's paths: ``var``, ``var/field``,
    ``var/k`` (cells and struct arrays, column-major), ``var/k/field``."""
    import scipy.io as sio

    def load(**kw: Any) -> dict[str, Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sio.loadmat(str(path), squeeze_me=False, struct_as_record=True, **kw)

    a = load(mat_dtype=True, chars_as_strings=False)
    b = load(mat_dtype=False, chars_as_strings=False)  # keeps the imaginary part
    out: dict[str, Leaf] = {}
    for name in a:
        if name.startswith("__") and name != "__function_workspace__":
            continue
        if name == "__function_workspace__":
            continue  # npystore names no such variable (MATLAB's own workspace)
        _scipy_leaf(a[name], b[name], name, out)
    return out


def _scipy_leaf(v: Any, vb: Any, path: str, out: dict[str, Leaf]) -> None:
    import scipy.io.matlab as mio
    import scipy.sparse as sp

    if sp.issparse(v):
        out[path] = ("sparse", sp.csc_matrix(vb))
    elif isinstance(v, mio.MatlabFunction):
        out[path] = ("object", "function_handle")
    elif isinstance(v, mio.MatlabOpaque):
        out[path] = ("object", v[0]["s2"].decode() if v.size else "opaque")
    elif isinstance(v, np.ndarray) and v.dtype.names is not None:
        cls = v.classname if isinstance(v, mio.MatlabObject) else "struct"
        out[path] = ("container", cls, v.shape)
        if v.size == 1:
            for f in v.dtype.names:
                _scipy_leaf(v.reshape(-1)[0][f], vb.reshape(-1)[0][f], f"{path}/{f}", out)
        else:
            for k, idx in enumerate(_fortran_indices(v.shape)):
                for f in v.dtype.names:
                    _scipy_leaf(v[idx][f], vb[idx][f], f"{path}/{k}/{f}", out)
    elif isinstance(v, np.ndarray) and v.dtype == object:
        if v.size and all(x is None for x in v.reshape(-1)):
            out[path] = ("container", "struct", v.shape)  # a struct with no fields
            return
        out[path] = ("container", "cell", v.shape)
        for k, idx in enumerate(_fortran_indices(v.shape)):
            _scipy_leaf(v[idx], vb[idx], f"{path}/{k}", out)
    elif isinstance(v, np.ndarray) and v.dtype.kind == "U":
        out[path] = ("text", _rows(v) if v.size else [], v.shape)
    elif isinstance(v, np.ndarray):
        out[path] = ("array", vb if vb.dtype.kind == "c" else v, "scipy")
    else:
        out[path] = ("object", type(v).__name__)


_H5_NUMERIC = {
    "double": "f8", "single": "f4", "int8": "i1", "uint8": "u1", "int16": "i2",
    "uint16": "u2", "int32": "i4", "uint32": "u4", "int64": "i8", "uint64": "u8",
    "logical": "?",
}  # fmt: skip


def h5_flatten(path: Path) -> dict[str, Leaf]:
    """Leaves of a MAT v7.3 file read with h5py, MATLAB's layout spelled out: datasets are
    MATLAB arrays transposed (``MATLAB_class``; ``MATLAB_empty``: the data is the dims),
    complex values a ``real``/``imag`` compound, char UTF-16 code units, cells and struct
    arrays datasets of references, scalar structs groups (``MATLAB_fields`` order), sparse
    matrices groups with ``data``, ``ir``, ``jc`` and ``MATLAB_sparse`` rows."""
    import h5py

    out: dict[str, Leaf] = {}
    with h5py.File(path, "r") as f:
        for name in f:
            if name.startswith("#"):
                continue
            _h5_leaf(f, f[name], name, out)
    return out


def _attr(obj: Any, key: str) -> Any:
    v = obj.attrs.get(key)
    if isinstance(v, bytes | np.bytes_):
        return v.decode()
    return v


def _fields(obj: Any) -> list[str]:
    raw = obj.attrs.get("MATLAB_fields")
    if raw is None:
        return list(obj)
    return [b"".join(np.asarray(x).tolist()).decode() for x in raw]


def _h5_leaf(f: Any, obj: Any, path: str, out: dict[str, Leaf]) -> None:
    import h5py
    import scipy.sparse as sp

    cls = _attr(obj, "MATLAB_class") or ""
    if isinstance(obj, h5py.Group) and cls == "function_handle":
        # MATLAB writes a function handle as a group (MATLAB_object_decode = 1) of fields
        # that are not the handle's MATLAB value (matlabroot, sentinel, a workspace in
        # #subsystem#): one object, as scipy's MatlabFunction is for v5 files; npystore
        # gives a placeholder naming the class (docs/howto-matlab.md)
        out[path] = ("object", cls)
        return
    if isinstance(obj, h5py.Group):
        if "MATLAB_sparse" in obj.attrs:
            rows = int(obj.attrs["MATLAB_sparse"])
            jc = obj["jc"][()].astype(np.int64)
            dtype = np.dtype(_H5_NUMERIC.get(cls, "f8"))
            data = obj["data"][()] if "data" in obj else np.zeros(0, dtype)
            if data.dtype.names:
                data = data["real"] + 1j * data["imag"]
            ir = obj["ir"][()].astype(np.int64) if "ir" in obj else np.zeros(0, np.int64)
            out[path] = ("sparse", sp.csc_matrix((data, ir, jc), shape=(rows, len(jc) - 1)))
            return
        fields = _fields(obj)
        members = [obj[k] for k in fields if k in obj]
        is_array = members and all(
            isinstance(m, h5py.Dataset)
            and m.dtype == h5py.ref_dtype
            and "MATLAB_class" not in m.attrs
            for m in members
        )
        if is_array:
            shape = members[0].shape[::-1]
            out[path] = ("container", cls or "struct", shape)
            for k, idx in enumerate(_fortran_indices(shape)):
                for name in fields:
                    ref = obj[name][()].T[idx]
                    _h5_leaf(f, f[ref], f"{path}/{k}/{name}", out)
        else:
            out[path] = ("container", cls or "struct", (1, 1))
            for name in fields:
                if name in obj:
                    _h5_leaf(f, obj[name], f"{path}/{name}", out)
        return
    if "MATLAB_object_decode" in obj.attrs or cls in ("function_handle",):
        out[path] = ("object", cls)
        return
    empty = bool(obj.attrs.get("MATLAB_empty", 0))
    if empty:
        dims = tuple(int(x) for x in np.asarray(obj[()]).reshape(-1))
        if cls in {"cell", "struct"}:
            out[path] = ("container", cls, dims)
        elif cls == "canonical empty":
            # MATLAB's [] (#refs#/a, which cells of [] point to): a 0x0 double
            out[path] = ("array", np.zeros(dims, np.float64), "h5py")
        elif cls == "char":
            out[path] = ("text", [""] * (dims[0] if dims else 0), dims)
        elif cls in _H5_NUMERIC:
            out[path] = ("array", np.zeros(dims, _H5_NUMERIC[cls]), "h5py")
        else:
            out[path] = ("object", cls)
        return
    if cls == "cell":
        refs = obj[()].T
        out[path] = ("container", "cell", refs.shape)
        for k, idx in enumerate(_fortran_indices(refs.shape)):
            _h5_leaf(f, f[refs[idx]], f"{path}/{k}", out)
        return
    if cls == "char":
        units = np.asarray(obj[()]).T
        out[path] = ("text", _units_rows(units), units.shape)
        return
    if cls in _H5_NUMERIC:
        data = obj[()]
        if data.dtype.names:
            data = data["real"] + 1j * data["imag"].astype(data["real"].dtype)
        data = np.asarray(data).T
        if data.ndim < 2:
            data = data.reshape(1, -1) if data.ndim == 1 else data.reshape(1, 1)
        target = np.dtype(_H5_NUMERIC[cls])
        if data.dtype.kind == "c":
            target = np.dtype(np.complex64 if cls == "single" else np.complex128)
        out[path] = ("array", data.astype(target), "h5py")
        return
    out[path] = ("object", cls or "unknown")


# -- npystore's faces


def _compute(v: Any) -> Any:
    return v.compute() if hasattr(v, "compute") and hasattr(v, "dask") else v


def mat_open_flatten(path: Path, hints: dict[str, Leaf]) -> dict[str, Leaf]:
    """open_mat's values as leaves; ``hints`` (the reference's leaves) tell a char array of
    several rows (an object array of str) from a cell of strings, which look alike."""
    import dask.array as da
    import scipy.sparse as sp

    import npystore
    from npystore import MatlabObject, MatStruct

    out: dict[str, Leaf] = {}

    def leaf(v: Any, p: str) -> None:
        if isinstance(v, da.Array):
            out[p] = ("array", v.compute(), "npystore")
        elif sp.issparse(v):
            out[p] = ("sparse", sp.csc_matrix(v))
        elif isinstance(v, MatlabObject):
            out[p] = ("object", v.matlab_class)
        elif isinstance(v, MatStruct):
            out[p] = ("container", v.matlab_class, tuple(getattr(v, "dims", (1, 1))))
            for k, x in v.items():
                leaf(x, f"{p}/{k}")
        elif isinstance(v, str):
            out[p] = ("text", [v], None)
        elif isinstance(v, np.ndarray) and v.dtype.names is not None and v.size == 0:
            # an empty struct array: an empty structured array (docs/howto-matlab.md)
            cls = (v.dtype.metadata or {}).get("matlab_class", "struct")
            out[p] = ("container", cls, v.shape)
        elif isinstance(v, np.ndarray) and v.dtype == object:
            elements = [v[i] for i in _fortran_indices(v.shape)] if v.size else []
            if hints.get(p, ("",))[0] == "text" and all(isinstance(e, str) for e in elements):
                out[p] = ("text", list(v.reshape(-1)), None)
                return
            # a struct array, or a cell whose elements are structs (the reference tells)
            is_struct = (
                bool(elements)
                and all(isinstance(e, MatStruct) for e in elements)
                and hints.get(p, ("", "cell"))[1] != "cell"
            )
            kind = elements[0].matlab_class if is_struct else "cell"
            out[p] = ("container", kind, v.shape)
            for k, e in enumerate(elements):
                if is_struct:
                    for name, x in e.items():
                        leaf(x, f"{p}/{k}/{name}")
                else:
                    leaf(e, f"{p}/{k}")
        elif isinstance(v, np.ndarray):
            out[p] = ("array", v, "npystore")
        else:
            out[p] = ("object", type(v).__name__)

    m = npystore.open_mat(str(path))
    try:
        for name in m:
            info = m.variables[name]
            v = m[name]
            if info.matlab_class == "char" and isinstance(v, np.ndarray):
                out[name] = ("text", list(v.reshape(-1)), None)
            elif (
                isinstance(v, np.ndarray)
                and v.dtype == object
                and v.size
                and isinstance(v.reshape(-1)[0], MatStruct)
                and hints.get(name, ("", "cell"))[1] != "cell"
            ):
                out[name] = ("container", v.reshape(-1)[0].matlab_class, v.shape)
                for k, idx in enumerate(_fortran_indices(v.shape)):
                    for fname, x in v[idx].items():
                        leaf(x, f"{name}/{k}/{fname}")
            else:
                leaf(v, name)
    finally:
        m.close()
    return out


def _zarr_tree(root: Any, paths: list[str] | None = None) -> Iterator[tuple[str, Any]]:
    """Every node below a zarr group: those of ``paths``, else walked by listing each
    group (zarr's ``members(max_depth=None)`` relies on consolidated metadata)."""
    import zarr

    if paths is not None:
        for p in paths:
            yield p, root[p]
        return
    todo = [("", root)]
    while todo:
        prefix, group = todo.pop()
        for name, node in group.members():
            p = f"{prefix}{name}"
            yield p, node
            if isinstance(node, zarr.Group):
                todo.append((f"{p}/", node))


def _origin(p: str, inverse: dict[str, str]) -> str:
    parts = p.split("/")
    for i in range(len(parts), 0, -1):
        head = "/".join(parts[:i])
        if head in inverse:
            return "/".join([inverse[head], *parts[i:]])
    return p


def mat_zarr_flatten(root: Any, paths: list[str] | None = None) -> dict[str, Leaf]:
    import scipy.sparse as sp
    import zarr

    attrs = root.attrs.asdict()
    renamed = attrs.get("npystore", {}).get("renamed", {})
    inverse = {v: k for k, v in renamed.items()}
    nodes = dict(_zarr_tree(root, paths))
    out: dict[str, Leaf] = {}
    for p, node in nodes.items():
        a = node.attrs.asdict()
        origin = _origin(p, inverse)
        if isinstance(node, zarr.Group):
            if a.get("matlab_sparse"):
                # data and ir hold what the file stores: MATLAB allocates nzmax >= nnz
                # values (an all-zero matrix keeps one row index); the matrix's values are
                # the first jc[-1] (docs/howto-matlab.md, "As a Zarr group")
                dims = tuple(a["matlab_dims"])
                jc = nodes[f"{p}/jc"][...]
                nnz = int(jc[-1]) if jc.size else 0
                data, ir = (nodes[f"{p}/{k}"][...][:nnz] for k in ("data", "ir"))
                out[origin] = ("sparse", sp.csc_matrix((data, ir, jc), shape=dims))
            elif "matlab_placeholder" in a:
                out[origin] = ("object", a.get("matlab_class"))
            elif "matlab_dims" in a:
                out[origin] = ("container", a.get("matlab_class"), tuple(a["matlab_dims"]))
            continue
        parent = nodes.get(p.rsplit("/", 1)[0]) if "/" in p else None
        if parent is not None and parent.attrs.get("matlab_sparse"):
            continue
        data = node[...]
        if a.get("matlab_class") == "char":
            out[origin] = ("text", _units_rows(data), tuple(a.get("matlab_dims", data.shape)))
        else:
            out[origin] = ("array", data, "zarr")
    return out


def mat_xarray_flatten(path: Path) -> dict[str, Leaf]:
    import xarray as xr

    out: dict[str, Leaf] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = xr.open_datatree(str(path), engine="npystore")
    try:
        for node in tree.subtree:
            prefix = node.path.strip("/")
            for name, var in node.dataset.data_vars.items():
                p = f"{prefix}/{name}" if prefix else str(name)
                if var.attrs.get("matlab_class") == "char":
                    values = np.asarray(var.values)
                    rows = (
                        [str(values)] if values.ndim == 0 else [str(x) for x in values.reshape(-1)]
                    )
                    out[p] = ("text", rows, None)
                else:
                    out[p] = ("array", np.asarray(var.values), "xarray")
    finally:
        tree.close()
    return out


def _refs_store(path: Path, zarr_format: int, **kw: Any) -> tuple[Any, list[str]]:
    """The references of ``path`` opened by fsspec's reference file system and zarr, and
    their node paths."""
    import fsspec
    import zarr
    from zarr.storage import FsspecStore

    import npystore

    refs = npystore.to_kerchunk(str(path), zarr_format=zarr_format, **kw)  # type: ignore[arg-type]
    refs = json.loads(json.dumps(refs))  # what a file of them holds
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, remote_protocol="file")
    root = zarr.open(FsspecStore(fs=fs, read_only=True, path=""), mode="r", zarr_format=zarr_format)
    # the nodes, from the references' keys: zarr 3.1's FsspecStore lists a group below the
    # root of a store with path="" as "/name", which the reference file system does not
    # know, so listing finds nothing there (consolidated metadata avoids the listing)
    marks = (".zarray", ".zgroup") if zarr_format == 2 else ("zarr.json",)
    paths = sorted(
        k.rsplit("/", 1)[0] for k in refs["refs"] if "/" in k and k.rsplit("/", 1)[1] in marks
    )
    return root, paths


# -- .npy / .npz faces


def npy_face(face: str, path: Path, kw: dict[str, Any]) -> dict[str, Any]:
    import npystore

    pickle_kw = {k: v for k, v in kw.items() if k in ("allow_pickle", "encoding")}
    if face == "load":
        return {"": npystore.load(str(path), **pickle_kw)}
    if face == "open":
        return {"": npystore.open_npy(str(path), **pickle_kw).compute()}
    if face == "zarr":
        import zarr

        return {"": np.asarray(zarr.open_array(npystore.open_store(str(path)), mode="r")[...])}
    if face in ("kerchunk2", "kerchunk3"):
        z, _ = _refs_store(path, int(face[-1]))
        return {"": np.asarray((z["data"] if face == "kerchunk2" else z)[...])}
    if face == "xarray":
        import xarray as xr

        with xr.open_dataset(str(path), engine="npystore", **pickle_kw) as ds:
            return {"": np.asarray(ds["data"].values)}
    raise ValueError(face)


def npz_face(face: str, path: Path, kw: dict[str, Any]) -> dict[str, Any]:
    """Every member a face gives, keyed by member name."""
    import npystore

    pickle_kw = {k: v for k, v in kw.items() if k in ("allow_pickle", "encoding")}
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    if face == "load":
        with npystore.load(str(path), **pickle_kw) as z:
            return {m: z[m] for m in names}
    if face == "open":
        z = npystore.open_npz(str(path), **pickle_kw)
        return {m: _compute(z[m]) for m in names}
    if face in ("zarr", "kerchunk2", "kerchunk3"):
        import zarr

        paths = None
        if face == "zarr":
            root = zarr.open_group(npystore.open_store(str(path)), mode="r")
        else:
            root, paths = _refs_store(path, int(face[-1]))
        root_attrs = root.attrs.asdict().get("npystore", {})
        out: dict[str, Any] = {m: Skipped(why) for m, why in root_attrs.get("skipped", {}).items()}
        for _p, node in _zarr_tree(root, paths):
            if isinstance(node, zarr.Array):
                out[node.attrs.asdict()["npystore"]["member"]] = np.asarray(node[...])
        return out
    if face == "xarray":
        import xarray as xr

        member = {k: m for m, k in npystore.open_npz(str(path)).member_keys.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = xr.open_datatree(str(path), engine="npystore", **pickle_kw)
        out = {}
        try:
            for node in tree.subtree:
                prefix = node.path.strip("/")
                for name, var in node.dataset.data_vars.items():
                    key = f"{prefix}/{name}" if prefix else str(name)
                    out[member.get(key, key)] = np.asarray(var.values)
        finally:
            tree.close()
        return out
    raise ValueError(face)


@dataclass(frozen=True)
class Skipped:
    """A member a face leaves out, naming why (the Zarr store's ``npystore.skipped``)."""

    why: str


# ------------------------------------------------------------------------------ comparing


def _memory(a: np.ndarray) -> bytes | None:
    """The bytes of a contiguous array as they lie in memory (padding included)."""
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        return None
    if a.nbytes == 0:
        return b""
    return ctypes.string_at(a.__array_interface__["data"][0], a.nbytes)


def _significant(a: np.ndarray) -> np.ndarray:
    """Native-order values as comparable bytes (x86 long doubles: their 10 bytes)."""
    native = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("=")))
    if native.dtype.type in (np.longdouble, np.clongdouble) and native.dtype.itemsize in (16, 32):
        return (
            native.view(np.uint8).reshape(-1, 16)[:, :10]
            if native.size
            else np.zeros((0, 10), np.uint8)
        )
    return native.view(np.uint8) if native.size else np.zeros(0, np.uint8)


def _deep_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype == object:
            return all(_deep_equal(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1), strict=True))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_deep_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    try:
        return bool(a == b) or (a != a and b != b)  # noqa: PLR0124 - NaN equals NaN here
    except Exception:
        return repr(a) == repr(b)


def compare_arrays(
    got: Any, want: Any, exact: bool, raw: tuple[bytes, bool] | None = None, order: bool = False
) -> tuple[str, str]:
    """("equal" | "equal*" | "unequal", detail). ``exact``: dtype as numpy gives it, and the
    padding bytes of structured values those of the file (``raw``: its data bytes and
    whether they are Fortran-ordered); ``order``: the memory order numpy gives (not a dask
    array's). Otherwise the byte order may be native (Zarr's rule) and structured values
    compare field by field."""
    if isinstance(want, bytes):
        return ("equal", "") if got == want else ("unequal", f"bytes member: {type(got).__name__}")
    if not isinstance(got, np.ndarray):
        return "unequal", f"got a {type(got).__name__}, expected an ndarray"
    if got.shape != want.shape:
        return "unequal", f"shape {got.shape} != {want.shape}"
    if want.dtype == object:
        if got.dtype != object:
            return "unequal", f"dtype {got.dtype} != object"
        return ("equal", "") if _deep_equal(got, want) else ("unequal", "object values differ")
    note = ""
    if got.dtype != want.dtype or got.dtype.descr != want.dtype.descr:
        same_native = want.dtype.names is None and got.dtype.newbyteorder(
            "="
        ) == want.dtype.newbyteorder("=")
        if exact or not same_native:
            return "unequal", f"dtype {got.dtype.descr} != {want.dtype.descr}"
        note = "native byte order"
    if (
        order
        and got.ndim > 1
        and got.size > 1
        and bool(got.flags.f_contiguous) != bool(want.flags.f_contiguous)
    ):
        return "unequal", "memory order differs"
    if want.dtype.names is not None:
        for name in want.dtype.names:
            status, detail = compare_arrays(got[name], want[name], exact=False)
            if status == "unequal":
                return "unequal", f"field {name!r}: {detail}"
        if exact and raw is not None:
            data, fortran = raw
            contiguous = got.flags.f_contiguous if fortran else got.flags.c_contiguous
            if contiguous and _memory(got) != data:
                return "unequal", "padding bytes differ from the file's (fields equal)"
        return ("equal*", note) if note else ("equal", "")
    if not np.array_equal(_significant(got), _significant(want)):
        return "unequal", "values differ"
    if exact and want.dtype.type in (np.longdouble, np.clongdouble):
        gm, wm = _memory(got), _memory(want)  # numpy.load keeps the file's 16 bytes
        if (
            gm is not None
            and wm is not None
            and got.flags.c_contiguous == want.flags.c_contiguous
            and gm != wm
        ):
            return "unequal", "long double padding bytes differ from numpy's"
    return ("equal*", note) if note else ("equal", "")


def compare_mat(got: Leaf, want: Leaf, version: str) -> tuple[str, str]:
    """One MATLAB value against the reference reader's, under the conventions of
    docs/format-mat.md ("Where other readers differ")."""
    kind = want[0]
    if got[0] != kind:
        if kind == "container" and want[1] == "struct" and got[0] == "object":
            return "unequal", f"struct read as object {got[1]!r}"
        return "unequal", f"{got[0]} != {kind}"
    if kind == "array":
        a, b = np.asarray(got[1]), np.asarray(want[1])
        notes = []
        if b.ndim == 2 and b.shape == (1, 0) and a.shape == (0, 0) and a.dtype == np.float64:
            return "equal*", "MATLAB [] (a 0-byte element) is 0x0"  # format-mat.md / test_mat5
        if a.shape != b.shape:
            return "unequal", f"shape {a.shape} != {b.shape}"
        if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
            if version == "4" and a.dtype.kind in "fc" and a.dtype.itemsize >= 8:
                notes.append("v4: every matrix is double")
            elif a.dtype.kind == "c" and b.dtype.kind == "c":
                notes.append("complex class dtype")
            elif a.dtype == np.bool_ and b.dtype == np.uint8 and set(np.unique(b)) <= {0, 1}:
                notes.append("logical as bool")
            else:
                return "unequal", f"dtype {a.dtype} != {b.dtype}"
            b = b.astype(a.dtype)
        if not np.array_equal(_significant(a.astype(a.dtype)), _significant(b.astype(a.dtype))):
            return "unequal", "values differ"
        return ("equal*", "; ".join(notes)) if notes else ("equal", "")
    if kind == "text":
        ga, wa = list(got[1]), list(want[1])
        if "".join(ga) == "" and "".join(wa) == "":
            return "equal", ""
        if ga == wa:
            return "equal", ""
        if len(ga) == 1 and "".join(wa) == ga[0] and len(wa) == 1:
            return "equal", ""
        return "unequal", f"text {ga[:3]!r} != {wa[:3]!r}"
    if kind == "sparse":
        a, b = got[1], want[1]
        if a.shape != b.shape:
            return "unequal", f"sparse shape {a.shape} != {b.shape}"
        note = ""
        if a.dtype != b.dtype:
            if a.dtype == np.bool_ and b.dtype in (np.uint8, np.float64):
                note = "logical sparse as bool"
            elif a.dtype == np.float64 and b.dtype.kind in "iu" and version == "5":
                # a double sparse matrix whose values are stored as small integers
                # (miUINT8): scipy keeps the stored type even with mat_dtype=True; MATLAB's
                # class (not logical in the array flags) is double (docs/format-mat.md)
                note = "double sparse stored as integers (scipy: the stored type)"
            else:
                return "unequal", f"sparse dtype {a.dtype} != {b.dtype}"
        if (a.astype(b.dtype) != b).nnz:
            return "unequal", "sparse values differ"
        return ("equal*", note) if note else ("equal", "")
    if kind == "container":
        if tuple(got[2]) != tuple(want[2]):
            return "unequal", f"{want[1]} dims {tuple(got[2])} != {tuple(want[2])}"
        if got[1] != want[1]:
            return "unequal", f"class {got[1]!r} != {want[1]!r}"
        return "equal", ""
    if kind == "object":
        return (
            "skipped-documented",
            f"MATLAB object {want[1]!r}: npystore gives a placeholder naming the class "
            "(docs/format-mat.md)",
        )
    return ("equal", "") if got == want else ("unequal", "differs")


# ------------------------------------------------------------------------------ sweep


class Timeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Timeout(f"over {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:1000]}"


def classify_refusal(face: str, error: str) -> str:
    for face_re, msg_re, _where in DOCUMENTED:
        if re.fullmatch(face_re, face) and re.search(msg_re, error):
            return "refused-documented"
    return "refused-unexpected"


@dataclass
class Sweep:
    out: Any
    timeout: int
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    files: int = 0

    def record(self, file: str, kind: str, face: str, path: str, status: str, detail: str) -> None:
        self.counts[(face, status)] += 1
        self.out.write(json.dumps({"file": file, "kind": kind, "face": face, "path": path,
                                   "status": status, "detail": detail}) + "\n")  # fmt: skip

    def run_face(self, fn: Callable[[], Any]) -> tuple[Any, str | None]:
        try:
            with deadline(self.timeout), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn(), None
        except Timeout as e:
            return None, f"Timeout: {e}"
        except Exception as e:
            return None, _error(e)

    def npy_like(self, file: str, path: Path, kind: str) -> None:
        try:
            with deadline(self.timeout), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want, kw, raw = (npy_oracle if kind == "npy" else npz_oracle)(path)
        except Exception as e:
            oracle_error = _error(e)
            for face in NPY_FACES:
                got, err = self.run_face(
                    lambda face=face: (npy_face if kind == "npy" else npz_face)(face, path, {})
                )
                status = "both-refused" if err else "oracle-failed"
                self.record(
                    file,
                    kind,
                    face,
                    "*",
                    status,
                    f"oracle {oracle_error}; npystore {err or 'read it'}",
                )
            return
        for face in NPY_FACES:
            reader = npy_face if kind == "npy" else npz_face
            got, err = self.run_face(lambda face=face, reader=reader: reader(face, path, kw))
            exact = face in ("load", "open")
            for key, w in want.items():
                if isinstance(w, bytes) and face not in ("load", "open"):
                    self.record(
                        file,
                        kind,
                        face,
                        key,
                        "skipped-documented",
                        "not an .npy member (docs/howto-npz.md)",
                    )
                    continue
                if err is None and isinstance(got.get(key), Skipped):
                    self.record(
                        file, kind, face, key, classify_refusal(face, got[key].why), got[key].why
                    )
                    continue
                if err is not None:
                    self.record(file, kind, face, key, classify_refusal(face, err), err)
                    continue
                if key not in got:
                    self.record(
                        file, kind, face, key, "unequal", f"missing (got {sorted(got)[:5]})"
                    )
                    continue
                status, detail = compare_arrays(got[key], w, exact, raw.get(key), face == "load")
                self.record(file, kind, face, key, status, detail)
            if err is None:
                for key in set(got) - set(want):
                    self.record(file, kind, face, key, "unequal", "extra member")

    def mat(self, file: str, path: Path) -> None:
        version = mat_kind(path)
        try:
            with deadline(self.timeout), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = h5_flatten(path) if version == "7.3" else scipy_flatten(path)
        except Exception as e:
            oracle_error = _error(e)
            for face in MAT_FACES:
                _, err = self.run_face(lambda face=face: self.mat_face(face, path, {}))
                status = "both-refused" if err else "oracle-failed"
                self.record(
                    file,
                    "mat",
                    face,
                    "*",
                    status,
                    f"oracle {oracle_error}; npystore {err or 'read it'}",
                )
            return
        for face in MAT_FACES:
            got, err = self.run_face(lambda face=face, want=want: self.mat_face(face, path, want))
            if err is None and want.get("None", ("",))[0] == "object" and "None" not in got:
                # scipy reads no name for a top-level opaque object (MATLAB's string,
                # datetime, classdef objects): it files it under "None" (tests/test_mat5.py)
                # (two of them overwrite each other): pair them with npystore's names
                extra = [p for p in got if "/" not in p and p not in want and got[p][0] == "object"]
                if extra:
                    want = {k: v for k, v in want.items() if k != "None"}
                    want.update({p: got[p] for p in extra})
            for p, w in want.items():
                if err is not None:
                    status = classify_refusal(face, err)
                    if w[0] == "object":
                        status = "skipped-documented"
                    self.record(file, "mat", face, p, status, err)
                    continue
                if p not in got:
                    if face == "xarray" and _no_xarray_form(p, want):
                        self.record(file, "mat", face, p, "skipped-documented",
                                    "no xarray form: cells, struct arrays, sparse, objects "
                                    "(npystore.faces.xarray.mat)")  # fmt: skip
                    elif w[0] == "object":
                        self.record(
                            file, "mat", face, p, "skipped-documented", f"MATLAB object {w[1]!r}"
                        )
                    else:
                        self.record(file, "mat", face, p, "unequal", "missing")
                    continue
                status, detail = compare_mat(got[p], w, version)
                self.record(file, "mat", face, p, status, detail)
            if err is None:
                for p in set(got) - set(want):
                    self.record(file, "mat", face, p, "unequal", f"extra {got[p][0]}")

    def mat_face(self, face: str, path: Path, hints: dict[str, Leaf]) -> dict[str, Leaf]:
        if face == "open":
            return mat_open_flatten(path, hints)
        if face == "zarr":
            import zarr

            import npystore

            return mat_zarr_flatten(zarr.open_group(npystore.open_store(str(path)), mode="r"))
        if face in ("kerchunk2", "kerchunk3"):
            return mat_zarr_flatten(*_refs_store(path, int(face[-1])))
        if face == "xarray":
            return mat_xarray_flatten(path)
        raise ValueError(face)


def _no_xarray_form(p: str, want: dict[str, Leaf]) -> bool:
    """Whether ``p`` lies in a cell, struct array, sparse matrix or object (or is a
    container: xarray shows scalar structs as groups, nothing else)."""
    parts = p.split("/")
    for i in range(1, len(parts) + 1):
        leaf = want.get("/".join(parts[:i]))
        if leaf is None:
            continue
        if leaf[0] in ("sparse", "object"):
            return True
        if leaf[0] == "container" and (
            leaf[1] != "struct" or math.prod(leaf[2]) != 1 or i == len(parts)
        ):
            return True
    return False


def files_of(folder: Path) -> list[tuple[str, Path]]:
    found = []
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix.lower() in EXTENSIONS:
            found.append((str(p.relative_to(folder)), p))
    return found


def sweep(
    folders: list[Path], out_path: Path, timeout: int, only: str | None, limit: int | None = None
) -> int:
    import dask

    dask.config.set(scheduler="synchronous")  # the deadline's signal reaches the main thread
    os.environ.setdefault("NPYSTORE_INDEX_CACHE", "")
    start = time.monotonic()
    with out_path.open("w") as out:
        s = Sweep(out, timeout)
        for folder in folders:
            for rel, path in files_of(folder):
                name = f"{folder.name}/{rel}"
                if only and only not in name:
                    continue
                if limit is not None and s.files >= limit:
                    break
                s.files += 1
                t0 = time.monotonic()
                try:
                    if path.suffix.lower() == ".mat":
                        s.mat(name, path)
                    else:
                        s.npy_like(name, path, path.suffix.lower()[1:])
                except Exception:
                    s.record(name, "?", "sweep", "*", "sweep-error", traceback.format_exc()[-800:])
                took = time.monotonic() - t0
                print(f"{s.files:4d} {took:6.1f}s {name}", file=sys.stderr, flush=True)
    summarize(out_path)
    print(f"{s.files} files in {time.monotonic() - start:.0f} s")
    return 0


def summarize(out_path: Path) -> None:
    rows = [json.loads(line) for line in out_path.open()]
    files = {r["file"] for r in rows}
    statuses = ["equal", "equal*", "unequal", "refused-unexpected", "refused-documented",
                "skipped-documented", "oracle-failed", "both-refused", "sweep-error"]  # fmt: skip
    by_face: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        by_face[r["face"]][r["status"]] += 1
    print(f"{len(files)} files, {len(rows)} comparisons")
    print(f"{'face':<10}" + "".join(f"{s:>20}" for s in statuses))
    total: Counter[str] = Counter()
    for face, c in sorted(by_face.items()):
        total.update(c)
        print(f"{face:<10}" + "".join(f"{c[s]:>20}" for s in statuses))
    print(f"{'all':<10}" + "".join(f"{total[s]:>20}" for s in statuses))
    # per variable (an .npy, a member, a MATLAB variable: its leaves' worst outcome)
    rank = {status: i for i, status in enumerate(
        ["equal", "equal*", "skipped-documented", "refused-documented", "both-refused",
         "oracle-failed", "refused-unexpected", "unequal", "sweep-error"])}  # fmt: skip
    worst: dict[tuple[str, str, str], str] = {}
    for r in rows:
        top = r["path"].split("/")[0] if r["kind"] == "mat" else r["path"]
        key = (r["file"], r["face"], top)
        if key not in worst or rank[r["status"]] > rank[worst[key]]:
            worst[key] = r["status"]
    per_variable = Counter(worst.values())
    print(f"\nper variable and face ({len(worst)}):")
    print("".join(f"{s}={per_variable[s]}  " for s in statuses if per_variable[s]))
    problems: Counter[tuple[str, str, str]] = Counter()
    for r in rows:
        if r["status"] in ("unequal", "refused-unexpected", "sweep-error", "oracle-failed"):
            detail = re.sub(r"/\S+", "PATH", r["detail"])[:160]
            problems[(r["status"], r["face"], detail)] += 1
    if problems:
        print("\nnot equal (status, face, detail: count):")
        for (status, face, detail), n in problems.most_common(60):
            print(f"  {n:5d}  {status:<18} {face:<10} {detail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="download packages and unpack their data files")
    c.add_argument("dest", type=Path)
    m = sub.add_parser("make", help="write files with numpy, scipy, hdf5storage, h5py")
    m.add_argument("dest", type=Path)
    s = sub.add_parser("sweep", help="compare every file through every face")
    s.add_argument("folders", type=Path, nargs="+")
    s.add_argument("--out", type=Path, default=Path("corpus-results.jsonl"))
    s.add_argument("--timeout", type=int, default=300, help="seconds per face of a file")
    s.add_argument("--only", help="only files whose name contains this")
    s.add_argument("--limit", type=int, help="at most this many files")
    r = sub.add_parser("summary", help="summarise a results file")
    r.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    if args.command == "collect":
        collect(args.dest)
    elif args.command == "make":
        make(args.dest)
    elif args.command == "sweep":
        return sweep(args.folders, args.out, args.timeout, args.only, args.limit)
    else:
        summarize(args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
