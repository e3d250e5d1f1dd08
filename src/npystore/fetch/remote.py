"""Retries and the time budget of remote reads (part of the fetch layer).

Every remote byte range (and the GET that opens an S3 object) is read by
:func:`read_ranges`: each range on its own, up to :data:`REMOTE_ATTEMPTS` attempts with
exponential backoff and jitter, and all of them within one *time budget* per range
(:data:`READ_BUDGET` seconds by default; ``storage_options={"npystore_read_budget": s}``
or the environment variable ``NPYSTORE_READ_BUDGET``; the numbers live in
:mod:`npystore.fetch.budget`). The budget covers every attempt of
the range and the waits between them, so a server that trickles a body slower than it can
ever finish (each socket read inside the client's ``read_timeout``) is cut when the budget
runs out, and retries stacked under npystore's (botocore's own) are bounded by it too.

A range's clock runs only while the range holds one of its filesystem's connections
(:func:`slots`: as many as the connection pool has), so ranges queued behind others in a
large read are not charged for the wait. A range that fails reports the URL, the range,
the attempts made and the *last* problem (exception type and message).

Programming and configuration errors (a ``TypeError`` from a misspelled option, ...) are
never retried, nor is :class:`~npystore.errors.ConsistencyError` (the object changed).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from npystore.errors import ConsistencyError, FetchError, NpystoreError
from npystore.fetch.budget import (
    BUDGET_ENV,
    BUDGET_OPTION,
    READ_BUDGET,
    REMOTE_ATTEMPTS,
    RETRY_DELAY,
    RETRY_DELAY_MAX,
    budget_from,
)

__all__ = [
    "BUDGET_ENV",
    "BUDGET_OPTION",
    "READ_BUDGET",
    "REMOTE_ATTEMPTS",
    "RETRY_DELAY",
    "RETRY_DELAY_MAX",
    "backoff_delay",
    "wait_to_retry",
    "budget_from",
    "describe",
    "is_fatal",
    "read_ranges",
    "slots",
]

#: Exceptions that no retry can mend: configuration errors (a misspelled option is a
#: ``TypeError`` from the first request), missing code, npystore's own verdicts. Not
#: ``AttributeError``/``AssertionError``/``ValueError``: HTTP clients raise those on some
#: dropped connections, which a retry mends.
_FATAL: Final = (TypeError, NameError, ImportError, NotImplementedError, NpystoreError)


def describe(problem: BaseException | str | None) -> str:
    """A problem for a message: an exception's type and text (its repr when the text is
    empty), a string as it is; never empty."""
    if problem is None:
        return "no attempt was made"
    if isinstance(problem, str):
        return problem or "unknown problem"
    text = str(problem)
    return f"{type(problem).__name__}: {text}" if text else repr(problem)


def is_fatal(exc: BaseException) -> bool:
    """Whether retrying ``exc`` is pointless (a bug, a configuration error, a changed object)."""
    return isinstance(exc, _FATAL)


async def wait_to_retry(attempt: int, attempts: int, spent: float, budget: float) -> float | None:
    """Sleep the backoff after attempt ``attempt`` (0-based) when another attempt fits in
    ``attempts`` and in the ``budget`` (seconds, ``spent`` used so far): the seconds spent
    then; ``None`` when the attempts or the budget are used up (the caller gives up).

    The one pause of every retry loop (range reads and the opening requests)."""
    if attempt == attempts - 1:
        return None
    delay = backoff_delay(attempt)
    if spent + delay >= budget:
        return None
    await asyncio.sleep(delay)
    return spent + delay


def backoff_delay(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 2``: :data:`RETRY_DELAY` doubling per
    attempt, capped at :data:`RETRY_DELAY_MAX`, plus up to 50% jitter."""
    delay = min(RETRY_DELAY_MAX, RETRY_DELAY * 2.0**attempt)
    return delay * (1 + random.random() / 2)


def failure(
    url: str, what: str, made: int, budget: float, problem: BaseException | str | None, *, out: bool
) -> FetchError:
    """The error of a read that gave up: after all attempts, or (``out``) its budget."""
    if out:
        return FetchError(
            f"{url}: reading {what} ran out of its time budget of {budget:g} s after {made} "
            f"attempt{'s' if made != 1 else ''} (set {BUDGET_OPTION!r} in storage_options or "
            f"{BUDGET_ENV} to allow more); last problem: {describe(problem)}"
        )
    return FetchError(f"{url}: reading {what} failed after {made} attempts: {describe(problem)}")


def cut(seconds: float, attempt: int) -> TimeoutError:
    """The problem of an attempt the budget ended."""
    return TimeoutError(
        f"attempt {attempt} had no complete answer when the budget ran out, {seconds:.1f} s "
        f"into it (a stalled or too slow response)"
    )


def limit(seconds: float) -> asyncio.Timeout:
    """``asyncio.timeout`` for the rest of a budget (none for an infinite one)."""
    return asyncio.timeout(None if math.isinf(seconds) else max(seconds, 0.0))


# -- connection slots ----------------------------------------------------------------------

_slots: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def slots(pool: Any, size: int | None) -> asyncio.Semaphore | None:
    """The semaphore of ``pool`` (a client or session, or a filesystem) with ``size``
    permits, made on first use; None when the pool is unbounded. Call it on the loop."""
    if not size or size <= 0:
        return None
    try:
        sem = _slots.get(pool)
        if sem is None:
            sem = _slots[pool] = asyncio.Semaphore(size)
    except TypeError:  # not weakly referable or not hashable: no slots
        return None
    return sem


# -- the retry loop ------------------------------------------------------------------------

GetOne = Callable[[int, int, int], Awaitable["bytes | memoryview"]]


async def read_ranges(
    ranges: Sequence[tuple[int, int]],
    get_one: GetOne,
    *,
    url: str,
    budget: float,
    sem: asyncio.Semaphore | None = None,
    attempts: int = REMOTE_ATTEMPTS,
) -> list[bytes | memoryview]:
    """Read each ``[start, stop)`` with ``get_one(index, start, stop)``, all concurrently.

    Each range is retried on its own (a short body, any exception but the fatal ones) until
    it arrives whole, its attempts are used up or its budget runs out. The first range that
    fails ends the others. A vanished object (``FileNotFoundError``) is a
    :class:`~npystore.errors.ConsistencyError`.

    Raises
    ------
    FetchError
        A range failed after its attempts or its budget (naming the last problem).
    ConsistencyError
        The object changed or disappeared since it was opened.
    """
    if not ranges:
        return []
    tasks = [
        asyncio.ensure_future(_read_one(k, a, b, get_one, url, budget, sem, attempts))
        for k, (a, b) in enumerate(ranges)
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    errors = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception()]
    if errors:
        first = next((e for e in errors if isinstance(e, ConsistencyError)), errors[0])
        raise first  # type: ignore[misc]
    return [task.result() for task in tasks]


async def _read_one(
    k: int,
    start: int,
    stop: int,
    get_one: GetOne,
    url: str,
    budget: float,
    sem: asyncio.Semaphore | None,
    attempts: int,
) -> bytes | memoryview:
    loop = asyncio.get_running_loop()
    want = stop - start
    spent = 0.0
    problem: BaseException | str | None = None
    made = 0
    for attempt in range(attempts):
        async with sem if sem is not None else contextlib.nullcontext():
            began = loop.time()
            made += 1
            deadline = limit(budget - spent)
            try:
                async with deadline:
                    data = await get_one(k, start, stop)
            except FileNotFoundError as exc:
                raise ConsistencyError(
                    f"{url}: the object disappeared since it was opened ({describe(exc)})"
                ) from exc
            except Exception as exc:
                if is_fatal(exc):
                    raise
                problem = cut(loop.time() - began, made) if deadline.expired() else exc
            else:
                if len(data) == want:
                    return data
                problem = f"got {len(data)} bytes, expected {want}"
            finally:
                spent += loop.time() - began
        waited = await wait_to_retry(attempt, attempts, spent, budget)
        if waited is None:
            break
        spent = waited
    out = made < attempts or spent >= budget  # stopped early: the budget ran out
    raise failure(url, f"bytes [{start}, {stop})", made, budget, problem, out=out)
