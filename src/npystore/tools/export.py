"""``npystore convert`` to ``.npy`` or ``.npz`` (chosen by the output's extension).

Any input npystore reads becomes the tree :func:`npystore.faces.tree.build.file_nodes`
gives (the one ``open_store`` serves and the Zarr conversion writes): every array node is
read as a lazy dask array and written by :func:`npystore.save` (an ``.npy`` output takes
exactly one array: an ``.npy`` input, or the one ``--name`` picks) or
:func:`npystore.savez_compressed` (``.npz``: one member per array, named by its path in the
tree; ``compress=False`` writes :func:`npystore.savez`'s stored members).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from npystore.faces.dask import to_dask
from npystore.faces.tree.build import file_nodes
from npystore.faces.tree.nodes import ArrayNode
from npystore.fetch import open_reader
from npystore.formats.deflate_write import DEFAULT_LEVEL
from npystore.formats.npy import DEFAULT_MAX_HEADER_SIZE
from npystore.tools.args import CliError, output_kind
from npystore.write import save
from npystore.write.npz import write_archive

__all__ = ["ExportResult", "export"]


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export` wrote: the output and the arrays in it (member names)."""

    out: str
    arrays: tuple[str, ...]
    nbytes: int


def _size(node: ArrayNode) -> int:
    n = 1
    for d in node.array.layout.shape:
        n *= d
    return n


def export(
    url: str,
    out: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    out_storage_options: Mapping[str, Any] | None = None,
    name: str | None = None,
    compress: bool = True,
    level: int | None = None,
) -> ExportResult:
    """Write the arrays of ``url`` into the ``.npy`` or ``.npz`` file ``out``.

    Parameters
    ----------
    url : str
        Any file npystore reads (``.npy``, ``.npz``, ``.mat``), local or remote.
    out : str
        Output path or URL ending in ``.npy`` or ``.npz``.
    storage_options, out_storage_options : mapping, optional
        fsspec options for the input and for the output (default: the input's).
    name : str, optional
        For an ``.npy`` output from a file with several arrays: the one to write.
    compress : bool
        ``.npz`` members deflated (default) or stored.
    level : int, optional
        ``compresslevel`` of the deflated members (1-9, default 6; see
        :func:`npystore.savez_compressed`).

    Raises
    ------
    CliError
        The output is neither ``.npy`` nor ``.npz``; an ``.npy`` output for several arrays
        without ``name``; a ``name`` that is not an array of the input.
    """
    reader = open_reader(url, storage_options)
    nodes = file_nodes(reader, max_header_size=DEFAULT_MAX_HEADER_SIZE, max_members=1_000_000)
    stem = os.path.splitext(os.path.basename(url.rstrip("/")))[0] or "array"
    arrays = {(path or stem): node for path, node in nodes.items() if isinstance(node, ArrayNode)}
    options = out_storage_options if out_storage_options is not None else storage_options
    try:
        kind = output_kind(out)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    if kind == "npy":
        if name is not None:
            if name not in arrays:
                raise CliError(f"{url}: no array {name!r}; it holds {sorted(arrays)}")
            arrays = {name: arrays[name]}
        if len(arrays) != 1:
            raise CliError(
                f"{url}: holds {len(arrays)} arrays ({sorted(arrays)[:5]}...); an .npy output "
                "takes one: pick it with --name, or write an .npz"
            )
        ((_key, node),) = arrays.items()
        save(out, to_dask(node.array), storage_options=options)
    elif kind == "npz":
        dask_arrays = {key: to_dask(node.array) for key, node in arrays.items()}
        write_archive(
            out,
            dask_arrays,
            compress=compress,
            storage_options=options,
            level=DEFAULT_LEVEL if level is None else level,
        )
    else:
        raise CliError(f"{out}: expected an output ending in .npy or .npz")
    total = sum(node.array.layout.dtype.itemsize * _size(node) for node in arrays.values())
    return ExportResult(out, tuple(arrays), total)
