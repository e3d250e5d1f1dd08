"""The only IO in npystore: :class:`RangeReader`, byte ranges of one object on any fsspec URL.

A reader is bound to one object and to the identity it had when it was opened (size plus
ETag, version id or generation; a local file's device, inode, mtime and ctime; see
:mod:`npystore.fetch.identity`). On S3, GCS and Azure the identity comes from a ranged GET
of the object's first bytes (no ``HeadObject``), so opening and sniffing a file is one
round trip.
It reads ranges through one backend, chosen once when the reader is made:

- local files (``LocalFileSystem``): ``os.preadv`` straight into the caller's buffers, large
  ranges split across a small thread pool (the GIL is released while the kernel copies);
- S3 (s3fs): one ``GetObject`` per range, all in flight at once on fsspec's event loop, each
  *pinned* to the object opened: ``VersionId`` when the store reported one, else
  ``If-Match: <ETag>``; a replaced object answers 412 and the read raises
  :class:`~npystore.errors.ConsistencyError` (old and new bytes never mix in one result).
  Servers that ignore the pin exist (rclone's ``serve s3`` answers ``If-Match`` with 200), so
  every response's ``ETag`` (and ``VersionId``, when both sides have one) is compared with the
  identity before its body is read, and its ``Content-Range`` total with the size at open;
- http(s): concurrent ranged GETs on fsspec's event loop and session, each with ``If-Match``
  and the strong ETag the server reported at open (a replaced object answers 412), and each
  response's ``ETag`` compared with it (a mismatch, or no ETag at all, is a
  :class:`~npystore.errors.ConsistencyError`); without a strong ETag at open, unpinned;
- GCS (gcsfs): one media GET per range from the *generation* opened, each answer's
  ``X-Goog-Generation`` compared with it (see :mod:`npystore.fetch.gcs`);
- Azure Blob (adlfs): one GET per range with ``If-Match`` and the ETag opened, over a SAS
  URL and a bare aiohttp session (the SDK for other credentials), each answer's ETag
  compared with it (see :mod:`npystore.fetch.azure`);
- other async filesystems: one ``_cat_file`` per range, concurrently;
- everything else: ``fs.cat_ranges``;
- an open binary file object instead of a URL: positional reads (see :mod:`npystore.fetch.fileobj`).

An http(s) server that ignores ``Range`` (``python -m http.server``) answers the first ranged
GET with ``200`` and the whole object: an object of at most :data:`IGNORED_RANGE_MAX` bytes is
kept from that answer and every later read of the reader is served from it (one GET in all);
a larger one raises :class:`~npystore.errors.UnsupportedError` at once, without reading the
body or retrying, saying to read it through ``simplecache::`` or a download.

Remote results are length-checked; a short body, a dropped connection or a server error is
retried with exponential backoff and jitter, up to :data:`REMOTE_ATTEMPTS` attempts and within
a time budget per range (see :mod:`npystore.fetch.remote`), before a
:class:`~npystore.errors.FetchError` names the URL, the range and the last problem.

Readers pickle as ``(filesystem, path, identity, budget)``: a dask worker rebuilds the
filesystem once (fsspec caches instances), never once per chunk.

The package's modules, one job each (this module only re-exports their public names):

- :mod:`~npystore.fetch.open`: :func:`open_reader` (URL and options handling, the
  opening request) and :func:`write_object`;
- :mod:`~npystore.fetch.reader`: :class:`RangeReader`, and the choice of its backend;
- :mod:`~npystore.fetch.identity`: :class:`ObjectIdentity`;
- :mod:`~npystore.fetch.transport`: the backend interface, remote ranges split into parts,
  concurrent async reads under the budget, the checks of pinned answers;
- the backends: :mod:`~npystore.fetch.local` (local files, file objects),
  :mod:`~npystore.fetch.s3`, :mod:`~npystore.fetch.gcs`, :mod:`~npystore.fetch.azure`,
  :mod:`~npystore.fetch.http`, :mod:`~npystore.fetch.generic` (every other fsspec
  filesystem);
- their helpers: :mod:`~npystore.fetch.opening` (the opening request),
  :mod:`~npystore.fetch.openget` (the retry loop of the opening GETs),
  :mod:`~npystore.fetch.remote` (retries and budgets), :mod:`~npystore.fetch.s3direct`
  (presigned S3 GETs), :mod:`~npystore.fetch.fileobj` (open file objects);
- :mod:`~npystore.fetch.many`, :mod:`~npystore.fetch.s3many`: many objects named by a list,
  a glob or a folder, opened together (S3: presigned direct GETs, direct listings);
- :mod:`~npystore.fetch.cache`: local cache files; :mod:`~npystore.fetch.blockfile`: a
  file object over a reader;
- writing: :mod:`~npystore.fetch.sink` (objects written by parts and committed atomically)
  and :mod:`~npystore.fetch.tempfiles` (their temporary files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npystore.fetch.budget import (
    BUDGET_ENV,
    BUDGET_OPTION,
    READ_BUDGET,
    REMOTE_ATTEMPTS,
    RETRY_DELAY,
    RETRY_DELAY_MAX,
)
from npystore.fetch.cache import read_cache_file, write_cache_file
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.local import LOCAL_PART_SIZE
from npystore.fetch.open import OPEN_HEAD, open_reader, write_object
from npystore.fetch.reader import (
    RangeReader,
    _restore,  # noqa: F401 - pickles made before the split name it here
    _restore_file,  # noqa: F401 - likewise
)
from npystore.fetch.transport import REMOTE_PART_SIZE

if TYPE_CHECKING:
    from npystore.fetch.http import IGNORED_RANGE_MAX


def __getattr__(name: str) -> Any:
    # the http backend (and asyncio, ssl with it) loads when a remote object is read
    if name == "IGNORED_RANGE_MAX":
        from npystore.fetch.http import IGNORED_RANGE_MAX  # noqa: PLC0415

        return IGNORED_RANGE_MAX
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUDGET_ENV",
    "BUDGET_OPTION",
    "READ_BUDGET",
    "REMOTE_ATTEMPTS",
    "RETRY_DELAY",
    "RETRY_DELAY_MAX",
    "IGNORED_RANGE_MAX",
    "LOCAL_PART_SIZE",
    "OPEN_HEAD",
    "REMOTE_PART_SIZE",
    "ObjectIdentity",
    "RangeReader",
    "open_reader",
    "read_cache_file",
    "write_cache_file",
    "write_object",
]
