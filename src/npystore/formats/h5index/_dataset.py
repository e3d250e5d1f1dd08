"""Small plain datasets described wholly by their object header: numbers stored as they are.

MATLAB writes each element of a cell as its own dataset, reached by object reference: a
row of characters, a scalar, a short vector. Opening one through libhdf5 costs some 200
microseconds (the object, its attribute manager, a read, a close), ten times what reading
the few bytes costs. :func:`plain_dataset` recognises, from the header's messages alone,
the datasets whose values are bytes of the file in numpy's layout:

- a datatype message (type 0x03) of a fixed-point integer of 1, 2, 4 or 8 bytes with no
  padding bits, or an IEEE 754 binary32 or binary64 float, either byte order;
- a dataspace message (type 0x01), scalar or simple (C order, as h5py reads it);
- a data layout message (type 0x08) of version 3 or 4, compact (the bytes in the message)
  or contiguous (an address and a size, the size the elements' exactly);
- no filter pipeline (0x0B), no external storage (0x07), no link or group message, no
  shared message among these, each of the three messages once.

Anything else is None: the caller reads it with libhdf5. The datatype's fields::

    0  1  class (low 4 bits: 0 fixed-point, 1 floating-point) and version (high 4 bits)
    1  3  class bit fields: bit 0 byte order (1 big-endian); fixed-point bits 1-2 padding,
          bit 3 signed; floating-point bits 1-3 padding, bits 4-5 mantissa normalization
          (2: implied leading 1), bit 6 VAX order, bits 8-15 the sign bit's position
    4  4  size in bytes
    8     fixed-point: u16 bit offset, u16 precision;
          floating-point: u16 bit offset, u16 precision, u8 exponent position, u8 exponent
          size, u8 mantissa position, u8 mantissa size, u32 exponent bias

Data layout, versions 3 and 4 (class 0 compact, 1 contiguous)::

    0  1  version        1  1  class
    compact:     u16 size, then the bytes
    contiguous:  O address (undefined: never written, read as fill values by libhdf5), L size
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from npystore.formats.h5index._fields import undefined
from npystore.formats.h5index._header import SHARED

__all__ = ["PLAIN_MAX_BYTES", "PlainDataset", "dataspace_dims", "number_dtype", "plain_dataset"]

#: Largest dataset :func:`plain_dataset` describes (larger ones are read by libhdf5 or
#: laid out for byte-range reads).
PLAIN_MAX_BYTES: Final = 1 << 20

_DATASPACE: Final = 0x01
_DATATYPE: Final = 0x03
_EXTERNAL: Final = 0x07
_LAYOUT: Final = 0x08
_FILTERS: Final = 0x0B
_GROUP_MESSAGES: Final = frozenset({0x02, 0x06, 0x11})
_WANTED: Final = frozenset({_DATASPACE, _DATATYPE, _LAYOUT})
_REFUSED: Final = frozenset({_EXTERNAL, _FILTERS, *_GROUP_MESSAGES})
#: (size, exponent position, exponent size, mantissa size, bias, sign position) of
#: IEEE 754 binary32 and binary64.
_IEEE: Final = {4: (23, 8, 23, 127, 31), 8: (52, 11, 52, 1023, 63)}


@dataclass(frozen=True, slots=True)
class PlainDataset:
    """A dataset whose values are ``dtype`` elements in C order at one place.

    Attributes
    ----------
    dtype : numpy.dtype
        The elements, byte order included (what h5py reports).
    shape : tuple of int
        The dataspace (``()``: scalar).
    inline : bytes or None
        A compact dataset's bytes (exactly ``nbytes``); None for a contiguous one.
    address : int
        A contiguous dataset's first byte (relative to the base address); -1 if compact.
    """

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    inline: bytes | None
    address: int

    @property
    def nbytes(self) -> int:
        """Bytes of the values."""
        return math.prod(self.shape) * self.dtype.itemsize


def plain_dataset(
    messages: tuple[tuple[int, bytes], ...], sizeof_addr: int, sizeof_len: int
) -> PlainDataset | None:
    """The dataset an object header's ``messages`` describe, when it is a small plain one
    (see the module); None otherwise (read it with libhdf5). Never raises."""
    found: dict[int, bytes] = {}
    for kind, body in messages:
        base = kind & ~SHARED
        if base in _REFUSED or (kind != base and base in _WANTED):
            return None
        if kind in _WANTED:
            if kind in found:
                return None
            found[kind] = body
    if len(found) != len(_WANTED):
        return None
    dtype = number_dtype(found[_DATATYPE])
    shape = dataspace_dims(found[_DATASPACE], sizeof_len)
    if dtype is None or shape is None:
        return None
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > PLAIN_MAX_BYTES:
        return None
    layout = found[_LAYOUT]
    if len(layout) < 2 or layout[0] not in (3, 4):
        return None
    if layout[1] == 0:  # compact
        if len(layout) < 4:
            return None
        size = layout[2] | layout[3] << 8
        data = layout[4 : 4 + size]
        if size != nbytes or len(data) != size:
            return None
        return PlainDataset(dtype, shape, bytes(data), -1)
    if layout[1] == 1:  # contiguous
        if len(layout) < 2 + sizeof_addr + sizeof_len:
            return None
        address = int.from_bytes(layout[2 : 2 + sizeof_addr], "little")
        size = int.from_bytes(layout[2 + sizeof_addr : 2 + sizeof_addr + sizeof_len], "little")
        if address == undefined(sizeof_addr) or size != nbytes:
            return None
        return PlainDataset(dtype, shape, None, address)
    return None


def number_dtype(datatype: bytes) -> np.dtype[Any] | None:
    """The numpy dtype of a plain fixed-point or IEEE floating-point datatype (no padding
    bits, full precision; what h5py reads it as), else None."""
    if len(datatype) < 12 or datatype[0] >> 4 not in (1, 2, 3):
        return None
    cls = datatype[0] & 0x0F
    bits = datatype[1] | datatype[2] << 8 | datatype[3] << 16
    size = int.from_bytes(datatype[4:8], "little")
    offset = datatype[8] | datatype[9] << 8
    precision = datatype[10] | datatype[11] << 8
    if offset != 0 or precision != 8 * size:
        return None
    order = ">" if bits & 1 else "<"
    if cls == 0:
        if size not in (1, 2, 4, 8) or bits & ~0x09:
            return None  # padding bits set (or unknown bits)
        return np.dtype(f"{order}{'i' if bits & 0x08 else 'u'}{size}")
    if cls == 1:
        ieee = _IEEE.get(size)
        if ieee is None or len(datatype) < 20:
            return None
        exp_pos, exp_size, mant_pos, mant_size = (
            datatype[12],
            datatype[13],
            datatype[14],
            datatype[15],
        )
        bias = int.from_bytes(datatype[16:20], "little")
        sign = bits >> 8 & 0xFF
        if (
            bits & 0xFF & ~0x01 != 0x20  # no padding, implied leading 1, not VAX order
            or (exp_pos, exp_size, mant_size, bias, sign) != ieee
            or mant_pos != 0
            or bits >> 16
        ):
            return None
        return np.dtype(f"{order}f{size}")
    return None


def dataspace_dims(dataspace: bytes, sizeof_len: int) -> tuple[int, ...] | None:
    """The dimensions of a scalar (``()``) or simple dataspace; None for a null one or
    one that does not parse."""
    if len(dataspace) < 4:
        return None
    version, rank = dataspace[0], dataspace[1]
    if version == 1:
        pos = 8
    elif version == 2:
        if dataspace[3] == 0:
            return ()
        if dataspace[3] != 1:
            return None
        pos = 4
    else:
        return None
    if len(dataspace) < pos + rank * sizeof_len:
        return None
    return tuple(
        int.from_bytes(dataspace[pos + i * sizeof_len : pos + (i + 1) * sizeof_len], "little")
        for i in range(rank)
    )
