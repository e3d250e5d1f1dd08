"""Local cache files: the directory, reading one, writing one atomically, bounded in size.

The deflate checkpoint indexes of :mod:`npystore.read.inflate` (and
:mod:`npystore.read.stream`) are kept in such files, one per member, named by a digest
of the object's identity (size, ETag or version, mtime) and the member, so a second
process that opens the same unchanged member slices it without an index pass.

Where (:func:`resolve_cache_dir`): the ``index_cache`` option of the openers, else the
environment variable ``NPYSTORE_INDEX_CACHE`` (a directory, or ``off``), else
``$XDG_CACHE_HOME/npystore/deflate-index`` (``~/.cache/...``). ``index_cache=False``
turns it off. The directory is kept under :data:`MAX_CACHE_BYTES`: writing a file
removes the least recently used ones beyond that. A directory that cannot be written
costs nothing but the index pass it would have saved.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Final

__all__ = [
    "CACHE_ENV",
    "MAX_CACHE_BYTES",
    "IndexCacheOption",
    "default_cache_dir",
    "read_cache_file",
    "resolve_cache_dir",
    "write_cache_file",
]

log = logging.getLogger(__name__)

#: The environment variable naming the cache directory (``off``, ``0`` or empty: none).
CACHE_ENV: Final = "NPYSTORE_INDEX_CACHE"
#: Most bytes of cache files kept in one directory (least recently used removed first).
MAX_CACHE_BYTES: Final = 256 * 2**20
#: What the ``index_cache`` option takes: a directory, True (the default one), False (no
#: cache) or None (the default one, unless ``NPYSTORE_INDEX_CACHE`` says otherwise).
IndexCacheOption = str | os.PathLike[str] | bool | None
_OFF: Final = ("", "0", "off", "false", "no", "none")


def default_cache_dir() -> str | None:
    """``NPYSTORE_INDEX_CACHE`` if set (None when it says ``off``), else the user cache
    directory's ``npystore/deflate-index``."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in _OFF else env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "npystore", "deflate-index")


def resolve_cache_dir(option: IndexCacheOption) -> str | None:
    """The cache directory an ``index_cache`` option means (None: no cache)."""
    if option is False:
        return None
    if option is None or option is True:
        return default_cache_dir()
    return os.fspath(option)


def read_cache_file(path: str) -> bytes | None:
    """The content of a local cache file, or None if it does not exist (or cannot be read).
    A hit marks the file as recently used."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:  # unreadable: as if absent (the index is built instead)
        log.debug("cache file %s not read: %s", path, exc)
        return None
    try:
        os.utime(path)
    except OSError as exc:
        log.debug("cache file %s not touched: %s", path, exc)
    return data


def write_cache_file(path: str, data: bytes, *, budget: int = MAX_CACHE_BYTES) -> None:
    """Write a local cache file atomically (a temporary name, then rename), then keep its
    directory under ``budget`` bytes. Failures are logged, not raised: a cache that
    cannot be written only loses its use."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("cache file %s not written: %s", path, exc)
        try:
            os.unlink(tmp)
        except OSError as cleanup:
            log.debug("temporary cache file %s not removed: %s", tmp, cleanup)
        return
    _prune(directory, budget, keep=path)


def _prune(directory: str, budget: int, keep: str) -> None:
    """Remove the least recently used cache files until the directory holds ``budget``
    bytes (never ``keep``, the file just written)."""
    entries = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.is_file() and entry.name.endswith(".dflidx"):
                    st = entry.stat()
                    entries.append((st.st_mtime, st.st_size, entry.path))
    except OSError as exc:
        log.debug("cache directory %s not listed: %s", directory, exc)
        return
    total = sum(size for _, size, _ in entries)
    for _, size, file in sorted(entries):
        if total <= budget:
            break
        if os.path.abspath(file) == os.path.abspath(keep):
            continue
        try:
            os.unlink(file)
        except OSError as exc:
            log.debug("cache file %s not removed: %s", file, exc)
            continue
        total -= size
