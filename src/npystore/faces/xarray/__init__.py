"""The xarray backend: ``xarray.open_dataset(url, engine="npystore")``.

Opens ``.npy``, ``.npz`` and MATLAB ``.mat`` files (any version) from local paths and any
fsspec URL as :class:`xarray.Dataset` objects whose variables are lazy: opening reads
headers and metadata only, and indexing a variable reads only the bytes of the selection
(through :class:`~npystore.read.access.LayoutArray`). With ``chunks={}`` xarray makes dask arrays
with npystore's own chunking (contiguous byte ranges, or whole stored chunks).

Mapping (see ``docs/howto-xarray.md``):

- ``.npy``: one variable ``data`` with dimensions ``dim_0``, ``dim_1``, ...
- ``.npz``: one variable per ``.npy`` member, named by its key (``.npy`` stripped; when
  members ``x`` and ``x.npy`` both exist they are ``x`` and ``x.npy``, the keys
  ``numpy.load`` reads them by), with
  dimensions ``<key>_dim_0``, ``<key>_dim_1``, ... (so members of different shapes never
  clash); members that are not ``.npy`` files are skipped with a
  :class:`SkippedVariableWarning`.
- ``.mat``: numeric, logical and complex variables in MATLAB's ``size()`` (at least 2-D
  unless ``squeeze=True``), dimensions ``<name>_dim_<i>``; char variables become string
  variables (``str`` dtype, one string per row); scalar structs are groups (``group="s"``,
  :func:`xarray.open_datatree`); cells, struct arrays, sparse matrices and objects are
  skipped with a :class:`SkippedVariableWarning`.

``dims={"name": ("y", "x")}`` renames the dimensions of chosen variables (shared names are
how variables are aligned).

The modules:

- :mod:`~npystore.faces.xarray.engine`: :class:`NpystoreBackendEntrypoint`, what xarray
  calls (the entry point ``npystore`` of ``xarray.backends``): arguments, which files it
  claims.
- :mod:`~npystore.faces.xarray.datasets`: an opened file turned into datasets, one per
  group (``.npy`` and ``.npz`` variables, ``.npz`` member directories).
- :mod:`~npystore.faces.xarray.mat`: MATLAB variables and scalar structs as variables and
  groups.
- :mod:`~npystore.faces.xarray.array`: :class:`NpystoreBackendArray`, the lazily indexed
  array behind each variable, and its preferred chunks.
- :mod:`~npystore.faces.xarray.names`: variable and dimension names, ``dims=`` and
  ``drop_variables``.
"""

from __future__ import annotations

from npystore.faces.xarray.array import NpystoreBackendArray
from npystore.faces.xarray.datasets import SkippedVariableWarning
from npystore.faces.xarray.datasets import _Closer as _Closer  # pickles of 0.2 name it here
from npystore.faces.xarray.engine import NpystoreBackendEntrypoint

__all__ = ["NpystoreBackendArray", "NpystoreBackendEntrypoint", "SkippedVariableWarning"]
