"""The opening GET of an object store: one ranged GET whose answer carries the object's
identity, its size (``Content-Range``) and its first (or last) bytes, retried within the
read budget (part of the fetch layer).

:func:`open_within` is the one retry loop of the opening GETs of S3
(:func:`npystore.fetch.opening.s3_open`), GCS (:func:`npystore.fetch.gcs.gcs_open`) and
Azure (:func:`npystore.fetch.azure.azure_open`); each store supplies one attempt (an
:data:`OpenAttempt`) and how to ask an empty object's identity.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from npystore.fetch import remote
from npystore.fetch.budget import REMOTE_ATTEMPTS
from npystore.fetch.opening import CONTENT_RANGE, named

__all__ = ["OpenAttempt", "Opened", "RangeNotSatisfiable", "open_within"]


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


class RangeNotSatisfiable(Exception):
    """416 (``InvalidRange``): no byte of the range asked for exists (an empty object, or a
    suffix range the server refuses)."""


@dataclass(frozen=True, slots=True)
class Opened:
    """What an opening GET answered: the ``Content-Range`` and ``Content-Length`` headers
    (``""``/None when absent), the body, and the identity fields (ETag, version, ...)."""

    content_range: str
    length: int | None
    data: bytes
    fields: Mapping[str, Any]


#: One opening GET: given the ``Range`` header's value (``bytes=0-127``, ``bytes=-65536``),
#: its answer. It raises ``FileNotFoundError``/``PermissionError`` for a missing or
#: forbidden object, :class:`RangeNotSatisfiable` for a 416, anything else to be retried.
OpenAttempt = Callable[[str], Awaitable[Opened]]


async def open_within(
    name: str,
    count: int,
    budget: float,
    attempt: OpenAttempt,
    empty: Callable[[], Awaitable[Mapping[str, Any]]],
) -> tuple[Mapping[str, Any], bytes]:
    """The retry loop of every opening GET (S3, GCS, Azure): identity (an ``info`` dict with
    ``size``) and the first ``count`` bytes (last ``-count`` if negative), from one ranged
    GET, retried within ``budget`` seconds like a range read.

    A suffix the server refuses (416; S3 answers a suffix longer than the object with all of
    it, some servers refuse it) is asked again as a prefix of the same length: all of a
    smaller object (the tail wanted), else only a bounded prefix (no tail returned). An
    object where no range is satisfiable is empty: its identity comes from ``empty()``.
    """
    loop = asyncio.get_running_loop()
    asked = count  # > 0: a prefix of that many bytes, < 0: a suffix
    span = f"[0, {count})" if count > 0 else f"the last {-count}"
    problem: BaseException | str | None = None
    spent = 0.0
    made = 0
    for attempt_no in range(REMOTE_ATTEMPTS):
        began = loop.time()
        made += 1
        deadline = remote.limit(budget - spent)
        wanted = f"bytes=0-{asked - 1}" if asked > 0 else f"bytes={asked}"
        try:
            async with deadline:
                answer = await attempt(wanted)
        except (FileNotFoundError, PermissionError) as exc:
            raise named(exc, name) from exc
        except RangeNotSatisfiable:
            spent += loop.time() - began
            if asked < 0:
                asked = -count
                continue
            return await empty(), b""
        except Exception as exc:  # retried like any range read; FetchError after the budget
            spent += loop.time() - began
            if remote.is_fatal(exc):
                raise
            problem = remote.cut(loop.time() - began, made) if deadline.expired() else exc
        else:
            spent += loop.time() - began
            resp = {"ContentRange": answer.content_range, "ContentLength": answer.length}
            got = _opening_bytes(resp, answer.data, asked)
            if isinstance(got, str):
                problem = got
            else:
                size, part = got
                if asked != count and len(part) < size:  # a prefix, not the tail: no tail
                    part = b""
                return {"size": size, **answer.fields}, part
        waited = await remote.wait_to_retry(attempt_no, REMOTE_ATTEMPTS, spent, budget)
        if waited is None:
            break
        spent = waited
    out = made < REMOTE_ATTEMPTS or spent >= budget  # stopped early: the budget ran out
    raise remote.failure(name, f"bytes {span} at open", made, budget, problem, out=out)
