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
#: the ``fsspec.specs`` entry point and npystore's Zarr data types reach zarr through the
#: ``zarr.data_type`` entry point, so neither needs an import here.
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
