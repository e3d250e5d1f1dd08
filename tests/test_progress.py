"""Progress of long work: a bar on a terminal, sparse plain lines elsewhere."""

from __future__ import annotations

import io
import threading

from npystore.tools.progress import Progress, format_duration, format_size


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_on_a_non_terminal_are_sparse_and_carry_rate_and_eta() -> None:
    out = io.StringIO()
    with Progress(1000, 1000 * 4096, "job", file=out, interval=3600) as p:
        for _ in range(1000):
            p.update(4096)
        middle = Progress(10, 100, "x", file=io.StringIO())
        middle.update(40, items=4)
        assert "ETA" in middle.line()
        assert "4 of 10 chunks" in middle.line()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 1  # the interval is an hour: only the closing line
    assert lines[0].startswith("job: 3.9 MiB of 3.9 MiB (100%), 1000 of 1000 chunks, ")
    assert "/s, elapsed " in lines[0]


def test_a_line_every_interval() -> None:
    out = io.StringIO()
    p = Progress(3, 300, "job", file=out, interval=0)
    for _ in range(3):
        p.update(100)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert "ETA" in lines[0]
    assert lines[0].startswith("job: 100 B of 300 B (33%), 1 of 3 chunks")


def test_a_terminal_gets_a_tqdm_bar_with_rate() -> None:
    out = _Terminal()
    with Progress(4, 4 * 2**20, "job", file=out) as p:
        threads = [threading.Thread(target=p.update, args=(2**20,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    text = out.getvalue()
    assert "\r" in text  # redrawn in place
    assert "job: 100%" in text
    assert "4.00M/4.00M" in text
    assert "B/s" in text
    assert p.items == 4
    assert p.nbytes == 4 * 2**20


def test_formats() -> None:
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.5 KiB"
    assert format_duration(42.4) == "42 s"
    assert format_duration(200) == "3 min 20 s"
    assert format_duration(7500) == "2 h 05 min"
