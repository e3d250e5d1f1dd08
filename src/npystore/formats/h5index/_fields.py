"""Integer fields as HDF5 stores them: little-endian, of the superblock's sizes (O for
addresses, L for lengths), an address with every bit set standing for "undefined"."""

from __future__ import annotations

from npystore.errors import FormatError

__all__ = ["uint", "undefined"]


def uint(data: bytes, offset: int, size: int, what: str) -> int:
    """The little-endian unsigned integer of ``size`` bytes at ``offset`` of ``data``.

    Raises
    ------
    FormatError
        The field does not lie inside ``data`` (``what`` names the block in the message).
    """
    if offset < 0 or offset + size > len(data):
        raise FormatError(
            f"{what}: needs bytes [{offset}, {offset + size}) of a {len(data)}-byte block"
        )
    return int.from_bytes(data[offset : offset + size], "little")


def undefined(sizeof_addr: int) -> int:
    """The undefined address (all bits set) for addresses of ``sizeof_addr`` bytes."""
    return (1 << (8 * sizeof_addr)) - 1
