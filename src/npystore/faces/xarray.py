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
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeGuard

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.core import indexing

from npystore.errors import FormatError, UnsupportedError
from npystore.faces.dask import normalize_layout_chunks
from npystore.faces.matfile import MatFile, mat_from_reader
from npystore.faces.npz import NpzFile, npz_from_reader
from npystore.fetch import RangeReader
from npystore.files.mat.tree import CharLeaf, MatInfo, MatNode, NumericLeaf, StructNode, ValueLeaf
from npystore.files.npy import open_layout_array
from npystore.files.open import is_npy_or_matlab, sniff_source
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, RawExtent

__all__ = ["NpystoreBackendArray", "NpystoreBackendEntrypoint", "SkippedVariableWarning"]

#: File name endings the engine claims in :meth:`NpystoreBackendEntrypoint.guess_can_open`.
EXTENSIONS: Final = (".npy", ".npz", ".mat")
#: Name of the one variable of an ``.npy`` file.
NPY_VARIABLE: Final = "data"
_NUMERIC_CLASSES: Final = {
    "double": "f8", "single": "f4", "int8": "i1", "uint8": "u1", "int16": "i2",
    "uint16": "u2", "int32": "i4", "uint32": "u4", "int64": "i8", "uint64": "u8",
}  # fmt: skip
#: xarray's CF decoding options: accepted (xarray passes the ones a caller gives) and
#: ignored, since npystore's files carry no CF metadata.
_DECODERS: Final = (
    "mask_and_scale",
    "decode_times",
    "decode_timedelta",
    "use_cftime",
    "concat_characters",
    "decode_coords",
)


class SkippedVariableWarning(UserWarning):
    """A variable of the file has no xarray form and was left out of the dataset."""


class NpystoreBackendArray(BackendArray):
    """One variable for xarray's lazy indexing: reads only the selected bytes.

    Parameters
    ----------
    array : LayoutArray or callable
        The array, or a function that makes it on first read (MATLAB v5 variables, whose
        element headers are read only when their data is wanted).
    shape : tuple of int
        The shape xarray sees.
    dtype : numpy.dtype
        The dtype xarray sees (values are cast to it when stored otherwise).
    squeezed : tuple of int
        Axes of ``array`` (all of length 1) that are not in ``shape``.
    """

    def __init__(
        self,
        array: LayoutArray | Callable[[], LayoutArray],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        squeezed: tuple[int, ...] = (),
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self._squeezed = squeezed
        self._array = array if isinstance(array, LayoutArray) else None
        self._make = None if isinstance(array, LayoutArray) else array
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "unread" if self._array is None else self._array.source
        return f"NpystoreBackendArray({state}, shape={self.shape}, dtype={self.dtype})"

    def __getstate__(self) -> dict[str, Any]:
        # travels as the LayoutArray alone (reader + layout), never as the open file
        return {
            "array": self.layout_array(),
            "shape": self.shape,
            "dtype": self.dtype,
            "squeezed": self._squeezed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["array"], state["shape"], state["dtype"], state["squeezed"]
        )

    def layout_array(self) -> LayoutArray:
        """The underlying :class:`~npystore.read.access.LayoutArray` (made on first use)."""
        if self._array is None:
            with self._lock:
                if self._array is None:
                    if self._make is None:  # pragma: no cover - set in __init__
                        raise RuntimeError("no array and no way to make one")
                    self._array = self._make()
                    self._make = None
        return self._array

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.BASIC, self._read
        )

    def _read(self, key: tuple[Any, ...]) -> np.ndarray[Any, Any]:
        full: list[Any] = list(key)
        for axis in self._squeezed:
            full.insert(axis, 0)
        out = self.layout_array()[tuple(full)]
        return np.asarray(out).astype(self.dtype, copy=False)

    def get_duck_array(self, dtype: Any = None) -> np.ndarray[Any, Any]:
        """The whole variable, read in one eager pass (parallel range reads)."""
        out = self.layout_array().read()
        if self._squeezed:
            out = np.squeeze(out, axis=self._squeezed)
        return out.astype(self.dtype, copy=False)


class NpystoreBackendEntrypoint(BackendEntrypoint):
    """Open ``.npy``, ``.npz`` and MATLAB ``.mat`` files lazily with xarray.

    Use it through ``xarray.open_dataset(url, engine="npystore", ...)`` (and
    ``xarray.open_datatree`` for MATLAB structs); the engine is registered as the
    ``npystore`` entry point of the ``xarray.backends`` group.
    """

    description: ClassVar[str] = (
        "Lazily open .npy, .npz and MATLAB .mat files on local disk, S3 or any fsspec URL"
    )
    url: ClassVar[str] = "https://github.com/npystore/npystore/blob/main/docs/howto-xarray.md"
    supports_groups: ClassVar[bool] = True
    open_dataset_parameters: ClassVar[tuple[str, ...]] = (
        "filename_or_obj",
        "drop_variables",
        "storage_options",
        "group",
        "dims",
        "squeeze",
        "allow_pickle",
        "index_cache",
        *_DECODERS,
    )

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        group: str | None = None,
        dims: Mapping[str, Sequence[str]] | None = None,
        squeeze: bool = False,
        allow_pickle: bool = False,
        index_cache: str | None = None,
        mask_and_scale: Any = None,
        decode_times: Any = None,
        decode_timedelta: Any = None,
        use_cftime: Any = None,
        concat_characters: Any = None,
        decode_coords: Any = None,
    ) -> xr.Dataset:
        """Open a file as a dataset of lazily indexed variables; no data is read.

        Parameters
        ----------
        filename_or_obj : str or os.PathLike
            Local path or any fsspec URL (``s3://``, ``https://``, chained URLs).
        drop_variables : str or iterable of str, optional
            Variables to leave out (their data is never read).
        storage_options : mapping, optional
            fsspec filesystem options (pass through ``backend_kwargs`` or as a keyword).
        group : str, optional
            A MATLAB scalar struct whose fields form the dataset (nested structs as
            ``"outer/inner"``), or an ``.npz`` member directory (members named
            ``"group/..."``, with the prefix dropped from their names).
        dims : mapping of str to sequence of str, optional
            Dimension names for chosen variables, overriding ``<name>_dim_<i>``
            (``dim_<i>`` for an ``.npy`` file).
        squeeze : bool
            MATLAB files only: drop the length-1 dimensions of numeric variables (MATLAB
            sizes are at least 2-D).
        allow_pickle : bool
            Allow object arrays (stored as pickles; unpickling runs code from the file).
        index_cache : str, optional
            ``.npz`` only: local directory for deflate checkpoint indexes (see
            :func:`npystore.open_npz`).
        mask_and_scale, decode_times, decode_timedelta, use_cftime, concat_characters, decode_coords
            xarray's CF decoding options: accepted and ignored (the files carry no CF
            metadata).

        Returns
        -------
        xarray.Dataset
            Lazy variables; ``encoding["preferred_chunks"]`` holds npystore's chunking, which
            ``chunks={}`` uses.

        Raises
        ------
        FormatError
            The file is not a ``.npy``, ``.npz`` or MAT-file, or is malformed.
        ValueError
            ``group`` for an ``.npy`` file, a missing group, or ``dims``
            naming an unknown variable or the wrong number of dimensions.
        """
        del mask_and_scale, decode_times, decode_timedelta, use_cftime
        del concat_characters, decode_coords
        opened = _Opened.open(
            _as_url(filename_or_obj), storage_options, allow_pickle, index_cache, squeeze
        )
        try:
            return opened.dataset(group, _drop_set(drop_variables), dims or {})
        except BaseException:
            opened.close()
            raise

    def open_groups_as_dict(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        dims: Mapping[str, Sequence[str]] | None = None,
        squeeze: bool = False,
        allow_pickle: bool = False,
        index_cache: str | None = None,
        **decoders: Any,
    ) -> dict[str, xr.Dataset]:
        """Every group of the file: ``"/"``, and one per scalar struct of a MAT-file or
        member directory of an ``.npz`` (``sub/x.npy`` is ``x`` in group ``/sub``).

        Parameters are those of :meth:`open_dataset` (without ``group``);
        ``drop_variables`` and ``dims`` apply to every group. The decoding options
        xarray passes are ignored.

        Returns
        -------
        dict of str to xarray.Dataset
            ``{"/": root, "/s": fields of struct s, "/s/t": ...}``.
        """
        bad = set(decoders) - set(_DECODERS)
        if bad:
            raise TypeError(f"unexpected keyword arguments {sorted(bad)}")
        opened = _Opened.open(
            _as_url(filename_or_obj), storage_options, allow_pickle, index_cache, squeeze
        )
        try:
            drop = _drop_set(drop_variables)
            out = {"/": opened.dataset(None, drop, dims or {}, tree=True)}
            for path in opened.groups(drop):
                out["/" + path] = opened.dataset(path, drop, dims or {}, tree=True)
        except BaseException:
            opened.close()
            raise
        return out

    def open_datatree(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[Any],
        *,
        drop_variables: str | Iterable[str] | None = None,
        **kwargs: Any,
    ) -> xr.DataTree:
        """The file as a :class:`xarray.DataTree`: MATLAB scalar structs and ``.npz``
        member directories become groups.

        Keyword arguments are those of :meth:`open_groups_as_dict`.
        """
        groups = self.open_groups_as_dict(filename_or_obj, drop_variables=drop_variables, **kwargs)
        return xr.DataTree.from_dict(groups)

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Whether the engine opens this: by extension (``.npy``, ``.npz``, ``.mat``), or
        for an existing local file, by its first bytes (the ``.npy`` magic, MATLAB's header
        text). Other ZIP and HDF5 files are left to other engines."""
        try:
            path = os.fspath(filename_or_obj)
        except TypeError:
            return False
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if _member_path(path).lower().endswith(EXTENSIONS):
            return True
        if "://" in path or "::" in path or not os.path.isfile(path):
            return False
        return is_npy_or_matlab(path)


# -- opening ---------------------------------------------------------------------------------


def _as_url(filename_or_obj: Any) -> str:
    try:
        path = os.fspath(filename_or_obj)
    except TypeError:
        raise TypeError(
            f"the npystore engine opens paths and URLs (str or os.PathLike), got "
            f"{type(filename_or_obj).__name__}"
        ) from None
    return os.fsdecode(path) if isinstance(path, bytes) else path


def _member_path(url: str) -> str:
    """The path of the first segment of a (chained) URL that has one, without a query or
    fragment: what names the file being opened (``simplecache::s3://b/x.npy`` -> the
    ``s3://`` segment's path; ``npz://x.npy::s3://b/a.npz`` -> ``x.npy``)."""
    segments = url.split("::")
    for i, segment in enumerate(segments):
        if "://" not in segment and i < len(segments) - 1:
            continue  # a bare protocol of a chain, such as "simplecache"
        path = segment.split("://", 1)[-1].split("?", 1)[0].split("#", 1)[0]
        if path.strip("/"):
            return path.rstrip("/")
    return ""


def _drop_set(drop_variables: str | Iterable[str] | None) -> frozenset[str]:
    if drop_variables is None:
        return frozenset()
    if isinstance(drop_variables, str):
        return frozenset({drop_variables})
    return frozenset(drop_variables)


class _Opened:
    """An opened file of one of the three kinds, turned into datasets on demand."""

    def __init__(
        self, reader: RangeReader, kind: str, obj: Any, squeeze: bool, allow_pickle: bool
    ) -> None:
        self.reader = reader
        self.url = reader.url
        self.kind = kind
        self.obj = obj
        self.squeeze = squeeze
        self.allow_pickle = allow_pickle
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        url: str,
        storage_options: Mapping[str, Any] | None,
        allow_pickle: bool,
        index_cache: str | None,
        squeeze: bool,
    ) -> _Opened:
        found = sniff_source(url, storage_options)
        reader, prefix, kind = found.reader, found.prefix, found.kind
        obj: Any
        if kind == "npy":
            obj = open_layout_array(reader, prefix, allow_pickle, DEFAULT_MAX_HEADER_SIZE)
        elif kind == "npz":
            obj = npz_from_reader(reader, allow_pickle=allow_pickle, index_cache=index_cache)
        else:
            obj = mat_from_reader(reader, prefix)
        return cls(reader, kind, obj, squeeze, allow_pickle)

    def close(self) -> None:
        """Release the file (h5py handles of a MAT v7.3 file)."""
        if isinstance(self.obj, MatFile):
            self.obj.close()

    # -- datasets ----------------------------------------------------------------------------

    def dataset(
        self,
        group: str | None,
        drop: frozenset[str],
        dims: Mapping[str, Sequence[str]],
        *,
        tree: bool = False,
    ) -> xr.Dataset:
        """The dataset of the root or of one group (a MATLAB struct, an ``.npz`` member
        directory); ``tree``: one node of a DataTree (sub-groups are left to their own
        nodes, silently)."""
        if group is not None and self.kind == "npy":
            raise ValueError(
                f"{self.url}: group={group!r}: an .npy file has no groups (groups are "
                f"MATLAB structs and .npz member directories)"
            )
        skipped: dict[str, str] = {}
        attrs: dict[str, Any] = {}
        if self.kind == "npy":
            variables = self._npy_variables(drop)
        elif self.kind == "npz":
            variables = self._npz_variables(group, drop, skipped, tree)
        else:
            variables = self._mat_variables(group, drop, skipped, warn_structs=not tree)
            if group is None:
                attrs["matlab_version"] = self.obj.version
            if group is None and self.obj.header_text:
                attrs["matlab_header"] = self.obj.header_text
        _check_dims(self.url, dims, variables, drop | skipped.keys())
        made = {name: make(dims.get(name)) for name, make in variables.items()}
        if skipped:
            reasons = "; ".join(f"{name!r} ({why})" for name, why in skipped.items())
            warnings.warn(
                f"{self.url}{'/' + group if group else ''}: left out {reasons}",
                SkippedVariableWarning,
                stacklevel=4,  # the caller of xarray.open_dataset
            )
        ds = xr.Dataset(made, attrs=attrs)
        if isinstance(self.obj, MatFile):
            ds.set_close(_Closer(self.obj))
        return ds

    def _npy_variables(self, drop: frozenset[str]) -> dict[str, _VariableMaker]:
        if NPY_VARIABLE in drop:
            return {}
        array: LayoutArray = self.obj
        attrs = {"fortran_order": array.layout.order == "F"}
        names = tuple(f"dim_{i}" for i in range(array.ndim))
        data = NpystoreBackendArray(array, array.shape, array.dtype)
        return {NPY_VARIABLE: _VariableMaker(data, names, attrs, _preferred(array))}

    def _npz_variables(
        self, group: str | None, drop: frozenset[str], skipped: dict[str, str], tree: bool
    ) -> dict[str, _VariableMaker]:
        npz: NpzFile = self.obj
        prefix = f"{group.strip('/')}/" if group else ""
        if prefix and not any(k.startswith(prefix) for k in npz.files):
            raise ValueError(
                f"{self.url}: no group {group!r}: no member name starts with {prefix!r}"
            )
        headers = npz.headers  # every member's header, in one concurrent batch
        out: dict[str, _VariableMaker] = {}
        # one variable per member, named by the key numpy reads it by (members x and x.npy
        # are variables x and x.npy)
        for member in npz.member_keys.values():
            key = member[len(prefix) :]
            if not member.startswith(prefix) or key in drop or (tree and "/" in key):
                continue
            header = headers.get(member)
            if header is None:
                skipped[key] = "not an .npy member"
                continue
            if header.is_pickled and not self.allow_pickle:
                skipped[key] = "an object array: pass allow_pickle=True to read it"
                continue
            array = npz.array(member)
            out[key] = _VariableMaker(
                NpystoreBackendArray(array, array.shape, array.dtype),
                _default_dims(key, array.ndim),
                {"fortran_order": header.fortran_order},
                _preferred(array),
            )
        return out

    def _mat_variables(
        self, group: str | None, drop: frozenset[str], skipped: dict[str, str], warn_structs: bool
    ) -> dict[str, _VariableMaker]:
        mat: MatFile = self.obj
        out: dict[str, _VariableMaker] = {}
        if group is None:
            for name, info in mat.variables.items():
                if name in drop:
                    continue
                if info.refused:
                    raise UnsupportedError(
                        f"{info.refused}; pass drop_variables={name!r} to open the others"
                    )
                why = _mat_skip_reason(info)
                if why is None and info.matlab_class == "char":
                    out[name] = self._char(name, self._node(name))
                elif why is None:
                    out[name] = self._numeric_lazy(name, info)
                elif why != "struct" or warn_structs:
                    skipped[name] = _explain(why, name)
            return out
        for name, node in self._struct(group).items():
            if name in drop:
                continue
            if isinstance(node, NumericLeaf):
                out[name] = self._numeric(name, node)
            elif isinstance(node, ValueLeaf):  # read with its struct
                leaf = NumericLeaf(
                    node.as_array(self.reader, f"{self.url}:{group}/{name}"),
                    node.matlab_class,
                    node.dims,
                )
                out[name] = self._numeric(name, leaf)
            elif isinstance(node, CharLeaf):
                out[name] = self._char(name, node)
            elif _is_scalar_struct(node):
                if warn_structs:
                    skipped[name] = _explain("struct", f"{group}/{name}")
            else:
                skipped[name] = _explain(_node_skip_reason(node), name)
        return out

    def groups(self, drop: frozenset[str]) -> list[str]:
        """Paths of every group below the root, parents first: the scalar structs of a
        MAT-file, the member directories of an ``.npz``."""
        if self.kind == "npz":
            dirs = {
                "/".join(parts[:i])
                for parts in (k.split("/") for k in self.obj.files if k not in drop)
                for i in range(1, len(parts))
            }
            return sorted(dirs, key=lambda d: (d.count("/"), d))
        if self.kind != "mat":
            return []
        mat: MatFile = self.obj
        paths: list[str] = []
        todo = [
            name
            for name, info in mat.variables.items()
            if name not in drop and _mat_skip_reason(info) == "struct"
        ]
        while todo:
            path = todo.pop(0)
            node = self._node_at(path)
            if not _is_scalar_struct(node):
                continue
            paths.append(path)
            fields = self._struct(path)
            todo.extend(
                f"{path}/{f}"
                for f, child in fields.items()
                if f not in drop and _is_scalar_struct(child)
            )
        return paths

    def _node(self, name: str) -> MatNode:
        with self._lock:
            node: MatNode = self.obj.node(name)
            return node

    def _node_at(self, path: str) -> MatNode:
        first, *rest = path.split("/")
        if first not in self.obj.variables:
            raise ValueError(
                f"{self.url}: no group {path!r}: {first!r} is not a variable (variables: "
                f"{sorted(self.obj.variables)})"
            )
        node = self._node(first)
        walked = first
        for part in rest:
            if not _is_scalar_struct(node):
                size = "x".join(map(str, node.dims))
                raise ValueError(
                    f"{self.url}: no group {path!r}: {walked!r} is a {size} "
                    f"{node.matlab_class}, not a scalar (1x1) struct"
                )
            if part not in node.elements[0]:
                raise ValueError(
                    f"{self.url}: no group {path!r}: the struct {walked!r} has no field "
                    f"{part!r} (fields: {list(node.fields)})"
                )
            node = node.elements[0][part]
            walked = f"{walked}/{part}"
        return node

    def _struct(self, path: str) -> Mapping[str, MatNode]:
        node = self._node_at(path)
        if not _is_scalar_struct(node):
            size = "x".join(map(str, node.dims))
            raise ValueError(
                f"{self.url}: group {path!r} is a {size} {node.matlab_class}, expected a "
                f"scalar (1x1) struct"
            )
        return node.elements[0]

    # -- variables ---------------------------------------------------------------------------

    def _numeric_lazy(self, name: str, info: MatInfo) -> _VariableMaker:
        """A top-level numeric variable. A v5 file's variable is parsed on first read (its
        element may hold the data itself); other versions' trees carry no data."""
        dtype = _mat_dtype(info.matlab_class, info.complex)
        shape, squeezed = self._shape(info.dims)
        attrs = _mat_attrs(info.matlab_class, info.is_global)
        if self.obj.version != "5":
            node = self._node(name)
            if isinstance(node, NumericLeaf):
                return self._numeric(name, node, attrs)
        # chunks as for a raw column-major array of this shape (the layout is not known yet)
        nbytes = math.prod(info.dims) * dtype.itemsize
        virtual = LayoutArray(self.reader, ArrayLayout(dtype, info.dims, "F", RawExtent(0, nbytes)))
        array = NpystoreBackendArray(lambda: self._leaf(name), shape, dtype, squeezed)
        preferred = _drop_axes(_preferred(virtual), squeezed)
        return _VariableMaker(array, _default_dims(name, len(shape)), attrs, preferred)

    def _leaf(self, name: str) -> LayoutArray:
        node = self._node(name)
        if not isinstance(node, NumericLeaf):
            raise FormatError(
                f"{self.url}: variable {name!r} was listed as numeric but reads as a "
                f"{type(node).__name__}"
            )
        return node.array

    def _numeric(
        self, name: str, leaf: NumericLeaf, attrs: dict[str, Any] | None = None
    ) -> _VariableMaker:
        array = leaf.array
        dtype = array.dtype.newbyteorder("=")
        shape, squeezed = self._shape(array.shape)
        return _VariableMaker(
            NpystoreBackendArray(array, shape, dtype, squeezed),
            _default_dims(name, len(shape)),
            attrs if attrs is not None else _mat_attrs(leaf.matlab_class, False),
            _drop_axes(_preferred(array), squeezed),
        )

    def _char(self, name: str, node: MatNode) -> _VariableMaker:
        if not isinstance(node, CharLeaf):
            raise FormatError(
                f"{self.url}: variable {name!r} was listed as char but reads as a "
                f"{type(node).__name__}"
            )
        value = node.value
        text = np.array(value) if isinstance(value, str) else np.asarray(value).astype(str)
        return _VariableMaker(text, _default_dims(name, text.ndim), {"matlab_class": "char"}, {})

    def _shape(self, dims: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if not self.squeeze:
            return dims, ()
        squeezed = tuple(i for i, n in enumerate(dims) if n == 1)
        return tuple(n for n in dims if n != 1), squeezed


class _Closer:
    """Closes a MAT-file; pickles as a no-op (an unpickled dataset holds no open file)."""

    def __init__(self, target: MatFile | None) -> None:
        self._target = target

    def __call__(self) -> None:
        if self._target is not None:
            self._target.close()

    def __reduce__(self) -> tuple[type[_Closer], tuple[None]]:
        return (_Closer, (None,))


class _VariableMaker:
    """A variable waiting for its dimension names."""

    def __init__(
        self,
        data: NpystoreBackendArray | np.ndarray[Any, Any],
        dims: tuple[str, ...],
        attrs: dict[str, Any],
        preferred: dict[int, int],
    ) -> None:
        self.data = data
        self.dims = dims
        self.attrs = attrs
        self.preferred = preferred

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.data.shape)

    def __call__(self, names: Sequence[str] | None) -> xr.Variable:
        dims = tuple(names) if names is not None else self.dims
        encoding: dict[str, Any] = {}
        data: Any = self.data
        if isinstance(data, NpystoreBackendArray):
            encoding["preferred_chunks"] = {dims[i]: n for i, n in self.preferred.items()}
            data = indexing.LazilyIndexedArray(data)
        return xr.Variable(dims, data, attrs=self.attrs, encoding=encoding)


def _default_dims(name: str, ndim: int) -> tuple[str, ...]:
    return tuple(f"{name}_dim_{i}" for i in range(ndim))


def _check_dims(
    url: str,
    dims: Mapping[str, Sequence[str]],
    variables: Mapping[str, _VariableMaker],
    absent: Iterable[str],
) -> None:
    known = set(absent)
    for name, names in dims.items():
        if isinstance(names, str):
            raise ValueError(
                f"{url}: dims[{name!r}] is the string {names!r}, expected a sequence of "
                f"dimension names"
            )
        if name not in variables:
            if name in known:
                continue
            raise ValueError(
                f"{url}: dims names {name!r}, which is not a variable of the file "
                f"(variables: {sorted(variables)})"
            )
        ndim = variables[name].ndim
        if len(names) != ndim:
            raise ValueError(
                f"{url}: dims[{name!r}] has {len(names)} names {tuple(names)}, the variable "
                f"has {ndim} dimensions"
            )


def _preferred(array: LayoutArray) -> dict[int, int]:
    """npystore's "auto" chunk size per axis (what its dask face would choose)."""
    chunks = normalize_layout_chunks(array, "auto")
    return {axis: max(1, c[0]) for axis, c in enumerate(chunks) if c}


def _drop_axes(preferred: dict[int, int], squeezed: tuple[int, ...]) -> dict[int, int]:
    if not squeezed:
        return preferred
    kept = [axis for axis in sorted(preferred) if axis not in squeezed]
    return {i: preferred[axis] for i, axis in enumerate(kept)}


# -- MATLAB classes --------------------------------------------------------------------------


def _mat_dtype(matlab_class: str, is_complex: bool) -> np.dtype[Any]:
    if matlab_class == "logical":
        return np.dtype(np.bool_)
    if is_complex:
        return np.dtype(np.complex64 if matlab_class == "single" else np.complex128)
    return np.dtype(_NUMERIC_CLASSES[matlab_class])


def _mat_attrs(matlab_class: str, is_global: bool) -> dict[str, Any]:
    attrs: dict[str, Any] = {"matlab_class": matlab_class}
    if is_global:
        attrs["matlab_global"] = True
    return attrs


def _mat_skip_reason(info: MatInfo) -> str | None:
    """``None`` for a variable that becomes a data variable, else what it is."""
    if info.sparse:
        return "sparse"
    if info.matlab_class == "char":
        return None
    if info.matlab_class in _NUMERIC_CLASSES or info.matlab_class == "logical":
        return None if info.dims else "object"
    if info.matlab_class == "struct":
        return "struct" if math.prod(info.dims or (0,)) == 1 else "struct array"
    if info.matlab_class == "cell":
        return "cell"
    return "object"


def _node_skip_reason(node: MatNode) -> str:
    if isinstance(node, StructNode):
        return "struct array" if node.matlab_class == "struct" else "object"
    name = type(node).__name__
    return {"SparseLeaf": "sparse", "CellNode": "cell"}.get(name, "object")


def _explain(why: str, name: str) -> str:
    return {
        "sparse": "a sparse matrix: read it with npystore.open_mat",
        "cell": "a cell array: read it with npystore.open_mat",
        "struct": f"a struct: open it with group={name!r} or xarray.open_datatree",
        "struct array": "a struct array: read it with npystore.open_mat",
        "object": "a MATLAB object: not decoded",
    }[why]


def _is_scalar_struct(node: MatNode) -> TypeGuard[StructNode]:
    return (
        isinstance(node, StructNode)
        and node.matlab_class == "struct"
        and len(node.elements) == 1
        and math.prod(node.dims) == 1
    )
