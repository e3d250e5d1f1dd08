"""Progress of long work (``npystore convert``) on a stream, with rate and time left.

On a terminal it is a tqdm bar (bytes done, rate, ETA), redrawn in place. Anywhere else (a
log file, CI, a pipe) carriage returns would pile up into hundreds of lines, so it writes one
plain line every ``interval`` seconds and a last one at the end:

>>> import io
>>> out = io.StringIO()
>>> with Progress(4, 4 * 2**20, "demo", file=out, interval=3600) as p:
...     for _ in range(4):
...         p.update(2**20)
>>> print(out.getvalue().strip().splitlines()[-1].split(", ")[0])
demo: 4.0 MiB of 4.0 MiB (100%)
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Final, TextIO

__all__ = ["CountProgress", "Progress", "format_duration", "format_size"]

#: Seconds between two lines when the stream is not a terminal.
LINE_INTERVAL: Final = 10.0


def format_size(n: float) -> str:
    """Bytes as text: ``"512 B"``, ``"1.5 MiB"``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def format_duration(seconds: float) -> str:
    """Seconds as text: ``"42 s"``, ``"3 min 20 s"``, ``"2 h 05 min"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """Thread-safe progress of ``total_bytes`` in ``total_items`` pieces.

    Parameters
    ----------
    total_items : int
        Pieces of work (chunks).
    total_bytes : int
        Bytes of work, the unit of the rate.
    description : str
        What is being done (starts every line).
    file : text stream, optional
        Where to write (default ``sys.stderr``).
    interval : float
        Seconds between two lines when ``file`` is not a terminal.
    unit : str
        The unit of ``total_bytes`` (default ``"B"``, bytes; e.g. ``"file"`` to count files).
    """

    def __init__(
        self,
        total_items: int,
        total_bytes: int,
        description: str,
        *,
        file: TextIO | None = None,
        interval: float = LINE_INTERVAL,
        unit: str = "B",
    ) -> None:
        self.unit = unit
        self.total_items = total_items
        self.total_bytes = total_bytes
        self.description = description
        self.file = file if file is not None else sys.stderr
        self.interval = interval
        self.items = 0
        self.nbytes = 0
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._last_line = self._start
        self._bar: Any = None
        isatty = getattr(self.file, "isatty", None)
        if isatty is not None and isatty():
            try:
                from tqdm import tqdm  # noqa: PLC0415 - optional (the zarr extra brings it)
            except ImportError:
                pass  # plain lines, as on a non-terminal
            else:
                self._bar = tqdm(
                    total=total_bytes,
                    unit=unit,
                    unit_scale=unit == "B",
                    unit_divisor=1024,
                    desc=description,
                    file=self.file,
                    dynamic_ncols=True,
                    leave=True,
                )

    def update(self, nbytes: int, items: int = 1) -> None:
        """Record ``items`` more pieces of ``nbytes`` bytes done."""
        with self._lock:
            self.items += items
            self.nbytes += nbytes
            if self._bar is not None:
                self._bar.update(nbytes)
                return
            now = time.monotonic()
            if now - self._last_line < self.interval:
                return
            self._last_line = now
            self._write_line(now)

    def line(self) -> str:
        """The current state as one line (what a non-terminal gets)."""
        return self._text(time.monotonic())

    def close(self) -> None:
        """Finish: close the bar, or write the last line."""
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            else:
                self._write_line(time.monotonic())

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _text(self, now: float) -> str:
        elapsed = max(now - self._start, 1e-9)
        rate = self.nbytes / elapsed
        share = self.nbytes / self.total_bytes if self.total_bytes else 1.0
        size = format_size if self.unit == "B" else self._count
        parts = [
            f"{self.description}: {size(self.nbytes)} of {size(self.total_bytes)} ({share:.0%})",
            f"{self.items} of {self.total_items} chunks",
            f"{size(rate)}/s",
        ]
        if 0 < self.nbytes < self.total_bytes:
            parts.append(f"ETA {format_duration((self.total_bytes - self.nbytes) / rate)}")
        else:
            parts.append(f"elapsed {format_duration(elapsed)}")
        return ", ".join(parts)

    def _count(self, n: float) -> str:
        return f"{n:.0f} {self.unit}s" if n >= 10 else f"{n:.1f} {self.unit}s"

    def _write_line(self, now: float) -> None:
        print(self._text(now), file=self.file, flush=True)


class CountProgress:
    """A bar over a count of things (files opened), shown on a terminal for long lists only.

    :meth:`start` is told how many there are and returns the callback to report each batch
    done (None: no bar: too few, or ``file`` is not a terminal); :meth:`close` ends the bar.

    Parameters
    ----------
    description : str
        What is being done (the bar's label).
    minimum : int
        Fewest things worth a bar.
    file : text stream, optional
        Where to draw (default ``sys.stderr``).
    """

    def __init__(self, description: str, *, minimum: int = 256, file: TextIO | None = None):
        self.description = description
        self.minimum = minimum
        self.file = file if file is not None else sys.stderr
        self._progress: Progress | None = None

    def start(self, count: int) -> Any:
        """The callback ``done(n)`` for ``count`` things, or None for no bar."""
        isatty = getattr(self.file, "isatty", None)
        if count < self.minimum or isatty is None or not isatty():
            return None
        progress = self._progress = Progress(
            count, count, self.description, file=self.file, unit="file"
        )

        def done(n: int) -> None:
            progress.update(n, n)

        return done

    def close(self) -> None:
        """End the bar, if one was drawn."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None

    def __enter__(self) -> CountProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
