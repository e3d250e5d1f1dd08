"""Who an object was when it was opened: :class:`ObjectIdentity` (part of the fetch layer).

A :class:`~npystore.fetch.RangeReader` is bound to one identity: its size, and the version
markers its filesystem reported (ETag, version id, mtime, inode, ...). Every backend checks
its reads against it (see :mod:`npystore.fetch.transport`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from npystore.errors import FetchError

__all__ = ["ObjectIdentity"]

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
        Version markers the filesystem reported (ETag, version id, mtime, inode, ...).
    """

    url: str
    size: int
    fields: tuple[tuple[str, str], ...]

    @classmethod
    def from_info(cls, url: str, info: Mapping[str, Any]) -> ObjectIdentity:
        """Build an identity from an fsspec ``info()`` dict."""
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            raise FetchError(f"{url}: the filesystem reports no valid size ({size!r})")
        if info.get("type") == "directory":
            raise IsADirectoryError(f"{url}: is a directory, expected a file")
        fields = tuple((key, str(info[key])) for key in _IDENTITY_KEYS if info.get(key))
        return cls(url=url, size=size, fields=fields)
