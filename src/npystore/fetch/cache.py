"""Local cache files: read one if it exists, write one atomically (part of the fetch layer).

The deflate indexes of :mod:`npystore.read.inflate` (and :mod:`npystore.read.stream`) are
kept in such files under a ``cache_dir``.
"""

from __future__ import annotations

import os
import threading

__all__ = ["read_cache_file", "write_cache_file"]


def read_cache_file(path: str) -> bytes | None:
    """The content of a local cache file, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_cache_file(path: str, data: bytes) -> None:
    """Write a local cache file atomically (write to a temporary name, then rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
