"""Opening a remote object: its identity from one request, retried within the budget.

Part of the fetch layer (see :mod:`npystore.fetch`). On S3 an object is opened with one
ranged ``GetObject`` of its first (or last) bytes, whose answer carries what ``HeadObject``
would (ETag, LastModified, VersionId, the size in ``Content-Range``): :func:`s3_open`.
Elsewhere the identity is the filesystem's ``info``, asked within the budget on async
filesystems: :func:`info_within`. :func:`get_object` is the one ranged ``GetObject`` that
both the opening and botocore-served range reads use.

One retry budget: npystore's requests through botocore are retried by npystore alone (see
:mod:`npystore.fetch.remote`). botocore's retry handler is told not to retry them (a
``needs-retry`` handler that answers "no" for npystore's own requests, which a context
variable marks, so the filesystem's other calls keep botocore's retries) and s3fs's retry
wrapper is not used for them; an unreachable endpoint then fails after npystore's attempts
(about 2 s) instead of botocore's attempts times npystore's (44 s).

:func:`filesystem` makes the filesystem of a URL and turns fsspec's errors for an unknown
protocol or a missing implementation into :class:`~npystore.errors.UnsupportedError` and
:class:`~npystore.errors.MissingDependencyError` naming the protocol and the package.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from npystore.errors import (
    ConsistencyError,
    MissingDependencyError,
    UnsupportedError,
    missing_dependency,
)
from npystore.fetch import remote
from npystore.fetch.remote import READ_BUDGET, REMOTE_ATTEMPTS

__all__ = [
    "CONTENT_RANGE",
    "call_s3",
    "chain_options",
    "chain_protocols",
    "error_code",
    "filesystem",
    "get_object",
    "info_attempts",
    "info_within",
    "named",
    "s3_open",
    "s3_opening",
]

#: ``Content-Range: bytes first-last/total`` (total ``*`` when unknown).
CONTENT_RANGE: Final = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
#: Most bytes taken from a response stream at a time when it is copied into a buffer.
_STREAM_PIECE: Final = 2**20
#: Protocols whose implementation comes with an npystore extra: (package, extra).
_EXTRAS: Final = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "http": ("aiohttp", "http"),
    "https": ("aiohttp", "http"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
}
#: HTTP statuses an ``info`` request is not retried for (the answer will not change).
_FINAL_STATUSES: Final = frozenset({400, 401, 403, 404, 405, 410})

#: True while npystore sends one of its own requests through botocore (see the module doc).
_OWN_RETRIES: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "npystore_own_retries", default=False
)
_NO_RETRY_ID: Final = "npystore-retries-its-own-requests"


# -- the filesystem of a URL ---------------------------------------------------------------


def filesystem(url: str, options: Mapping[str, Any]) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs(url, **options)``, with clear errors for protocols fsspec
    does not know (:class:`~npystore.errors.UnsupportedError`) or whose package is missing
    (:class:`~npystore.errors.MissingDependencyError` naming it, and the npystore extra that
    installs it where there is one). Every protocol of a chained URL is checked.

    Two traps of fsspec are avoided:

    - a chained URL's top-level options go to its *first* protocol (fsspec's rule), so
      ``simplecache::s3://...`` with ``key`` or ``client_kwargs`` at the top would give
      them to the cache, which ignores them, and S3 would try real AWS with no
      credentials, retrying for most of a minute. Options the first protocol does not take
      and an inner one does are given to that inner protocol, with a warning that says how
      to write them (:func:`chain_options`);
    - npystore's calls are blocking calls on fsspec's IO loop, which an *asynchronous*
      instance cannot serve ("Loop is not running"). ``asynchronous`` and ``loop`` are
      removed from the options (kerchunk and zarr add ``asynchronous=True`` to the options
      dict they are given, so a dict reused after ``xr.open_dataset(..., engine="kerchunk")``
      carries it), and an asynchronous instance that fsspec's instance cache hands back
      is never taken: a new one is made for npystore (:func:`_ours`).
    """
    import fsspec  # noqa: PLC0415 - the fetch layer's own dependency, loaded with it

    options = _blocking(chain_options(url, options))
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
        if not _ours(fs):
            fs, path = fsspec.core.url_to_fs(url, **_fresh(url, options))
    except (ValueError, ImportError) as exc:
        problem = _protocol_problem(url)
        if problem is None:
            raise
        raise problem from exc
    return fs, path


#: Options every fsspec filesystem takes (``AbstractFileSystem``'s own, the instance cache's,
#: the async ones'): they stay where they are in a chain.
_ANY_FILESYSTEM: Final = frozenset(
    {
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "asynchronous",
        "loop",
        "batch_size",
    }
)


def _takes(cls: type) -> set[str]:
    """The keyword options a filesystem class's ``__init__`` names (over its MRO)."""
    import inspect  # noqa: PLC0415 - only for chained URLs

    names: set[str] = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names.update(p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
    names.discard("self")
    return names


def chain_options(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` for a chained URL, with the top-level options meant for an inner
    protocol moved under that protocol's name (and a warning); ``options`` as they are
    for a plain URL, or when every top-level option is one the first protocol takes.

    An option is moved when the first protocol's filesystem class does not name it and an
    inner protocol's does (``key``, ``client_kwargs``, ``anon`` of ``s3`` under
    ``simplecache``). Options already under the inner protocol's name win over moved ones.
    """
    out = dict(options)
    if "::" not in url or not out:
        return out
    import warnings  # noqa: PLC0415

    import fsspec  # noqa: PLC0415

    protocols = chain_protocols(url)
    try:
        classes = [fsspec.get_filesystem_class(p) for p in protocols]
    except (ValueError, ImportError):
        return out  # the protocol's own error comes from url_to_fs
    first = _takes(classes[0]) | _ANY_FILESYSTEM
    stray = [k for k in out if k not in first and k not in protocols]
    for protocol, cls in zip(protocols[1:], classes[1:], strict=True):
        meant = [k for k in stray if k in _takes(cls)]
        if not meant:
            continue
        moved = {k: out.pop(k) for k in meant}
        nested = out.get(protocol)
        out[protocol] = {**moved, **(nested if isinstance(nested, Mapping) else {})}
        stray = [k for k in stray if k not in meant]
        warnings.warn(
            f"{url}: storage_options {sorted(moved)} are options of {protocol!r}, not of "
            f"{protocols[0]!r}; fsspec gives a chained URL's top-level options to its first "
            f"protocol, so npystore passed them to {protocol!r}. Write them under the "
            f"protocol's name: storage_options={{{protocol!r}: {{...}}}} (the options of "
            f"{protocols[0]!r} itself stay at the top)",
            UserWarning,
            stacklevel=4,
        )
    return out


#: Options that make an asynchronous filesystem (npystore's calls are blocking ones).
_ASYNC_OPTIONS: Final = ("asynchronous", "loop")


def _blocking(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (top level and per protocol) without ``asynchronous`` and ``loop``."""
    out = {k: v for k, v in options.items() if k not in _ASYNC_OPTIONS}
    for key, value in out.items():
        if isinstance(value, Mapping) and any(k in value for k in _ASYNC_OPTIONS):
            out[key] = {k: v for k, v in value.items() if k not in _ASYNC_OPTIONS}
    return out


def _ours(fs: Any) -> bool:
    """Whether ``fs`` (and every filesystem it wraps) is one npystore can call: not an
    asynchronous instance (fsspec's instance cache hands out zarr's or kerchunk's, made
    for the same options)."""
    for _ in range(8):  # a chain: each filesystem wraps the next as ``fs``
        if fs is None:
            break
        if getattr(fs, "async_impl", False) and getattr(fs, "asynchronous", False):
            return False
        fs = getattr(fs, "fs", None)
    return True


def _fresh(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` asking every protocol of ``url`` for a new instance (none from the cache)."""
    out = dict(options, skip_instance_cache=True)
    for protocol in chain_protocols(url)[1:]:
        nested = out.get(protocol)
        out[protocol] = {
            **(nested if isinstance(nested, Mapping) else {}),
            "skip_instance_cache": True,
        }
    return out


def chain_protocols(url: str) -> list[str]:
    """The protocols of ``url``, outermost first, as fsspec reads a chain: a part without
    ``://`` names a protocol (``simplecache::s3://...``), except the last, a local path."""
    import fsspec  # noqa: PLC0415

    parts = url.split("::")
    return [
        fsspec.core.split_protocol(part)[0] or (part if i < len(parts) - 1 else "file")
        for i, part in enumerate(parts)
    ]


def _protocol_problem(url: str) -> UnsupportedError | None:
    """What is wrong with the protocols of ``url`` (None: nothing)."""
    import fsspec  # noqa: PLC0415
    from fsspec.registry import known_implementations  # noqa: PLC0415

    for protocol in chain_protocols(url):
        try:
            fsspec.get_filesystem_class(protocol)
        except ValueError:
            return UnsupportedError(
                f"{url}: no filesystem is known for the protocol {protocol!r} (check the URL; "
                f"fsspec knows e.g. file, memory, http, https, s3, gcs, az, and the protocols "
                f"of installed packages that register one)"
            )
        except ImportError as exc:
            return _missing_implementation(url, protocol, exc, known_implementations)
    return None


def _missing_implementation(
    url: str, protocol: str, exc: ImportError, known: Mapping[str, Mapping[str, str]]
) -> MissingDependencyError:
    """The error for a known protocol whose implementation cannot be imported."""
    what = f"{url}: the {protocol}:// protocol"
    if protocol in _EXTRAS:
        package, extra = _EXTRAS[protocol]
        return missing_dependency(package, extra, what, exc)
    spec = known.get(protocol, {})
    root = str(spec.get("class", "")).split(".")[0]
    if root and root != "fsspec":  # a package of its own (gcsfs, adlfs, ...)
        return missing_dependency(root, None, what, exc)
    return MissingDependencyError(
        f"{what} needs a package that is not installed or cannot be imported "
        f"({type(exc).__name__}: {exc}); install what it names",
        None,
        None,
    )


def named(exc: OSError, name: str) -> OSError:
    """``exc`` (a missing or forbidden object) as the same type with ``errno``, a message and
    ``filename`` naming ``name`` (S3 says "The specified key does not exist.", fsspec's http
    only the URL); ``exc`` itself if it has a file name already (a local path's)."""
    if exc.filename is not None or not isinstance(exc, (FileNotFoundError, PermissionError)):
        return exc
    detail = exc.strerror or str(exc)
    missing = isinstance(exc, FileNotFoundError)
    text = "No such file or object" if missing else "Access denied"
    if detail and detail != name:
        text += f" ({detail})"
    if missing:
        return FileNotFoundError(errno.ENOENT, text, name)
    return PermissionError(errno.EACCES, text, name)


# -- S3 requests -----------------------------------------------------------------------------


def _no_botocore_retry(
    caught_exception: BaseException | None = None, response: Any = None, **_: Any
) -> bool | None:
    """``needs-retry.s3.GetObject`` handler: "do not retry" (False, which aiobotocore takes
    as an answer) for npystore's own requests that botocore would retry (a connection error,
    429, 5xx); no opinion otherwise (redirects to another region stay botocore's)."""
    if not _OWN_RETRIES.get():
        return None
    if caught_exception is not None:
        return False
    status = getattr(response[0], "status_code", None) if isinstance(response, tuple) else None
    if isinstance(status, int) and (status == 429 or status >= 500):
        return False
    return None


async def call_s3(fs: Any, method: str, **params: Any) -> dict[str, Any]:
    """One S3 request of npystore's through the client of ``fs``, as ``fs._call_s3`` makes
    it (the filesystem's extra request arguments included; errors translated to
    ``FileNotFoundError``, ``PermissionError``, ``OSError`` as s3fs does) but tried once:
    npystore's retry loop is the only one (see the module doc)."""
    from s3fs.errors import translate_boto_error  # noqa: PLC0415 - S3 only

    await fs.set_session()
    client = await fs.get_s3(params.get("Bucket"))
    client.meta.events.register_first(
        f"needs-retry.s3.{_OPERATIONS[method]}",
        _no_botocore_retry,
        # one id per operation: botocore ignores a second registration under an id it has
        # seen, whatever the event (a HeadObject handler would keep GetObject's out)
        unique_id=f"{_NO_RETRY_ID}-{_OPERATIONS[method]}",
    )
    call = getattr(client, method)
    kwargs = fs._get_s3_method_kwargs(call, **params)
    token = _OWN_RETRIES.set(True)
    try:
        resp: dict[str, Any] = await call(**kwargs)
    except Exception as exc:
        translated = translate_boto_error(exc)
        if translated is exc:
            raise
        raise translated from exc
    finally:
        _OWN_RETRIES.reset(token)
    return resp


_OPERATIONS: Final = {
    "get_object": "GetObject",
    "head_object": "HeadObject",
    # the writers' multipart upload (npystore.fetch.sink.S3Sink)
    "create_multipart_upload": "CreateMultipartUpload",
    "upload_part": "UploadPart",
    "complete_multipart_upload": "CompleteMultipartUpload",
    "abort_multipart_upload": "AbortMultipartUpload",
}


async def get_object(
    fs: Any,
    bucket: str,
    key: str,
    byte_range: str,
    pin: Mapping[str, str],
    into: memoryview | None = None,
    *,
    check: Callable[[str | None, str | None, str], None] | None = None,
) -> tuple[dict[str, Any], bytes | memoryview]:
    """One ranged ``GetObject``: the response and its body (streamed into ``into`` if given,
    see :func:`_stream_into`); the body is always closed. ``check(etag, version_id,
    content_range)`` sees the response before its body is read (and may raise)."""
    resp = await call_s3(fs, "get_object", Bucket=bucket, Key=key, Range=byte_range, **pin)
    body = resp["Body"]
    try:
        if check is not None:
            check(resp.get("ETag"), resp.get("VersionId"), str(resp.get("ContentRange") or ""))
        data = await body.read() if into is None else await _stream_into(body, into)
    finally:
        body.close()
    return resp, data


async def _stream_into(body: Any, view: memoryview) -> memoryview:
    """Copy a response body into ``view`` as it arrives (``read(amt)`` of aiobotocore's
    ``StreamingBody``); the part filled. A body longer than the view reports one byte more
    than the view holds, so the caller's length check fails."""
    filled = 0
    while True:
        piece = await body.read(min(_STREAM_PIECE, view.nbytes - filled + 1))
        if not piece:
            return view[:filled]
        end = filled + len(piece)
        if end > view.nbytes:
            return memoryview(bytes(view.nbytes + 1))
        view[filled:end] = piece
        filled = end


def error_code(exc: BaseException) -> str | None:
    """The S3 error code behind an exception (s3fs wraps botocore's ClientError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, Mapping):
            error = response.get("Error")
            if isinstance(error, Mapping) and error.get("Code"):
                return str(error["Code"])
        current = current.__cause__ or current.__context__
    return None


def info_within(fs: Any, path: str, name: str, budget: float) -> Mapping[str, Any]:
    """``fs.info(path)``; on an async filesystem (http, gcs, ...) retried like a range read:
    up to :data:`REMOTE_ATTEMPTS` attempts with backoff, all within ``budget`` seconds, then
    a :class:`~npystore.errors.FetchError` naming ``name`` and the last problem. A missing or
    forbidden object (``FileNotFoundError``, ``PermissionError``, an HTTP 4xx answer) is
    raised at once, naming ``name``."""
    if not getattr(fs, "async_impl", False):
        try:
            info: Mapping[str, Any] = fs.info(path)
        except (FileNotFoundError, PermissionError) as exc:
            raise named(exc, name) from exc
        return info
    from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

    result: Mapping[str, Any] = sync(fs.loop, info_attempts, fs, path, name, budget)
    return result


def _transport_failure(exc: FileNotFoundError, fs: Any) -> BaseException | None:
    """The connection error behind a ``FileNotFoundError`` of fsspec's HTTPFileSystem, which
    reports any failure of its ``info`` requests (a refused connection too) as one; None
    for a real "not found" (a 404 answer) and for other filesystems."""
    if not any(c.__module__ == "fsspec.implementations.http" for c in type(fs).__mro__):
        return None
    cause = exc.__cause__
    if cause is None or isinstance(cause, FileNotFoundError):
        return None
    return None if getattr(cause, "status", None) is not None else cause


async def info_attempts(fs: Any, path: str, name: str, budget: float) -> Mapping[str, Any]:
    """:func:`info_within` on the event loop of an async filesystem."""
    loop = asyncio.get_running_loop()
    problem: BaseException | str | None = None
    spent = 0.0
    made = 0
    for attempt in range(REMOTE_ATTEMPTS):
        began = loop.time()
        made += 1
        deadline = remote.limit(budget - spent)
        try:
            async with deadline:
                got: Mapping[str, Any] = await fs._info(path)
        except (FileNotFoundError, PermissionError) as exc:
            spent += loop.time() - began
            cause = _transport_failure(exc, fs) if isinstance(exc, FileNotFoundError) else None
            if cause is None:
                raise named(exc, name) from exc
            problem = cause
        except Exception as exc:  # retried; FetchError after the attempts or the budget
            spent += loop.time() - began
            if remote.is_fatal(exc) or getattr(exc, "status", None) in _FINAL_STATUSES:
                raise
            problem = remote.cut(loop.time() - began, made) if deadline.expired() else exc
        else:
            return got
        waited = await remote.wait_to_retry(attempt, REMOTE_ATTEMPTS, spent, budget)
        if waited is None:
            break
        spent = waited
    out = made < REMOTE_ATTEMPTS or spent >= budget  # stopped early: the budget ran out
    raise remote.failure(name, "the object's size and identity", made, budget, problem, out=out)


def s3_open(
    fs: Any, path: str, name: str, count: int, budget: float = READ_BUDGET
) -> tuple[Mapping[str, Any], bytes]:
    """Identity (as an fsspec ``info`` dict) and the first ``count`` bytes (last ``-count``
    if negative) of an S3 object, from one ranged ``GetObject``, retried within ``budget``
    seconds.

    The response carries what ``HeadObject`` would (ETag, LastModified, VersionId) and the
    total size in ``Content-Range``, so opening costs one round trip instead of two. An empty
    object (no range can be satisfied) falls back to ``info``.
    """
    from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

    got: tuple[Mapping[str, Any], bytes] = sync(fs.loop, s3_opening, fs, path, name, count, budget)
    return got


async def s3_opening(
    fs: Any, path: str, name: str, count: int, budget: float
) -> tuple[Mapping[str, Any], bytes]:
    """:func:`s3_open` on the event loop (for callers already on it)."""
    from npystore.fetch.openget import (  # noqa: PLC0415 - it imports this module
        Opened,
        RangeNotSatisfiable,
        open_within,
    )

    bucket, key, version = fs.split_path(path)
    pin = {"VersionId": version} if version else {}

    async def attempt(wanted: str) -> Opened:
        try:
            resp, data = await get_object(fs, bucket, key, wanted, pin)
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as exc:
            code = error_code(exc)
            if code in ("InvalidRange", "416"):
                raise RangeNotSatisfiable(str(exc)) from exc
            if code in ("AccessDenied", "403"):
                raise PermissionError(str(exc)) from exc
            if code in ("NoSuchBucket", "NoSuchKey", "404"):
                raise FileNotFoundError(str(exc)) from exc
            raise
        answered = resp.get("VersionId")
        if version and answered and answered != version:
            raise ConsistencyError(
                f"{name}: asked for version {version}, the server answered with version "
                f"{answered} (it ignored the version asked for)"
            )
        fields = {
            "ETag": resp.get("ETag"),
            "LastModified": resp.get("LastModified"),
            "VersionId": answered,
        }
        length = resp.get("ContentLength")
        return Opened(
            str(resp.get("ContentRange") or ""),
            length if isinstance(length, int) else None,
            bytes(data),  # bytes already (no ``into``)
            fields,
        )

    async def empty() -> Mapping[str, Any]:
        info: Mapping[str, Any] = await fs._info(path)
        return info

    return await open_within(name, count, budget, attempt, empty)
