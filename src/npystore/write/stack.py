"""``save_stack``: one ``.npy`` file per block along an axis, as ``dask.array.to_npy_stack``
lays them out, written in parallel.

The array is rechunked so that only ``axis`` is split (every other axis whole); block ``i``
becomes ``{url}/{i}.npy``, exactly the bytes ``numpy.save`` writes for it (C order), written
by the dask task that computes it through a sink (atomically: a failed block leaves no
file). Then ``{url}/info`` is written: the pickle of ``{"chunks", "dtype", "axis"}`` that
``dask.array.from_npy_stack`` reads (writing a pickle is safe; npystore itself never
unpickles it, see :mod:`npystore.formats.stackinfo`). Numbered files left from an earlier,
longer stack in the folder are removed before ``info`` is written, so the folder holds
exactly the new stack.
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Mapping
from typing import Any, Final

import dask.threaded
import numpy as np
from dask.base import get_scheduler
from dask.delayed import delayed

from npystore.fetch import write_object
from npystore.fetch.opening import filesystem
from npystore.fetch.remote import BUDGET_OPTION
from npystore.fetch.sink import Sink, open_sink
from npystore.formats.npy_write import check_writable, header_bytes
from npystore.write.source import block_bytes, compute_named

__all__ = ["save_stack"]

#: Files written at once when dask's default (threaded) scheduler runs the tasks.
STACK_CONCURRENCY: Final = 16
_NUMBERED: Final = re.compile(r"(\d+)\.npy")


def _write_file(
    url: str, block: Any, dtype: np.dtype[Any], shape: tuple[int, ...], options: Any
) -> int:
    """Write one block as a whole ``.npy`` file (numpy.save's bytes, C order)."""
    data = block_bytes(block, dtype, shape, url)
    head = header_bytes(dtype, shape, False)
    size = len(head) + len(data)
    sink: Sink = open_sink(url, options, size=size)
    try:
        if sink.min_part == 0:
            receipts = [sink.write(1, 0, head), sink.write(2, len(head), data)]
        else:  # one part: an S3 part of any size may be the last one
            buf = np.empty(size, np.uint8)
            buf[: len(head)] = np.frombuffer(head, np.uint8)
            buf[len(head) :] = np.frombuffer(data, np.uint8)
            receipts = [sink.write(1, 0, buf)]
        sink.commit(receipts, size)
    except BaseException:
        sink.abort()
        raise
    return size


def save_stack(
    url: str,
    array: Any,
    axis: int = 0,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``array`` as a folder of ``.npy`` files, one per block along ``axis``, as
    :func:`dask.array.to_npy_stack` does (``0.npy``, ``1.npy``, ... and ``info``), in
    parallel and to any fsspec URL.

    Each file is exactly what ``numpy.save`` writes for its block; ``info`` is the file
    ``dask.array.from_npy_stack`` reads. :func:`npystore.open_npy` of the folder reads it
    back from the files' headers (``info``'s axis and block lengths checked, never
    unpickled).

    Parameters
    ----------
    url : str
        The folder (local path or any fsspec URL; made if missing).
    array : dask.array.Array, numpy.ndarray or array-like
        The array; a dask array keeps its blocks along ``axis`` (other axes are joined), a
        numpy array is one block unless it is given as a dask array.
    axis : int
        The axis the files follow each other along.
    storage_options : mapping, optional
        fsspec's ``storage_options`` for the URL.

    Raises
    ------
    UnsupportedError
        An object array (also a :class:`TypeError`).
    WriteError
        A block failed (named; the original exception chained); files already written stay,
        ``info`` is not written.

    Examples
    --------
    >>> import numpy as np, dask.array as da, npystore
    >>> x = da.arange(10, chunks=4)
    >>> npystore.save_stack("/tmp/doc_stack", x)
    >>> sorted(__import__("os").listdir("/tmp/doc_stack"))
    ['0.npy', '1.npy', '2.npy', 'info']
    >>> da.from_npy_stack("/tmp/doc_stack").compute().tolist() == list(range(10))
    True
    >>> npystore.open_npy("/tmp/doc_stack").chunks
    ((4, 4, 2),)
    """
    import dask.array as da  # noqa: PLC0415

    x = array if isinstance(array, da.Array) else da.asarray(array)  # type: ignore[no-untyped-call]
    check_writable(x.dtype, str(url))
    if x.ndim == 0:
        raise ValueError(f"{url}: a 0-d array has no axis to split into files")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{url}: axis {axis} is out of bounds for {x.ndim} dimensions")
    axis %= x.ndim
    chunks = tuple(c if i == axis else (sum(c),) for i, c in enumerate(x.chunks))
    x = x.rechunk(chunks)
    options = dict(storage_options or {})
    options.pop(BUDGET_OPTION, None)
    fs, root = filesystem(os.fspath(url), options)
    root = root.rstrip("/")
    fs.makedirs(root, exist_ok=True)
    base = str(url).rstrip("/")
    keys = x.to_delayed(optimize_graph=True).ravel().tolist()
    write = delayed(_write_file, pure=False)
    tasks = []
    for i, key in enumerate(keys):
        shape = tuple(c[i] if d == axis else c[0] for d, c in enumerate(chunks))
        tasks.append(write(f"{base}/{i}.npy", key, x.dtype, shape, options))
    kwargs: dict[str, Any] = {}
    if get_scheduler() in (None, dask.threaded.get):  # type: ignore[no-untyped-call]
        kwargs["num_workers"] = STACK_CONCURRENCY
    compute_named(tasks, base, **kwargs)
    for entry in fs.ls(root, detail=False):
        m = _NUMBERED.fullmatch(str(entry).rstrip("/").rsplit("/", 1)[-1])
        if m is not None and int(m.group(1)) >= len(keys):
            fs.rm_file(entry)  # left from an earlier, longer stack
    write_object(f"{base}/info", stack_info_bytes(chunks, x.dtype, axis), options)


def stack_info_bytes(chunks: tuple[tuple[int, ...], ...], dtype: np.dtype[Any], axis: int) -> bytes:
    """The ``info`` file ``dask.array.to_npy_stack`` writes: the same dict, pickled (npystore
    writes this pickle and never loads one: :mod:`npystore.formats.stackinfo` reads its
    opcodes)."""
    return pickle.dumps({"chunks": chunks, "dtype": dtype, "axis": axis})
