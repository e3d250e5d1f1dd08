"""The time budget of remote reads and its attempts: the numbers and the option that sets
them (part of the fetch layer; the retry loop that spends them is
:mod:`npystore.fetch.remote`). Kept apart from that loop so that a reader of a local file,
which has a budget but never spends it, imports no asyncio."""

from __future__ import annotations

import math
import os
from typing import Any, Final

__all__ = [
    "BUDGET_ENV",
    "BUDGET_OPTION",
    "READ_BUDGET",
    "REMOTE_ATTEMPTS",
    "RETRY_DELAY",
    "RETRY_DELAY_MAX",
    "budget_from",
]

#: Attempts for a remote range (short body, dropped connection, server error) before giving up.
REMOTE_ATTEMPTS: Final = 6
#: First retry delay in seconds; it doubles per attempt (plus up to 50% jitter), capped.
RETRY_DELAY: Final = 0.05
RETRY_DELAY_MAX: Final = 2.0
#: Default time budget (seconds) of one remote range, all attempts and waits included.
#: A range is at most 8 MiB (``npystore.fetch.transport.REMOTE_PART_SIZE``): 300 s is
#: 28 KB/s per connection, i.e. a 2.2 Mbit/s link with botocore's 10 connections all busy
#: (14 Mbit/s with the 64 of npystore's direct S3 session, 22 Mbit/s with aiohttp's 100 on
#: http(s): a slower link wants fewer ``max_pool_connections`` or a larger budget); it is
#: also aiohttp's default total timeout of a single request.
READ_BUDGET: Final = 300.0
#: The ``storage_options`` key that sets the budget (npystore removes it before fsspec sees
#: the options).
BUDGET_OPTION: Final = "npystore_read_budget"
#: The environment variable that sets the budget when ``storage_options`` does not.
BUDGET_ENV: Final = "NPYSTORE_READ_BUDGET"


def budget_from(value: Any = None) -> float:
    """The time budget (seconds) of one remote read: ``value`` if given, else
    :data:`BUDGET_ENV`, else :data:`READ_BUDGET`. ``inf`` means no budget.

    Raises
    ------
    ValueError
        The value is not a positive number of seconds.
    """
    source = BUDGET_OPTION
    if value is None:
        value, source = os.environ.get(BUDGET_ENV), BUDGET_ENV
    if value is None or value == "":
        return READ_BUDGET
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not seconds > 0:  # NaN and non-positive
        raise ValueError(f"{source} must be a positive number of seconds, got {value!r}")
    return seconds
