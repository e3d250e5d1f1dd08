"""What a URL names by its form: one object or many (a list, a glob, a folder), answered
without the many-objects machinery (part of the fetch layer).

Every opener asks these first (:func:`npystore.load`, ``open_npz``, the xarray engine,
``npystore info``...), so they import nothing but the standard library: naming a single
local file must not cost fsspec and asyncio. :mod:`npystore.fetch.many` expands and opens
what they find to be many.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["has_magic", "is_folder", "is_many", "is_manifest_url"]


def has_magic(url: str) -> bool:
    """Whether ``url`` is a glob pattern: it has a ``*`` (``?`` and ``[...]`` then match as
    in fsspec's ``glob``). A ``?`` or ``[`` alone does not make a pattern: http URLs carry
    queries, and object names may hold brackets."""
    return "*" in url


def is_many(url: object) -> bool:
    """Whether ``url`` names several objects by its form alone: a list or tuple, a glob
    pattern, or a URL ending in ``/`` (a folder)."""
    if isinstance(url, list | tuple):
        return True
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    return isinstance(url, str) and (has_magic(url) or url.endswith(("/", os.sep)))


def is_folder(
    url: object,
    storage_options: Mapping[str, Any] | None = None,
    *,
    ask: bool = False,
) -> bool:
    """Whether ``url`` names a folder: a local directory (a stat); a remote one only when
    ``ask`` is true (one listing request; the caller asks after a plain open failed).
    Anything but a path or URL (an open file object) is not a folder."""
    if not isinstance(url, str | os.PathLike):
        return False
    text = os.fspath(url)
    if "::" not in text and (text.startswith("file://") or "://" not in text):
        return os.path.isdir(text.removeprefix("file://"))
    if not ask:
        return False
    from npystore.fetch import opening  # noqa: PLC0415 - a remote listing: fsspec
    from npystore.fetch.many import _options  # noqa: PLC0415

    fs, path = opening.filesystem(text, _options(storage_options))
    try:
        return bool(fs.isdir(path))
    except (OSError, ValueError):
        return False


def is_manifest_url(url: object) -> bool:
    """Whether ``url`` names a manifest by its form: a string ending in ``.json``."""
    return isinstance(url, str) and url.lower().endswith(".json")
