"""npystore: open .npy, .npz and MATLAB .mat files where they live, by reading byte ranges.

Local paths and any fsspec URL (``s3://``, ``http(s)://``, ``memory://``, chained URLs) open
as lazy dask arrays; only the bytes a computation needs are read.

>>> import numpy as np, npystore
>>> np.save("/tmp/doc_init.npy", np.arange(10, dtype=">u2"))
>>> npystore.open_npy("/tmp/doc_init.npy")[3:6].compute()
array([3, 4, 5], dtype='>u2')
"""

from npystore.api import load, open, open_npy, read_header, sniff
from npystore.errors import (
    ConsistencyError,
    FetchError,
    FormatError,
    NpystoreError,
    UnsupportedError,
)
from npystore.formats.npy import NpyHeader
from npystore.matfile import MatFile, open_mat
from npystore.mattree import MatInfo, MatlabObject, MatStruct
from npystore.npz import NpzFile, open_npz
from npystore.npzfs import register_protocol as _register_npz_protocol
from npystore.stores import open_store, to_kerchunk

try:  # register npystore's Zarr data types with zarr (zarr does not load entry points itself)
    import zarr as _zarr  # noqa: F401
except ImportError:  # pragma: no cover - zarr is optional
    pass
else:
    from npystore.faces import dtypes as _dtypes  # noqa: F401

_register_npz_protocol()  # npz:// for fsspec (also an fsspec.specs entry point)

__version__ = "0.1.0"

__all__ = [
    "ConsistencyError",
    "FetchError",
    "FormatError",
    "MatFile",
    "MatInfo",
    "MatStruct",
    "MatlabObject",
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
