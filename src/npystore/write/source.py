"""What a writer writes: an array as a dask array of *slabs*, blocks whose bytes are
contiguous runs of the file's data, in order, and the guard that names a failing block.

- :func:`as_source`: a numpy array keeps ``numpy.save``'s memory order (a Fortran-ordered
  array is written as the C order of its transpose, with ``fortran_order`` set) and its raw
  memory is written as it is (a byte view cut into slabs, padding bytes included); a dask
  array is written in C order, as ``np.save(np.asarray(x))``; anything else goes through
  ``np.asarray``. Object arrays are refused.
- :func:`slabs`: blocks contiguous in C order (every axis before one has chunks of 1, every
  axis after it is whole) are kept as they are; otherwise the array is rechunked into such
  slabs of about the size of its chunks.
- :func:`block_bytes`: a computed block as its bytes (a view when it is contiguous),
  checked against the dtype and shape the header promised.
- :func:`compute_named`: ``dask.compute`` that, when a task fails, says which block was
  being computed (the original exception chained);
- :func:`in_order`: a function of each slab, computed a window of slabs at a time and
  yielded in file order (archives and file objects are written as streams);
- :func:`open_target`: the sink for what a writer was given: a local path (``.npy`` or
  ``.npz`` appended when missing, as numpy does), a URL (as given), or an open file object.
"""

from __future__ import annotations

import itertools
import math
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import dask.array as da
import numpy as np
from dask.base import compute
from dask.callbacks import Callback
from dask.delayed import delayed

from npystore.errors import NpystoreError, UnsupportedError
from npystore.fetch.sink import Sink, StreamSink, is_local_path, open_sink
from npystore.formats.npy_write import check_writable, header_bytes

__all__ = [
    "SLAB_MIN",
    "Source",
    "WriteError",
    "as_source",
    "block_bytes",
    "compute_named",
    "destination",
    "in_order",
    "open_target",
    "slabs",
    "target_name",
]

T = TypeVar("T")

#: Smallest slab a chunked array is rechunked into, and the slab size of numpy sources.
SLAB_MIN: Final = 4 * 2**20
NUMPY_SLAB: Final = 16 * 2**20
SLAB_MAX: Final = 256 * 2**20


class WriteError(NpystoreError, RuntimeError):
    """Writing failed; nothing was made visible at the URL (the cause is chained)."""


@dataclass(frozen=True)
class Source:
    """An array ready to write.

    Attributes
    ----------
    data : dask.array.Array
        The data in the file's element order (C order of the array, or of its transpose
        for a Fortran-ordered numpy array), chunked in contiguous slabs.
    header : bytes
        The ``.npy`` header ``numpy.save`` writes for it.
    nbytes : int
        Bytes of data after the header.
    shape : tuple of int
        The array's shape in the order of its bytes (reversed for a Fortran-ordered array).
    itemsize : int
        Bytes per element.
    """

    data: da.Array
    header: bytes
    nbytes: int
    shape: tuple[int, ...] = ()
    itemsize: int = 1

    @property
    def size(self) -> int:
        """Bytes of the whole ``.npy`` file."""
        return len(self.header) + self.nbytes

    def block_sizes(self) -> list[int]:
        """Bytes of each block, in file order."""
        item = self.data.dtype.itemsize
        return [item * math.prod(s) for s in _block_shapes(self.data.chunks)]


def _block_shapes(chunks: tuple[tuple[int, ...], ...]) -> list[tuple[int, ...]]:
    return [tuple(c[i] for c, i in zip(chunks, idx, strict=True)) for idx in _indices(chunks)]


def _indices(chunks: tuple[tuple[int, ...], ...]) -> list[tuple[int, ...]]:
    return list(np.ndindex(*(len(c) for c in chunks)))


def _refuse_masked(source: str) -> UnsupportedError:
    return UnsupportedError(
        f"{source}: a masked array: its mask would be dropped (numpy.save raises "
        "NotImplementedError for it too); write its .data and its .mask (np.ma.getmaskarray) "
        "as two arrays, or .filled() values"
    )


def as_source(array: Any, source: str) -> Source:
    """The array to write (see the module docstring); ``source`` names it in messages.

    Raises
    ------
    UnsupportedError
        A masked array (numpy or dask), an object array.
    """
    if isinstance(array, np.ma.MaskedArray):
        raise _refuse_masked(source)
    if isinstance(array, da.Array):
        if isinstance(getattr(array, "_meta", None), np.ma.MaskedArray):
            raise _refuse_masked(source)
        check_writable(array.dtype, source)
        if any(math.isnan(n) for c in array.chunks for n in c):
            raise ValueError(f"{source}: the dask array has unknown chunk sizes; call "
                             "compute_chunk_sizes() first")  # fmt: skip
        header = header_bytes(array.dtype, array.shape, False)
        data = slabs(array, None)
        shape, itemsize = tuple(array.shape), array.dtype.itemsize
    else:
        a = np.asarray(array)
        check_writable(a.dtype, source)
        fortran = bool(a.flags.f_contiguous and not a.flags.c_contiguous)
        header = header_bytes(a.dtype, a.shape, fortran)
        flat = np.ascontiguousarray(a.T if fortran else a)
        # the raw memory, padding bytes included (numpy.save writes them; a copy of a
        # structured array through dask would not keep them)
        raw = flat.reshape(-1).view(np.uint8) if flat.size else np.empty(0, np.uint8)
        data = _views(raw, NUMPY_SLAB)
        shape, itemsize = tuple(flat.shape), a.dtype.itemsize
    nbytes = math.prod(data.shape) * data.dtype.itemsize
    return Source(data, header, nbytes, shape, itemsize)


def _views(raw: np.ndarray[Any, Any], step: int) -> da.Array:
    """``raw`` (bytes of the data, uint8) as a dask array whose blocks are views of it, of
    ``step`` bytes: no copy (``dask.array.from_array`` copies a numpy array whole first,
    which cost a 128 MiB save more time than writing it, and its memory twice)."""
    name = f"npystore-slab-{uuid.uuid4().hex}"
    starts = range(0, raw.size, step) if raw.size else range(1)
    sizes = tuple(min(step, raw.size - a) for a in starts)
    graph = {(name, i): raw[a : a + n] for i, (a, n) in enumerate(zip(starts, sizes, strict=True))}
    return da.Array(graph, name, chunks=(sizes,), dtype=np.uint8)  # type: ignore[no-untyped-call]


def _contiguous(chunks: tuple[tuple[int, ...], ...], shape: tuple[int, ...]) -> bool:
    """Whether every block is one contiguous run of the C-ordered data."""
    d = 0
    while d < len(shape) and all(c == 1 for c in chunks[d]) and d < len(shape) - 1:
        d += 1
    return all(len(c) <= 1 for c in chunks[d + 1 :])


def _slab_chunks(shape: tuple[int, ...], itemsize: int, target: int) -> tuple[tuple[int, ...], ...]:
    """Chunks of contiguous slabs of about ``target`` bytes (C order)."""
    if not shape:
        return ()
    out: list[tuple[int, ...]] = []
    for d, n in enumerate(shape):
        inner = itemsize * math.prod(shape[d + 1 :])
        if inner <= target or d == len(shape) - 1:
            step = max(1, target // max(inner, 1))
            out.append(_split(n, step))
            out.extend((m,) for m in shape[d + 1 :])
            return tuple(out)
        out.append(_split(n, 1))
    return tuple(out)


def _split(n: int, step: int) -> tuple[int, ...]:
    if n == 0:
        return (0,)
    return tuple(min(step, n - i) for i in range(0, n, step))


def slabs(x: da.Array, target: int | None) -> da.Array:
    """``x`` with contiguous blocks (unchanged if they already are)."""
    if x.ndim == 0 or _contiguous(x.chunks, x.shape):
        return x
    if target is None:
        biggest = max((math.prod(s) for s in _block_shapes(x.chunks)), default=0)
        target = min(SLAB_MAX, max(SLAB_MIN, biggest * x.dtype.itemsize))
    out: da.Array = x.rechunk(  # type: ignore[no-untyped-call]
        _slab_chunks(x.shape, x.dtype.itemsize, target)
    )
    return out


def block_bytes(block: Any, dtype: np.dtype[Any], shape: Sequence[int], where: str) -> Any:
    """A computed block's bytes (uint8, C order), after checking it is what was promised."""
    if isinstance(block, np.ma.MaskedArray):
        raise WriteError(f"{where}: the block computed to a masked array, whose mask would be "
                         "dropped; write .data and .mask as two arrays")  # fmt: skip
    b = np.asarray(block)
    if b.dtype != dtype or b.shape != tuple(shape):
        raise WriteError(
            f"{where}: the block computed to dtype {b.dtype} and shape {b.shape}, the array "
            f"declares {dtype} and {tuple(shape)}"
        )
    b = np.ascontiguousarray(b)
    return b.reshape(-1).view(np.uint8) if b.size else np.empty(0, np.uint8)


class _Running(Callback):
    """Keys started and not finished (what was running when a task failed)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.running: dict[Any, None] = {}

    def _pretask(self, key: Any, dsk: Any, state: Any) -> None:
        self.running[key] = None

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        self.running.pop(key, None)


def _describe(key: Any) -> str:
    if isinstance(key, tuple) and len(key) > 1:
        return f"block {tuple(key[1:])} of {key[0]}"
    return f"task {key}"


def compute_named(tasks: Sequence[Any], url: str, **kwargs: Any) -> list[Any]:
    """``dask.compute(*tasks)``; a failure raises :class:`WriteError` naming the block (the
    tasks running when it failed, on dask's local schedulers) with the original chained."""
    running = _Running()
    try:
        with running:
            return list(compute(*tasks, **kwargs))  # type: ignore[no-untyped-call]
    except WriteError:
        raise
    except Exception as exc:
        keys = [_describe(k) for k in running.running] or ["a block (on a distributed worker)"]
        raise WriteError(
            f"{url}: writing failed while computing {' or '.join(keys[:4])}: "
            f"{type(exc).__name__}: {exc}; nothing was written"
        ) from exc


def in_order(
    src: Source, url: str, fn: Callable[..., T], *args: Any, window: int | None = None
) -> Iterator[T]:
    """``fn(head, block, meta, final, start, *args)`` of each slab with data, in file order.

    ``head`` is the ``.npy`` header before the first slab (empty after it), ``block`` the
    computed slab and ``meta`` its ``(dtype, shape, where)`` for :func:`block_bytes`,
    ``final`` true for the last, ``start`` where the slab's bytes (the header's, for the
    first) begin in the file; an array without data gives one call with ``block`` and
    ``meta`` None. The calls run as dask tasks, ``window`` slabs at a time (default: the
    CPUs, at least 2), so memory holds a few slabs.
    """
    x = src.data
    keys = x.to_delayed(optimize_graph=True).ravel().tolist()  # type: ignore[no-untyped-call]
    indices = list(np.ndindex(*x.numblocks))
    sizes = src.block_sizes()
    todo = [k for k in range(len(keys)) if sizes[k]]
    if not todo:
        yield fn(src.header, None, None, True, 0, *args)
        return
    starts = list(itertools.accumulate(sizes, initial=len(src.header)))
    call = delayed(fn, pure=False)
    step = window or max(2, os.cpu_count() or 1)
    for w in range(0, len(todo), step):
        tasks = []
        for k in todo[w : w + step]:
            shape = tuple(c[i] for c, i in zip(x.chunks, indices[k], strict=True))
            meta = (x.dtype, shape, f"{url}: block {indices[k]}")
            head = src.header if k == todo[0] else b""
            start = 0 if head else starts[k]
            tasks.append(call(head, keys[k], meta, k == todo[-1], start, *args))
        yield from compute_named(tasks, url)


def _is_file_object(target: Any) -> bool:
    return hasattr(target, "write")  # as numpy.save decides


def target_name(target: Any, ext: str) -> str:
    """What messages call ``target``: the path or URL written (see :func:`destination`),
    or a file object's name."""
    if _is_file_object(target):
        name = getattr(target, "name", None)
        return f"<file object {name!r}>" if isinstance(name, str) else f"<{type(target).__name__}>"
    return destination(target, ext)


def destination(target: Any, ext: str) -> str:
    """The path or URL a writer writes: a local path (``str`` or ``os.PathLike``) gets ``ext``
    appended when it does not end with it, as ``numpy.save`` (``.npy``) and ``numpy.savez``
    (``.npz``) do; a URL (``://``, or a ``::`` chain) is kept as given.

    Raises
    ------
    TypeError
        ``target`` is neither a path, a URL nor a file object (bytes paths included).
    """
    path = os.fspath(target)
    if not isinstance(path, str):
        raise TypeError(f"expected a path, URL or file object, got {type(target).__name__}")
    if not is_local_path(path) or path.endswith(ext):
        return path
    return path + ext


def open_target(
    target: Any,
    ext: str,
    storage_options: Mapping[str, Any] | None,
    size: int | None,
    *,
    durable: bool,
) -> Sink:
    """The sink for a writer's ``target``: a file object is written in order from its
    position (:class:`~npystore.fetch.sink.StreamSink`); a path or URL as
    :func:`destination` says, through :func:`~npystore.fetch.sink.open_sink`."""
    if _is_file_object(target):
        if storage_options:
            raise ValueError("storage_options are for URLs, not for a file object")
        return StreamSink(target, target_name(target, ext))
    return open_sink(destination(target, ext), storage_options, size, durable=durable)
