"""``import npystore`` and ``npystore info`` stay light: the heavy libraries (dask, zarr,
scipy, h5py, xarray, aiohttp) load only when a call needs them. Times live in benchmarks/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

HEAVY = ("dask", "zarr", "scipy", "h5py", "xarray", "aiohttp", "pandas", "s3fs", "botocore")
#: What reading a small local file must not import either: fsspec (and the asyncio its
#: remote backends bring) cost more than reading the file.
REMOTE = ("fsspec", "asyncio", "ssl")


def _loaded_after(code: str, modules: tuple[str, ...] = HEAVY) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {modules!r} if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.split("\n")[-2].split()


def test_import_npystore_loads_no_heavy_library() -> None:
    assert _loaded_after("import npystore") == []
    # nor fsspec: a bare import reads no file
    probe = "import sys, npystore\nprint('fsspec' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_names_resolve_lazily() -> None:
    import npystore

    for name in npystore.__all__:
        assert getattr(npystore, name) is not None, name
    assert set(npystore.__all__) <= set(dir(npystore))
    code = (
        "import npystore\n"
        "try:\n    npystore.no_such_name\n"
        "except AttributeError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "no attribute 'no_such_name'" in out.stdout


def test_info_of_small_files_loads_no_heavy_library(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(10))
    np.savez(tmp_path / "b.npz", x=np.arange(3), y=np.ones((2, 2)))
    for name in ("a.npy", "b.npz"):
        code = (
            "import contextlib, io\n"
            "from npystore.tools.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    rc = main(['info', {str(tmp_path / name)!r}])\n"
            "assert rc in (0, None), rc\n"
        )
        assert _loaded_after(code) == [], name


def test_open_npy_loads_dask_when_called(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(10))
    code = f"import npystore\nprint(npystore.open_npy({str(tmp_path / 'a.npy')!r}).sum().compute())"
    assert "dask" in _loaded_after(code)


def test_info_of_an_npy_file_loads_no_other_format(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(10))
    code = (
        "import contextlib, io, sys\n"
        "from npystore.tools.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['info', {str(tmp_path / 'a.npy')!r}])\n"
        "print(' '.join(m for m in ('npystore.faces.matfile', 'npystore.formats.mat5', "
        "'npystore.faces.npz', 'npystore.formats.zipdir') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_load_read_header_cat_info_of_small_local_files_load_no_heavy_library(
    tmp_path: Path,
) -> None:
    """issue 26 item 1: load, read_header, ``cat`` and ``info`` of a small local file import
    neither dask (nor xarray, pandas ... through it) nor fsspec."""
    np.save(tmp_path / "a.npy", np.arange(10))
    np.savez(tmp_path / "b.npz", x=np.arange(3), y=np.ones((2, 2)))
    np.savez_compressed(tmp_path / "c.npz", x=np.arange(3))
    a, b, c = (str(tmp_path / n) for n in ("a.npy", "b.npz", "c.npz"))
    code = (
        "import contextlib, io, npystore\n"
        "from npystore.tools.cli import main\n"
        f"assert npystore.load({a!r})[3] == 3\n"
        f"assert npystore.read_header({a!r}).shape == (10,)\n"
        f"with npystore.load({b!r}) as z:\n    assert z['y'].sum() == 4\n"
        f"with npystore.load({c!r}) as z:\n    assert z['x'][2] == 2\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    assert main(['cat', {a!r}, '--slice', '2:4']) == 0\n"
        f"    assert main(['cat', {b + ':y'!r}]) == 0\n"
        f"    assert main(['cat', {c!r}]) == 0\n"
        f"    assert main(['info', {a!r}]) == 0\n"
        f"    assert main(['info', {b!r}]) == 0\n"
        "want = '[2 3]\\n[[1. 1.]\\n [1. 1.]]\\n[0 1 2]\\n'\n"
        "assert out.getvalue().startswith(want), out.getvalue()\n"
    )
    assert _loaded_after(code, HEAVY + REMOTE) == []


def test_dir_lists_the_public_names_only() -> None:
    """issue 26 item 22: no ``Any``, ``TYPE_CHECKING``, ``sys`` ... in ``dir(npystore)``."""
    import npystore

    assert dir(npystore) == sorted(npystore.__all__)
    for helper in ("Any", "TYPE_CHECKING", "annotations", "importlib", "sys", "warnings"):
        assert helper not in dir(npystore)


def test_open_and_load_are_typed() -> None:
    """issue 26 item 22: ``open`` and ``load`` say what they return (not ``Any``)."""
    import inspect
    import typing

    import npystore

    # load: an array or an archive; with allow_pickle=True also whatever a pickle holds
    plain, pickles = typing.get_overloads(npystore.load)
    assert inspect.signature(plain).return_annotation == "np.ndarray[Any, Any] | NpzArrays"
    assert inspect.signature(plain).parameters["allow_pickle"].annotation == "Literal[False]"
    assert inspect.signature(pickles).return_annotation == "Any"
    opened = inspect.signature(npystore.open).return_annotation
    assert opened == "da.Array | NpzFile | MatFile"


def test_first_open_mat_loads_only_what_the_file_needs(tmp_path: Path) -> None:
    """issue 26 item 2: the first ``open_mat`` + ``load`` of a small local file imports
    neither dask (with xarray, pandas ...) nor zarr, fsspec or asyncio; a v7.3 file loads none
    of the ``.npy``/``.npz`` modules either (the ``.npy`` parser, CRC ledgers, ISA-L): each
    costs the first call its import time and nothing else."""
    import h5py
    import scipy.io

    v5 = tmp_path / "a.mat"
    scipy.io.savemat(v5, {"x": np.arange(6.0).reshape(2, 3), "c": np.array([[1, "ab"]], object)},
                     do_compression=True)  # fmt: skip
    v73 = tmp_path / "b.mat"
    with h5py.File(v73, "w", userblock_size=512) as f:
        d = f.create_dataset("x", data=np.arange(6.0).reshape(3, 2))
        d.attrs["MATLAB_class"] = np.bytes_("double")
    from npystore.formats.mat5 import v73_header

    with open(v73, "r+b") as out:
        out.write(v73_header())
    npz_only = ("npystore.formats.npy", "npystore.read.crccheck", "isal", "npystore.files.npy")
    for path, extra in ((v5, ()), (v73, npz_only)):
        code = (
            "import npystore\n"
            f"with npystore.open_mat({str(path)!r}) as m:\n"
            "    values = {k: m.load(k) for k in m}\n"
            "assert values['x'].shape == (2, 3), values\n"
        )
        wanted_absent = ("dask", "zarr", "xarray", "pandas", *REMOTE, *extra)
        assert _loaded_after(code, wanted_absent) == [], path.name
