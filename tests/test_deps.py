"""Issue 15: a missing optional package is a MissingDependencyError naming it and the extra.

Each case runs in a fresh interpreter in which the package cannot be imported
(``sys.modules[name] = None``): zarr (``open_store``, ``to_kerchunk``, ``convert``, the Zarr
data types), h5py (MATLAB v7.3 files), scipy (sparse MATLAB values, v5 and v4). The command
line prints one line and exits with status 1. s3fs and aiohttp: tests/test_foreign.py.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp

import npystore
from npystore.errors import MissingDependencyError, UnsupportedError, missing_dependency, require


def _blocked(modules: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``modules`` cannot be imported (blocked
    after ``import npystore``, which is light and looks at which modules are loaded)."""
    prelude = "import sys, npystore\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


_CATCH = """
import npystore
try:
    {call}
except npystore.MissingDependencyError as exc:
    assert isinstance(exc, ImportError) and isinstance(exc, npystore.UnsupportedError), exc
    print(f"{{exc.name}}|{{exc.extra}}|{{exc}}")
else:
    print("no error")
"""


def _library(modules: list[str], call: str) -> tuple[str, str, str]:
    """(package, extra, message) of the MissingDependencyError ``call`` raises."""
    done = _blocked(modules, _CATCH.format(call=call))
    assert done.returncode == 0, done.stderr
    name, extra, message = done.stdout.rstrip("\n").split("|", 2)
    return name, extra, message


def _command(modules: list[str], argv: list[str]) -> str:
    """The one line ``npystore ARGV`` prints on stderr (exit status 1, no traceback)."""
    done = _blocked(modules, f"from npystore.tools.cli import main\nsys.exit(main({argv!r}))")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("deps")
    np.save(root / "a.npy", np.arange(10.0))
    with h5py.File(root / "v73.mat", "w", userblock_size=512) as f:
        f.create_dataset("x", data=np.arange(6.0).reshape(2, 3))
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5"
    with open(root / "v73.mat", "r+b") as f:
        f.write(header.ljust(116) + b"\x00" * 8 + b"\x00\x02IM")
    sparse = sp.csc_matrix(np.array([[0.0, 2.0], [3.0, 0.0]]))
    sio.savemat(root / "sparse5.mat", {"s": sparse, "d": np.eye(2)})
    sio.savemat(root / "sparse4.mat", {"s": sparse}, format="4")
    return {p.stem: p for p in root.iterdir()}


def test_zarr_missing(files: dict[str, Path], tmp_path: Path) -> None:
    npy = str(files["a"])
    for call in (
        f"npystore.open_store({npy!r})",
        f"npystore.to_kerchunk({npy!r}, zarr_format=3)",
        "import npystore.faces.zarr.dtypes",
    ):
        name, extra, message = _library(["zarr"], call)
        assert (name, extra) == ("zarr", "zarr"), call
        assert "needs zarr, which is not installed or cannot be imported" in message
        assert message.endswith("install it with: pip install 'npystore[zarr]'")
    # kerchunk's Zarr v2 form is plain JSON: it needs no zarr
    done = _blocked(["zarr"], f"import npystore\nprint(len(npystore.to_kerchunk({npy!r})['refs']))")
    # .zgroup, .zattrs, .zmetadata, data/.zarray, data/.zattrs, data/0
    assert (done.returncode, done.stdout.strip()) == (0, "6"), done.stderr
    _, _, message = _library(["zarr"], "from npystore.tools.convert import convert")
    assert message.startswith("converting to Zarr (npystore convert) needs zarr")
    line = _command(["zarr"], ["convert", npy, str(tmp_path / "out.zarr")])
    assert line.startswith(f"npystore: error: {npy}: converting to Zarr (npystore convert) needs")
    assert line.endswith("pip install 'npystore[zarr]'\n")


def test_virtualizarr_missing() -> None:
    name, extra, message = _library(["virtualizarr"], "import npystore.virtualizarr")
    assert (name, extra) == ("virtualizarr", "virtualizarr")
    assert message.startswith("npystore's VirtualiZarr parser needs virtualizarr")
    assert message.endswith("pip install 'npystore[virtualizarr]'")


def test_h5py_missing_for_v73_files(files: dict[str, Path]) -> None:
    path = str(files["v73"])
    for call in (f"npystore.open_mat({path!r})", f"npystore.open({path!r})"):
        name, extra, message = _library(["h5py"], call)
        assert (name, extra) == ("h5py", "mat")
        assert message.startswith(f"{path}: a MATLAB v7.3 (HDF5) file needs h5py")
        assert message.endswith("pip install 'npystore[mat]'")
    line = _command(["h5py"], ["info", path])
    assert line.startswith(f"npystore: error: {path}: a MATLAB v7.3 (HDF5) file needs h5py")


@pytest.mark.parametrize("version", ["sparse5", "sparse4"])
def test_scipy_missing_for_sparse_values(files: dict[str, Path], version: str) -> None:
    path = str(files[version])
    blocked = ["scipy", "scipy.sparse"]
    name, extra, message = _library(blocked, f"npystore.open_mat({path!r})['s']")
    assert (name, extra) == ("scipy", "mat")
    assert path in message
    assert "sparse" in message
    assert "needs scipy, which is not installed" in message
    assert message.endswith("pip install 'npystore[mat]'")
    if version == "sparse5":  # the other variables read without scipy
        code = f"import npystore\nprint(npystore.open_mat({path!r})['d'].sum().compute())"
        done = _blocked(blocked, code)
        assert done.stdout.split()[-1] == "2.0", done.stderr
    line = _command(blocked, ["cat", f"{path}:s"])
    assert line.startswith("npystore: error: ")
    assert "needs scipy" in line


def test_require_and_the_error_type() -> None:
    assert require("json", "json", None, "x").dumps([1]) == "[1]"
    with pytest.raises(MissingDependencyError, match=r"pip install no_such_pkg_xyz$") as info:
        require("no_such_pkg_xyz.sub", "no_such_pkg_xyz", None, "a test")
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value, UnsupportedError)
    assert info.value.name == "no_such_pkg_xyz"
    assert info.value.extra is None
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    error = missing_dependency("zarr", "zarr", "s3://b/a.npy: a store")
    copy = pickle.loads(pickle.dumps(error))  # crosses process boundaries (dask workers)
    assert (type(copy), str(copy), copy.name, copy.extra) == (
        MissingDependencyError,
        str(error),
        "zarr",
        "zarr",
    )
    assert npystore.MissingDependencyError is MissingDependencyError
