"""What the ZIP record parsers share: fixed sizes, the ZIP64 sentinels, the general purpose
flag bits, and names cut short for messages."""

from __future__ import annotations

from typing import Final

__all__ = [
    "CENTRAL_HEADER_SIZE", "F_DESCRIPTOR", "F_ENCRYPTED", "F_MASKED", "F_PATCHED", "F_STRONG",
    "F_UTF8", "U16", "U32", "short",
]  # fmt: skip

#: Fixed part of a central directory header: the least one member takes in the directory.
CENTRAL_HEADER_SIZE: Final = 46
#: The sentinels of 16- and 32-bit fields whose value is in a ZIP64 record or extra field.
U16: Final = 0xFFFF
U32: Final = 0xFFFF_FFFF
#: Flag bits: encrypted (0), data descriptor (3), patched data (5), strong encryption (6),
#: UTF-8 name (11), masked local header (13).
F_ENCRYPTED, F_DESCRIPTOR, F_PATCHED, F_STRONG, F_UTF8, F_MASKED = (
    0x0001, 0x0008, 0x0020, 0x0040, 0x0800, 0x2000,
)  # fmt: skip


def short(value: str | bytes, limit: int = 80) -> str | bytes:
    """``value`` cut to about ``limit`` characters, for messages."""
    if len(value) <= limit:
        return value
    return value[:limit] + "..." if isinstance(value, str) else value[:limit] + b"..."
