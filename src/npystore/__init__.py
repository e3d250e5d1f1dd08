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
import importlib.abc
import importlib.util
import sys
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
    from npystore.api import load, open, open_npy, read_header, sniff
    from npystore.formats.npy import NpyHeader
    from npystore.matfile import MatFile, open_mat
    from npystore.mattree import MatInfo, MatlabObject, MatStruct
    from npystore.npz import NpzFile, open_npz
    from npystore.stores import open_store, to_kerchunk

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
    "sniff": "npystore.api",
    "NpyHeader": "npystore.formats.npy",
    "MatFile": "npystore.matfile",
    "open_mat": "npystore.matfile",
    "MatInfo": "npystore.mattree",
    "MatlabObject": "npystore.mattree",
    "MatStruct": "npystore.mattree",
    "NpzFile": "npystore.npz",
    "open_npz": "npystore.npz",
    "open_store": "npystore.stores",
    "to_kerchunk": "npystore.stores",
}


class _ZarrTypesOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Registers npystore's Zarr data types (:mod:`npystore.faces.dtypes`) as soon as zarr
    is imported, without importing zarr here: zarr 3.1 collects the ``zarr.data_type``
    entry points but never loads them, so a process that imported npystore would otherwise
    fail to open arrays npystore wrote with its own data types."""

    def __init__(self) -> None:
        self._loader: Any = None

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "zarr":
            return None
        sys.meta_path.remove(self)  # once, and so the search below skips this finder
        spec = importlib.util.find_spec("zarr")
        if spec is not None and spec.loader is not None:
            self._loader = spec.loader
            spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        importlib.import_module("npystore.faces.dtypes")


if sys.modules.get("zarr") is not None:
    importlib.import_module("npystore.faces.dtypes")
else:
    sys.meta_path.insert(0, _ZarrTypesOnImport())


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'npystore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "sniff",
    "to_kerchunk",
]
