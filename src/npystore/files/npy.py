"""``.npy`` files through the fetch layer: the header read in one or two ranges, the data
described as an :class:`~npystore.read.layout.ArrayLayout` (a byte range of the file, or a
pickle for object arrays). The byte layout is :mod:`npystore.formats.npy`'s.
"""

from __future__ import annotations

from typing import Final

from npystore.errors import FormatError
from npystore.fetch import RangeReader
from npystore.formats import npy
from npystore.formats.shapes import check_shape
from npystore.read.access import LayoutArray
from npystore.read.layout import ArrayLayout, Order, PickledExtent, RawExtent, Unpickle

__all__ = ["header_from_prefix", "npy_layout", "open_layout_array"]


def header_from_prefix(reader: RangeReader, prefix: bytes, max_header_size: int) -> npy.NpyHeader:
    """The ``.npy`` header behind ``reader``, parsed from ``prefix`` (its first bytes, e.g.
    :func:`npystore.files.read_prefix`); exactly the rest of it is read if the prefix was
    too short."""
    url = reader.url
    if len(prefix) < npy.PREAMBLE_MAX_LEN and len(prefix) == reader.size and npy.is_npy(prefix):
        raise FormatError(f"{url}: truncated .npy file: {reader.size} bytes, no complete header")
    preamble = npy.parse_preamble(prefix, source=url)
    if preamble.header_length > max_header_size:
        raise FormatError(
            f"{url}: .npy header declares {preamble.header_length} bytes, more than "
            f"max_header_size={max_header_size}; pass a larger max_header_size to read it"
        )
    end = preamble.data_offset
    if end > reader.size:
        raise FormatError(
            f"{url}: truncated .npy file: the header ends at byte {end}, "
            f"the file has {reader.size} bytes"
        )
    if end <= len(prefix):
        text = prefix[preamble.header_start : end]
    else:
        text = prefix[preamble.header_start :] + reader.read(len(prefix), end)
    header = _parse_header(preamble, bytes(text), url)
    if not header.is_pickled and header.data_offset + header.nbytes > reader.size:
        raise FormatError(
            f"{url}: truncated .npy file: shape {header.shape} of {header.dtype} needs "
            f"{header.nbytes} bytes from byte {header.data_offset}, the file has "
            f"{reader.size - header.data_offset}"
        )
    check_shape(header.shape, header.dtype, source=url)
    return header


#: Headers parsed, by their bytes: the shards of a dataset repeat one header (or a few),
#: whose tokenizing parse costs more than everything else of opening a local file.
_parsed: dict[tuple[npy.NpyPreamble, bytes], npy.NpyHeader] = {}
_PARSED_MAX: Final = 1024


def _parse_header(preamble: npy.NpyPreamble, text: bytes, url: str) -> npy.NpyHeader:
    """``npy.parse_header``, remembered by the header's bytes (a header says nothing about
    its file: the same bytes parse to the same header wherever they are)."""
    key = (preamble, text)
    header = _parsed.get(key)
    if header is None:
        header = npy.parse_header(preamble, text, source=url)
        if len(_parsed) >= _PARSED_MAX:
            _parsed.clear()
        _parsed[key] = header
    return header


def npy_layout(
    reader: RangeReader, header: npy.NpyHeader, allow_pickle: bool, unpickle: Unpickle
) -> ArrayLayout:
    order: Order = "F" if header.fortran_order else "C"
    if header.is_pickled:
        if not allow_pickle:
            raise npy.pickle_refused(reader.url, header.dtype)
        extent = PickledExtent(header.data_offset, reader.size - header.data_offset)
        return ArrayLayout(header.dtype, header.shape, order, extent, unpickle)
    return ArrayLayout(
        header.dtype, header.shape, order, RawExtent(header.data_offset, header.nbytes)
    )


def open_layout_array(
    reader: RangeReader,
    prefix: bytes,
    allow_pickle: bool,
    max_header_size: int,
    unpickle: Unpickle = Unpickle(),  # noqa: B008 - frozen
) -> LayoutArray:
    """The ``.npy`` file behind ``reader`` as a lazy :class:`~npystore.read.access.LayoutArray`,
    its header parsed from ``prefix`` (read exactly to its end if it is longer); for the
    package's tools (Zarr store, xarray backend), which need the layout, not a dask array."""
    header = header_from_prefix(reader, prefix, max_header_size)
    return LayoutArray(reader, npy_layout(reader, header, allow_pickle, unpickle))
