"""Opening a remote object: its identity from one request, retried within the budget.

Part of the fetch layer (see :mod:`npystore.fetch`). On S3 an object is opened with one
ranged ``GetObject`` of its first (or last) bytes, whose answer carries what ``HeadObject``
would (ETag, LastModified, VersionId, the size in ``Content-Range``): :func:`s3_open`.
Elsewhere the identity is the filesystem's ``info``, asked within the budget on async
filesystems: :func:`info_within`. :func:`get_object` is the one ranged ``GetObject`` that
both the opening and botocore-served range reads use.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from npystore import remote
from npystore.errors import ConsistencyError, FetchError
from npystore.remote import BUDGET_ENV, BUDGET_OPTION, READ_BUDGET, REMOTE_ATTEMPTS

__all__ = ["CONTENT_RANGE", "error_code", "get_object", "info_within", "s3_open"]

#: ``Content-Range: bytes first-last/total`` (total ``*`` when unknown).
CONTENT_RANGE: Final = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
#: Most bytes taken from a response stream at a time when it is copied into a buffer.
_STREAM_PIECE: Final = 2**20


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
    resp: dict[str, Any] = await fs._call_s3(
        "get_object", Bucket=bucket, Key=key, Range=byte_range, **pin
    )
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


def _opening_bytes(resp: Mapping[str, Any], data: bytes, count: int) -> tuple[int, bytes] | str:
    """``(size, bytes)`` from the answer to the opening GET, or what is wrong with it.

    ``count > 0`` asked for the first ``count`` bytes, ``count < 0`` for the last ``-count``.
    A server that ignores the range sends the whole object (no ``Content-Range``).
    """
    content_range = str(resp.get("ContentRange") or "")
    match = CONTENT_RANGE.fullmatch(content_range)
    if match is None or match.group(3) == "*":
        if resp.get("ContentLength") != len(data):
            return f"no usable Content-Range ({content_range!r}) and a short body"
        size = len(data)
        want = min(abs(count), size)
        return size, data[:want] if count > 0 else data[size - want :]
    size = int(match.group(3))
    want = min(abs(count), size)
    first = 0 if count > 0 else size - want
    if int(match.group(1)) != first or len(data) != want:
        return f"got {len(data)} bytes as {content_range!r}, expected bytes {first}+{want}"
    return size, bytes(data)


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
    """``fs.info(path)``, within ``budget`` seconds on an async filesystem."""
    if not getattr(fs, "async_impl", False) or math.isinf(budget):
        info: Mapping[str, Any] = fs.info(path)
        return info
    from fsspec.asyn import sync  # noqa: PLC0415 - only for async filesystems

    async def timed() -> Mapping[str, Any]:
        deadline = remote.limit(budget)
        try:
            async with deadline:
                got: Mapping[str, Any] = await fs._info(path)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            raise FetchError(
                f"{name}: asking for the object's size and identity ran out of its time "
                f"budget of {budget:g} s (set {BUDGET_OPTION!r} in storage_options or "
                f"{BUDGET_ENV} to allow more)"
            ) from exc
        return got

    result: Mapping[str, Any] = sync(fs.loop, timed)
    return result


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

    got: tuple[Mapping[str, Any], bytes] = sync(fs.loop, _s3_opening, fs, path, name, count, budget)
    return got


async def _s3_opening(
    fs: Any, path: str, name: str, count: int, budget: float
) -> tuple[Mapping[str, Any], bytes]:
    loop = asyncio.get_running_loop()
    bucket, key, version = fs.split_path(path)
    pin = {"VersionId": version} if version else {}
    asked = count  # > 0: a prefix of that many bytes, < 0: a suffix
    span = f"[0, {count})" if count > 0 else f"the last {-count}"
    problem: BaseException | str | None = None
    spent = 0.0
    made = 0
    out = False
    for attempt in range(REMOTE_ATTEMPTS):
        began = loop.time()
        made += 1
        deadline = remote.limit(budget - spent)
        wanted = f"bytes=0-{asked - 1}" if asked > 0 else f"bytes={asked}"
        try:
            async with deadline:
                resp, data = await get_object(fs, bucket, key, wanted, pin)
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as exc:  # retried like any range read; FetchError after the budget
            spent += loop.time() - began
            if remote.is_fatal(exc):
                raise
            code = error_code(exc)
            if code in ("InvalidRange", "416") and asked < 0:
                # S3 answers a suffix longer than the object with all of it; some servers
                # (rclone, ...) refuse it instead. Ask for a prefix of the same length: all
                # of a smaller object (the tail wanted), else only a bounded prefix
                asked = -count
                continue
            if code in ("InvalidRange", "416"):  # an empty object: no range is satisfiable
                empty: Mapping[str, Any] = await fs._info(path)
                return empty, b""
            if code in ("AccessDenied", "403", "NoSuchBucket", "NoSuchKey", "404"):
                raise
            problem = remote.cut(loop.time() - began, made) if deadline.expired() else exc
        else:
            spent += loop.time() - began
            answered = resp.get("VersionId")
            if version and answered and answered != version:
                raise ConsistencyError(
                    f"{name}: asked for version {version}, the server answered with version "
                    f"{answered} (it ignored the version asked for)"
                )
            got = _opening_bytes(resp, bytes(data), asked)  # bytes already (no ``into``)
            if isinstance(got, str):
                problem = got
            else:
                size, part = got
                if asked != count and len(part) < size:  # a prefix, not the tail: no tail
                    part = b""
                info = {
                    "size": size,
                    "ETag": resp.get("ETag"),
                    "LastModified": resp.get("LastModified"),
                    "VersionId": answered,
                }
                return info, part
        if attempt == REMOTE_ATTEMPTS - 1:
            break
        delay = remote.backoff_delay(attempt)
        if spent + delay >= budget:
            out = True
            break
        await asyncio.sleep(delay)
        spent += delay
    out = out or spent >= budget
    raise remote.failure(name, f"bytes {span} at open", made, budget, problem, out=out)
