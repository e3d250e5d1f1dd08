"""Zarr entry points: :func:`open_store` and :func:`to_kerchunk`.

Both build the same hierarchy of nodes from a file (an ``.npy`` is an array at the root, an
``.npz`` a group with one array per ``.npy`` member) and hand it to the Zarr face.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from npystore.errors import UnsupportedError
from npystore.faces.tree import ArrayNode, file_nodes
from npystore.fetch import open_reader
from npystore.files.zip import DEFAULT_MAX_MEMBERS
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.layout import RawExtent

if TYPE_CHECKING:
    from npystore.faces.zarr.store import LayoutStore

__all__ = ["open_store", "to_kerchunk"]

#: Largest chunk inlined into kerchunk references (edge chunks, inflated members).
MAX_INLINE_CHUNK: Final = 8 * 2**20


def open_store(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_members: int = DEFAULT_MAX_MEMBERS,
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
    carries consolidated metadata, so zarr needs no listing. Chunks are computed from byte
    ranges of the file on demand; deflated members are served through their checkpoint
    index.

    Parameters
    ----------
    url : str
        Local path or any fsspec URL.
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    max_header_size : int
        Largest npy header accepted.
    max_members : int
        Most members an ``.npz`` archive may declare (default 1,000,000), checked before its
        central directory is read.

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
    nodes = file_nodes(reader, max_header_size=max_header_size, max_members=max_members)
    return LayoutStore(nodes, url=reader.url)


def to_kerchunk(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> dict[str, Any]:
    """Kerchunk version-1 references for a file (plain JSON-serialisable dict).

    Metadata documents are inlined; every full chunk of a raw layout that is one contiguous
    byte range is a ``[url, offset, length]`` reference into the original file; other chunks
    (zero-padded edge chunks, non-contiguous chunks, chunks of deflated members) are inlined
    as ``base64:`` strings, up to :data:`MAX_INLINE_CHUNK` bytes each.

    Open the result with ``fsspec.filesystem("reference", fo=refs, remote_protocol=...)`` and
    zarr (Zarr v3 metadata; npystore's data types are registered on ``import npystore``).

    Parameters
    ----------
    url : str
        Local path or any fsspec URL.
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    max_header_size : int
        Largest npy header accepted.
    max_members : int
        Most members an ``.npz`` archive may declare (default 1,000,000).

    Returns
    -------
    dict
        ``{"version": 1, "refs": {...}}``.

    Raises
    ------
    UnsupportedError
        A chunk that must be inlined is larger than :data:`MAX_INLINE_CHUNK`, or an archive
        with more than ``max_members`` members.
    """
    from npystore.faces.zarr.store import LayoutStore  # noqa: PLC0415

    reader = open_reader(url, storage_options)
    if reader.source is not None:
        raise UnsupportedError(
            f"{reader.url}: kerchunk references point into a file by its URL; pass the "
            f"file's path or URL, not an open file object"
        )
    nodes = file_nodes(reader, max_header_size=max_header_size, max_members=max_members)
    store = LayoutStore(nodes, url=reader.url)
    target = reader.fs.unstrip_protocol(reader.path)
    refs: dict[str, Any] = {}
    for key in store._keys():
        where = store._resolve(key)
        if where is None:  # pragma: no cover - keys come from the store itself
            continue
        path, index = where
        if index is None:
            refs[key] = store._metadata_bytes(path).decode()
            continue
        node = nodes[path]
        if not isinstance(node, ArrayNode):  # pragma: no cover
            continue
        span = _direct_range(node, index)
        if span is not None:
            refs[key] = [target, span[0], span[1] - span[0]]
            continue
        size = node.chunk_nbytes()
        if size > MAX_INLINE_CHUNK:
            raise UnsupportedError(
                f"{node.array.source}: chunk {key} must be inlined (edge, non-contiguous or "
                f"deflated) but has {size} bytes, more than {MAX_INLINE_CHUNK}"
            )
        data = store._chunk_bytes(node, index)
        refs[key] = "base64:" + base64.b64encode(data).decode()
    result = {"version": 1, "refs": refs}
    json.dumps(result)  # fail here, not in the caller, if anything is not JSON
    return result


def _direct_range(node: Any, index: tuple[int, ...]) -> tuple[int, int] | None:
    """The file byte range of a full, contiguous chunk of a raw layout, else None."""
    from npystore.read.layout import plan_reads  # noqa: PLC0415

    layout = node.array.layout
    if not isinstance(layout.storage, RawExtent):
        return None
    chunks = node.chunks()
    sel = tuple((i * c, c, 1) for i, c in zip(index, chunks, strict=True))
    if any(s + c > n for (s, c, _), n in zip(sel, layout.shape, strict=True)):
        return None
    plan = plan_reads(layout, sel, max_gap=0, max_span=1 << 62)
    pieces = list(plan.iter_pieces())
    if len(pieces) != 1 or not pieces[0].contiguous:
        return None
    return pieces[0].start, pieces[0].stop
