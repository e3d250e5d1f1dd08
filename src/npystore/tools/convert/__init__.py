"""Copy an ``.npy``, ``.npz`` or ``.mat`` file into a real Zarr v3 store: :func:`convert`.

The hierarchy is the one :func:`npystore.open_store` serves (an ``.npz`` member is an array
named by its key; a MATLAB variable is an array, a group for structs and cells, ``data``/``ir``/
``jc`` arrays for sparse matrices, uint16 code units plus a ``matlab_text`` attribute for char),
except that an ``.npy`` file becomes an array *inside* the root group, named after the file.
Arrays whose dtype has no Zarr data type are skipped with a message.

Chunks are read as lazy dask arrays whose blocks are exactly the Zarr chunks, and written in
parallel on dask's threaded scheduler, one task per chunk. Progress is recorded in the store
itself, in :data:`MANIFEST_KEY`: the source's identity (URL, size, ETag/mtime), the options,
and the chunks written so far, rewritten atomically at most every ``checkpoint_interval``
seconds and when the run ends or is interrupted. A later run with the same source and options
skips every chunk the manifest records or the store holds (chunk objects are written
atomically, by zarr's local store and by object stores); a different source or options is
refused unless ``overwrite=True``.

This module runs a conversion; its steps live beside it: :mod:`~npystore.tools.convert.plan`
(what is written, with which chunks), :mod:`~npystore.tools.convert.manifest` (the output
store and the progress manifest: starting, checking and resuming) and
:mod:`~npystore.tools.convert.write` (Zarr nodes, codecs and one write task per chunk).

>>> import numpy as np, zarr
>>> from npystore.tools.convert import convert
>>> np.save("/tmp/doc_convert.npy", np.arange(20.0).reshape(4, 5))
>>> r = convert("/tmp/doc_convert.npy", "/tmp/doc_convert.zarr", chunks=(2,), overwrite=True)
>>> r.arrays, r.chunks_total, r.chunks_written
(('doc_convert',), 2, 2)
>>> zarr.open_group("/tmp/doc_convert.zarr", mode="r")["doc_convert"][3]
array([15., 16., 17., 18., 19.])
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dask.base import compute

from npystore.errors import FormatError, missing_dependency
from npystore.tools.args import missing_parent, output_kind

try:
    import zarr
except ImportError as exc:
    raise missing_dependency("zarr", "zarr", "converting to Zarr (npystore convert)", exc) from exc

from npystore.tools.convert.manifest import MANIFEST_KEY, open_manifest, open_store
from npystore.tools.convert.plan import ChunkSpec, ConvertError, make_plan
from npystore.tools.convert.write import (
    STOP_AFTER_ENV,
    Writer,
    chunk_bytes,
    codecs_for,
    ensure_nodes,
    tasks,
)
from npystore.tools.progress import Progress, format_size

__all__ = ["MANIFEST_KEY", "STOP_AFTER_ENV", "ConvertError", "ConvertResult", "convert",
           "format_size"]  # fmt: skip


@dataclass(frozen=True)
class ConvertResult:
    """What :func:`convert` did.

    Attributes
    ----------
    out : str
        The output store.
    format : str
        ``"npy"``, ``"npz"`` or ``"mat"``.
    arrays : tuple of str
        Paths of the arrays in the output group.
    skipped : dict
        Path or member -> why it was not converted.
    chunks_total, chunks_done_before, chunks_written : int
        Chunks of all arrays; those a previous run had written; those written now.
    nbytes : int
        Bytes of array data (uncompressed).
    """

    out: str
    format: str
    arrays: tuple[str, ...]
    skipped: dict[str, str]
    chunks_total: int
    chunks_done_before: int
    chunks_written: int
    nbytes: int


def convert(
    url: str,
    out: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    out_storage_options: Mapping[str, Any] | None = None,
    name: str | None = None,
    chunks: ChunkSpec | None = None,
    array_chunks: Mapping[str, ChunkSpec] | None = None,
    compressor: str = "zstd",
    level: int | None = None,
    overwrite: bool = False,
    progress: bool = False,
    workers: int | None = None,
    checkpoint_interval: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> ConvertResult:
    """Write a file's arrays into a Zarr v3 group at ``out``, in parallel and resumably.

    Parameters
    ----------
    url : str
        The source: an ``.npy``, ``.npz`` or MATLAB file, local path or fsspec URL.
    out : str
        The output group: a local directory or an fsspec URL (``s3://bucket/x.zarr``),
        named with ``.zarr`` or without an extension; a local directory's parent must
        exist. Chained URLs are refused.
    storage_options, out_storage_options : mapping, optional
        fsspec options for the source and for the output.
    name : str, optional
        Name of the array made from an ``.npy`` file (default: the file name without
        ``.npy``).
    chunks : str or sequence of int, optional
        Zarr chunks of every array: a size (``"16MiB"``: dask's "auto" chunks of at most that
        size), or lengths of the leading axes (``(1000,)``: 1000 along axis 0, the other axes
        whole; ``-1`` means a whole axis). Default: the source's dask chunks, at most
        :data:`~npystore.tools.convert.plan.DEFAULT_CHUNK_LIMIT` bytes.
    array_chunks : mapping, optional
        Per-array chunks (output path -> spec as for ``chunks``).
    compressor : {"zstd", "blosc", "gzip", "none"}
        The Zarr compressor; ``level`` its level (default zstd 3, blosc 5, gzip 5).
    overwrite : bool
        Replace whatever ``out`` holds. Without it, ``out`` must be empty, or hold an
        unfinished conversion of the same source with the same options (which is resumed),
        or a finished one (nothing is written).
    progress : bool
        Show progress on stderr: a bar with rate and time left on a terminal, a line every
        10 s elsewhere (:class:`npystore.tools.progress.Progress`).
    workers : int, optional
        Threads writing chunks (default: the number of CPUs, at least 4).
    checkpoint_interval : float
        Most seconds between two updates of the progress manifest (0: after every chunk).
    log : callable, optional
        Receives one-line messages (the plan, skipped arrays).

    Returns
    -------
    ConvertResult

    Raises
    ------
    ConvertError
        ``out`` holds something else, has another extension (``.zip``, ``.h5``) or is a
        chained URL, its parent directory is missing, or bad options.
    KeyboardInterrupt
        Interrupted; the chunks written so far are recorded, a rerun resumes.
    """
    say = log or (lambda message: None)
    try:
        kind = output_kind(out)
    except ValueError as exc:
        raise ConvertError(str(exc)) from exc
    if kind != "zarr":
        raise ConvertError(
            f"{out}: an .{kind} output is written by npystore.tools.export.export (or "
            f"npystore.save / savez_compressed); convert writes Zarr groups"
        )
    parent = missing_parent(out)
    if parent is not None:
        raise ConvertError(
            f"{out}: the directory {parent!r} does not exist; create it first (convert, like "
            "numpy.save, does not create directories)"
        )
    codecs, effective_level = codecs_for(compressor, level)
    plan = make_plan(
        url, storage_options, name=name, chunks=chunks, array_chunks=array_chunks or {}
    )
    for path, why in plan.skipped.items():
        say(f"warning: {plan.url}: skipping {path!r}: {why}")
    store = open_store(out, out_storage_options)
    manifest, keys = open_manifest(
        store,
        out,
        plan,
        {"compressor": compressor, "level": effective_level},
        overwrite=overwrite,
        interval=checkpoint_interval,
    )
    total = sum(a.nchunks for a in plan.arrays)
    before = sum(len(d) for d in manifest.done.values())
    nbytes = sum(a.array.layout.size * a.array.dtype.itemsize for a in plan.arrays)
    paths = tuple(a.path for a in plan.arrays)

    def result(written: int) -> ConvertResult:
        return ConvertResult(out, plan.format, paths, dict(plan.skipped), total, before, written,
                             nbytes)  # fmt: skip

    if manifest.doc.get("complete"):
        say(f"{out}: already complete ({total} chunks from {plan.url}); nothing to do")
        return result(0)
    arrays = ensure_nodes(store, plan, codecs, keys, say)
    say(
        f"{plan.url} -> {out}: {len(plan.arrays)} arrays, {format_size(nbytes)} in {total} chunks"
        + (f" ({before} done already, resuming)" if before else "")
    )
    todo_bytes = sum(
        chunk_bytes(a, i)
        for a in plan.arrays
        for i in range(a.nchunks)
        if i not in manifest.done[a.path]
    )
    bar = (
        Progress(total - before, todo_bytes, f"convert {plan.url}")
        if progress and total > before
        else None
    )
    writer = Writer(manifest, bar)
    delayed_writes = list(tasks(plan, arrays, manifest.done, writer))
    try:
        with bar or contextlib.nullcontext():
            compute(  # type: ignore[no-untyped-call]
                *delayed_writes,
                scheduler="threads",
                num_workers=workers or max(4, os.cpu_count() or 1),
            )
    except FormatError as exc:  # the source is corrupt: a resumed run must fail too
        writer.stop.set()
        manifest.flush(failed=str(exc))
        raise
    except BaseException:
        writer.stop.set()
        manifest.flush()
        raise
    manifest.flush(complete=True)
    with warnings.catch_warnings():  # "consolidated metadata is not in the v3 spec (yet)",
        # the manifest "is not a component of a Zarr hierarchy", and data types without a
        # v3 spec (reported when the array was made): all known
        warnings.simplefilter("ignore", zarr.errors.ZarrUserWarning)
        warnings.simplefilter("ignore", zarr.errors.UnstableSpecificationWarning)
        zarr.consolidate_metadata(store)
    return result(writer.written)
