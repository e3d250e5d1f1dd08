"""read/drive.py: the one loop that runs a pure parser until the bytes it asked for are read."""

from __future__ import annotations

import pytest

from npystore.errors import FormatError
from npystore.formats import mat5, zipdir
from npystore.formats.need import NeedMoreBytes
from npystore.read.drive import MAX_ROUNDS, parse_with_more

DATA = bytes(range(100))


def _parse(window: tuple[int, bytes]) -> bytes:
    """A parser that wants bytes [10, 30) and is given a window of the file."""
    start, data = window
    if start > 10 or start + len(data) < 30:
        raise NeedMoreBytes("short", offset=10, needed=20)
    return data[10 - start : 30 - start]


def _read(window: tuple[int, bytes], need: NeedMoreBytes) -> tuple[int, bytes]:
    return need.offset, DATA[need.offset : need.offset + need.needed]


def test_reads_what_the_parser_asks_for_and_retries() -> None:
    calls: list[int] = []

    def more(window: tuple[int, bytes], need: NeedMoreBytes) -> tuple[int, bytes]:
        calls.append(need.offset)
        return _read(window, need)

    assert parse_with_more(_parse, more, (0, DATA[:5]), source="f") == DATA[10:30]
    assert calls == [10]
    assert parse_with_more(_parse, more, (0, DATA), source="f") == DATA[10:30]
    assert calls == [10]  # enough bytes: no read


def test_a_parser_that_keeps_asking_is_refused_naming_the_source() -> None:
    reads: list[int] = []

    def never(data: bytes) -> int:
        raise NeedMoreBytes("short", offset=len(data), needed=1)

    def more(data: bytes, need: NeedMoreBytes) -> bytes:
        reads.append(need.offset)
        return data + b"x"

    with pytest.raises(FormatError, match=r"^s3://b/f\.mat: too many metadata pieces"):
        parse_with_more(never, more, b"", source="s3://b/f.mat", limit=5)
    assert len(reads) == 4  # no read after the last call
    assert MAX_ROUNDS >= 1000


def test_errors_of_more_propagate_unchained() -> None:
    def more(window: tuple[int, bytes], need: NeedMoreBytes) -> tuple[int, bytes]:
        raise FormatError("the stream ends first")

    with pytest.raises(FormatError, match="the stream ends first") as info:
        parse_with_more(_parse, more, (0, b""), source="f")
    assert info.value.__context__ is None


def test_one_need_more_bytes_everywhere() -> None:
    assert zipdir.NeedMoreBytes is mat5.NeedMoreBytes is NeedMoreBytes
