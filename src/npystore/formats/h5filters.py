"""Undo an HDF5 filter pipeline on one stored chunk: deflate, shuffle and fletcher32.

An HDF5 chunked dataset stores each chunk as the output of its *filter pipeline*, the list of
filters recorded in the dataset's creation properties, applied in list order when writing.
Reading undoes them in reverse order. Each chunk also carries a 32-bit *filter mask* (in the
chunk index): bit ``i`` set means filter ``i`` was skipped for that chunk (an optional filter
that failed or did not help), so its data never went through it.

Every chunk, edge chunks included, decodes to exactly ``prod(chunk_shape) * itemsize`` bytes;
the pipeline's output is checked against that size.

The three filters npystore decodes, with the byte layouts they produce::

    id  name        client data              stored bytes (what the filter wrote)
    --  ----------  -----------------------  -------------------------------------------------
    1   deflate     [level]                  a zlib stream (RFC 1950: 2-byte header, deflate
                                             data, 4-byte big-endian Adler-32 trailer) of the
                                             input; inflating must give back the input size
    2   shuffle     [element size]           the input's bytes regrouped by byte position: for
                                             n = len // size elements, byte j of element i is
                                             at j * n + i; the len % size trailing bytes are
                                             copied unchanged at the end. Element sizes <= 1
                                             or fewer than 2 elements leave the data as is.
    3   fletcher32  []                       the input followed by 4 bytes: its Fletcher-32
                                             checksum, little-endian (see below)

HDF5's Fletcher-32 (``H5_checksum_fletcher32``) reads the input as *big-endian* 16-bit words
``w[0..n)`` (an odd trailing byte ``b`` counts as the word ``b << 8``) and keeps two sums
folded with an end-around carry, ``x -> (x & 0xffff) + (x >> 16)``, after every 360 words and
twice at the end. The result is ``(sum2 << 16) | sum1`` with::

    S1 = sum(w[i])                S2 = sum((n - i) * w[i])       (i = 0 .. n-1)
    sum1 = fold(S1)               sum2 = fold(S2)
    fold(S) = 0 if S == 0 else (S - 1) % 65535 + 1     (the folding never reaches 0 from
                                                         a positive sum: 65535 stands for 0)

Files written by HDF5 1.6.2 and earlier on little-endian machines stored the checksum with
the two bytes of each 16-bit half swapped; like libhdf5, both forms are accepted.

Any other filter (szip 4, nbit 5, scaleoffset 6, lzf 32000, blosc 32001, bitshuffle 32008,
zstd 32015, ...) is valid HDF5 that npystore does not decode: an
:class:`~npystore.errors.UnsupportedError` naming it.

This module is pure: bytes in, bytes out. It inflates with ISA-L (``isal``) when installed,
else zlib-ng, else the standard library's zlib. Shuffle and Fletcher-32 are undone here with
numpy, or by faster kernels the caller passes (:class:`FilterKernels`: the read layer passes
numcodecs' compiled ones, 1.5-5x faster, see ``npystore.read.chunked``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

import numpy as np

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.deflate import INFLATE_ERRORS, zlib_module

__all__ = [
    "DEFLATE",
    "FILTER_NAMES",
    "FLETCHER32",
    "FilterKernels",
    "FilterLike",
    "SHUFFLE",
    "SUPPORTED_FILTERS",
    "decode_chunk",
    "fletcher32",
    "unshuffle",
    "unsupported_filters",
]

DEFLATE: Final = 1
SHUFFLE: Final = 2
FLETCHER32: Final = 3
#: Filter ids that :func:`decode_chunk` undoes.
SUPPORTED_FILTERS: Final = frozenset({DEFLATE, SHUFFLE, FLETCHER32})
#: Names of the registered HDF5 filters, for messages.
FILTER_NAMES: Final[dict[int, str]] = {
    DEFLATE: "deflate",
    SHUFFLE: "shuffle",
    FLETCHER32: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    305: "lzo",
    307: "bzip2",
    32000: "lzf",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32013: "zfp",
    32015: "zstd",
    32017: "sz",
    32026: "blosc2",
}
_Bytes = bytes | bytearray | memoryview
_CHECKSUM_SIZE: Final = 4
_FOLD: Final = 65535
#: Words per block when summing a checksum: every block's weighted sum stays below 2**48.
_BLOCK_WORDS: Final = 1 << 16
#: Blocks summed at a time.
_GROUP_BLOCKS: Final = 16
_POSITIONS: Final = np.arange(_BLOCK_WORDS, dtype=np.float64)


_ZLIB: Final = zlib_module()


class FilterLike(Protocol):
    """A pipeline step as this module reads it (:class:`npystore.read.layout.Filter` is one)."""

    @property
    def id(self) -> int:
        """HDF5 filter id."""

    @property
    def name(self) -> str:
        """The filter's name (may be empty)."""

    @property
    def client_data(self) -> tuple[int, ...]:
        """The filter's parameters."""


class FilterKernels(Protocol):
    """Faster implementations of two steps of :func:`decode_chunk`, given by the caller."""

    def fletcher32_body(self, data: _Bytes) -> _Bytes | None:
        """``data`` without its last 4 bytes when they are HDF5's Fletcher-32 of the rest
        (little-endian), else None (the check is then made by :func:`fletcher32`, which
        also knows the old byte-swapped form and names the sums in its message)."""

    def unshuffle(self, data: _Bytes, element_size: int) -> _Bytes:
        """:func:`unshuffle`'s result (``element_size >= 2``, at least 2 elements)."""


def _name(filt: FilterLike) -> str:
    return filt.name or FILTER_NAMES.get(int(filt.id), "unknown")


def unsupported_filters(filters: Sequence[FilterLike]) -> list[str]:
    """Descriptions (``"lzf (32000)"``) of the filters :func:`decode_chunk` cannot undo."""
    return [f"{_name(f)} ({int(f.id)})" for f in filters if int(f.id) not in SUPPORTED_FILTERS]


def fletcher32(data: _Bytes) -> int:
    """HDF5's Fletcher-32 checksum of ``data`` (``H5_checksum_fletcher32``).

    Parameters
    ----------
    data : bytes-like
        The bytes summed (a chunk without its trailing checksum).

    Returns
    -------
    int
        The 32-bit checksum, as HDF5 stores it (little-endian) after the data.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    words = raw[: raw.size & ~1].view(">u2")
    n = words.size + (raw.size & 1)
    s1 = 0  # sum of w[i]
    t = 0  # sum of i * w[i]; then S2 = n * S1 - t
    group = _GROUP_BLOCKS * _BLOCK_WORDS
    for lo in range(0, words.size, group):
        # einsum, not a matrix product: BLAS (OpenBLAS threads spinning against the decode
        # threads) made a 128 MB hdf5storage load take 16.7 s instead of 1.5 s; float64
        # is exact here (every block's weighted sum < 2**48)
        part = words[lo : lo + group]
        full = part.size // _BLOCK_WORDS * _BLOCK_WORDS
        matrix = part[:full].reshape(-1, _BLOCK_WORDS)
        sums: list[int] = matrix.sum(axis=1, dtype=np.int64).tolist()  # each < 2**32
        dots: list[float] = np.einsum("ij,j->i", matrix, _POSITIONS).tolist()
        if full < part.size:
            tail = part[full:]
            sums.append(int(tail.sum(dtype=np.int64)))
            dots.append(float(np.einsum("i,i->", tail, _POSITIONS[: tail.size])))
        for b, (block_sum, block_dot) in enumerate(zip(sums, dots, strict=True)):
            s1 += int(block_sum)
            t += (lo + b * _BLOCK_WORDS) * int(block_sum) + int(block_dot)
    if raw.size & 1:
        odd = int(raw[-1]) << 8
        s1 += odd
        t += (n - 1) * odd
    if s1 == 0:  # only when every word is zero: then both sums stay 0
        return 0
    sum1 = (s1 - 1) % _FOLD + 1
    sum2 = (n * s1 - t - 1) % _FOLD + 1
    return (sum2 << 16) | sum1


def unshuffle(data: _Bytes, element_size: int) -> bytes:
    """Undo HDF5's shuffle filter (bytes grouped by position within ``element_size``).

    Parameters
    ----------
    data : bytes-like
        Shuffled bytes.
    element_size : int
        The element size the data was shuffled with.

    Returns
    -------
    bytes
        The bytes in element order.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    n = raw.size // element_size if element_size > 0 else 0
    if element_size <= 1 or n <= 1:
        return raw.tobytes()
    body = raw[: n * element_size].reshape(element_size, n).T.tobytes()
    return body + raw[n * element_size :].tobytes()


def _inflate(data: _Bytes, expected: int, source: str) -> bytes:
    """Inflate a zlib stream that must give exactly ``expected`` bytes (never more)."""
    inflater = _ZLIB.decompressobj()
    try:
        out: bytes = inflater.decompress(data, expected + 1)
    except INFLATE_ERRORS as exc:
        raise FormatError(f"{source}: the deflated chunk is corrupt: {exc}") from exc
    if len(out) > expected:
        raise FormatError(
            f"{source}: the deflated chunk inflates to more than {expected} bytes, "
            f"expected exactly {expected}"
        )
    if not inflater.eof:
        raise FormatError(
            f"{source}: the deflated chunk ({len(data)} bytes) ends before its zlib stream "
            f"does ({len(out)} bytes inflated, expected {expected})"
        )
    if len(out) < expected:
        raise FormatError(
            f"{source}: the deflated chunk inflates to {len(out)} bytes, expected {expected}"
        )
    return out


def _check_fletcher32(data: _Bytes, source: str, kernels: FilterKernels | None) -> _Bytes:
    if len(data) < _CHECKSUM_SIZE:
        raise FormatError(
            f"{source}: a fletcher32-filtered chunk of {len(data)} bytes, expected at least "
            f"{_CHECKSUM_SIZE} (the checksum)"
        )
    if kernels is not None and len(data) > _CHECKSUM_SIZE:
        checked = kernels.fletcher32_body(data)
        if checked is not None:
            return checked
    body = memoryview(data)[:-_CHECKSUM_SIZE]
    stored = int.from_bytes(memoryview(data)[-_CHECKSUM_SIZE:], "little")
    computed = fletcher32(body)
    # HDF5 <= 1.6.2 on little-endian machines: the bytes of each 16-bit half swapped
    reversed_ = ((computed & 0x00FF00FF) << 8) | ((computed >> 8) & 0x00FF00FF)
    if stored not in (computed, reversed_):
        raise FormatError(
            f"{source}: fletcher32 checksum mismatch: the chunk stores {stored:#010x}, its "
            f"{len(body)} bytes sum to {computed:#010x}"
        )
    return body


def decode_chunk(
    data: _Bytes,
    filters: Sequence[FilterLike],
    filter_mask: int,
    *,
    itemsize: int,
    nbytes: int,
    source: str,
    kernels: FilterKernels | None = None,
) -> bytes:
    """Undo an HDF5 filter pipeline on one stored chunk.

    Parameters
    ----------
    data : bytes-like
        The chunk's stored bytes.
    filters : sequence of npystore.read.layout.Filter
        The pipeline in the order it was applied when writing (``id``, ``name``,
        ``client_data``).
    filter_mask : int
        The chunk's filter mask: bit ``i`` set means filter ``i`` was skipped.
    itemsize : int
        Element size of the stored dtype (shuffle's default element size).
    nbytes : int
        Size of the decoded chunk: ``prod(chunk_shape) * itemsize``.
    source : str
        Where the chunk is, for messages (URL, dataset, chunk).
    kernels : FilterKernels, optional
        Faster shuffle and Fletcher-32 kernels (the same results); numpy's by default.

    Returns
    -------
    bytes
        Exactly ``nbytes`` decoded bytes.

    Raises
    ------
    FormatError
        A corrupt or truncated deflate stream, a chunk that inflates to another size than
        expected (more is refused before it is produced), a fletcher32 mismatch, a decoded
        size other than ``nbytes``.
    UnsupportedError
        A filter other than deflate, shuffle and fletcher32 that was applied to the chunk.
    """
    active = [i for i in range(len(filters)) if not (filter_mask >> i) & 1]
    for i in active:
        if int(filters[i].id) not in SUPPORTED_FILTERS:
            raise UnsupportedError(
                f"{source}: HDF5 filter {_name(filters[i])} (id {int(filters[i].id)}) is not "
                f"supported; npystore decodes deflate (1), shuffle (2) and fletcher32 (3)"
            )
    out: _Bytes = data
    for i in reversed(active):
        filt = filters[i]
        fid = int(filt.id)
        if fid == FLETCHER32:
            out = _check_fletcher32(out, source, kernels)
        elif fid == DEFLATE:
            # what the filters applied before this one produced: fletcher32 adds 4 bytes
            pending = sum(1 for j in active if j < i and int(filters[j].id) == FLETCHER32)
            out = _inflate(out, nbytes + _CHECKSUM_SIZE * pending, source)
        else:
            size = int(filt.client_data[0]) if filt.client_data else itemsize
            size = size if size > 0 else itemsize
            if kernels is not None and size > 1 and len(out) // size > 1:
                out = kernels.unshuffle(out, size)
            else:
                out = unshuffle(out, size)
    if len(out) != nbytes:
        raise FormatError(
            f"{source}: the chunk decodes to {len(out)} bytes, expected {nbytes} "
            f"(filters {[_name(filters[i]) for i in active] or 'none'})"
        )
    return out if isinstance(out, bytes) else bytes(out)
