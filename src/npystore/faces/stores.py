"""Zarr entry points: :func:`open_store` (and :func:`to_kerchunk`, from
:mod:`npystore.faces.refs`).

Both build the same hierarchy of nodes from a file (an ``.npy`` is an array at the root, an
``.npz`` a group with one array per ``.npy`` member) and hand it to a face.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from npystore.faces.refs import to_kerchunk
from npystore.faces.tree import file_nodes
from npystore.fetch import open_reader
from npystore.files.zip import DEFAULT_MAX_MEMBERS
from npystore.formats.mat5 import CharErrors
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE

if TYPE_CHECKING:
    from npystore.faces.zarr.store import LayoutStore

__all__ = ["open_store", "to_kerchunk"]


def open_store(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_members: int = DEFAULT_MAX_MEMBERS,
    char_errors: CharErrors = "strict",
) -> LayoutStore:
    """Open a file as a read-only Zarr v3 store.

    An ``.npy`` file is an array at the root (``zarr.open_array(store, mode="r")``); an
    ``.npz`` archive is a group with one array per ``.npy`` member
    (``zarr.open_group(store, mode="r")``), named by the member's key (as
    :func:`~npystore.faces.tree.node_name` makes it safe: percent-encoded, reserved
    names escaped, long names shortened; when members ``x`` and ``x.npy`` both exist they
    are ``x`` and ``x.npy``, the keys numpy reads them by). Each array's attributes name its
    member (``npystore.member``); the root's ``npystore.renamed`` maps every member whose
    node name is not its key to that node name. The root
    carries consolidated metadata, so zarr needs no listing, when the file has at most
    1,000 arrays and groups (:data:`~npystore.faces.zarr.store.CONSOLIDATED_MAX`); for more,
    zarr lists the store. Opening reads an archive's central directory only: a member's
    header is read, and its node and ``zarr.json`` made, when zarr asks for it (the root's
    attributes, which name the members not served, read every member's header). Chunks are
    computed from byte ranges of the file on demand; deflated members are served through
    their checkpoint index.

    Parameters
    ----------
    url : str
        Local path or any fsspec URL.
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    max_header_size : int
        Largest npy header accepted.
    max_members : int
        Most members an ``.npz`` archive may declare (default 100,000), checked before its
        central directory is read.
    char_errors : {"strict", "replace"}
        MAT v6/v7 char variables that are not valid UTF-8: ``"strict"`` raises
        :class:`~npystore.errors.FormatError` naming the variable, ``"replace"`` reads each
        invalid sequence as U+FFFD (as :func:`npystore.open_mat` and ``scipy.io.loadmat``).

    Returns
    -------
    LayoutStore
        A ``zarr.abc.store.Store``; writes raise :class:`~npystore.errors.UnsupportedError`.

    Raises
    ------
    FormatError
        Malformed input, as for :func:`~npystore.open`.
    UnsupportedError
        An archive with more than ``max_members`` members, or input npystore does not read.

    Examples
    --------
    >>> import numpy as np, npystore, zarr
    >>> np.save("/tmp/doc_store.npy", np.arange(6, dtype=">i2").reshape(2, 3))
    >>> z = zarr.open_array(npystore.open_store("/tmp/doc_store.npy"), mode="r")
    >>> z[1]
    array([3, 4, 5], dtype=int16)
    """
    from npystore.faces.zarr.store import LayoutStore  # noqa: PLC0415

    reader = open_reader(url, storage_options)
    nodes = file_nodes(
        reader, max_header_size=max_header_size, max_members=max_members, char_errors=char_errors
    )
    return LayoutStore(nodes, url=reader.url)
