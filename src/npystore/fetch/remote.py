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

A range's clock runs only while the range holds a permit of its connection pool's
:class:`Limiter` (:func:`slots`), so ranges queued behind others in a large read are not
charged for the wait. The limiter starts at the pool's size and adapts to the server:
timeouts, dropped connections and 5xx/429 answers halve the requests in flight, answers that
start late cut them by a quarter, answers in time add them back one per round. A server
that can serve only a few requests at once (a small S3-compatible server, a busy proxy)
then gets a few, and the retries of what failed go out under the lower limit. A range that
fails reports the URL, the range, the attempts made and the *last* problem (exception type
and message), and when the limit had to fall, the option that asks for fewer requests at
once.

Programming and configuration errors (a ``TypeError`` from a misspelled option, ...) are
never retried, nor is :class:`~npystore.errors.ConsistencyError` (the object changed).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
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
    "CUT_ON_FAILURE",
    "CUT_ON_LATE",
    "FORGET_AFTER",
    "LATE_FACTOR",
    "LATE_SLACK",
    "Limiter",
    "first_byte",
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


# -- requests in flight: one adaptive limit per server and connection pool ------------------

#: Factor the limit is multiplied by when the server fails or times out (AIMD's decrease).
CUT_ON_FAILURE: Final = 0.5
#: Factor the limit is multiplied by when answers come late (first byte after
#: :data:`LATE_FACTOR` times the fastest first byte seen, and :data:`LATE_SLACK` seconds more).
CUT_ON_LATE: Final = 0.75
LATE_FACTOR: Final = 4.0
LATE_SLACK: Final = 3.0
#: Seconds after its last cut that a limit starts again from the pool's size, at the next
#: request after a pause (nothing in flight): a server slow a while ago may not be now.
FORGET_AFTER: Final = 60.0


class Limiter:
    """Requests in flight to one server over one connection pool: at most :attr:`limit`,
    which adapts to what the server can answer (additive increase, multiplicative decrease).

    A range holds one permit per attempt (``ticket = await acquire()``, then
    :meth:`release`) and reports how the attempt went (:meth:`record`). A failure that
    points at an overloaded server (a timeout, a dropped or refused connection, 429 or
    5xx) halves the limit; an answer whose first byte came late (the server queues the
    requests: :data:`LATE_FACTOR` times the fastest first byte seen and :data:`LATE_SLACK`
    seconds more) cuts it by a quarter; each in-time answer raises it by ``1 / limit``
    (one more per round of answers), up to :attr:`most`, the pool's size. Only attempts
    started after the last cut can cut again, so a burst of failures of the requests
    already in flight counts once (as TCP's congestion window does per round trip).
    Retries wait for a permit under the lowered limit: a slow server gets fewer requests
    at once instead of the same number again. :data:`FORGET_AFTER` seconds after the last
    cut, a request that finds nothing in flight starts the limit again from :attr:`most`.

    Parameters
    ----------
    most : int
        The most requests at once (the connection pool's size).
    advice : str
        How to ask for fewer at once with this backend's options (for messages).
    pool : asyncio.Semaphore, optional
        The connection pool's own permits, shared by the limiters of every server it talks
        to (a permit of each is held), so that the pool's size holds in all.
    """

    def __init__(self, most: int, advice: str = "", pool: asyncio.Semaphore | None = None) -> None:
        self.most = most
        self.advice = advice
        self.pool = pool
        #: The current limit (a float: additive increase adds fractions).
        self.limit = float(most)
        #: The lowest the limit fell to.
        self.least = most
        #: Requests holding a permit now.
        self.in_flight = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._started = 0  # tickets handed out
        self._cut_after = 0  # attempts with a ticket up to this one started before the last cut
        self._fastest = math.inf  # the earliest first byte seen (seconds after sending)
        self._cut_at = -math.inf  # loop time of the last cut

    def _cap(self) -> int:
        return max(1, int(self.limit))

    async def acquire(self) -> int:
        """Wait for a permit (first come, first served), and one of the pool's; the
        attempt's ticket."""
        ticket = await self._acquire_own()
        if self.pool is not None:
            try:
                await self.pool.acquire()
            except BaseException:
                self._release_own()
                raise
        return ticket

    def release(self) -> None:
        """Give the permits back."""
        if self.pool is not None:
            self.pool.release()
        self._release_own()

    async def _acquire_own(self) -> int:
        now = asyncio.get_running_loop().time()
        if self.in_flight == 0 and self.limit < self.most and now - self._cut_at > FORGET_AFTER:
            self.limit = float(self.most)  # a pause long after the last cut: start again
        if not self._waiters and self.in_flight < self._cap():
            self.in_flight += 1
        else:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter  # the permit is counted by whoever resolves it
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._release_own()  # handed a permit, then cancelled: pass it on
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
        self._started += 1
        return self._started

    def _release_own(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self._cap():
            waiter = self._waiters.popleft()
            if waiter.done():  # cancelled while waiting
                continue
            self.in_flight += 1
            waiter.set_result(None)

    def record(self, ticket: int, *, failed: bool, first_byte: float | None = None) -> None:
        """What attempt ``ticket`` told about the server: ``failed`` (overloaded), or an
        answer whose first byte came ``first_byte`` seconds after it was sent."""
        late = False
        if first_byte is not None:
            self._fastest = min(self._fastest, first_byte)
            late = first_byte > max(LATE_FACTOR * self._fastest, self._fastest + LATE_SLACK)
        if failed or late:
            if ticket > self._cut_after:  # once per round of requests in flight
                self.limit = max(1.0, self.limit * (CUT_ON_FAILURE if failed else CUT_ON_LATE))
                self.least = min(self.least, self._cap())
                self._cut_after = self._started
                self._cut_at = asyncio.get_running_loop().time()
            return
        if self.limit < self.most:
            self.limit = min(float(self.most), self.limit + 1.0 / self.limit)
            self._wake()

    def hint(self) -> str:
        """How to ask this server for fewer requests at once, when the limit had to fall."""
        if self.least >= self.most:
            return ""
        fewer = f"; {self.advice.format(n=self.least)}" if self.advice else ""
        return (
            f"; the server could not answer {self.most} requests at once (npystore fell "
            f"back to {self.least} in flight){fewer}"
        )


#: Per connection pool: its permits, and the limiter of each server it talks to.
_slots: weakref.WeakKeyDictionary[Any, tuple[asyncio.Semaphore, dict[str | None, Limiter]]] = (
    weakref.WeakKeyDictionary()
)


def slots(
    pool: Any, size: int | None, advice: str = "", server: str | None = None
) -> Limiter | None:
    """The :class:`Limiter` of ``server`` (a host, or None when the pool talks to one) over
    ``pool`` (a client or session, or a filesystem) with at most ``size`` requests at once,
    made on first use; None when the pool is unbounded. ``advice`` is the option that asks
    for fewer at once (``{n}``: a number to suggest). A server slow to answer does not slow
    the pool's requests to another. Call it on the loop."""
    if not size or size <= 0:
        return None
    try:
        entry = _slots.get(pool)
        if entry is None:
            entry = _slots[pool] = (asyncio.Semaphore(size), {})
    except TypeError:  # not weakly referable or not hashable: no limit
        return None
    permits, limiters = entry
    limiter = limiters.get(server)
    if limiter is None:
        limiter = limiters[server] = Limiter(size, advice, permits)
    return limiter


#: The first-byte time of the attempt running in this task (see :func:`first_byte`).
_FIRST_BYTE: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "npystore_first_byte", default=None
)


def first_byte() -> None:
    """Note that the answer of the attempt running in this task has begun (its status and
    headers arrived): the backends call it where they check an answer, and the attempt's
    :class:`Limiter` learns how long the server took to start answering."""
    cell = _FIRST_BYTE.get()
    if cell is not None and not cell:
        cell.append(asyncio.get_running_loop().time())


# -- the retry loop ------------------------------------------------------------------------

GetOne = Callable[[int, int, int], Awaitable["bytes | memoryview"]]


async def read_ranges(
    ranges: Sequence[tuple[int, int]],
    get_one: GetOne,
    *,
    url: str,
    budget: float,
    sem: Limiter | None = None,
    attempts: int = REMOTE_ATTEMPTS,
) -> list[bytes | memoryview]:
    """Read each ``[start, stop)`` with ``get_one(index, start, stop)``, all concurrently.

    Each range is retried on its own (a short body, any exception but the fatal ones) until
    it arrives whole, its attempts are used up or its budget runs out. Each attempt holds a
    permit of ``sem`` (the :class:`Limiter` of the connection pool, which adapts how many are
    in flight to the server's answers). The first range that fails ends the others. A
    vanished object (``FileNotFoundError``) is a :class:`~npystore.errors.ConsistencyError`.

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
    sem: Limiter | None,
    attempts: int,
) -> bytes | memoryview:
    loop = asyncio.get_running_loop()
    want = stop - start
    spent = 0.0
    problem: BaseException | str | None = None
    made = 0
    for attempt in range(attempts):
        ticket = 0 if sem is None else await sem.acquire()
        began = loop.time()
        made += 1
        deadline = limit(budget - spent)
        answered: list[float] = []
        token = _FIRST_BYTE.set(answered)
        overloaded = False
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
            overloaded = True
            problem = cut(loop.time() - began, made) if deadline.expired() else exc
        else:
            if len(data) == want:
                if sem is not None:
                    sem.record(ticket, failed=False, first_byte=_after(answered, began))
                return data
            problem = f"got {len(data)} bytes, expected {want}"
        finally:
            _FIRST_BYTE.reset(token)
            spent += loop.time() - began
            if sem is not None:
                if overloaded:
                    sem.record(ticket, failed=True)
                sem.release()
        waited = await wait_to_retry(attempt, attempts, spent, budget)
        if waited is None:
            break
        spent = waited
    out = made < attempts or spent >= budget  # stopped early: the budget ran out
    error = failure(url, f"bytes [{start}, {stop})", made, budget, problem, out=out)
    if sem is not None and (hint := sem.hint()):
        error = FetchError(f"{error}{hint}")
    raise error


def _after(answered: list[float], began: float) -> float | None:
    """Seconds from sending an attempt to the first byte of its answer (None: not noted)."""
    return answered[0] - began if answered else None
