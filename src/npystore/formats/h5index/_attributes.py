"""The attributes an object header holds itself (compact storage), read from its messages.

An object's attributes are attribute messages (type 0x0C) in its header, unless they are
kept densely (in a fractal heap named by an attribute info message, type 0x15) or are
shared (a message whose flags mark it shared: its body is a reference to a message stored
elsewhere, kept under the type ``0x0C | SHARED``). :func:`compact_attributes` answers only
for the first case, and answers "don't know" (None) for the others: the caller then asks
libhdf5.

Attribute message (type 0x0C)::

    version 1: version, reserved, u16 name size, u16 datatype size, u16 dataspace size,
               then the name, the datatype and the dataspace, each padded to 8 bytes,
               then the data
    version 2: version, flags (1: datatype shared, 2: dataspace shared), the three u16
               sizes, then name, datatype, dataspace (not padded), data
    version 3: as version 2, with the name's character set (u8) before the name
    the name size counts its terminating NUL

Datatype (inside the attribute message)::

    0  1  class (low 4 bits) and version (high 4 bits)
    1  3  class bit fields: fixed-point (class 0): bit 0 big-endian, bit 3 signed;
          string (class 3): bits 0-3 padding (0 NUL-terminated, 1 NUL-padded, 2 space-padded)
    4  4  size in bytes
    8     properties: fixed-point: u16 bit offset, u16 precision

Dataspace::

    version 1: version, rank, flags, 5 reserved, then rank x L dimension sizes (rank 0:
               scalar), then the maximum sizes if flags & 1
    version 2: version, rank, flags, type (0 scalar, 1 simple, 2 null), then the sizes

Attribute info message (type 0x15)::

    version, flags, u16 maximum creation index if flags & 1, O fractal heap address
    (undefined when every attribute is in the header), O name index address, O creation
    order index address if flags & 2

Values are decoded as h5py reads them for the two kinds MATLAB writes: fixed-point
integers of 1, 2, 4 or 8 bytes and fixed-length strings (bytes, trailing NULs dropped), a
numpy scalar for a scalar dataspace and an array otherwise. Any other attribute is named
but not decoded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from npystore.formats.h5index._dataset import dataspace_dims, number_dtype
from npystore.formats.h5index._fields import undefined
from npystore.formats.h5index._header import SHARED

__all__ = ["UNDECODED", "CompactAttributes", "compact_attributes"]

_ATTRIBUTE: Final = 0x0C
_ATTRIBUTE_INFO: Final = 0x15
_FIXED_POINT: Final = 0
_STRING: Final = 3
_STRING_PADS: Final = (0, 1)  # NUL-terminated, NUL-padded: h5py reads the bytes as they are
#: Elements of an attribute decoded here (larger ones are left to libhdf5).
_MAX_ELEMENTS: Final = 4096


#: What :meth:`CompactAttributes.value` gives for an attribute it does not decode.
UNDECODED: Final = object()


@dataclass(frozen=True, slots=True)
class CompactAttributes:
    """The attributes of an object header that keeps them all in its messages.

    Attributes
    ----------
    messages : mapping of str to (bytes, int)
        Each attribute's message body and where its datatype starts, by name
        (:meth:`value` decodes one when asked).
    sizeof_len : int
        The superblock's size of lengths (dataspace sizes).
    """

    messages: Mapping[str, tuple[bytes, int]]
    sizeof_len: int

    def __contains__(self, name: object) -> bool:
        return name in self.messages

    def value(self, name: str) -> Any:
        """The value h5py reads for attribute ``name`` when it is a fixed-point integer or
        a fixed-length string of at most 4,096 elements (a numpy scalar for a scalar
        dataspace, else a new array), or :data:`UNDECODED` (ask libhdf5).

        Raises
        ------
        KeyError
            No attribute of that name.
        """
        body, pos = self.messages[name]
        return _value(body, pos, self.sizeof_len)


def compact_attributes(
    messages: tuple[tuple[int, bytes], ...], sizeof_addr: int, sizeof_len: int
) -> CompactAttributes | None:
    """The attributes among ``messages`` (an object header's, as
    :func:`~npystore.formats.h5index.object_header_messages` returns them), or None when
    they cannot all be known from the header: attributes stored densely or shared, a
    name that is not UTF-8, two attributes of one name, or a message that does not parse.

    None is "ask libhdf5", never an error: this is a shortcut past h5py's attribute
    manager, and libhdf5 judges what it does not cover.
    """
    found: dict[str, tuple[bytes, int]] = {}
    for kind, body in messages:
        if kind == _ATTRIBUTE:
            named = _name(body)
            if named is None or named[0] in found:
                return None
            found[named[0]] = (body, named[1])
        elif kind == _ATTRIBUTE | SHARED or (kind == _ATTRIBUTE_INFO and _dense(body, sizeof_addr)):
            return None
    return CompactAttributes(found, sizeof_len)


def _dense(body: bytes, sizeof_addr: int) -> bool:
    """Whether an attribute info message names a fractal heap (or does not parse)."""
    if len(body) < 2:
        return True
    pos = 2 + (2 if body[1] & 1 else 0)
    if len(body) < pos + sizeof_addr:
        return True
    heap = int.from_bytes(body[pos : pos + sizeof_addr], "little")
    return heap != undefined(sizeof_addr)


def _name(body: bytes) -> tuple[str, int] | None:
    """The name of an attribute message and where its datatype starts; None when the
    message does not parse."""
    if len(body) < 8:
        return None
    version = body[0]
    name_size = body[2] | body[3] << 8
    if version == 1:
        pos = 8
        after = 8 + -(-name_size // 8) * 8
    elif version in (2, 3):
        pos = 8 if version == 2 else 9
        after = pos + name_size
    else:
        return None
    raw = body[pos : pos + name_size]
    if name_size < 1 or len(raw) != name_size or raw[-1] != 0 or 0 in raw[:-1]:
        return None
    try:
        return raw[:-1].decode("utf-8"), after
    except UnicodeDecodeError:
        return None


def _value(body: bytes, pos: int, sizeof_len: int) -> Any:
    """The value of the attribute message ``body`` whose datatype starts at ``pos``."""
    version, flags = body[0], body[1]
    type_size = body[4] | body[5] << 8
    space_size = body[6] | body[7] << 8
    pad = 8 if version == 1 else 1
    datatype = body[pos : pos + type_size]
    pos += -(-type_size // pad) * pad
    dataspace = body[pos : pos + space_size]
    pos += -(-space_size // pad) * pad
    if len(datatype) != type_size or len(dataspace) != space_size or pos > len(body):
        return UNDECODED
    if version > 1 and flags & 3:
        return UNDECODED  # a shared datatype or dataspace
    dtype = _dtype(datatype)
    dims = dataspace_dims(dataspace, sizeof_len)
    if dtype is None or dims is None:
        return UNDECODED
    count = math.prod(dims)  # 1 for a scalar
    if count > _MAX_ELEMENTS or len(body) - pos < count * dtype.itemsize:
        return UNDECODED
    if not dims and dtype.kind == "S":
        text = body[pos : pos + dtype.itemsize].rstrip(b"\0")
        return UNDECODED if b"\0" in text else np.bytes_(text)
    values = np.frombuffer(body, dtype, count, pos)
    if dtype.kind == "S" and any(b"\0" in v for v in values.tolist()):
        return UNDECODED  # a NUL inside a string: libhdf5's conversion decides
    if not dims:
        return values[0]
    return values.reshape(dims).copy()


def _dtype(datatype: bytes) -> np.dtype[Any] | None:
    """The numpy dtype h5py reads a fixed-point or fixed-length string datatype as."""
    if len(datatype) < 8:
        return None
    cls = datatype[0] & 0x0F
    size = int.from_bytes(datatype[4:8], "little")
    if cls == _FIXED_POINT:
        dtype = number_dtype(datatype)  # a plain integer, or libhdf5 converts it
        return dtype if dtype is not None and dtype.kind in "iu" else None
    if cls == _STRING and (datatype[1] & 0x0F) in _STRING_PADS and 1 <= size <= 2**16:
        return np.dtype(f"S{size}")
    return None
