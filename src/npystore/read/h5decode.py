"""Decode HDF5 chunks whose filters npystore does not undo itself, with libhdf5's own filters.

:func:`npystore.formats.h5filters.decode_chunk` undoes deflate, shuffle and fletcher32, the
filters MATLAB and most writers use. Any other filter (lzf, szip, nbit, scaleoffset, and the
plugins ``hdf5plugin`` registers: blosc, bitshuffle, zstd, lz4, ...) is decoded here, by the
libhdf5 that h5py links, one chunk at a time in the process (under one lock: with libhdf5
1.14, decoders used on several threads at once crashed the process, even though h5py
serializes each of its calls):

1. an in-memory HDF5 file (core driver, no backing store) holds one dataset whose shape is
   one chunk, with the same stored type and the same filter pipeline as the file's dataset;
2. the chunk's raw bytes are written into it as they are stored (``H5Dwrite_chunk``); the
   pipeline holds only the filters the chunk went through (its filter mask applied here:
   libhdf5 2.0 ignores the mask of a chunk written into a dataset still open);
3. reading the dataset back runs libhdf5's filter pipeline in reverse.

libhdf5 never sees the file's own structure on this path: the file, its B-tree and object
headers are built here, so only the chunk's bytes come from the (untrusted) file, and they
go to the filter's decoder, as they would in any reader. The chunk index that located them
was walked and checked by npystore (:mod:`npystore.formats.h5chunks`).

``hdf5plugin`` is imported when installed, so its filters are registered. A filter libhdf5
does not have is an :class:`~npystore.errors.UnsupportedError` that names it and says
which package provides it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

import h5py
import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.read.layout import Filter

__all__ = ["decode_with_libhdf5"]

#: Decoders kept (one in-memory file each, about one chunk of memory).
_CACHED: Final = 8
#: Most parameters of one filter (HDF5's own and the registered plugins' take at most 20).
MAX_CLIENT_DATA: Final = 32
#: Held while libhdf5 builds, fills or reads a decoder, and by the cache of decoders.
_LOCK: Final = threading.Lock()
_cache: OrderedDict[Any, _ChunkDecoder] = OrderedDict()
_names = itertools.count()
_plugins_loaded = False


def _load_plugins() -> None:
    """Register ``hdf5plugin``'s filters with libhdf5, once, when it is installed."""
    global _plugins_loaded  # noqa: PLW0603 - a process-wide, idempotent registration
    if _plugins_loaded:
        return
    _plugins_loaded = True
    # optional: without it, libhdf5's built-in filters (lzf, szip, nbit, scaleoffset) remain
    with contextlib.suppress(ImportError):
        import hdf5plugin  # noqa: F401, PLC0415 - registers filters on import


class _ChunkDecoder:
    """One in-memory HDF5 dataset shaped as one chunk, with a given pipeline."""

    def __init__(
        self,
        dtype: np.dtype[Any],
        chunk_shape: tuple[int, ...],
        filters: Sequence[Filter],
        given: Sequence[tuple[int, ...]],
    ) -> None:
        self.dtype = dtype
        self.shape = chunk_shape
        self.file = h5py.File(
            f"npystore-decode-{next(_names)}", "w", driver="core", backing_store=False
        )
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunk_shape)
        for f, values in zip(filters, given, strict=True):
            flags = h5py.h5z.FLAG_OPTIONAL if f.optional else h5py.h5z.FLAG_MANDATORY
            dcpl.set_filter(int(f.id), flags, values)
        tid = h5py.h5t.py_create(dtype, logical=True)
        space = h5py.h5s.create_simple(chunk_shape)
        self.dset = h5py.h5d.create(self.file.id, b"chunk", tid, space, dcpl=dcpl)
        self.origin = (0,) * len(chunk_shape)
        made = self.dset.get_create_plist()
        #: the parameters each filter ended up with (a filter's "set local" callback may
        #: derive some from the type and chunk shape)
        self.client_data = tuple(
            tuple(int(c) for c in made.get_filter(i)[2]) for i in range(made.get_nfilters())
        )

    def decode(self, data: bytes | memoryview) -> np.ndarray[Any, Any]:
        self.dset.write_direct_chunk(self.origin, bytes(data), 0)
        out = np.empty(self.shape, dtype=self.dtype)
        self.dset.read(h5py.h5s.ALL, h5py.h5s.ALL, out)
        return out


def _decoder(
    dtype: np.dtype[Any], chunk_shape: tuple[int, ...], filters: Sequence[Filter], source: str
) -> _ChunkDecoder:
    """The cached decoder of a pipeline, made when missing (``_LOCK`` held)."""
    cache = _cache
    key = (dtype, chunk_shape, tuple(filters))
    found = cache.get(key)
    if found is not None:
        cache.move_to_end(key)
        return found
    _load_plugins()
    made = _matching_decoder(dtype, chunk_shape, filters, source)
    cache[key] = made
    if len(cache) > _CACHED:
        cache.popitem(last=False)[1].file.close()
    return made


def _matching_decoder(
    dtype: np.dtype[Any], chunk_shape: tuple[int, ...], filters: Sequence[Filter], source: str
) -> _ChunkDecoder:
    """A decoder whose pipeline has exactly the file's filter parameters.

    The parameters stored in a file are those a filter's "set local" callback produced from
    the ones its writer gave; given the stored ones again, some filters (bitshuffle) add
    theirs a second time. So, per filter, the stored parameters, then their suffixes and
    prefixes, are tried until libhdf5 ends up with the stored ones. A pipeline for which no
    candidate reproduces them is refused rather than decoded with other parameters.
    """
    missing = [f for f in filters if not h5py.h5z.filter_avail(int(f.id))]
    if missing:
        raise UnsupportedError(
            f"{source}: libhdf5 has no decoder for HDF5 filter {_names_of(missing)} "
            f"(pipeline {_names_of(filters)}){_hint(filters)}"
        )
    stored = [tuple(int(c) for c in f.client_data) for f in filters]
    for f, values in zip(filters, stored, strict=True):
        if len(values) > MAX_CLIENT_DATA:
            raise UnsupportedError(
                f"{source}: HDF5 filter {_names_of([f])} has {len(values)} parameters, more "
                f"than the {MAX_CLIENT_DATA} npystore reproduces"
            )
    given = list(stored)
    for i, values in enumerate(stored):
        candidates = [values]
        candidates += [values[k:] for k in range(1, len(values) + 1)]
        candidates += [values[:k] for k in range(len(values) - 1, 0, -1)]
        failure: Exception | None = None
        for candidate in candidates:
            given[i] = candidate
            try:
                made = _ChunkDecoder(dtype, chunk_shape, filters, given)
            except (ValueError, RuntimeError, OSError, TypeError, KeyError) as exc:
                failure = failure or exc
                continue
            if made.client_data[i] == values:
                break
            made.file.close()
        else:
            why = f"libhdf5: {failure}" if failure else "it derives other parameters"
            raise UnsupportedError(
                f"{source}: libhdf5 cannot build the filter pipeline {_names_of(filters)} "
                f"with the file's parameters {values} for filter {i} on {dtype} chunks of "
                f"shape {chunk_shape} ({why}){_hint(filters)}"
            )
    return made


def decode_with_libhdf5(
    data: bytes | memoryview,
    filters: Sequence[Filter],
    filter_mask: int,
    *,
    dtype: np.dtype[Any],
    chunk_shape: tuple[int, ...],
    source: str,
) -> np.ndarray[Any, Any]:
    """Undo an HDF5 filter pipeline on one stored chunk with libhdf5's filters.

    Parameters
    ----------
    data : bytes or memoryview
        The chunk as stored in the file.
    filters : sequence of npystore.read.layout.Filter
        The dataset's pipeline, in the order it was applied when writing.
    filter_mask : int
        The chunk's filter mask (bit ``i`` set: filter ``i`` was skipped).
    dtype : numpy.dtype
        The stored element type.
    chunk_shape : tuple of int
        The chunk's shape in HDF5's (C) order.
    source : str
        Names the chunk in messages.

    Returns
    -------
    numpy.ndarray
        The decoded chunk, shape ``chunk_shape``, C order.

    Raises
    ------
    UnsupportedError
        libhdf5 has no decoder for one of the filters (the message names the package that
        provides it, usually ``hdf5plugin``).
    FormatError
        The filter failed on the chunk's bytes (corrupt data).
    """
    applied = [f for i, f in enumerate(filters) if not (filter_mask >> i) & 1]
    if not applied:
        want = math.prod(chunk_shape) * dtype.itemsize
        if len(data) != want:
            raise FormatError(
                f"{source}: an unfiltered chunk of {len(data)} bytes, expected {want}"
            )
        return np.frombuffer(bytes(data), dtype=dtype).reshape(chunk_shape).copy()
    with _LOCK:
        decoder = _decoder(dtype, chunk_shape, applied, source)
        try:
            return decoder.decode(data)
        except (OSError, RuntimeError, ValueError) as exc:
            text = str(exc)
            if "not registered" in text or "not available" in text or "can't open" in text:
                raise UnsupportedError(
                    f"{source}: libhdf5 has no decoder for the filter pipeline "
                    f"{_names_of(filters)}: {text}{_hint(filters)}"
                ) from exc
            raise FormatError(
                f"{source}: the chunk's {len(data)} stored bytes do not decode through the "
                f"filter pipeline {_names_of(filters)} (libhdf5: {text})"
            ) from exc


def _names_of(filters: Sequence[Filter]) -> str:
    return "[" + ", ".join(f"{f.name or 'filter'} ({f.id})" for f in filters) + "]"


def _hint(filters: Sequence[Filter]) -> str:
    if not _plugin_installed() and any(f.id >= 256 and f.id != 32000 for f in filters):
        return "; third-party HDF5 filters are provided by: pip install 'npystore[hdf5plugin]'"
    return ""


def _plugin_installed() -> bool:
    try:
        import hdf5plugin  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True
