"""Count the HTTP requests and bytes an ``s3fs.S3FileSystem`` sends and receives.

:class:`RequestCounter` hooks the botocore events of a filesystem's aiobotocore client and
counts every HTTP attempt, so tests (and the demo) can state how many requests and which byte
ranges a read costs. Importing this module imports no AWS library.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Self

if TYPE_CHECKING:
    from s3fs import S3FileSystem

__all__ = ["Measurement", "RequestCounter", "RequestRecord", "parse_range_header"]


def parse_range_header(value: str | bytes | None) -> tuple[int, int | None] | None:
    """Parse an HTTP ``Range`` header of the single-range ``bytes=`` form.

    Parameters
    ----------
    value : str, bytes or None
        Header value, e.g. ``"bytes=10-109"``.

    Returns
    -------
    tuple or None
        ``(start, end_inclusive)``; ``(start, None)`` for an open range
        ``bytes=start-``; ``(-n, None)`` for a suffix range ``bytes=-n``
        (the last `n` bytes, like Python's ``[-n:]``). ``None`` when the value
        is missing or not a single byte range.

    Examples
    --------
    >>> parse_range_header(b"bytes=10-109")
    (10, 109)
    >>> parse_range_header("bytes=5-")
    (5, None)
    >>> parse_range_header("bytes=-5")
    (-5, None)
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    unit, _, spec = text.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    first, last = first.strip(), last.strip()
    try:
        if not first:
            return (-int(last), None) if last else None
        return int(first), int(last) if last else None
    except ValueError:
        return None


class RequestRecord(NamedTuple):
    """One HTTP attempt seen by a :class:`RequestCounter`."""

    operation: str
    """botocore operation name, e.g. ``"GetObject"``."""
    method: str
    """HTTP method."""
    url: str
    """Request URL."""
    range_header: str | None
    """Raw ``Range`` header, if any."""


@dataclass(repr=False, eq=False)
class Measurement:
    """Counts collected by a :class:`RequestCounter` during one window.

    Each HTTP attempt is counted once, retries included. Requests made through
    other clients (e.g. :meth:`LocalS3.client`) are not seen.

    Attributes
    ----------
    requests : int
        HTTP attempts, all operations.
    gets : int
        ``GetObject`` attempts.
    heads : int
        ``HeadObject`` attempts.
    bytes : int
        Body bytes of successful (2xx) ``GetObject`` responses, from their
        ``Content-Length`` (what the server sent, not the range asked for).
    errors : int
        Attempts that got no HTTP response (connection error, ...) or a status
        of 400 or more (a 404 from an existence check counts).
    in_flight : int
        Attempts sent and not yet answered, now.
    max_in_flight : int
        The most attempts in flight at once while the window was open: how many requests
        went out concurrently. An attempt is answered when ``response-received`` fires:
        after its body was read for npystore's direct GETs
        (:mod:`npystore.fetch.s3direct`), after the response head for botocore's.
    ranges : list of tuple
        ``(start, end_inclusive_or_None)`` of each ``GetObject``, in send order,
        as :func:`parse_range_header` gives it; a GET without ``Range`` is
        recorded as ``(0, None)``, an unparsable one is left out.
    by_operation : collections.Counter
        Attempts per operation name.
    records : list of RequestRecord
        Every attempt, in send order.
    """

    requests: int = 0
    gets: int = 0
    heads: int = 0
    bytes: int = 0
    errors: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    ranges: list[tuple[int, int | None]] = field(default_factory=list)
    by_operation: Counter[str] = field(default_factory=Counter)
    records: list[RequestRecord] = field(default_factory=list)

    def __repr__(self) -> str:
        ops = dict(self.by_operation)
        return (
            f"Measurement(requests={self.requests}, gets={self.gets}, heads={self.heads}, "
            f"bytes={self.bytes}, errors={self.errors}, max_in_flight={self.max_in_flight}, "
            f"by_operation={ops})"
        )

    def _on_send(self, record: RequestRecord) -> None:
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.by_operation[record.operation] += 1
        self.records.append(record)
        if record.operation == "HeadObject":
            self.heads += 1
        elif record.operation == "GetObject":
            self.gets += 1
            if record.range_header is None:
                self.ranges.append((0, None))
            else:
                parsed = parse_range_header(record.range_header)
                if parsed is not None:
                    self.ranges.append(parsed)

    def _on_response(self, body_bytes: int, failed: bool) -> None:
        # an attempt sent before the window opened may be answered in it
        self.in_flight = max(0, self.in_flight - 1)
        self.bytes += body_bytes
        if failed:
            self.errors += 1


_counter_ids = itertools.count()


def _operation_of(event_name: str) -> str:
    # "before-send.s3.GetObject" -> "GetObject"
    return event_name.rsplit(".", 1)[-1]


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    if value is None:
        return None
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


class RequestCounter:
    """Count the HTTP requests an ``s3fs.S3FileSystem`` sends.

    Handlers are registered on the filesystem's aiobotocore client
    (``fs.s3.meta.events``):

    * ``before-send.s3`` (every operation) fires once per HTTP attempt, just
      before it is sent, with the final signed request, so it gives the
      operation, method, URL and ``Range``; retries go through it again.
    * ``response-received.s3`` fires once per attempt after it finished, with
      the response headers and status, or with the exception when no response
      came; it gives body sizes and errors.

    The handlers are plain functions returning ``None`` (aiobotocore awaits a
    handler's result only if it is awaitable, and a non-``None`` result of a
    ``before-send`` handler would replace the HTTP response). They run on
    fsspec's IO thread, so all updates hold a lock. Several counters on one
    filesystem are independent.

    Use :meth:`attach` rather than the constructor.

    Notes
    -----
    Only that one client is watched: with ``cache_regions=True`` s3fs may make
    more (never here: an explicit endpoint or region turns it off). If s3fs
    replaces its client (``fs.connect(refresh=True)``), the handlers move to
    the new one when the next :meth:`measure` window opens. A handler that
    another party registered on a more specific event name (e.g.
    ``before-send.s3.GetObject``) runs before ours; if it raises, that attempt
    was never sent and is not counted as a request (its ``response-received``
    still counts it in ``errors``).

    Examples
    --------
    >>> counter = RequestCounter.attach(fs)  # doctest: +SKIP
    >>> with counter.measure() as m:  # doctest: +SKIP
    ...     fs.cat_file(url, start=10, end=110)
    >>> m.gets, m.bytes, m.ranges  # doctest: +SKIP
    (1, 100, [(10, 109)])
    """

    def __init__(self, fs: S3FileSystem) -> None:
        self._fs_ref: weakref.ref[Any] = weakref.ref(fs)
        self._lock = threading.Lock()
        self._uid = f"npystore.testing.RequestCounter-{next(_counter_ids)}-{uuid.uuid4().hex[:8]}"
        self._client: Any = None
        self._windows: list[Measurement] = []
        self._total = Measurement()
        self._attached = False

    @classmethod
    def attach(cls, fs: S3FileSystem) -> RequestCounter:
        """Create a counter and register its handlers on `fs`'s client.

        Parameters
        ----------
        fs : s3fs.S3FileSystem
            The filesystem to watch. A synchronous one is connected if needed;
            an asynchronous one must have awaited ``fs.set_session()`` first.

        Returns
        -------
        RequestCounter
            The attached counter.
        """
        counter = cls(fs)
        counter._register(counter._current_client())
        counter._attached = True
        return counter

    # registration -----------------------------------------------------------------

    def _current_client(self) -> Any:
        fs = self._fs_ref()
        if fs is None:
            raise RuntimeError("the filesystem this counter watched is gone")
        client = getattr(fs, "_s3", None)
        if client is None:
            if getattr(fs, "asynchronous", False):
                raise RuntimeError("await fs.set_session() before attaching a RequestCounter")
            client = fs.s3  # connects a synchronous filesystem
        return client

    def _register(self, client: Any) -> None:
        events = client.meta.events
        events.register("before-send.s3", self._before_send, unique_id=f"{self._uid}-send")
        events.register(
            "response-received.s3", self._response_received, unique_id=f"{self._uid}-response"
        )
        self._client = client

    def _unregister(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        events = client.meta.events
        events.unregister("before-send.s3", unique_id=f"{self._uid}-send")
        events.unregister("response-received.s3", unique_id=f"{self._uid}-response")

    def _follow_client(self) -> None:
        """Move the handlers if s3fs replaced its client (``connect(refresh=True)``)."""
        fs = self._fs_ref()
        client = getattr(fs, "_s3", None) if fs is not None else None
        if client is not None and client is not self._client:
            self._unregister()
            self._register(client)

    def detach(self) -> None:
        """Remove the handlers; open windows stop counting. Idempotent."""
        with self._lock:
            self._attached = False
            self._windows.clear()
        self._unregister()

    @property
    def attached(self) -> bool:
        """Whether the handlers are registered."""
        return self._attached

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.detach()

    # handlers (run on fsspec's IO thread) ----------------------------------------------

    def _before_send(self, request: Any = None, event_name: str = "", **kwargs: Any) -> None:
        # Must return None: a non-None result would be used as the HTTP response.
        try:
            record = RequestRecord(
                operation=_operation_of(event_name),
                method=str(getattr(request, "method", "")),
                url=str(getattr(request, "url", "")),
                range_header=_header(getattr(request, "headers", None), "Range"),
            )
        except Exception:  # never break the request being counted
            return
        with self._lock:
            self._total._on_send(record)
            for window in self._windows:
                window._on_send(record)

    def _response_received(
        self,
        response_dict: Mapping[str, Any] | None = None,
        exception: BaseException | None = None,
        parsed_response: Mapping[str, Any] | None = None,
        event_name: str = "",
        **kwargs: Any,
    ) -> None:
        body_bytes = 0
        failed = exception is not None or response_dict is None
        try:
            if response_dict is not None:
                status = int(response_dict.get("status_code", 0))
                failed = failed or status >= 400
                if _operation_of(event_name) == "GetObject" and 200 <= status < 300:
                    length = _header(response_dict.get("headers"), "Content-Length")
                    if length is not None:
                        body_bytes = int(length)
                    elif parsed_response is not None:
                        body_bytes = int(parsed_response.get("ContentLength", 0))
        except Exception:  # never break the request being counted
            pass
        with self._lock:
            self._total._on_response(body_bytes, failed)
            for window in self._windows:
                window._on_response(body_bytes, failed)

    # measuring ----------------------------------------------------------------------

    @property
    def total(self) -> Measurement:
        """Everything counted since :meth:`attach`."""
        return self._total

    @contextlib.contextmanager
    def measure(self) -> Iterator[Measurement]:
        """Count the requests sent while the ``with`` block runs.

        Windows may overlap or nest; each counts every request sent while it
        is open. The counts are final once the block has exited.

        Yields
        ------
        Measurement
            Filled in while the block runs.

        Raises
        ------
        RuntimeError
            If the counter was detached.
        """
        if not self._attached:
            raise RuntimeError("RequestCounter is detached")
        self._follow_client()
        window = Measurement()
        with self._lock:
            self._windows.append(window)
        try:
            yield window
        finally:
            with self._lock:
                # identity, not equality: windows with equal counts are distinct
                self._windows = [w for w in self._windows if w is not window]
