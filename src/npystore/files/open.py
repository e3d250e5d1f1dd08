"""The one sniff and dispatch: open a URL (or reader), read its first bytes, name its format.

Every face that takes "any file" (:func:`npystore.open`, the CLI, the Zarr store, the
kerchunk references, ``convert`` and the xarray engine) starts here, then opens the
format's reader from :class:`Sniffed`: :mod:`npystore.files.npy`, :mod:`npystore.files.zip`
or :mod:`npystore.files.mat`. A file that is none of them raises the one error of
:func:`npystore.formats.sniff.unknown_format`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from npystore.errors import UnsupportedError
from npystore.fetch import RangeReader, open_reader
from npystore.fetch.fileobj import BinaryFile
from npystore.files import read_prefix
from npystore.formats.sniff import PREFIX_SIZE, is_matlab_text, sniff, unknown_format

__all__ = ["Sniffed", "is_npy_or_matlab", "sniff", "sniff_reader", "sniff_source"]


@dataclass(frozen=True, slots=True)
class Sniffed:
    """An opened file and what it is.

    Attributes
    ----------
    reader : RangeReader
        The file, pinned to the identity seen at open.
    prefix : bytes
        Its first bytes (128, fewer for a smaller file): the format's magic, the whole
        header of most ``.npy`` files, the MAT header.
    kind : {"npy", "npz", "mat"}
        The format.
    """

    reader: RangeReader
    prefix: bytes
    kind: Literal["npy", "npz", "mat"]


def sniff_reader(reader: RangeReader) -> Sniffed:
    """Read the first bytes of ``reader`` and name the format.

    Raises
    ------
    FormatError
        None of the formats npystore reads.
    """
    prefix = read_prefix(reader)
    kind = sniff(prefix)
    if kind == "unknown":
        from npystore.files.mat import hdf5_superblock  # noqa: PLC0415 - an error path
        from npystore.formats.mat5 import plain_hdf5_refused  # noqa: PLC0415

        superblock = hdf5_superblock(reader)
        if superblock is not None:  # HDF5 behind a user block that is no MAT-file header
            raise UnsupportedError(plain_hdf5_refused(reader.url, superblock))
        raise unknown_format(reader.url, prefix)
    return Sniffed(reader, bytes(prefix), kind)


def sniff_source(
    url: str | BinaryFile, storage_options: Mapping[str, Any] | None = None, **open_options: Any
) -> Sniffed:
    """:func:`sniff_reader` of a freshly opened URL or file object (``open_options`` go to
    :func:`npystore.fetch.open_reader`, e.g. ``head``)."""
    return sniff_reader(open_reader(url, storage_options, **open_options))


def is_npy_or_matlab(path: str) -> bool:
    """Whether a local file starts with the ``.npy`` magic or MATLAB's header text (a cheap
    claim, as xarray's ``guess_can_open`` makes: ZIP and plain HDF5 files are left to
    other engines); False when it cannot be read."""
    try:
        prefix = read_prefix(open_reader(path, None, head=PREFIX_SIZE))
    except (OSError, ValueError):
        return False
    return sniff(prefix) == "npy" or is_matlab_text(prefix)
