"""Many objects at once: a list, a glob or a folder of URLs expanded into objects, and all
of them opened together (part of the fetch layer).

:func:`expand` turns what the user named into a list of :class:`Located` objects, in the
order the dataset has them:

- a list or tuple of URLs: each as it is, in the list's order;
- a glob (a pattern with ``*``, ``**`` across folders; ``?`` and ``[...]`` too once a ``*``
  makes it a pattern): one listing per prefix (fsspec's
  ``glob``, which lists the prefix before the first wildcard once, paginated), the matches
  in *natural* order (``emb_2`` before ``emb_10``, :func:`natural_key`);
- a folder (a URL ending in ``/``, or one that names a directory): the files in it with the
  wanted suffix, in natural order. A folder written by ``dask.array.to_npy_stack`` (an
  ``info`` file beside ``0.npy``, ``1.npy``, ...) must hold every number from 0 on; its
  ``info`` bytes are returned as they are, never unpickled (see
  :mod:`npystore.formats.stackinfo`).

:func:`open_all` then opens every object with its opening request, all in flight together:
on S3 one ranged ``GetObject`` per object (:func:`npystore.fetch.opening.s3_open`'s
request, with its retries and budget) on fsspec's event loop, at most
:data:`OPEN_CONCURRENCY` at a time; on other remote filesystems the same number of threads,
each running :func:`npystore.fetch.open_reader`; local files one after the other (a stat is
cheaper than a thread hop). Each object becomes a :class:`~npystore.fetch.RangeReader`
pinned to the identity its own opening answer carried.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from fsspec.implementations.local import LocalFileSystem

from npystore.errors import FormatError
from npystore.fetch import opening, remote, s3direct, s3many
from npystore.fetch.identity import ObjectIdentity
from npystore.fetch.naming import has_magic, is_folder, is_many
from npystore.fetch.open import OPEN_HEAD, open_reader
from npystore.fetch.reader import RangeReader
from npystore.fetch.remote import BUDGET_OPTION
from npystore.fetch.s3 import S3Ranges, is_s3

__all__ = [
    "OPEN_CONCURRENCY",
    "STACK_INFO",
    "Expanded",
    "Located",
    "expand",
    "has_magic",
    "is_folder",
    "is_many",
    "natural_key",
    "open_all",
]

_log = logging.getLogger(__name__)

#: Opening requests in flight at once (S3 GETs on the event loop, or threads elsewhere).
OPEN_CONCURRENCY: Final = 64
#: The file ``dask.array.to_npy_stack`` writes beside the shards (a pickle).
STACK_INFO: Final = "info"
#: Largest ``info`` file read from a ``to_npy_stack`` folder (dask's is ~200 bytes plus
#: 2-3 bytes per chunk).
STACK_INFO_MAX: Final = 16 * 2**20

_DIGITS: Final = re.compile(r"(\d+)")
_STACK_NAME: Final = re.compile(r"(\d+)\.npy")

#: Called with the number of objects opened since the last call (a progress bar).
OnOpen = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Located:
    """One object of a dataset, not opened yet.

    Attributes
    ----------
    fs : fsspec.AbstractFileSystem
        Its filesystem.
    path : str
        Its path on ``fs``.
    url : str
        Its name for messages and identities (protocol-qualified, or the local path).
    size : int or None
        Its size as the listing reported it (None: not listed).
    """

    fs: Any
    path: str
    url: str
    size: int | None = None


@dataclass(frozen=True, slots=True)
class Expanded:
    """What a list, glob or folder named.

    Attributes
    ----------
    objects : list of Located
        The objects, in the dataset's order.
    pattern : str or None
        The glob or folder URL they came from (None for a list).
    stack_info : bytes or None
        The bytes of a ``to_npy_stack`` folder's ``info`` file (never unpickled).
    """

    objects: list[Located]
    pattern: str | None
    stack_info: bytes | None = None


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key of natural order: runs of digits compare as numbers (``emb_2`` before
    ``emb_10``, ``9.npy`` before ``10.npy``), the rest as text; ties by the name itself."""
    parts = _DIGITS.split(name)  # text, digits, text, ...: the same kinds at the same places
    return (*((int(p) if i % 2 else p) for i, p in enumerate(parts)), name)


def _options(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    options = dict(storage_options or {})
    options.pop(BUDGET_OPTION, None)
    return options


def _located(fs: Any, path: str, info: Mapping[str, Any] | None = None) -> Located:
    url = path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)
    size = None if info is None else info.get("size")
    return Located(fs, path, url, size if isinstance(size, int) else None)


def expand(
    urls: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    storage_options: Mapping[str, Any] | None = None,
    *,
    suffixes: tuple[str, ...] = (".npy",),
) -> Expanded:
    """The objects ``urls`` names (see the module doc), in the dataset's order.

    Parameters
    ----------
    urls : str, path or sequence of them
        A list of URLs, a glob, or a folder.
    storage_options : mapping, optional
        fsspec's ``storage_options`` (npystore's own keys are ignored here).
    suffixes : tuple of str
        The file names a folder contributes (a glob or a list takes what it names).

    Raises
    ------
    FileNotFoundError
        Nothing matches the glob, the folder holds no such file, or a ``to_npy_stack``
        folder lacks a number.
    ValueError
        An empty list.
    """
    options = _options(storage_options)
    if isinstance(urls, list | tuple):
        if not urls:
            raise ValueError("an empty list of URLs: name at least one file")
        out = []
        for u in urls:
            if not isinstance(u, str | os.PathLike):
                raise TypeError(f"expected URLs (str or path), got {type(u).__name__} in the list")
            fs, path = opening.filesystem(os.fspath(u), options)
            out.append(_located(fs, path))
        return Expanded(out, None)
    url = os.fspath(urls)  # type: ignore[arg-type]
    fs, path = opening.filesystem(url, options)
    if has_magic(url):
        return Expanded(_glob(fs, path, url), url)
    return _folder(fs, path.rstrip("/") or path, url, suffixes)


def _glob(fs: Any, path: str, url: str) -> list[Located]:
    found = _s3_glob(fs, path) if is_s3(fs) else None
    if found is None:
        found = fs.glob(path, detail=True)
    files = [p for p, info in found.items() if info.get("type", "file") != "directory"]
    if not files:
        raise FileNotFoundError(
            errno.ENOENT,
            "no file matches the pattern (check the folder and the wildcards; '*' stays in "
            "one folder, '**' crosses folders)",
            url,
        )
    return [_located(fs, p, found[p]) for p in sorted(files, key=natural_key)]


def _s3_glob(fs: Any, path: str) -> dict[str, dict[str, Any]] | None:
    """``fs.glob(path, detail=True)`` of an S3 glob by one listing of the literal prefix
    before the first wildcard over the direct session
    (:func:`npystore.fetch.s3many.direct_list`), matched with fsspec's own glob pattern;
    None: s3fs lists it."""
    from fsspec.asyn import sync  # noqa: PLC0415 - async filesystems only
    from fsspec.utils import glob_translate  # noqa: PLC0415

    bucket, _, pattern = path.partition("/")
    first = min((i for i, c in enumerate(pattern) if c in "*?["), default=-1)
    if not pattern or first < 0 or any(c in bucket for c in "*?["):
        return None
    try:
        listed = sync(fs.loop, s3many.direct_list, fs, bucket, pattern[:first])
    except Exception as exc:  # s3fs lists it: its errors, its retries
        _log.debug("%s: direct listing failed (%r), listing through s3fs", path, exc)
        return None
    if listed is None:
        return None
    match = re.compile(glob_translate(path)).match
    return {
        f"{bucket}/{key}": {"name": f"{bucket}/{key}", "size": size, "type": "file"}
        for key, size in listed
        if not key.endswith("/") and match(f"{bucket}/{key}")
    }


def _folder(fs: Any, path: str, url: str, suffixes: tuple[str, ...]) -> Expanded:
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError as exc:
        raise opening.named(exc, url) from exc
    names = {str(e["name"]).rstrip("/").rsplit("/", 1)[-1]: e for e in entries}
    by_path = {str(e["name"]): e for e in entries}
    files = [
        str(e["name"])
        for name, e in names.items()
        if e.get("type", "file") != "directory" and name.endswith(suffixes)
    ]
    if not files:
        want = " or ".join(suffixes)
        raise FileNotFoundError(errno.ENOENT, f"the folder holds no {want} file", url)
    info: bytes | None = None
    numbered = sorted(
        (int(m.group(1)), f)
        for f in files
        if (m := _STACK_NAME.fullmatch(f.rstrip("/").rsplit("/", 1)[-1])) is not None
    )
    stack = STACK_INFO in names and names[STACK_INFO].get("type", "file") != "directory"
    if stack and numbered:  # an info file beside numbered shards: dask's to_npy_stack
        others = sorted(set(files) - {f for _, f in numbered})
        if others:
            raise FormatError(
                f"{url}: a dask to_npy_stack folder (an info file and numbered shards) also "
                f"holds {others[0]}; name the files to read as a list, or remove it"
            )
        gaps = [i for i, (n, _) in enumerate(numbered) if n != i]
        if gaps:
            raise FileNotFoundError(
                errno.ENOENT,
                f"a dask to_npy_stack folder (it has an info file) misses {gaps[0]}.npy: "
                f"its shards must be numbered 0.npy to {len(numbered) - 1}.npy",
                url,
            )
        size = int(names[STACK_INFO].get("size") or 0)
        if size > STACK_INFO_MAX:
            raise FormatError(
                f"{url}: the info file is {size} bytes, not the small pickle "
                f"dask.array.to_npy_stack writes"
            )
        info = fs.cat_file(str(names[STACK_INFO]["name"]))
        files = [f for _, f in numbered]
    else:
        files.sort(key=natural_key)
    return Expanded([_located(fs, f, by_path.get(f)) for f in files], url, info)


def open_all(
    objects: Sequence[Located],
    storage_options: Mapping[str, Any] | None = None,
    *,
    head: int = OPEN_HEAD,
    tail: int = 0,
    whole: int = 0,
    on_open: OnOpen | None = None,
    concurrency: int = OPEN_CONCURRENCY,
) -> list[RangeReader]:
    """Open every object, the opening requests all in flight together (see the module doc).

    Parameters
    ----------
    objects : sequence of Located
        What to open.
    storage_options : mapping, optional
        As :func:`npystore.fetch.open_reader` takes them (``npystore_read_budget``
        included).
    head : int
        Bytes read with the identity on S3 (the header of an ``.npy`` file).
    tail : int
        If positive, the last ``tail`` bytes instead (a ZIP archive's directory).
    whole : int
        On S3, an object the listing found at most this large is read whole by its opening
        request (an eager read of small files: one request each).
    on_open : callable, optional
        Called with the number of objects opened since its last call.
    concurrency : int
        Most opening requests in flight at once.

    Returns
    -------
    list of RangeReader
        One per object, in order, each pinned to the identity its opening answer carried.

    Raises
    ------
    FileNotFoundError, PermissionError, FetchError
        As :func:`npystore.fetch.open_reader` (the first failure in the dataset's order).
    """
    budget = remote.budget_from(dict(storage_options or {}).get(BUDGET_OPTION))
    readers: list[RangeReader | None] = [None] * len(objects)
    groups: dict[int, list[int]] = {}
    for k, obj in enumerate(objects):
        groups.setdefault(id(obj.fs), []).append(k)
    for ks in groups.values():
        fs = objects[ks[0]].fs
        if is_s3(fs) and (head > 0 or tail > 0):
            from fsspec.asyn import sync  # noqa: PLC0415 - async filesystems only

            count = -tail if tail > 0 else head
            batch = [objects[k] for k in ks]
            counts = [
                o.size if count > 0 and o.size is not None and count < o.size <= whole else count
                for o in batch
            ]
            got = sync(fs.loop, _open_s3, fs, batch, counts, budget, on_open, concurrency)
        elif isinstance(fs, LocalFileSystem):
            got = []
            for k in ks:
                got.append(open_reader(objects[k].path, storage_options, head=head, tail=tail))
                if on_open is not None:
                    on_open(1)
        else:
            got = _open_threads(
                [objects[k] for k in ks], storage_options, head, tail, on_open, concurrency
            )
        for k, reader in zip(ks, got, strict=True):
            readers[k] = reader
    return [r for r in readers if r is not None]


def _open_threads(
    objects: Sequence[Located],
    storage_options: Mapping[str, Any] | None,
    head: int,
    tail: int,
    on_open: OnOpen | None,
    concurrency: int,
) -> list[RangeReader]:
    def one(obj: Located) -> RangeReader:
        reader = open_reader(obj.url, storage_options, head=head, tail=tail)
        if on_open is not None:
            on_open(1)
        return reader

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(objects)))) as pool:
        return list(pool.map(one, objects))


async def _open_s3(
    fs: Any,
    objects: Sequence[Located],
    counts: Sequence[int],
    budget: float,
    on_open: OnOpen | None,
    concurrency: int,
) -> list[RangeReader]:
    """Open S3 objects, each with its first ``count`` bytes (the last ``-count`` if
    negative), at most ``concurrency`` opening GETs in flight."""
    sem = asyncio.Semaphore(max(1, concurrency))
    signed = await _signed_urls(fs, objects) if any(c > 0 for c in counts) else None

    async def one(obj: Located, count: int, url: s3direct.SignedUrl | None) -> RangeReader:
        async with sem:
            direct = await _direct_open(url, count) if url is not None and count > 0 else None
            if direct is None:
                url = None
                opened, got = await opening.s3_opening(fs, obj.path, obj.url, count, budget)
            else:
                opened, got = direct
        if on_open is not None:
            on_open(1)
        identity = ObjectIdentity.from_info(obj.url, opened)
        if count < 0:
            return RangeReader(fs, obj.path, identity, tail=got, budget=budget)
        reader = RangeReader(fs, obj.path, identity, head=got, budget=budget)
        transport = reader.transport
        if url is not None and isinstance(transport, S3Ranges) and not opened.get("VersionId"):
            transport.use_signed(url)  # the URL of the opening serves the reads too
        return reader

    urls = signed or [None] * len(objects)
    tasks = [
        asyncio.ensure_future(one(o, c, u)) for o, c, u in zip(objects, counts, urls, strict=True)
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:  # the first failure in the dataset's order
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    return [task.result() for task in tasks]


async def _signed_urls(
    fs: Any, objects: Sequence[Located]
) -> list[s3direct.SignedUrl | None] | None:
    """Presigned URLs for the opening GETs (:func:`npystore.fetch.s3many.direct_urls`),
    one per object (None for an object named with a version); None: botocore opens all."""
    by_bucket: dict[str, list[int]] = {}
    keys: list[str] = []
    for k, obj in enumerate(objects):
        bucket, key, version = fs.split_path(obj.path)
        keys.append(key)
        if not version:
            by_bucket.setdefault(bucket, []).append(k)
    out: list[s3direct.SignedUrl | None] = [None] * len(objects)
    for bucket, ks in by_bucket.items():
        try:
            got = await s3many.direct_urls(fs, bucket, [keys[k] for k in ks])
        except Exception as exc:  # any failure to presign: botocore opens these objects
            _log.debug("%s: no presigned URLs, opening through botocore: %r", bucket, exc)
            got = None
        if got is None:
            continue
        for k, url in zip(ks, got, strict=True):
            out[k] = url
    return out


async def _direct_open(
    signed: s3direct.SignedUrl, count: int
) -> tuple[dict[str, Any], bytes] | None:
    """The identity (as an ``info`` dict) and first ``count`` bytes of an object from one
    direct GET; None when that path cannot answer (any error, an answer without ETag or
    total size): the caller opens the object through botocore, whose retries and error
    messages are the reference."""
    seen: dict[str, str | None] = {}

    def check(etag: str | None, version: str | None, content_range: str) -> None:
        seen.update(etag=etag, version=version)

    try:
        content_range, data = await s3direct.direct_get(signed, 0, count, check=check)
    except Exception as exc:  # botocore opens it: its retries, its errors
        _log.debug("%s: direct opening GET failed (%r), opening through botocore", signed, exc)
        return None
    match = opening.CONTENT_RANGE.fullmatch(content_range)
    if match is None or match.group(3) == "*" or int(match.group(1)) != 0 or not seen.get("etag"):
        return None
    size = int(match.group(3))
    if len(data) != min(count, size):
        return None
    return {"size": size, "ETag": seen["etag"], "VersionId": seen.get("version")}, bytes(data)
