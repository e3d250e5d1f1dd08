"""npystore: open .npy, .npz and MATLAB .mat files where they live, by reading byte ranges.

Local paths and any fsspec URL (``s3://``, ``http(s)://``, ``memory://``, chained URLs) open
as lazy dask arrays; only the bytes a computation needs are read.

>>> import numpy as np, npystore
>>> np.save("/tmp/doc_init.npy", np.arange(10, dtype=">u2"))
>>> npystore.open_npy("/tmp/doc_init.npy")[3:6].compute()
array([3, 4, 5], dtype='>u2')
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from typing import TYPE_CHECKING, Any

from npystore.errors import (
    ConsistencyError,
    FetchError,
    FormatError,
    MissingDependencyError,
    NpystoreError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from npystore.api import load, open, open_npy, read_header, save, savez, savez_compressed, sniff
    from npystore.faces.many import to_manifest
    from npystore.faces.matfile import MatFile, open_mat
    from npystore.faces.npz import NpzFile, open_npz
    from npystore.faces.refs import to_kerchunk
    from npystore.faces.stores import open_store
    from npystore.files.mat.tree import MatInfo, MatlabObject, MatStruct
    from npystore.formats.npy import NpyHeader
    from npystore.write.stack import save_stack

#: Public names and the module each lives in: imported on first use, so that
#: ``import npystore`` costs little more than ``import numpy`` (dask, fsspec, zarr, h5py and
#: scipy load when a function that needs them is called). ``npz://`` reaches fsspec through
#: the ``fsspec.specs`` entry point; npystore's Zarr data types are registered when zarr is
#: imported (below).
_LAZY: dict[str, str] = {
    "load": "npystore.api",
    "open": "npystore.api",
    "open_npy": "npystore.api",
    "read_header": "npystore.api",
    "save": "npystore.api",
    "savez": "npystore.api",
    "savez_compressed": "npystore.api",
    "sniff": "npystore.api",
    "NpyHeader": "npystore.formats.npy",
    "MatFile": "npystore.faces.matfile",
    "open_mat": "npystore.faces.matfile",
    "MatInfo": "npystore.files.mat.tree",
    "MatlabObject": "npystore.files.mat.tree",
    "MatStruct": "npystore.files.mat.tree",
    "NpzFile": "npystore.faces.npz",
    "open_npz": "npystore.faces.npz",
    "open_store": "npystore.faces.stores",
    "to_kerchunk": "npystore.faces.refs",
    "to_manifest": "npystore.faces.many",
    "save_stack": "npystore.write.stack",
}


# The two import hooks below are a meta path finder and a loader by protocol (find_spec;
# create_module and exec_module), not by subclassing importlib.abc: importing that module
# costs more than the rest of ``import npystore`` (it loads importlib.resources, pathlib,
# tempfile ...).


def _as_loader(hook: object) -> Any:
    """``hook`` where importlib wants a loader (it is one by protocol, see above)."""
    return hook


class _ZarrTypesOnImport:
    """Registers npystore's Zarr data types (:mod:`npystore.faces.zarr.dtypes`) as soon as zarr
    is imported, without importing zarr here: zarr 3.1 collects the ``zarr.data_type``
    entry points but never loads them (zarr 3.4 loads them on its first data type lookup), so
    a process that imported npystore would otherwise fail to open arrays npystore wrote with
    its own data types. The registration only adds npystore's types and gates zarr's record
    type (whatever name that zarr registers it under): what zarr does with a dtype it stores
    exactly does not change."""

    def __init__(self) -> None:
        self._loader: Any = None

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "zarr":
            return None
        sys.meta_path.remove(self)  # once, and so the search below skips this finder
        spec = importlib.util.find_spec("zarr")
        if spec is not None and spec.loader is not None:
            self._loader = spec.loader
            spec.loader = _as_loader(self)
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        importlib.import_module("npystore.faces.zarr.dtypes")


if sys.modules.get("zarr") is not None:
    importlib.import_module("npystore.faces.zarr.dtypes")
else:
    sys.meta_path.insert(0, _ZarrTypesOnImport())


#: Modules that moved when the package was regrouped by role (0.2): the old names still
#: import, with a DeprecationWarning, for one release (and old pickles still load).
_MOVED: dict[str, str] = {
    "npystore.access": "npystore.read.access",
    "npystore.archive": "npystore.files.zip",
    "npystore.blockfile": "npystore.fetch.blockfile",
    "npystore.chunked": "npystore.read.chunked",
    "npystore.cli": "npystore.tools.cli",
    "npystore.convert": "npystore.tools.convert",
    "npystore.crccheck": "npystore.read.crccheck",
    "npystore.demo": "npystore.tools.demo",
    "npystore.faces.dtypes": "npystore.faces.zarr.dtypes",
    "npystore.faces.mat_zarr": "npystore.faces.tree.mat",
    "npystore.faces.zarr_store": "npystore.faces.zarr.store",
    "npystore.fileobj": "npystore.fetch.fileobj",
    "npystore.h5decode": "npystore.read.h5decode",
    "npystore.h5meta": "npystore.files.mat.h5meta",
    "npystore.h5safe": "npystore.files.mat.h5safe",
    "npystore.hdf5": "npystore.files.mat.hdf5",
    "npystore.inflate": "npystore.read.inflate",
    "npystore.layout": "npystore.read.layout",
    "npystore.mat_v4": "npystore.files.mat.v4",
    "npystore.mat_v5": "npystore.files.mat.v5",
    "npystore.mat_v5_build": "npystore.files.mat.v5_build",
    "npystore.mat_v73": "npystore.files.mat.v73",
    "npystore.matfile": "npystore.faces.matfile",
    "npystore.mattree": "npystore.files.mat.tree",
    "npystore.npz": "npystore.faces.npz",
    "npystore.npzfs": "npystore.faces.npzfs",
    "npystore.opening": "npystore.fetch.opening",
    "npystore.progress": "npystore.tools.progress",
    "npystore.remote": "npystore.fetch.remote",
    "npystore.s3direct": "npystore.fetch.s3direct",
    "npystore.stores": "npystore.faces.stores",
    "npystore.xarray_backend": "npystore.faces.xarray",
}


class _MovedModules:
    """Resolves a moved module's old name to the module itself (one object, two names)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _MOVED:
            return None
        return importlib.util.spec_from_loader(name, _as_loader(self))

    def create_module(self, spec: Any) -> Any:
        new = _MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: Any) -> None:
        """Nothing to run: the module was imported under its new name."""


sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'npystore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (:data:`__all__`), not the helpers this module imports."""
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "ConsistencyError",
    "FetchError",
    "FormatError",
    "MatFile",
    "MatInfo",
    "MatStruct",
    "MatlabObject",
    "MissingDependencyError",
    "NpyHeader",
    "NpzFile",
    "NpystoreError",
    "UnsupportedError",
    "__version__",
    "load",
    "open",
    "open_mat",
    "open_npy",
    "open_npz",
    "open_store",
    "read_header",
    "save",
    "savez",
    "savez_compressed",
    "save_stack",
    "sniff",
    "to_kerchunk",
    "to_manifest",
]
