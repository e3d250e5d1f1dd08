"""Opening: :func:`open_reader` turns a URL (or a file object) into a bound reader, and
:func:`write_object` writes a whole object (part of the fetch layer).

Both take fsspec's ``storage_options`` plus npystore's own ``"npystore_read_budget"``
(removed before the filesystem is made). Opening captures the object's size and identity
in one request: on S3 and GCS a ranged GET that carries the object's first (or last) bytes
too (:mod:`npystore.fetch.opening`, :mod:`npystore.fetch.gcs`), on Azure the first
(:mod:`npystore.fetch.azure`: no suffix ranges there), elsewhere ``info``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from npystore.fetch.budget import BUDGET_OPTION, budget_from
from npystore.fetch.fileobj import BinaryFile, FileSource, is_file_object
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.local import open_local
from npystore.fetch.reader import RangeReader, is_local

__all__ = ["OPEN_HEAD", "open_reader", "write_object"]

#: Bytes read together with the identity when an S3 object is opened (see :func:`open_reader`):
#: enough to recognise every format and to hold a typical .npy header, no array data.
OPEN_HEAD: Final = 128


def write_object(url: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write ``data`` as the whole object at ``url`` (any fsspec URL; the package's tools'
    small outputs, e.g. ``npystore refs -o``)."""
    from npystore.fetch import opening  # noqa: PLC0415 - fsspec, loaded when used

    options = dict(storage_options or {})
    options.pop(BUDGET_OPTION, None)  # npystore's own, for reads
    fs, path = opening.filesystem(url, options)
    with fs.open(path, "wb") as f:
        f.write(data)


def open_reader(
    url: str | BinaryFile,
    storage_options: Mapping[str, Any] | None = None,
    *,
    head: int = OPEN_HEAD,
    tail: int = 0,
) -> RangeReader:
    """Open a reader on ``url`` (any fsspec URL, chained URLs included).

    One request captures the object's size and identity. On S3, GCS and Azure that request
    is a ranged GET of the first ``head`` bytes (the magic bytes every format starts with; a
    format whose metadata sits at the start, like HDF5, asks for more, since a round trip
    costs about the same for 128 bytes or 64 KiB); a local file's first ``head`` bytes are
    read from the descriptor its identity (``fstat``) comes from; elsewhere it is ``info``
    and no data is read. Reads inside those bytes are served from them (the snapshot taken
    at open); data reads go to the object, pinned to its identity.

    Parameters
    ----------
    url : str or file object
        Local path or fsspec URL, e.g. ``"s3://bucket/a.npy"`` or ``"simplecache::s3://..."``;
        or an open, seekable binary file object, read from its current position to its end
        (see :mod:`npystore.fetch.fileobj`; no request, ``storage_options`` must be empty).
    storage_options : mapping, optional
        Keyword arguments for the filesystem (fsspec's ``storage_options``), plus npystore's
        own ``"npystore_read_budget"``: seconds one remote byte range (and the opening
        request) may take, all retries included (default: the environment variable
        ``NPYSTORE_READ_BUDGET``, else :data:`~npystore.fetch.remote.READ_BUDGET`, 300 s;
        ``inf`` for none). It is removed before the filesystem is made.
    head : int
        Bytes to read with the identity on S3, GCS, Azure and local files (0: ``info``, or
        ``os.stat``, only).
    tail : int
        If positive, read the object's last ``tail`` bytes with the identity instead (one
        suffix-range GET on S3 and GCS; Azure has no suffix ranges: its opening GET of the
        first bytes, the tail read after it), for formats whose index is at the end.

    Returns
    -------
    RangeReader

    Raises
    ------
    FetchError
        The opening request failed after its attempts or its time budget.
    FileNotFoundError, PermissionError
        The object does not exist, or may not be read (the message names the URL).
    UnsupportedError
        A protocol fsspec does not know; a file object that cannot seek.
    MissingDependencyError
        The protocol's filesystem package (s3fs, aiohttp, gcsfs, ...) is not installed (an
        :class:`UnsupportedError` and an :class:`ImportError`).
    ValueError
        ``npystore_read_budget`` (or ``NPYSTORE_READ_BUDGET``) is not a positive number.
    """
    if is_file_object(url):
        if storage_options:
            raise TypeError("storage_options apply to URLs, not to an open file object")
        source = FileSource(url)
        identity = ObjectIdentity(source.name, source.size, source.fields)
        return RangeReader(None, "", identity, source=source)
    if not isinstance(url, (str, os.PathLike)):
        raise TypeError(
            f"expected a path, a URL or a binary file object with read, seek and tell, "
            f"got {type(url).__name__}"
        )
    options = dict(storage_options or {})
    budget = budget_from(options.pop(BUDGET_OPTION, None))
    plain = None if options else local_path(os.fspath(url))
    if plain is not None:  # no fsspec: it costs more to import than a small file to read
        return _local_reader(None, plain, plain, budget, head)
    # a remote object (or options for fsspec): the opening machinery and the backends
    from npystore.fetch import opening  # noqa: PLC0415
    from npystore.fetch.azure import azure_open  # noqa: PLC0415

    fs, path = opening.filesystem(os.fspath(url), options)
    local = is_local(fs)
    name = path if local else fs.unstrip_protocol(path)
    # S3, GCS and Azure: one GET of the first bytes; S3 and GCS: of the last (Azure has no
    # suffix ranges: an archive's tail is read after its identity)
    opener = _opener(fs)
    if tail > 0 and opener is not None and opener is not azure_open:
        opened, last = opener(fs, path, name, -tail, budget)
        return RangeReader(
            fs, path, ObjectIdentity.from_info(name, opened), tail=last, budget=budget
        )
    if head > 0 and opener is not None:
        opened, first = opener(fs, path, name, head, budget)
        return RangeReader(
            fs, path, ObjectIdentity.from_info(name, opened), head=first, budget=budget
        )
    if local:
        return _local_reader(fs, path, name, budget, head)
    info = opening.info_within(fs, path, name, budget)
    return RangeReader(fs, path, ObjectIdentity.from_info(name, info), budget=budget)


def _opener(fs: Any) -> Callable[..., tuple[Mapping[str, Any], bytes]] | None:
    """The opening GET of ``fs``'s kind of store (None: ``info``)."""
    from npystore.fetch import opening  # noqa: PLC0415
    from npystore.fetch.azure import azure_open, is_azure  # noqa: PLC0415
    from npystore.fetch.gcs import gcs_open, is_gcs  # noqa: PLC0415
    from npystore.fetch.s3 import is_s3  # noqa: PLC0415

    if is_s3(fs):
        return opening.s3_open
    if is_gcs(fs):
        return gcs_open
    if is_azure(fs):
        return azure_open
    return None


def local_path(url: str | bytes) -> str | None:
    """The absolute path fsspec's ``LocalFileSystem`` makes of ``url`` when ``url`` is a
    plain local path (no protocol, no chain), else None: such a path is opened without
    fsspec (its import costs more than reading a small file)."""
    if not isinstance(url, str) or not url or "::" in url or url.startswith(("data:", "file:")):
        return None
    if "://" in url and len(url.split("://", 1)[0]) > 1:
        return None  # a protocol
    if os.sep != "/":  # Windows paths: fsspec's own rules
        return None
    path = url
    if path.startswith("~"):
        path = os.path.expanduser(path)
    elif not path.startswith("/"):
        path = path[2:] if path.startswith("./") else "" if path == "." else path
        path = f"{os.getcwd()}/{path}"
    return path.rstrip("/") or "/"


def _local_reader(fs: Any, path: str, name: str, budget: float, head: int) -> RangeReader:
    """A reader of a local file (``fs`` None: no fsspec), opened by
    :func:`~npystore.fetch.local.open_local`: with ``head``, its identity (``fstat``) and
    first bytes from one descriptor (the prefix every open reads, and a small MAT-file's
    tags, without another open); a missing or forbidden file raises
    ``FileNotFoundError``/``PermissionError`` naming it, a directory ``IsADirectoryError``."""
    identity, first = open_local(path, name, head)
    return RangeReader(fs, path, identity, head=first, budget=budget)
