"""HDF5 object headers: the messages of each block, continuation blocks followed.

Object header, version 1 (at the address ``H5Gget_objinfo`` reports)::

    0   1  version (1)          1  1  reserved
    2   2  number of messages   4  4  reference count
    8   4  header data size     12 4  padding (messages start at 16)
    messages, each 8-byte aligned:  type u16, data size u16, flags u8, reserved 3, data
    (message flags bit 1: shared, the data a reference to the message kept elsewhere:
    such a message is returned with its type plus SHARED)

Object header, version 2::

    0   4  "OHDR"               4  1  version (2)       5  1  flags
    then 16 bytes of times if flags & 0x20, 4 bytes of attribute phase change if flags & 0x10,
    the size of chunk 0 in 1 << (flags & 3) bytes, then messages (type u8, data size u16,
    flags u8, creation order u16 if flags & 0x04, data) and a 4-byte checksum. Continuation
    blocks of a v2 header start with "OCHK" and end with a checksum; their messages have
    the header's layout (creation order if its flags say so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from npystore.errors import FormatError
from npystore.formats import h5sum
from npystore.formats.h5index._fields import uint

__all__ = [
    "HEADER_PREFIX", "MAX_CONTINUATIONS", "MAX_HEADER_BLOCK", "MAX_HEADER_SIZE", "SHARED",
    "HeaderBlock", "header_size", "object_header_messages", "parse_object_header",
]  # fmt: skip

_CONTINUATION: Final = 0x10
#: Message flag: the message is shared (its body refers to where the message is).
_SHARED_FLAG: Final = 0x02
#: Added to the type of a shared message in what :func:`object_header_messages` returns,
#: so that no reader takes the reference for the message.
SHARED: Final = 0x100
_MAX_MESSAGES: Final = 65535


@dataclass(frozen=True, slots=True)
class HeaderBlock:
    """The messages of one block of an object header and the blocks it continues in.

    Attributes
    ----------
    messages : tuple of (int, bytes)
        Message type and data.
    continuations : tuple of (int, int)
        Address and length of each further block (relative to the base address).
    """

    messages: tuple[tuple[int, bytes], ...]
    continuations: tuple[tuple[int, int], ...]


#: Bytes of an object header that :func:`header_size` needs.
HEADER_PREFIX: Final = 40
#: Largest first block of an object header that :func:`header_size` accepts (the size
#: fields allow 4 GiB and more; real headers take a few KiB).
MAX_HEADER_SIZE: Final = 2**20


def header_size(prefix: bytes) -> int:
    """Bytes of an object header's first block, from its first :data:`HEADER_PREFIX` bytes.

    Raises
    ------
    FormatError
        Neither a version-1 nor a version-2 (``OHDR``) object header, or one larger than
        :data:`MAX_HEADER_SIZE`.
    """
    if prefix.startswith(b"OHDR"):
        if uint(prefix, 4, 1, "object header") != 2:
            raise FormatError(f"OHDR object header of version {prefix[4]}, expected 2")
        flags = uint(prefix, 5, 1, "object header")
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        size = pos + width + uint(prefix, pos, width, "object header") + 4
    elif prefix[:1] == b"\x01" and prefix[1:2] == b"\x00":
        size = 16 + uint(prefix, 8, 4, "object header")
    else:
        raise FormatError(f"no object header here: the bytes start {prefix[:8]!r}")
    if size > MAX_HEADER_SIZE:
        raise FormatError(
            f"object header of {size} bytes, more than the {MAX_HEADER_SIZE} read for a hint"
        )
    return size


def parse_object_header(
    data: bytes, sizeof_addr: int, *, continuation: int = 0, header_flags: int = 0
) -> HeaderBlock:
    """The messages of an object header block.

    Parameters
    ----------
    data : bytes
        The block: from the header's address (``continuation=0``) or a continuation
        block's address, at least as long as the block.
    sizeof_addr : int
        Bytes per address (from the superblock).
    continuation : int
        0 for the header itself, 1 for a continuation block of a version-1 header, 2 for
        one of a version-2 header.
    header_flags : int
        For a continuation block of a version-2 header: the header's flags (bit 2: each
        message carries its creation order).

    Raises
    ------
    FormatError
        An unknown header version, or a message that runs past the block.
    """
    if continuation == 1:
        return _messages_v1(data, 0, len(data), sizeof_addr)
    if continuation == 2 or data.startswith(b"OHDR"):
        return _header_v2(data, sizeof_addr, continuation == 2, header_flags)
    if not data or data[0] != 1:
        raise FormatError(
            f"object header of version {data[0] if data else None}, expected 1 or 'OHDR'"
        )
    count = uint(data, 2, 2, "object header")
    size = uint(data, 8, 4, "object header")
    block = _messages_v1(data, 16, 16 + size, sizeof_addr)
    return HeaderBlock(block.messages[:count], block.continuations)


#: Most continuation blocks of an object header followed by :func:`object_header_messages`.
MAX_CONTINUATIONS: Final = 64
#: Largest continuation block :func:`object_header_messages` reads.
MAX_HEADER_BLOCK: Final = 2**20


def object_header_messages(
    read: Callable[[int, int], bytes], base: int, address: int, sizeof_addr: int
) -> tuple[tuple[int, bytes], ...]:
    """Every message of the object header at ``address``, continuation blocks followed.

    Parameters
    ----------
    read : callable
        ``read(start, stop)`` returns the file's bytes ``[start, stop)`` (fewer at its end);
        the caller decides where they come from.
    base : int
        Where the HDF5 file starts (the user block's size).
    address : int
        The object header's address (relative to ``base``).
    sizeof_addr : int
        The superblock's size of addresses.

    Returns
    -------
    tuple of (int, bytes)
        ``(message type, body)`` of the first block, then of each continuation block (at
        most :data:`MAX_CONTINUATIONS`, each at most :data:`MAX_HEADER_BLOCK` bytes).

    Raises
    ------
    FormatError
        A malformed header, or one larger than :data:`MAX_HEADER_SIZE`.
    """
    start = base + address
    prefix = read(start, start + HEADER_PREFIX)
    size = header_size(prefix)
    first = parse_object_header(read(start, start + size), sizeof_addr)
    version = 2 if prefix.startswith(b"OHDR") else 1
    flags = prefix[5] if version == 2 else 0
    messages = list(first.messages)
    todo = list(first.continuations)
    seen = {address}
    for _ in range(MAX_CONTINUATIONS):
        if not todo:
            break
        a, n = todo.pop(0)
        if a in seen:
            raise FormatError(f"object header at {address}: continuation block {a} reached twice")
        seen.add(a)
        block = parse_object_header(
            read(base + a, base + a + min(n, MAX_HEADER_BLOCK)),
            sizeof_addr,
            continuation=version,
            header_flags=flags,
        )
        messages.extend(block.messages)
        todo.extend(block.continuations)
    return tuple(messages)


def _messages_v1(data: bytes, start: int, stop: int, sizeof_addr: int) -> HeaderBlock:
    messages: list[tuple[int, bytes]] = []
    continuations: list[tuple[int, int]] = []
    pos = start
    stop = min(stop, len(data))
    while pos + 8 <= stop and len(messages) < _MAX_MESSAGES:
        kind = uint(data, pos, 2, "object header message")
        size = uint(data, pos + 2, 2, "object header message")
        flags = data[pos + 4]
        body = data[pos + 8 : pos + 8 + size]
        if len(body) != size:
            raise FormatError(
                f"object header message of type {kind:#x} and {size} bytes at {pos} runs "
                f"past the {stop}-byte block"
            )
        _collect(kind, flags, body, sizeof_addr, messages, continuations)
        pos += 8 + (size + 7) // 8 * 8
    return HeaderBlock(tuple(messages), tuple(continuations))


def _header_v2(
    data: bytes, sizeof_addr: int, is_continuation: bool, header_flags: int
) -> HeaderBlock:
    if is_continuation:
        if not data.startswith(b"OCHK"):
            raise FormatError(f"object header continuation starts {data[:4]!r}, not 'OCHK'")
        h5sum.check(data, "object header continuation block")
        pos, stop, flags = 4, len(data) - 4, header_flags
    else:
        if uint(data, 4, 1, "object header") != 2:
            raise FormatError(f"OHDR object header of version {data[4]}, expected 2")
        flags = uint(data, 5, 1, "object header")
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        size = uint(data, pos, width, "object header")
        pos += width
        stop = pos + size
        if stop + 4 > len(data):
            raise FormatError(
                f"OHDR object header of {stop + 4} bytes, only {len(data)} bytes given"
            )
        h5sum.check(data[: stop + 4], "OHDR object header")
    order = bool(flags & 0x04)
    messages: list[tuple[int, bytes]] = []
    continuations: list[tuple[int, int]] = []
    while pos + 4 <= stop and len(messages) < _MAX_MESSAGES:
        kind = data[pos]
        size = uint(data, pos + 1, 2, "object header message")
        message_flags = data[pos + 3]
        pos += 4 + (2 if order else 0)
        body = data[pos : pos + size]
        if len(body) != size:
            raise FormatError(
                f"object header message of type {kind:#x} and {size} bytes runs past the "
                f"{stop}-byte block"
            )
        _collect(kind, message_flags, body, sizeof_addr, messages, continuations)
        pos += size
    return HeaderBlock(tuple(messages), tuple(continuations))


def _collect(
    kind: int,
    flags: int,
    body: bytes,
    sizeof_addr: int,
    messages: list[tuple[int, bytes]],
    continuations: list[tuple[int, int]],
) -> None:
    if flags & _SHARED_FLAG:
        messages.append((kind | SHARED, body))  # a reference to the message, not the message
        return
    messages.append((kind, body))
    if kind == _CONTINUATION:
        address = uint(body, 0, sizeof_addr, "continuation message")
        length = uint(body, sizeof_addr, 8, "continuation message")
        continuations.append((address, length))
