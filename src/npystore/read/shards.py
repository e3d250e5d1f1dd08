"""Many arrays read as one: :class:`ShardedArray`, shards concatenated along an axis or
stacked along a new one.

A dataset of many files (``emb_0000.npy`` ... ``emb_2313.npy``, a ``to_npy_stack`` folder, a
member of many ``.npz`` archives) is a sequence of :class:`~npystore.read.access.LayoutArray`
*shards*, each pinned to its own file's identity. :class:`ShardedArray` is the numpy-like
view of them together: indexing it maps the key onto the shards it touches and reads each
shard's part through that shard's reader (so the reads of one shard never mix two versions
of its file), and :meth:`ShardedArray.read` reads everything at once, the raw shards'
ranges all in flight together, straight into the result where the result's memory allows.

It pickles small: when every shard is a plain range of one file on one filesystem (the
``.npy`` case) as the filesystem, the budget and the dtype once and one tuple of builtins per
shard (path, URL, size, identity fields, shape, order, offset), which pickle (and unpickle)
in C; otherwise as its shards (each a reader and a layout).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

import numpy as np

from npystore.fetch import ObjectIdentity, RangeReader
from npystore.read.access import LayoutArray, normalize_key
from npystore.read.layout import ArrayLayout, RawExtent

__all__ = ["ShardedArray"]

#: Threads that read shards whose bytes cannot go straight into the result.
_READ_THREADS: Final = 16


class ShardedArray:
    """Shards as one lazy, read-only, numpy-like array.

    Parameters
    ----------
    shards : sequence of LayoutArray
        The shards, in order; equal dtypes, and shapes that agree (checked by the caller).
    axis : int
        The axis of the result the shards follow each other along.
    stack : bool
        True: each shard is one index of a new axis ``axis``; False: shards are concatenated
        along their axis ``axis``.
    """

    def __init__(self, shards: Sequence[LayoutArray], axis: int, stack: bool) -> None:
        if not shards:
            raise ValueError("a sharded array needs at least one shard")
        self.shards = list(shards)
        self.axis = axis
        self.stack = stack
        first = self.shards[0].shape
        lengths = [1 if stack else s.shape[axis] for s in self.shards]
        #: Where each shard starts along :attr:`axis` (and, last, the total length).
        self.starts = [0]
        for n in lengths:
            self.starts.append(self.starts[-1] + n)
        if stack:
            self._shape = (*first[:axis], len(self.shards), *first[axis:])
        else:
            self._shape = (*first[:axis], self.starts[-1], *first[axis + 1 :])

    def __reduce__(self) -> tuple[Any, ...]:
        compact = _compact(self.shards)
        if compact is not None:
            return (_restore_compact, (*compact, self.axis, self.stack))
        return (ShardedArray, (self.shards, self.axis, self.stack))

    @property
    def shape(self) -> tuple[int, ...]:
        """The whole array's shape."""
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The shards' dtype."""
        return self.shards[0].dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array in memory."""
        return self.size * self.dtype.itemsize

    @property
    def source(self) -> str:
        """Name for messages: the first shard's and how many there are."""
        return f"{self.shards[0].source} (+{len(self.shards) - 1} more files)"

    def __len__(self) -> int:
        return self._shape[0]

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        how = "stacked" if self.stack else "concatenated"
        return (
            f"ShardedArray({len(self.shards)} files {how} along axis {self.axis}, "
            f"shape={self.shape}, dtype={self.dtype})"
        )

    def shard_of(self, index: int) -> int:
        """The shard holding position ``index`` along :attr:`axis`."""
        return bisect.bisect_right(self.starts, index) - 1

    def __getitem__(self, key: Any) -> np.ndarray[Any, Any]:
        selection, post = normalize_key(key, self.shape)
        start, count, step = selection[self.axis]
        pieces = list(self._pieces(start, count, step)) if count else []
        if len(pieces) == 1:  # one shard (every dask chunk): its own result, no copy
            k, _, local = pieces[0]
            shard_key = [slice(s, s + c * st, st) for s, c, st in selection]
            if self.stack:
                del shard_key[self.axis]
            else:
                shard_key[self.axis] = local
            got = self.shards[k][tuple(shard_key)]
            whole = np.expand_dims(got, self.axis) if self.stack else got
            return np.asarray(whole[(*post, Ellipsis)])
        out = np.empty(tuple(c for _, c, _ in selection), dtype=self.dtype)
        if count:
            for k, positions, local in pieces:
                shard_key = [slice(s, s + c * st, st) for s, c, st in selection]
                if self.stack:
                    del shard_key[self.axis]
                else:
                    shard_key[self.axis] = local
                where: list[Any] = [slice(None)] * out.ndim
                where[self.axis] = positions
                got = self.shards[k][tuple(shard_key)]
                out[tuple(where)] = got if not self.stack else np.expand_dims(got, self.axis)
        return np.asarray(out[(*post, Ellipsis)])

    def _pieces(self, start: int, count: int, step: int) -> Iterator[tuple[int, slice, slice]]:
        """For a selection ``(start, count, step)`` along :attr:`axis`: each shard it
        touches, the positions of the result it fills and the shard's own slice."""
        stop = start + (count - 1) * step + 1  # one past the last position read
        done = 0
        k = self.shard_of(start)
        while done < count:
            lo, hi = self.starts[k], self.starts[k + 1]
            first = start + done * step
            if first >= hi:
                k = self.shard_of(first)
                continue
            last = min(hi, stop)
            n = len(range(first, last, step))
            yield k, slice(done, done + n), slice(first - lo, last - lo, step)
            done += n
            k += 1

    def read(self, *, parallel: bool = True) -> np.ndarray[Any, Any]:
        """Read the whole array into one new array, every shard at once: a raw shard whose
        part of the result is contiguous is read straight into it (its ranges all in flight
        with the others'), any other shard is read whole by a thread and copied."""
        out = np.empty(self.shape, dtype=self.dtype)
        if out.size == 0:
            return out
        direct: list[Future[None]] = []
        others: list[int] = []
        flat = memoryview(out.reshape(-1).view(np.uint8).data) if out.flags.c_contiguous else None
        for k, shard in enumerate(self.shards):
            target = self._contiguous_target(k)
            storage = shard.layout.storage
            if flat is None or target is None or not isinstance(storage, RawExtent):
                others.append(k)
                continue
            begin, end = target
            view = flat[begin:end]
            direct.append(shard.reader.start_readinto([(storage.offset, view)], parallel=parallel))
        if others:
            with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(others))) as pool:
                for k, values in zip(
                    others,
                    pool.map(lambda k: self.shards[k].read(parallel=parallel), others),
                    strict=True,
                ):
                    where: list[Any] = [slice(None)] * out.ndim
                    where[self.axis] = (
                        k if self.stack else slice(self.starts[k], self.starts[k + 1])
                    )
                    out[tuple(where)] = values
        problem: BaseException | None = None
        for future in direct:  # wait for all: their views are the result's memory
            try:
                future.result()
            except BaseException as exc:
                problem = problem or exc
        if problem is not None:
            raise problem
        return out

    def _contiguous_target(self, k: int) -> tuple[int, int] | None:
        """Bytes ``[begin, end)`` of a C-ordered result that shard ``k`` fills, when they
        are one run and the shard's file holds its elements in the same order (C order,
        or a shard with at most one dimension longer than 1); None otherwise."""
        shard = self.shards[k]
        if shard.layout.order != "C" and sum(n > 1 for n in shard.shape) > 1:
            return None
        if any(n != 1 for n in self.shape[: self.axis]):
            return None
        row = math.prod(self.shape[self.axis + 1 :]) * self.dtype.itemsize
        return self.starts[k] * row, self.starts[k + 1] * row

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        arr = self.read()
        return arr if dtype is None else arr.astype(dtype, copy=False)


_Compact = tuple[Any, float, np.dtype[Any], list[tuple[Any, ...]]]


def _compact(shards: Sequence[LayoutArray]) -> _Compact | None:
    """``(fs, budget, dtype, rows)`` when every shard is a plain range of a file read by a
    plain reader of one filesystem; None otherwise."""
    first = shards[0].reader
    dtype = shards[0].layout.dtype
    rows = []
    for shard in shards:
        reader, layout = shard.reader, shard.layout
        storage = layout.storage
        if (
            type(reader) is not RangeReader
            or reader.source is not None
            or reader.fs is not first.fs
            or reader.budget != first.budget
            or type(storage) is not RawExtent
            or storage.crc is not None
            or layout.unpickle is not None
            or layout.dtype != dtype
            or shard.source != reader.url
        ):
            return None
        identity = reader.identity
        rows.append(
            (reader.path, identity.url, identity.size, identity.fields, layout.shape,
             layout.order, storage.offset, storage.nbytes)
        )  # fmt: skip
    return first.fs, first.budget, dtype, rows


def _restore_compact(
    fs: Any,
    budget: float,
    dtype: np.dtype[Any],
    rows: list[tuple[Any, ...]],
    axis: int,
    stack: bool,
) -> ShardedArray:
    """Unpickle a :class:`ShardedArray` pickled by :func:`_compact`."""
    shards = [
        LayoutArray(
            RangeReader(fs, path, ObjectIdentity(url, size, fields), budget=budget),
            ArrayLayout(dtype, shape, order, RawExtent(offset, nbytes)),
        )
        for path, url, size, fields, shape, order, offset, nbytes in rows
    ]
    return ShardedArray(shards, axis, stack)
