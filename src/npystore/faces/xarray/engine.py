"""The engine xarray calls: :class:`NpystoreBackendEntrypoint`.

Registered as the ``npystore`` entry point of the ``xarray.backends`` group
(``npystore.faces.xarray:NpystoreBackendEntrypoint``). It takes xarray's arguments, decides
which files it claims (:meth:`~NpystoreBackendEntrypoint.guess_can_open`), and hands the
opened file to :class:`~npystore.faces.xarray.datasets.OpenedFile` for the datasets.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final

import xarray as xr
from xarray.backends import BackendEntrypoint

from npystore.faces.xarray.datasets import OpenedFile
from npystore.faces.xarray.names import drop_set
from npystore.fetch.cache import IndexCacheOption
from npystore.files.open import is_npy_or_matlab
from npystore.formats.mat5 import CharErrors

__all__ = ["EXTENSIONS", "NpystoreBackendEntrypoint"]

#: File name endings the engine claims in :meth:`NpystoreBackendEntrypoint.guess_can_open`.
EXTENSIONS: Final = (".npy", ".npz", ".mat")
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
        "char_errors",
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
        index_cache: IndexCacheOption = None,
        char_errors: CharErrors = "strict",
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
        filename_or_obj : str, os.PathLike or list of str
            Local path or any fsspec URL (``s3://``, ``https://``, chained URLs). Many
            ``.npy`` files (a glob, a folder, a list) give one dataset whose variable
            ``data`` joins them along its first axis (see :func:`npystore.open_npy`): the
            files are opened together, the chunks never span two files.
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
        index_cache : str, bool or None
            ``.npz`` only: where deflate checkpoint indexes are kept (see
            :func:`npystore.open_npz`; False: nowhere).
        char_errors : {"strict", "replace"}
            MAT v6/v7 files only: char variables that are not valid UTF-8 raise
            :class:`~npystore.errors.FormatError` (``"strict"``) or are read with U+FFFD
            for each invalid sequence (``"replace"``), as in :func:`npystore.open_mat`.
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
        from npystore.fetch.naming import is_folder, is_many  # noqa: PLC0415

        if is_many(filename_or_obj) or is_folder(_as_url(filename_or_obj), storage_options):
            if group is not None:
                raise ValueError("group applies to one file, not to a dataset of .npy files")
            from npystore.faces.xarray.many import sharded_dataset  # noqa: PLC0415

            return sharded_dataset(
                filename_or_obj, storage_options, allow_pickle, dims or {},
                drop_set(drop_variables),
            )  # fmt: skip
        opened = OpenedFile.open(
            _as_url(filename_or_obj),
            storage_options,
            allow_pickle,
            index_cache,
            squeeze,
            char_errors=char_errors,
        )
        try:
            return opened.dataset(group, drop_set(drop_variables), dims or {})
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
        index_cache: IndexCacheOption = None,
        char_errors: CharErrors = "strict",
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
        opened = OpenedFile.open(
            _as_url(filename_or_obj),
            storage_options,
            allow_pickle,
            index_cache,
            squeeze,
            char_errors=char_errors,
        )
        try:
            drop = drop_set(drop_variables)
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
