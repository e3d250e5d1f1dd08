"""Local cache files: the directory, reading an entry, writing one atomically, bounded.

The deflate checkpoint indexes of :mod:`npystore.read.inflate` (and
:mod:`npystore.read.stream`) are kept in such entries, one per member, named by a digest
of a key (the object's strong identity and the member, see :mod:`npystore.read.index`), so
a second process that opens the same unchanged member slices it without an index pass.

Where (:func:`resolve_cache_dir`): the ``index_cache`` option of the openers, else the
environment variable ``NPYSTORE_INDEX_CACHE`` (a directory, or ``off``), else
``$XDG_CACHE_HOME/npystore/deflate-index`` (``~/.cache/...``). ``index_cache=False``
turns it off. The directory is kept under :data:`MAX_CACHE_BYTES`: writing an entry
removes the least recently used ones beyond that. A directory that cannot be written
costs nothing but the index pass it would have saved.

The cache is a cache: a damaged, planted or foreign entry costs at most a rebuild, never
wrong data, a hang or another file overwritten.

- **The directory** is made with mode 0700 and used only when it is a real directory (not
  a symbolic link), owned by this user and not writable by group or others; otherwise it
  is ignored (one warning per process saying why and what to do), as if the cache were off.
  Every entry is then opened relative to a descriptor of that directory (``openat``), so a
  directory swapped after the check is not followed.
- **Writes** go to an unpredictable temporary name (the writers' own,
  :func:`npystore.fetch.tempfiles.temporary_name`) made with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` (mode 0600; what :func:`tempfile.mkstemp` does, but
  relative to the checked directory), then renamed over the entry: a symbolic link or any
  other file planted at either name is never written through. Those dead processes left
  are swept as the writers' are (:func:`npystore.fetch.tempfiles.sweep`).
- **Reads** open the entry with ``O_NOFOLLOW | O_NONBLOCK`` and take it only when ``fstat``
  says it is a regular file of this user of at most the size the caller allows (the largest
  legitimate entry for that member): a symbolic link, a FIFO, a device, an oversized file is
  removed at once (and rebuilt by the caller), without reading it.
- **Entries** carry a header (:data:`ENTRY_MAGIC`), the SHA-256 of their key and a SHA-256 of
  everything before it: a truncated, damaged, foreign (another key's) or old-format entry is
  removed and rebuilt. A checksum is no signature: whoever can write as this user can forge
  an entry, so the caller validates what an entry says too (see
  :mod:`npystore.read.index`).

POSIX only (``O_NOFOLLOW`` and ``openat``); where they are missing the cache is off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import struct
from typing import Final

from npystore.fetch.tempfiles import sweep, temporary_name

__all__ = [
    "CACHE_ENV",
    "ENTRY_MAGIC",
    "MAX_CACHE_BYTES",
    "IndexCacheOption",
    "default_cache_dir",
    "drop_cache_file",
    "entry_name",
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
#: The first bytes of every entry (its format version).
ENTRY_MAGIC: Final = b"NPYSTORE-CACHE2\n"
#: An entry's name ends with this.
SUFFIX: Final = ".dflidx"
_OFF: Final = ("", "0", "off", "false", "no", "none")
#: header: magic, SHA-256 of the key, payload length; trailer: SHA-256 of all before it.
_HEAD: Final = struct.Struct(f"<{len(ENTRY_MAGIC)}s32sQ")
_DIGEST: Final = 32
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_SUPPORTED: Final = bool(_O_NOFOLLOW and _O_DIRECTORY and os.open in os.supports_dir_fd)
#: Directories already warned about in this process.
_warned: set[tuple[str, str]] = set()


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


def entry_name(key: str) -> str:
    """The file name of the entry for ``key`` in the cache directory."""
    return hashlib.sha256(key.encode()).hexdigest()[:32] + SUFFIX


def read_cache_file(directory: str, key: str, *, max_bytes: int) -> bytes | None:
    """The payload of the entry for ``key``, or None when there is none usable.

    An entry that is not a regular file of this user, is larger than ``max_bytes`` of
    payload allows, or whose header, key or checksum is not right is removed (the caller
    rebuilds it). A hit marks the entry as recently used.
    """
    dfd = _open_directory(directory, create=False)
    if dfd is None:
        return None
    name = entry_name(key)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # ELOOP: a symbolic link; EACCES, ENXIO, ...
            _drop(dfd, name, directory, f"not opened ({exc})")
            return None
        try:
            st = os.fstat(fd)
            problem = _entry_problem(st, max_bytes)
            if problem is not None:
                _drop(dfd, name, directory, problem)
                return None
            data = _read_all(fd, st.st_size)
            _touch(fd, name)
        finally:
            os.close(fd)
        payload = _unwrap(data, key)
        if isinstance(payload, str):
            _drop(dfd, name, directory, payload)
            return None
        return payload
    finally:
        os.close(dfd)


def write_cache_file(
    directory: str, key: str, data: bytes, *, budget: int = MAX_CACHE_BYTES
) -> None:
    """Write ``data`` as the entry for ``key`` atomically (an unpredictable temporary name
    made with ``O_EXCL | O_NOFOLLOW``, then a rename), then keep the directory under
    ``budget`` bytes. Failures are logged, not raised: a cache that cannot be written only
    loses its use."""
    dfd = _open_directory(directory, create=True)
    if dfd is None:
        return
    name = entry_name(key)
    tmp = temporary_name()
    try:
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                0o600,
                dir_fd=dfd,
            )
            try:
                _write_all(fd, _wrap(key, data))
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as exc:
            log.debug("cache entry %s in %s not written: %s", name, directory, exc)
            _unlink(dfd, tmp)
            return
        _prune(dfd, directory, budget, keep=name)
    finally:
        os.close(dfd)


def drop_cache_file(directory: str, key: str, why: str) -> None:
    """Remove the entry for ``key`` (it was found wrong: ``why``); the next use rebuilds it."""
    dfd = _open_directory(directory, create=False)
    if dfd is None:
        return
    try:
        _drop(dfd, entry_name(key), directory, why)
    finally:
        os.close(dfd)


# -- the directory ---------------------------------------------------------------------------


def _open_directory(directory: str, *, create: bool) -> int | None:
    """A descriptor of the cache directory when it may be used (see the module doc): a real
    directory, owned by this user, not writable by group or others; made with mode 0700 if
    missing and ``create``. None otherwise (warned about once)."""
    if not _SUPPORTED:
        return None
    path = directory.rstrip(os.sep) or os.sep  # "dir/" would follow a symbolic link
    flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            fd = os.open(path, flags)
        except OSError as exc:
            log.debug("cache directory %s not made: %s", path, exc)
            return None
    except OSError as exc:  # ELOOP: a symbolic link; ENOTDIR; EACCES
        _refuse(path, f"it cannot be opened as a directory without following links ({exc})")
        return None
    st = os.fstat(fd)
    problem = None
    if st.st_uid != os.geteuid():
        problem = f"it is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        problem = (
            f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"run chmod go-w on it"
        )
    if problem is not None:
        os.close(fd)
        _refuse(path, problem)
        return None
    return fd


def _refuse(directory: str, problem: str) -> None:
    if (directory, problem) in _warned:
        return
    _warned.add((directory, problem))
    log.warning(
        "npystore: the index cache directory %s is not used: %s (another user could plant "
        "entries in it). Point %s or index_cache= at a private directory, or turn it off.",
        directory,
        problem,
        CACHE_ENV,
    )


# -- entries -------------------------------------------------------------------------------


def _entry_problem(st: os.stat_result, max_bytes: int) -> str | None:
    """Why an opened entry is not taken (None: it is)."""
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file (mode {st.st_mode:o})"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user"
    if st.st_size > _HEAD.size + max_bytes + _DIGEST:
        return f"{st.st_size} bytes, more than an entry for this key can hold"
    if st.st_size < _HEAD.size + _DIGEST:
        return f"{st.st_size} bytes, shorter than an entry's header"
    return None


def _wrap(key: str, payload: bytes) -> bytes:
    head = _HEAD.pack(ENTRY_MAGIC, hashlib.sha256(key.encode()).digest(), len(payload))
    body = head + payload
    return body + hashlib.sha256(body).digest()


def _unwrap(data: bytes, key: str) -> bytes | str:
    """The payload of an entry, or what is wrong with it."""
    if len(data) < _HEAD.size + _DIGEST:
        return "truncated"
    magic, digest, length = _HEAD.unpack_from(data)
    if magic != ENTRY_MAGIC:
        return "not an entry of this format"
    if length != len(data) - _HEAD.size - _DIGEST:
        return f"declares {length} bytes, holds {len(data) - _HEAD.size - _DIGEST}"
    if hashlib.sha256(data[:-_DIGEST]).digest() != data[-_DIGEST:]:
        return "checksum mismatch (damaged)"
    if digest != hashlib.sha256(key.encode()).digest():
        return "the entry of another key"
    return data[_HEAD.size : -_DIGEST]


def _read_all(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes of ``fd`` (fewer if it ends sooner)."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        piece = os.read(fd, min(left, 2**24))
        if not piece:
            break
        parts.append(piece)
        left -= len(piece)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _touch(fd: int, name: str) -> None:
    """Mark an entry as recently used (its mtime orders the pruning)."""
    try:
        os.utime(fd)
    except OSError as exc:
        log.debug("cache entry %s not touched: %s", name, exc)


def _unlink(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.debug("cache entry %s not removed: %s", name, exc)


def _drop(dfd: int, name: str, directory: str, why: str) -> None:
    log.info("npystore: index cache entry %s in %s removed (%s)", name, directory, why)
    _unlink(dfd, name)


def _prune(dfd: int, directory: str, budget: int, keep: str) -> None:
    """Remove the least recently used entries until the directory holds ``budget`` bytes
    (never ``keep``, the entry just written), anything else that ends like an entry but is
    no regular file, and the temporary files of dead processes."""
    sweep(directory)
    entries = []
    try:
        with os.scandir(dfd) as it:
            for entry in it:
                if entry.name.endswith(SUFFIX):
                    st = entry.stat(follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        _unlink(dfd, entry.name)
                    else:
                        entries.append((st.st_mtime, st.st_size, entry.name))
    except OSError as exc:
        log.debug("cache directory %s not listed: %s", directory, exc)
        return
    total = sum(size for _, size, _ in entries)
    for _, size, name in sorted(entries):
        if total <= budget:
            break
        if name == keep:
            continue
        _unlink(dfd, name)
        total -= size
