"""What a conversion writes: the arrays and groups of the source, with their Zarr chunks.

:func:`make_plan` opens the source once and lists the groups and arrays of the output
hierarchy (the one :func:`npystore.open_store` serves; an ``.npy`` file becomes an array inside
the root group), each array with its Zarr chunks and data type; arrays whose dtype has no Zarr
data type are listed as skipped. :class:`ConvertError` reports options that cannot be met.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import dask
from dask.utils import parse_bytes

from npystore.errors import NpystoreError, UnsupportedError
from npystore.faces.dask import normalize_layout_chunks
from npystore.faces.tree import ArrayNode, GroupNode, file_nodes, node_name
from npystore.faces.zarr.dtypes import zarr_dtype_for
from npystore.fetch import open_reader
from npystore.files.zip import DEFAULT_MAX_MEMBERS
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.read.access import LayoutArray

__all__ = ["DEFAULT_CHUNK_LIMIT", "ArrayPlan", "ChunkSpec", "ConvertError", "Plan", "make_plan"]

#: Largest default Zarr chunk (the source's dask chunks are capped to it).
DEFAULT_CHUNK_LIMIT: Final = 64 * 2**20

ChunkSpec = str | Sequence[int]


class ConvertError(NpystoreError):
    """The output cannot be written as asked (it holds something else, or options are bad)."""


@dataclass(frozen=True)
class ArrayPlan:
    """One output array: its path, the source array, its Zarr chunks, attributes and type."""

    path: str
    array: LayoutArray
    chunks: tuple[int, ...]
    attributes: Mapping[str, Any]
    dimension_names: tuple[str, ...]
    zdtype: Any

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks along each axis."""
        return tuple(
            -(-n // c) for n, c in zip(self.array.shape, self.chunks, strict=True)
        )  # fmt: skip

    @property
    def nchunks(self) -> int:
        """Chunks in all."""
        return math.prod(self.grid)

    def describe(self) -> dict[str, Any]:
        """Shape, dtype and chunks as the manifest records them."""
        dtype = self.array.dtype
        return {
            "shape": list(self.array.shape),
            "dtype": str(dtype.descr) if dtype.names else dtype.str,
            "chunks": list(self.chunks),
        }


@dataclass
class Plan:
    """The output hierarchy: the source, root attributes, groups, arrays and what is skipped."""

    url: str
    format: str
    identity: dict[str, Any]
    root_attributes: dict[str, Any]
    groups: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    arrays: list[ArrayPlan] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def _npy_name(url: str) -> str:
    if "://" in url:
        url = url.split("?", 1)[0].split("#", 1)[0]
    base = url.rstrip("/").rsplit("/", 1)[-1].rsplit("::", 1)[-1]
    if base.lower().endswith(".npy"):
        base = base[:-4]
    return node_name(base) if base else "data"


def _auto_chunks(array: LayoutArray, limit: int) -> tuple[int, ...]:
    """The dask "auto" chunks of ``array`` with ``array.chunk-size`` at most ``limit``."""
    if array.layout.ndim == 0:
        return ()
    configured = parse_bytes(dask.config.get("array.chunk-size"))
    with dask.config.set({"array.chunk-size": min(configured, limit)}):
        grid = normalize_layout_chunks(array, "auto")
    return tuple(max(1, axis[0]) if axis else 1 for axis in grid)


def _chunks_for(
    array: LayoutArray, spec: ChunkSpec | None, path: str, *, strict: bool
) -> tuple[int, ...]:
    """Zarr chunks from a spec: None (default), a size ("16MiB") or leading-axis lengths.

    Lengths beyond the array's dimensions are an error when ``strict`` (a spec for this
    array), else ignored (the spec for every array).
    """
    if spec is None:
        return _auto_chunks(array, DEFAULT_CHUNK_LIMIT)
    if isinstance(spec, str):
        try:
            limit = parse_bytes(spec)
        except ValueError as exc:
            raise ConvertError(
                f"chunks {spec!r} for {path!r}: expected a size such as '16MiB'"
            ) from exc
        return _auto_chunks(array, max(1, int(limit)))
    shape = array.shape
    lengths = [int(c) for c in spec]
    if len(lengths) > len(shape) and strict:
        raise ConvertError(
            f"chunks {tuple(lengths)} for {path!r}: {len(lengths)} lengths, but the array has "
            f"shape {shape} ({len(shape)} dims)"
        )
    out = []
    for axis, n in enumerate(shape):
        c = lengths[axis] if axis < len(lengths) else -1
        if c == -1:
            c = n
        elif c < 1:
            raise ConvertError(
                f"chunks {tuple(lengths)} for {path!r}: axis {axis} length {c}, expected >= 1 "
                "or -1 (the whole axis)"
            )
        out.append(max(1, min(c, n)))
    return tuple(out)


def make_plan(
    url: str,
    storage_options: Mapping[str, Any] | None,
    *,
    name: str | None,
    chunks: ChunkSpec | None,
    array_chunks: Mapping[str, ChunkSpec],
) -> Plan:
    """Open the source and plan the output: groups, arrays with their chunks, skipped arrays.

    Parameters
    ----------
    url : str
        The source file.
    storage_options : mapping, optional
        fsspec options for the source.
    name : str, optional
        Name of the array made from an ``.npy`` source (default: the file name).
    chunks : str or sequence of int, optional
        Chunks of every array (see :func:`npystore.tools.convert.convert`).
    array_chunks : mapping
        Chunks per array path.

    Returns
    -------
    Plan

    Raises
    ------
    ConvertError
        ``name`` for a source that is not ``.npy``, chunks for arrays the source lacks, bad
        chunk specs.
    """
    reader = open_reader(url, storage_options)
    nodes = file_nodes(
        reader, max_header_size=DEFAULT_MAX_HEADER_SIZE, max_members=DEFAULT_MAX_MEMBERS
    )
    root = nodes.get("")
    identity = {
        "url": reader.identity.url,
        "size": reader.identity.size,
        "fields": dict(reader.identity.markers),
    }
    if isinstance(root, ArrayNode):  # an .npy file: an array inside the root group
        about = dict(root.attributes)
        nodes = {"": GroupNode(about), name or _npy_name(reader.url): root}
    elif name is not None:
        raise ConvertError(f"{reader.url}: --name applies to .npy sources only")
    root_node = nodes[""]
    attrs = json.loads(json.dumps(dict(root_node.attributes)))
    plan = Plan(reader.url, attrs.get("npystore", {}).get("format", "?"), identity, attrs)
    plan.skipped.update(attrs.get("npystore", {}).get("skipped", {}))
    unknown = set(array_chunks) - {p for p, n in nodes.items() if isinstance(n, ArrayNode)}
    if unknown:
        known = sorted(p for p, n in nodes.items() if isinstance(n, ArrayNode))
        raise ConvertError(
            f"{reader.url}: chunks given for {sorted(unknown)}, the arrays are {known}"
        )
    for path, node in nodes.items():
        if path == "":
            continue
        if isinstance(node, GroupNode):
            plan.groups[path] = dict(node.attributes)
            continue
        try:
            zdtype = zarr_dtype_for(node.array.dtype)
        except UnsupportedError as exc:
            plan.skipped[path] = f"no Zarr data type: {exc}"
            continue
        strict = path in array_chunks
        spec = array_chunks[path] if strict else chunks
        plan.arrays.append(
            ArrayPlan(
                path,
                node.array,
                _chunks_for(node.array, spec, path, strict=strict),
                dict(node.attributes),
                node.dims(),
                zdtype,
            )
        )
    if plan.skipped:
        plan.root_attributes.setdefault("npystore", {})["skipped"] = dict(plan.skipped)
    return plan
