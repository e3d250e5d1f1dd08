"""An opened file turned into datasets: :class:`OpenedFile`.

The file is sniffed and opened once (``.npy``, ``.npz`` or MAT-file); each dataset is then
one group of it: the root, a MATLAB scalar struct (see :mod:`~npystore.faces.xarray.mat`)
or an ``.npz`` member directory. Variables with no xarray form are left out with one
:class:`SkippedVariableWarning` per dataset.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import xarray as xr

from npystore.faces.matfile import MatFile, mat_from_reader
from npystore.faces.npz import NpzFile, npz_from_reader
from npystore.faces.xarray.array import NpystoreBackendArray, VariableMaker, preferred_chunks
from npystore.faces.xarray.mat import MatVariables
from npystore.faces.xarray.names import NPY_VARIABLE, check_dims, default_dims
from npystore.fetch import RangeReader
from npystore.fetch.cache import IndexCacheOption
from npystore.files.npy import open_layout_array
from npystore.files.open import sniff_source
from npystore.formats.mat5 import CharErrors
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.access import LayoutArray

__all__ = ["OpenedFile", "SkippedVariableWarning"]


class SkippedVariableWarning(UserWarning):
    """A variable of the file has no xarray form and was left out of the dataset."""


class OpenedFile:
    """An opened file of one of the three kinds, turned into datasets on demand.

    Parameters
    ----------
    reader : RangeReader
        The file's reader.
    kind : str
        ``"npy"``, ``"npz"`` or ``"mat"``.
    obj : LayoutArray or NpzFile or MatFile
        The opened file, of that kind.
    squeeze : bool
        MAT-files only: drop the length-1 dimensions of numeric variables.
    allow_pickle : bool
        Allow object arrays.
    """

    def __init__(
        self, reader: RangeReader, kind: str, obj: Any, squeeze: bool, allow_pickle: bool
    ) -> None:
        self.reader = reader
        self.url = reader.url
        self.kind = kind
        self.obj = obj
        self.squeeze = squeeze
        self.allow_pickle = allow_pickle
        self._mat = MatVariables(reader, obj, squeeze) if isinstance(obj, MatFile) else None

    @classmethod
    def open(
        cls,
        url: str,
        storage_options: Mapping[str, Any] | None,
        allow_pickle: bool,
        index_cache: IndexCacheOption,
        squeeze: bool,
        *,
        char_errors: CharErrors = "strict",
    ) -> OpenedFile:
        """Sniff and open the file at ``url`` (headers and metadata only).

        Parameters
        ----------
        url : str
            Local path or fsspec URL.
        storage_options : mapping, optional
            fsspec filesystem options.
        allow_pickle : bool
            Allow object arrays.
        index_cache : str, bool or None
            ``.npz`` only: where deflate checkpoint indexes are kept (False: nowhere).
        squeeze : bool
            MAT-files only: drop length-1 dimensions.
        char_errors : {"strict", "replace"}
            MAT v6/v7 files only: chars that are not valid UTF-8 (see
            :func:`npystore.open_mat`).

        Returns
        -------
        OpenedFile
            The opened file.
        """
        found = sniff_source(url, storage_options)
        reader, prefix, kind = found.reader, found.prefix, found.kind
        obj: Any
        if kind == "npy":
            obj = open_layout_array(reader, prefix, allow_pickle, DEFAULT_MAX_HEADER_SIZE)
        elif kind == "npz":
            obj = npz_from_reader(reader, allow_pickle=allow_pickle, index_cache=index_cache)
        else:
            obj = mat_from_reader(reader, prefix, char_errors=char_errors)
        return cls(reader, kind, obj, squeeze, allow_pickle)

    def close(self) -> None:
        """Release the file (h5py handles of a MAT v7.3 file)."""
        if isinstance(self.obj, MatFile):
            self.obj.close()

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
        if self._mat is not None:
            variables = self._mat.variables(group, drop, skipped, warn_structs=not tree)
            if group is None:
                attrs["matlab_version"] = self.obj.version
            if group is None and self.obj.header_text:
                attrs["matlab_header"] = self.obj.header_text
        elif self.kind == "npz":
            variables = self._npz_variables(group, drop, skipped, tree)
        else:
            variables = self._npy_variables(drop)
        check_dims(self.url, dims, variables, drop | skipped.keys())
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

    def groups(self, drop: frozenset[str]) -> list[str]:
        """Paths of every group below the root, parents first: the scalar structs of a
        MAT-file, the member directories of an ``.npz``."""
        if self._mat is not None:
            return self._mat.groups(drop)
        if self.kind != "npz":
            return []
        dirs = {
            "/".join(parts[:i])
            for parts in (k.split("/") for k in self.obj.files if k not in drop)
            for i in range(1, len(parts))
        }
        return sorted(dirs, key=lambda d: (d.count("/"), d))

    def _npy_variables(self, drop: frozenset[str]) -> dict[str, VariableMaker]:
        if NPY_VARIABLE in drop:
            return {}
        array: LayoutArray = self.obj
        attrs = {"fortran_order": array.layout.order == "F"}
        names = default_dims(None, array.ndim)
        data = NpystoreBackendArray(array, array.shape, array.dtype)
        return {NPY_VARIABLE: VariableMaker(data, names, attrs, preferred_chunks(array))}

    def _npz_variables(
        self, group: str | None, drop: frozenset[str], skipped: dict[str, str], tree: bool
    ) -> dict[str, VariableMaker]:
        npz: NpzFile = self.obj
        prefix = f"{group.strip('/')}/" if group else ""
        if prefix and not any(k.startswith(prefix) for k in npz.files):
            raise ValueError(
                f"{self.url}: no group {group!r}: no member name starts with {prefix!r}"
            )
        headers = npz.headers  # every member's header, in one concurrent batch
        out: dict[str, VariableMaker] = {}
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
            out[key] = VariableMaker(
                NpystoreBackendArray(array, array.shape, array.dtype),
                default_dims(key, array.ndim),
                {"fortran_order": header.fortran_order},
                preferred_chunks(array),
            )
        return out


class _Closer:
    """Closes a MAT-file; pickles as a no-op (an unpickled dataset holds no open file)."""

    def __init__(self, target: MatFile | None) -> None:
        self._target = target

    def __call__(self) -> None:
        if self._target is not None:
            self._target.close()

    def __reduce__(self) -> tuple[type[_Closer], tuple[None]]:
        return (_Closer, (None,))
