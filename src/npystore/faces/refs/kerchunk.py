"""Kerchunk references (:func:`to_kerchunk`): a file's tree as kerchunk version-1 JSON.

Zarr v2 form (the default, what kerchunk's own tools combine and ``engine="kerchunk"``
opens): a root group; an ``.npy`` file's array is ``data`` with dimensions ``dim_0, ...``;
an ``.npz`` member is an array named by its key (made safe by
:func:`~npystore.faces.tree.node_name`) with dimensions ``{key}_dim_{i}``; a MAT-file
variable an array in MATLAB's shape with dimensions ``{name}_dim_{i}`` (Fortran order:
``order: "F"``), structs, cells and sparse matrices groups as in the Zarr store. Dimension
names go in ``_ARRAY_DIMENSIONS``, chunk keys use ``.``, ``fill_value`` is ``null``.

Zarr v2 holds a dtype exactly only where zarr-python reads its v2 ``dtype`` back as the
same NumPy dtype (:func:`v2_dtype_problem`): long doubles, records with titles, subarray or
nested fields, padding, ``align=True`` or no fields have no such form, and are refused with
the way out, ``zarr_format=3`` (npystore's Zarr data types). One set of references is one
Zarr format: zarr never opens a v3 array inside a v2 group (it does not list it), so there
is no per-array fallback.

Zarr v3 form (``zarr_format=3``): the documents of :func:`npystore.open_store` (an ``.npy``
is the root array), chunk keys ``c/i/j``. Which chunks are ranges and which are inlined is
decided once, by :func:`~npystore.faces.refs.plan.plan_array`, within one inline budget
(:class:`~npystore.faces.refs.budget.InlineBudget`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import unquote

import numpy as np

from npystore.errors import UnsupportedError
from npystore.faces.dask import ChunksSpec
from npystore.faces.refs.budget import MAX_INLINE, InlineBudget, OverBudget
from npystore.faces.refs.plan import ArrayRefs, plan_array
from npystore.faces.tree import ArrayNode, GroupNode, Node, file_nodes
from npystore.fetch import RangeReader, open_reader
from npystore.fetch.fileobj import BinaryFile
from npystore.files.zip import DEFAULT_MAX_MEMBERS
from npystore.formats.mat5 import CharErrors
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE

__all__ = [
    "NPY_ARRAY",
    "open_tree",
    "plan_tree",
    "to_kerchunk",
    "v2_dtype_problem",
    "variable_name",
]

#: Name of an ``.npy`` file's array in the references' root group.
NPY_ARRAY = "data"


def to_kerchunk(
    url: str | list[str] | tuple[str, ...],
    *,
    storage_options: Mapping[str, Any] | None = None,
    zarr_format: Literal[2, 3] = 2,
    chunks: ChunksSpec = None,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_members: int = DEFAULT_MAX_MEMBERS,
    max_inline: int = MAX_INLINE,
    char_errors: CharErrors = "strict",
) -> dict[str, Any]:
    """Kerchunk version-1 references for a file (a plain JSON-serialisable dict).

    Chunks are ``[url, offset, length]`` references into the original file wherever a
    byte range holds them: the chunk shape is chosen for that (see
    :mod:`npystore.faces.refs.plan`): at most 16 MiB contiguous chunks whose length
    divides the leading axis, or 512 KiB chunks with a small inlined last chunk; MAT v7.3
    variables keep their HDF5 chunks, with deflate, shuffle and fletcher32 as numcodecs
    ``zlib``, ``shuffle`` and ``fletcher32`` filters; members of archives written by
    :func:`npystore.savez_compressed` are one chunk per deflate block, decoded by the codec
    ``npystore.raw_deflate`` (:class:`npystore.codecs.RawDeflate`, found by readers
    through numcodecs' entry points where npystore is installed). Values no byte range
    holds (deflated members of ``numpy.savez_compressed``, compressed v5 variables, HDF5
    compact data, text) are inlined as ``base64:`` strings, at most ``max_inline`` bytes
    in all; beyond that the arrays are refused together, each named (re-deflate an archive
    with ``npystore convert IN.npz OUT.npz``, or convert to Zarr).

    Open the result with kerchunk's tools (``MultiZarrToZarr``), with
    ``xarray.open_dataset(refs, engine="kerchunk")``, or with fsspec's reference file
    system and zarr (see the Zarr how-to).

    Many ``.npy`` files (a list, a glob or a folder, as :func:`npystore.open_npy` takes
    them) give one array ``data`` of the whole dataset, one chunk per file, when the files
    are equally long along the axis but the last (an edge chunk, inlined zero-padded up
    to ``max_inline`` bytes); otherwise an :class:`~npystore.errors.UnsupportedError`
    says so and names :func:`npystore.to_manifest`. The references then carry npystore's
    manifest under the key ``"npystore"``, so :func:`npystore.open_npy` reopens them with
    every file's identity checked.

    Parameters
    ----------
    url : str or list of str
        Local path or any fsspec URL; or many ``.npy`` files.
    storage_options : mapping, optional
        Filesystem options, as fsspec's ``storage_options``.
    zarr_format : {2, 3}
        2 (default): kerchunk's conventional Zarr v2 form, a group whose arrays carry
        ``_ARRAY_DIMENSIONS``; dtypes Zarr v2 cannot hold exactly are refused. 3: Zarr v3
        documents, as :func:`npystore.open_store` serves (every dtype, npystore's data types
        where zarr's own are not exact).
    chunks : chunk spec, optional
        ``None``: chosen for references. Otherwise as in :func:`npystore.open_npy`
        (``"auto"``, an int for every axis, a tuple, a dict); an int or ``"auto"`` applies
        to every member of an ``.npz``. Chunks must be regular (equal, the last smaller);
        chunks that are not one byte range (an edge chunk past the end of the file, chunks
        that split a fast axis) are inlined. HDF5 chunked variables and block-indexed
        members keep the file's chunks.
    max_header_size : int
        Largest npy header accepted.
    max_members : int
        Most members an ``.npz`` archive may declare (default 100,000).
    max_inline : int
        Most inlined bytes (encoded, before base64) in all the references, 16 MiB by
        default: reserved before anything is read, so a small archive that inflates to
        gigabytes costs no more.
    char_errors : {"strict", "replace"}
        MAT v6/v7 char variables that are not valid UTF-8: ``"strict"`` raises
        :class:`~npystore.errors.FormatError` naming the variable, ``"replace"`` reads each
        invalid sequence as U+FFFD (as :func:`npystore.open_mat` and ``scipy.io.loadmat``).

    Returns
    -------
    dict
        ``{"version": 1, "refs": {...}}``.

    Raises
    ------
    UnsupportedError
        Arrays that need more inlined bytes than ``max_inline`` (the message names them,
        why, and the way out), a dtype Zarr v2 cannot hold exactly (``zarr_format=2``), an
        open file object instead of a URL, or an archive with more than ``max_members``
        members.
    ValueError
        ``zarr_format`` other than 2 or 3, or chunks Zarr cannot hold.

    Examples
    --------
    >>> import numpy as np, npystore
    >>> np.save("/tmp/doc_refs.npy", np.arange(7, dtype="<i4"))
    >>> refs = npystore.to_kerchunk("/tmp/doc_refs.npy")
    >>> refs["refs"]["data/0"][1:]
    [128, 28]
    """
    if zarr_format not in (2, 3):
        raise ValueError(f"zarr_format must be 2 or 3, got {zarr_format!r}")
    from npystore.fetch.naming import is_folder, is_many  # noqa: PLC0415

    if (
        isinstance(url, list | tuple)
        or is_many(url)
        or (isinstance(url, str) and is_folder(url, storage_options))
    ):
        from npystore.faces.many import dataset_kerchunk  # noqa: PLC0415

        if chunks is not None:
            raise UnsupportedError(
                "references of many files have one chunk per file: leave chunks out"
            )
        return dataset_kerchunk(
            url, storage_options=storage_options, zarr_format=zarr_format,
            max_header_size=max_header_size, max_inline=max_inline,
        )  # fmt: skip
    # an open file object is refused by open_tree, naming it
    reader, nodes = open_tree(url, storage_options, max_header_size, max_members, char_errors)
    target = reader.fs.unstrip_protocol(reader.path)
    if zarr_format == 2:
        _check_v2_dtypes(nodes)
    plans = plan_tree(nodes, chunks=chunks, budget=InlineBudget(max_inline), url=reader.url)
    if zarr_format == 2:
        refs = _v2_refs(nodes, plans, target)
    else:
        refs = _v3_refs(nodes, plans, target, reader.url)
    result = {"version": 1, "refs": refs}
    json.dumps(result)  # fail here, not in the caller, if anything is not JSON
    return result


def open_tree(
    url: str | BinaryFile,
    storage_options: Mapping[str, Any] | None,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    max_members: int = DEFAULT_MAX_MEMBERS,
    char_errors: CharErrors = "strict",
) -> tuple[RangeReader, Mapping[str, Node]]:
    """The reader and tree of the file at ``url``; open file objects are refused
    (references point into a file by its URL)."""
    reader = open_reader(url, storage_options)
    if reader.source is not None:
        raise UnsupportedError(
            f"{reader.url}: kerchunk references point into a file by its URL; pass the "
            f"file's path or URL, not an open file object"
        )
    nodes = file_nodes(
        reader, max_header_size=max_header_size, max_members=max_members, char_errors=char_errors
    )
    return reader, nodes


def plan_tree(
    nodes: Mapping[str, Node],
    *,
    chunks: ChunksSpec = None,
    references_only: bool = False,
    budget: InlineBudget | None = None,
    url: str = "",
) -> dict[str, ArrayRefs]:
    """The reference plan of every array of the tree, by path, within one inline budget.

    Raises
    ------
    UnsupportedError
        The arrays whose inlined bytes do not fit ``budget`` (default :data:`MAX_INLINE`),
        named together; nothing of them is read once the budget is spent.
    """
    budget = InlineBudget() if budget is None else budget
    plans: dict[str, ArrayRefs] = {}
    for path, node in nodes.items():
        if isinstance(node, ArrayNode):
            try:
                plans[path] = plan_array(
                    node, chunks=chunks, references_only=references_only, budget=budget
                )
            except OverBudget:
                continue  # recorded: every array that does not fit is named below
    budget.check(url or next(iter(budget.refused), ""))
    return plans


def v2_dtype_problem(dtype: np.dtype[Any]) -> str | None:
    """Why ``dtype`` has no Zarr v2 form that zarr-python reads back exactly, or ``None``.

    Exact: a leaf type zarr knows (bool, integers, float16/32/64, complex64/128, bytes,
    unicode, void, datetime64/timedelta64) in either byte order, or a record of such
    leaves packed in field order (no titles, subarray or nested fields, padding,
    ``align=True``, and at least one field): zarr turns anything else into another dtype
    (padding into extra void fields) or refuses it.

    >>> import numpy as np
    >>> v2_dtype_problem(np.dtype([("a", "<i4"), ("b", ">f8")])) is None
    True
    >>> v2_dtype_problem(np.dtype([("a", "u1"), ("b", "<f8")], align=True))
    'an aligned record (align=True)'
    """
    if dtype.names is None:
        return _v2_leaf_problem(dtype)
    if not dtype.names:
        return "a record with no fields"
    if dtype.isalignedstruct:
        return "an aligned record (align=True)"
    offset = 0
    for name in dtype.names:
        entry: tuple[Any, ...] = dtype.fields[name]  # type: ignore[index]
        field, at, title = entry[0], entry[1], entry[2:]
        if title:
            return f"a record with field titles ({title[0]!r} of {name!r})"
        if field.subdtype is not None:
            return f"a record with a subarray field ({name!r}: {field.str} {field.shape})"
        if field.names is not None:
            return f"a nested record (field {name!r})"
        if at != offset:
            return f"a record with padding or reordered fields (field {name!r} at byte {at})"
        problem = _v2_leaf_problem(field)
        if problem is not None:
            return f"a record with {problem} (field {name!r})"
        offset += field.itemsize
    if offset != dtype.itemsize:
        return f"a record with {dtype.itemsize - offset} padding bytes at its end"
    return None


def _v2_leaf_problem(dtype: np.dtype[Any]) -> str | None:
    if dtype.itemsize == 0:
        return f"zero-size items ({dtype.str})"
    if dtype.kind in "biuSUVMm" or (dtype.kind == "f" and dtype.itemsize in (2, 4, 8)):
        return None
    if dtype.kind == "c" and dtype.itemsize in (8, 16):
        return None
    if dtype.kind in "fc":
        return f"long double precision ({dtype.str})"
    return f"the dtype {dtype.str}"


def _check_v2_dtypes(nodes: Mapping[str, Node]) -> None:
    """Refuse arrays whose dtype Zarr v2 cannot hold exactly (before anything is read)."""
    for node in nodes.values():
        if not isinstance(node, ArrayNode):
            continue
        dtype = node.array.layout.dtype
        problem = v2_dtype_problem(dtype)
        if problem is not None:
            raise UnsupportedError(
                f"{node.array.source}: dtype {dtype!r} is {problem}, which Zarr v2 metadata "
                f"cannot hold exactly (zarr would refuse it or read another dtype); make Zarr "
                f"v3 references instead: to_kerchunk(..., zarr_format=3) or `npystore refs "
                f"--zarr-format 3` (npystore's Zarr data types, read wherever npystore is "
                f"installed), or convert the file to Zarr (`npystore convert`)"
            )


def variable_name(path: str, node: ArrayNode) -> str:
    """The name npystore's xarray engine gives the array at ``path``: an ``.npz`` member's
    key, a MATLAB variable's (or field's) name, else the unquoted node name."""
    about = node.attributes.get("npystore")
    if isinstance(about, Mapping) and isinstance(about.get("key"), str):
        return str(about["key"])
    name = node.attributes.get("matlab_name")
    if isinstance(name, str):
        return name
    return unquote(path.rsplit("/", 1)[-1])


def dimension_names(path: str, node: ArrayNode) -> list[str]:
    """``dim_{i}`` for an ``.npy`` file's array (``path == ""``), else ``{name}_dim_{i}``."""
    ndim = node.array.layout.ndim
    if path == "":
        return [f"dim_{i}" for i in range(ndim)]
    name = variable_name(path, node)
    return [f"{name}_dim_{i}" for i in range(ndim)]


def _inline(data: bytes) -> str:
    return "base64:" + base64.b64encode(data).decode()


def _v2_dtype(dtype: np.dtype[Any]) -> Any:
    return dtype.descr if dtype.names is not None else dtype.str


def _v2_refs(
    nodes: Mapping[str, Node], plans: Mapping[str, ArrayRefs], target: str
) -> dict[str, Any]:
    refs: dict[str, Any] = {}
    for path, node in nodes.items():
        if isinstance(node, GroupNode):
            base = f"{path}/" if path else ""
            refs[f"{base}.zgroup"] = json.dumps({"zarr_format": 2})
            refs[f"{base}.zattrs"] = json.dumps(dict(node.attributes))
            continue
        plan = plans[path]
        name = path or NPY_ARRAY
        if path == "":  # an .npy file: a group holding the array
            refs[".zgroup"] = json.dumps({"zarr_format": 2})
            refs[".zattrs"] = json.dumps(dict(node.attributes))
        layout = plan.layout
        zarray = {
            "zarr_format": 2,
            "shape": list(layout.shape),
            "chunks": list(plan.chunks),
            "dtype": _v2_dtype(layout.dtype),
            "compressor": None,
            "fill_value": None,
            "filters": list(plan.filters) or None,
            "order": layout.order,
            "dimension_separator": ".",
        }
        attrs = {} if path == "" else dict(node.attributes)
        attrs["_ARRAY_DIMENSIONS"] = dimension_names(path, node)
        refs[f"{name}/.zarray"] = json.dumps(zarray)
        refs[f"{name}/.zattrs"] = json.dumps(attrs)
        for index, ref in plan.items():
            key = f"{name}/{'.'.join(map(str, index)) or '0'}"
            refs[key] = _inline(ref) if isinstance(ref, bytes) else [target, *ref]
    return refs


def _v3_refs(
    nodes: Mapping[str, Node], plans: Mapping[str, ArrayRefs], target: str, url: str
) -> dict[str, Any]:
    from npystore.faces.zarr.store import LayoutStore  # noqa: PLC0415 - needs zarr

    planned: dict[str, Node] = {p: plans[p].node if p in plans else n for p, n in nodes.items()}
    filters = {
        path: [
            {
                "name": f"numcodecs.{f['id']}",
                "configuration": {k: v for k, v in f.items() if k != "id"},
            }
            for f in plan.filters
        ]
        for path, plan in plans.items()
        if plan.filters
    }
    store = LayoutStore(planned, url=url, filters=filters)
    refs: dict[str, Any] = {}
    for path in planned:
        key = f"{path}/zarr.json" if path else "zarr.json"
        refs[key] = store._metadata_bytes(path).decode()
        plan = plans.get(path)
        if plan is None:
            continue
        base = f"{path}/c" if path else "c"
        for index, ref in plan.items():
            key = "/".join([base, *map(str, index)])
            refs[key] = _inline(ref) if isinstance(ref, bytes) else [target, *ref]
    return refs
