"""Who an object was when it was opened: :class:`ObjectIdentity` (part of the fetch layer).

A :class:`~npystore.fetch.RangeReader` is bound to one identity: its size, and the version
markers its filesystem reported (ETag, version id, generation; for a local file its device,
inode, ``mtime_ns`` and ``ctime_ns``). Every backend checks its reads against it (see
:mod:`npystore.fetch.transport`).

The identity is also the key of what a process keeps between opens (the compressed bytes
of :mod:`npystore.read.memo`) and of the index cache on disk, so it must tell apart any two
contents an object had. It is *strong* when it does:

- a local file (:meth:`ObjectIdentity.from_stat`): device, inode, size, ``st_mtime_ns`` and
  ``st_ctime_ns``. The ctime cannot be set from user space, and every write, truncation or
  rename changes it; on Linux 6.13 and later (multigrain timestamps) a file whose ctime was
  looked at gets a distinct ``ctime_ns`` at its next change, so the identity seen at open
  changes with the first write after it. Older kernels and filesystems with coarse
  timestamps (one tick, 1-10 ms; FAT: 2 s) cannot see a same-size rewrite made within the
  tick of the open;
- an object whose filesystem reports a strong version marker: a strong ``ETag`` (S3, http
  ``"..."``, not ``W/"..."``), a ``VersionId``, a generation (gcs) or an MD5 hash.

Any other identity (an http server without ETags or with weak ones, a filesystem reporting
only a modification time, an in-memory file object) is weak: :meth:`ObjectIdentity.from_info`
adds a per-open token (``("open", random)``) to it, so nothing kept from one open is served
to another, and no index cache entry is read or written for it (:attr:`strong`).
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from npystore.errors import FetchError

__all__ = ["LOCAL_KEYS", "ObjectIdentity", "StatPin", "stat_changes", "stat_fields"]

#: The ``info()`` keys that mark an object's version, in the order they are kept.
_IDENTITY_KEYS: Final = (
    "ETag",
    "etag",
    "VersionId",
    "version_id",
    "LastModified",
    "last_modified",
    "mtime",
    "modified",
    "created",
    "ino",
    "generation",
    "md5Hash",
)
#: The keys among those that name one content (an ETag only when it is not weak).
_STRONG_KEYS: Final = frozenset(
    {"ETag", "etag", "VersionId", "version_id", "generation", "md5Hash"}
)
#: A local file's identity fields (besides its size), from ``os.stat``.
LOCAL_KEYS: Final = ("dev", "ino", "mtime_ns", "ctime_ns", "host")
#: The field that makes a weak identity unique to one open.
_OPEN_KEY: Final = "open"


def _host() -> str:
    """This machine's name (a device number means something on its machine only)."""
    global _HOST  # noqa: PLW0603 - asked once per process
    if _HOST is None:
        _HOST = socket.gethostname()
    return _HOST


_HOST: str | None = None


def stat_fields(st: os.stat_result) -> tuple[tuple[str, str], ...]:
    """A local file's identity fields from its ``stat``: device, inode, ``mtime_ns``,
    ``ctime_ns`` and the machine (see :func:`stat_changes`)."""
    return (
        ("dev", str(st.st_dev)),
        ("ino", str(st.st_ino)),
        ("mtime_ns", str(st.st_mtime_ns)),
        ("ctime_ns", str(st.st_ctime_ns)),
        ("host", _host()),
    )


class StatPin:
    """A local file's identity at open (``fields`` from :func:`stat_fields` and ``size``),
    compared with an ``fstat`` in one tuple comparison (:meth:`changes`)."""

    __slots__ = ("_expected", "_fields", "_size", "_with_dev")

    def __init__(self, fields: tuple[tuple[str, str], ...], size: int) -> None:
        was = dict(fields)
        self._fields = fields
        self._size = size
        #: The device number is compared on the machine that opened the file only.
        self._with_dev = was.get("host") == _host()
        self._expected = (
            size,
            _int(was.get("ino")),
            _int(was.get("mtime_ns")),
            _int(was.get("ctime_ns")),
            _int(was.get("dev")) if self._with_dev else 0,
        )

    def changes(self, st: os.stat_result) -> str | None:
        """What differs between the identity and ``st`` (see :func:`stat_changes`), or None."""
        now = (
            st.st_size,
            st.st_ino,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_dev if self._with_dev else 0,
        )
        if now == self._expected:
            return None
        return stat_changes(self._fields, self._size, st)


def _int(text: str | None) -> int | None:
    """An identity field as the number it was made from (None when it is not one)."""
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def stat_changes(fields: tuple[tuple[str, str], ...], size: int, st: os.stat_result) -> str | None:
    """What differs between a local file's identity at open (``fields`` from
    :func:`stat_fields` and ``size``) and its ``stat`` now, or None.

    The device number is compared on the machine that opened the file only: a dask worker
    on another machine reading the same path over a network filesystem sees another device
    number for the same file (its inode and timestamps are the server's)."""
    was = dict(fields)
    now = dict(stat_fields(st))
    keys = [k for k in LOCAL_KEYS if k != "host" and (k != "dev" or was.get("host") == _host())]
    changed = [f"{k} {was.get(k)} -> {now[k]}" for k in keys if was.get(k) != now[k]]
    if st.st_size != size:
        changed.insert(0, f"size {size} -> {st.st_size}")
    return ", ".join(changed) or None


@dataclass(frozen=True, slots=True)
class ObjectIdentity:
    """Who an object was when it was opened.

    Attributes
    ----------
    url : str
        The protocol-qualified path, for messages and dask names.
    size : int
        Size in bytes.
    fields : tuple of (str, str)
        Version markers the filesystem reported (ETag, version id, generation; a local
        file's device, inode, mtime and ctime in nanoseconds), and for a weak identity a
        per-open token (``"open"``).
    """

    url: str
    size: int
    fields: tuple[tuple[str, str], ...]

    @classmethod
    def from_info(cls, url: str, info: Mapping[str, Any]) -> ObjectIdentity:
        """Build an identity from an fsspec ``info()`` dict (with a per-open token when it
        holds no strong version marker)."""
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise FetchError(f"{url}: the filesystem reports no valid size ({size!r})")
        if info.get("type") == "directory":
            raise IsADirectoryError(f"{url}: is a directory, expected a file")
        fields = tuple((key, str(info[key])) for key in _IDENTITY_KEYS if info.get(key))
        return cls(url=url, size=size, fields=cls.pinned(fields))

    @classmethod
    def from_stat(cls, url: str, st: os.stat_result) -> ObjectIdentity:
        """A local file's identity from its ``os.stat`` (strong; see the module doc)."""
        return cls(url=url, size=st.st_size, fields=stat_fields(st))

    @staticmethod
    def pinned(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        """``fields``, plus a per-open token when none of them names one content."""
        if any(_strong(key, value) for key, value in fields):
            return fields
        return (*fields, (_OPEN_KEY, secrets.token_hex(8)))

    @property
    def markers(self) -> tuple[tuple[str, str], ...]:
        """The version markers the object reported: :attr:`fields` without the per-open
        token of a weak identity (what a later run can compare, e.g. ``convert``'s resume)."""
        return tuple((key, value) for key, value in self.fields if key != _OPEN_KEY)

    @property
    def strong(self) -> bool:
        """Whether the identity names one content, so that what was kept for it (compressed
        bytes, a cached index) may serve another open of the same object."""
        return all(key != _OPEN_KEY for key, _ in self.fields)


def _strong(key: str, value: str) -> bool:
    if key in ("ETag", "etag"):
        return bool(value) and not value.startswith(("W/", "w/"))
    return key in _STRONG_KEYS
