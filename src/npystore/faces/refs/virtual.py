"""A VirtualiZarr parser (:class:`NpystoreParser`): a file's arrays as ManifestArrays.

VirtualiZarr 2.x calls a parser as ``parser(url, registry)`` and gets a ``ManifestStore``:
Zarr v3 metadata per array and a manifest of ``(path, offset, length)`` per chunk. The
arrays and chunks are npystore's reference plans (:mod:`npystore.faces.refs.plan`) with
nothing inlined: an ``.npy`` is a group holding ``data``; an ``.npz`` a group with one
array per stored member; a MAT v7.3 file one array per numeric variable (structs as
groups), its HDF5 chunks with their filters as numcodecs codecs.

VirtualiZarr's kerchunk writer (``vds.vz.to_kerchunk()``, JSON and parquet) writes Zarr v2
metadata, which has no ``transpose`` codec, and writes the chunk of a 0-d array under a key
Zarr never reads (``data/`` for ``data/0``, VirtualiZarr 2.5 to 2.8). So by default
(``form="writable"``) arrays come in a form every VirtualiZarr writer takes (kerchunk JSON,
kerchunk parquet, Icechunk): a Fortran-order array (MATLAB's matrices, ``.npy`` files saved
in Fortran order) in its storage order, shape and dimension names reversed (``a_dim_1,
a_dim_0``: xarray's ``transpose("a_dim_0", "a_dim_1")`` gives numpy's array), and a 0-d array
as a 1-element 1-d array (``dim_0``). ``form="numpy"`` keeps numpy's shape (a ``transpose``
codec, 0-d arrays): the ManifestStore and Icechunk read that, VirtualiZarr's kerchunk v2
writer does not.

npystore reads the file's metadata through its own fetch layer (``storage_options``, as
everywhere in npystore); the registry is used by VirtualiZarr for the chunks.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

import numpy as np

from npystore.errors import UnsupportedError, missing_dependency

try:
    from virtualizarr.manifests import (
        ChunkManifest,
        ManifestArray,
        ManifestGroup,
        ManifestStore,
    )
    from virtualizarr.manifests.utils import create_v3_array_metadata
except ImportError as exc:
    raise missing_dependency(
        "virtualizarr", "virtualizarr", "npystore's VirtualiZarr parser", exc
    ) from exc

from npystore.faces.dask import ChunksSpec
from npystore.faces.refs.kerchunk import NPY_ARRAY, dimension_names, open_tree, variable_name
from npystore.faces.refs.plan import ArrayRefs, plan_array
from npystore.faces.tree import ArrayNode, GroupNode, Node
from npystore.faces.zarr.dtypes import bytes_codec_for, zarr_dtype_for
from npystore.files.zip import DEFAULT_MAX_MEMBERS
from npystore.formats.mat5 import CharErrors
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.layout import InlineExtent

__all__ = ["NpystoreParser"]


class NpystoreParser:
    """VirtualiZarr parser for ``.npy``, ``.npz`` (stored members, and deflated members of
    archives written by :func:`npystore.savez_compressed`: one chunk per deflate block, with
    the codec ``numcodecs.npystore.raw_deflate``) and MAT v7.3 files.

    Parameters
    ----------
    storage_options : mapping, optional
        Filesystem options npystore reads the file's metadata with (fsspec's
        ``storage_options``); the chunks are read by VirtualiZarr through its registry.
    chunks : chunk spec, optional
        As in :func:`npystore.to_kerchunk`; ``None`` chooses chunks that are each one byte
        range (a length that divides the leading axis, else one chunk per axis of up to
        256 MiB). HDF5 chunked variables keep the file's chunks.
    skip_variables : iterable of str, optional
        Arrays to leave out (node names, as the dataset shows them).
    max_header_size, max_members : int
        As for :func:`npystore.open`.
    form : {"writable", "numpy"}
        ``"writable"`` (default): arrays in a form every VirtualiZarr writer takes: a
        Fortran-order array with more than one dimension in its storage order (shape and
        dimension names reversed, no ``transpose`` codec), a 0-d array as a 1-element 1-d
        array. ``"numpy"``: numpy's shape and memory order (a ``transpose`` codec for
        Fortran order where a chunk needs one; 0-d arrays), which VirtualiZarr's kerchunk
        writer cannot write.
    char_errors : {"strict", "replace"}
        As for :func:`npystore.open_mat`: MAT v6/v7 chars that are not valid UTF-8.

    Notes
    -----
    A manifest holds no bytes, so an array no byte range of the file holds (a deflated
    member of a ``numpy.savez_compressed`` archive: re-deflate it with ``npystore convert
    x.npz y.npz``; a compressed MAT v5 variable: convert it with ``npystore convert``) is
    refused with :class:`~npystore.errors.UnsupportedError` (or name it in
    ``skip_variables``); small values that arrived with the metadata (MATLAB text, HDF5
    compact datasets) are left out with a warning.

    Examples
    --------
    >>> import numpy as np, obstore.store
    >>> from obspec_utils.registry import ObjectStoreRegistry
    >>> from virtualizarr import open_virtual_dataset
    >>> from npystore.virtualizarr import NpystoreParser
    >>> np.save("/tmp/doc_virtual.npy", np.arange(12.0).reshape(4, 3))
    >>> registry = ObjectStoreRegistry({"file://": obstore.store.LocalStore()})
    >>> vds = open_virtual_dataset(
    ...     "file:///tmp/doc_virtual.npy", registry=registry, parser=NpystoreParser()
    ... )
    >>> vds["data"].dims, vds["data"].shape
    (('dim_0', 'dim_1'), (4, 3))
    """

    def __init__(
        self,
        *,
        storage_options: Mapping[str, Any] | None = None,
        chunks: ChunksSpec = None,
        skip_variables: Iterable[str] | None = None,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
        max_members: int = DEFAULT_MAX_MEMBERS,
        form: Literal["writable", "numpy"] = "writable",
        char_errors: CharErrors = "strict",
    ) -> None:
        if form not in ("writable", "numpy"):
            raise ValueError(f"form must be 'writable' or 'numpy', not {form!r}")
        self.form = form
        self.storage_options = storage_options
        self.chunks = chunks
        self.skip_variables = frozenset(skip_variables or ())
        self.max_header_size = max_header_size
        self.max_members = max_members
        self.char_errors: CharErrors = char_errors

    def __call__(self, url: str, registry: Any) -> ManifestStore:
        """The ``ManifestStore`` of the file at ``url``.

        Parameters
        ----------
        url : str
            The file (``file:///...``, ``s3://...``, or any URL npystore opens).
        registry : obspec_utils.registry.ObjectStoreRegistry
            Where VirtualiZarr reads the chunks from.

        Returns
        -------
        virtualizarr.manifests.ManifestStore
        """
        reader, nodes = open_tree(
            url, self.storage_options, self.max_header_size, self.max_members, self.char_errors
        )
        target = reader.fs.unstrip_protocol(reader.path)
        if isinstance(nodes[""], ArrayNode):  # an .npy file: a group holding "data"
            nodes = {"": GroupNode(dict(nodes[""].attributes)), NPY_ARRAY: nodes[""]}
            dims_of = {NPY_ARRAY: ""}
        else:
            dims_of = {}
        arrays: dict[str, ManifestArray] = {}
        left_out: dict[str, str] = {}
        for path, node in nodes.items():
            if not isinstance(node, ArrayNode) or path.rsplit("/", 1)[-1] in self.skip_variables:
                continue
            try:
                refs = plan_array(node, chunks=self.chunks, references_only=True)
            except UnsupportedError as exc:
                if isinstance(node.array.layout.storage, InlineExtent):
                    left_out[path] = str(exc)
                    continue
                raise UnsupportedError(
                    f"{exc} (convert it to Zarr with `npystore convert`, or leave it out with "
                    f"NpystoreParser(skip_variables=[{path.rsplit('/', 1)[-1]!r}]))"
                ) from exc
            base = dims_of.get(path, path)
            dims = dimension_names(base, node)
            if self.form == "writable" and not dims:  # a 0-d array, as 1 element along dim_0
                dims = [f"{variable_name(base, node)}_dim_0" if base else "dim_0"]
            arrays[path] = _manifest_array(refs, target, dims, writable=self.form == "writable")
        if left_out:
            warnings.warn(
                f"{reader.url}: {len(left_out)} array(s) left out of the virtual dataset (no byte "
                f"range holds their values): {', '.join(sorted(left_out))}",
                UserWarning,
                stacklevel=2,
            )
        return ManifestStore(registry=registry, group=_group("", nodes, arrays))


def _manifest_array(
    refs: ArrayRefs, target: str, dims: list[str], *, writable: bool
) -> ManifestArray:
    layout = refs.layout
    shape, chunks = layout.shape, refs.chunks
    offsets, lengths = refs.offsets, refs.lengths
    codecs: list[dict[str, Any]] = []
    if writable and layout.order == "F" and layout.ndim > 1:
        # the storage order: a chunk's Fortran-order bytes are the C-order bytes of the
        # chunk with its axes reversed, and so is the chunk grid
        shape, chunks, dims = shape[::-1], chunks[::-1], dims[::-1]
        offsets, lengths = offsets.transpose(), lengths.transpose()
    elif writable and layout.ndim == 0:
        # one element along one axis: kerchunk v2 writes the chunk of a 1-d array right
        shape, chunks = (1,), (1,)
        offsets, lengths = offsets.reshape(1), lengths.reshape(1)
    elif layout.order == "F" and sum(c > 1 for c in chunks) > 1:
        # the bytes of a chunk with at most one axis longer than 1 are the same in C and F
        # order: no transpose codec (which VirtualiZarr's kerchunk writer cannot express)
        codecs.append(
            {"name": "transpose", "configuration": {"order": list(range(layout.ndim))[::-1]}}
        )
    # the data type and bytes codec of npystore's store: zarr's own type where it reads the
    # raw bytes as they are, else npystore's (a record of both byte orders, which
    # VirtualiZarr >= 2.8 refuses to infer a bytes codec for, and which zarr's struct would
    # read with one byte order)
    zdtype = zarr_dtype_for(layout.dtype)
    codecs.append(bytes_codec_for(layout.dtype, zdtype))
    for f in refs.filters:
        config = {k: v for k, v in f.items() if k != "id"}
        codecs.append({"name": f"numcodecs.{f['id']}", "configuration": config})
    fill: Any = None  # zeros
    if refs.fill:
        fill = np.frombuffer(refs.fill, dtype=layout.dtype)[0].item()
    elif layout.dtype.kind in "fc" and bool(np.all(offsets >= 0)):
        # every chunk is present: the fill value is never used, but xarray reads it as the
        # missing-value marker (VirtualiZarr's kerchunk writer keeps it): NaN masks nothing
        fill = float("nan") if layout.dtype.kind == "f" else complex("nan+nanj")
    attributes = {k: v for k, v in refs.node.attributes.items() if k != "npystore"}
    metadata = create_v3_array_metadata(
        shape=shape,
        data_type=cast("Any", zdtype),  # typed np.dtype; parse_data_type takes a ZDType
        chunk_shape=chunks,
        fill_value=fill,
        codecs=codecs,
        attributes=attributes,
        dimension_names=dims,
    )
    present = offsets >= 0
    paths: Any = np.where(present, target, "").astype(np.dtypes.StringDType())
    manifest = ChunkManifest.from_arrays(
        paths=paths,
        offsets=np.where(present, offsets, 0).astype(np.uint64),
        lengths=np.where(present, lengths, 0).astype(np.uint64),
        validate_paths=False,
    )
    return ManifestArray(metadata=metadata, chunkmanifest=manifest)


def _group(
    path: str, nodes: Mapping[str, Node], arrays: Mapping[str, ManifestArray]
) -> ManifestGroup:
    """The ManifestGroup at ``path`` with everything below it."""
    prefix = f"{path}/" if path else ""
    children = [
        p for p in nodes if p.startswith(prefix) and p != path and "/" not in p[len(prefix) :]
    ]
    members = {p[len(prefix) :]: arrays[p] for p in children if p in arrays}
    groups = {
        p[len(prefix) :]: _group(p, nodes, arrays)
        for p in children
        if isinstance(nodes[p], GroupNode)
    }
    node = nodes[path]
    attributes = dict(node.attributes) if isinstance(node, GroupNode) else {}
    return ManifestGroup(arrays=members, groups=groups, attributes=attributes)
