"""The ZIP central directory parser of .npz archives, checked against zipfile and numpy.

Every archive is parsed the way the IO layer will do it: one tail read of ``tail_size()``
bytes, separate range reads only where a parser asks for them (ZIP64 end record, a central
directory outside the tail) and one ``30 + len(name) + 64``-byte read per local header.
"""

from __future__ import annotations

import contextlib
import io
import struct
import time
import warnings
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.zipdir import (
    EOCD_SEARCH,
    LOCAL_HEADER_SIZE,
    EndRecord,
    LocalHeader,
    NeedMoreBytes,
    ZipDirectory,
    ZipEntry,
    check_members,
    member_name_problem,
    parse_central_directory,
    parse_end_record,
    parse_local_header,
    parse_zip64_end_record,
    tail_size,
)

SRC = "memory://test.npz"
SLACK = 64
U16 = 0xFFFF
U32 = 0xFFFF_FFFF
NAMES = ["a", "arr_0", "with space", "ünïcödé", "日本語", "nested/dir/x", "emoji_🎉"]


# ---------------------------------------------------------------- the IO layer, simulated


class Reader:
    """Range reads on a file object, logged; every read must lie inside the archive."""

    def __init__(self, fileobj: BinaryIO) -> None:
        self.f = fileobj
        self.size = fileobj.seek(0, io.SEEK_END)
        self.reads: list[tuple[int, int]] = []

    @classmethod
    def of(cls, data: bytes) -> Reader:
        return cls(io.BytesIO(data))

    def read(self, offset: int, n: int) -> bytes:
        assert offset >= 0, offset
        assert offset + n <= self.size, (offset, n, self.size)
        self.reads.append((offset, n))
        self.f.seek(offset)
        return self.f.read(n)


def open_directory(reader: Reader, *, initial: int = 256 * 1024) -> ZipDirectory:
    """Tail read, ZIP64 record and central directory reads where asked; check members."""
    size = reader.size
    n = tail_size(size, initial)
    tail_offset = size - n
    tail = reader.read(tail_offset, n)
    try:
        end = parse_end_record(tail, tail_offset, size, source=SRC)
    except NeedMoreBytes as exc:  # the read runs to the end of the archive
        tail_offset, tail = exc.offset, reader.read(exc.offset, size - exc.offset)
        end = parse_end_record(tail, tail_offset, size, source=SRC)
    if end.zip64_pending:
        with pytest.raises(NeedMoreBytes):
            parse_central_directory(tail, tail_offset, end, size, source=SRC)
        record = end.zip64_record_offset
        assert record is not None
        end = parse_zip64_end_record(reader.read(record, 56), record, end, size, source=SRC)
        assert not end.zip64_pending
    if end.cd_offset >= tail_offset:
        directory = parse_central_directory(tail, tail_offset, end, size, source=SRC)
    else:
        cd = reader.read(end.cd_offset, end.cd_size)
        directory = parse_central_directory(cd, end.cd_offset, end, size, source=SRC)
    check_members(directory, source=SRC)
    return directory


def locate(reader: Reader, directory: ZipDirectory, entry: ZipEntry) -> LocalHeader:
    """One local header read of 30 + len(name) + SLACK bytes (clipped), again if asked."""
    offset = entry.local_header_offset
    n = min(LOCAL_HEADER_SIZE + len(entry.name.encode()) + SLACK, reader.size - offset)
    cd_offset = directory.end.cd_offset
    try:
        data = reader.read(offset, max(n, 0))
        return parse_local_header(data, entry, reader.size, source=SRC, cd_offset=cd_offset)
    except NeedMoreBytes as exc:  # offset is the local header offset
        data = reader.read(exc.offset, exc.needed)
        return parse_local_header(data, entry, reader.size, source=SRC, cd_offset=cd_offset)


def raw_member(reader: Reader, header: LocalHeader) -> bytes:
    return reader.read(header.data_offset, header.entry.compressed_size)


def inflate(entry: ZipEntry, raw: bytes) -> bytes:
    if entry.method == zipfile.ZIP_STORED:
        return raw
    assert entry.method == zipfile.ZIP_DEFLATED
    d = zlib.decompressobj(-15)
    return d.decompress(raw) + d.flush()


def as_zipfile(entries: Sequence[ZipEntry]) -> list[tuple[Any, ...]]:
    return [
        (e.name, e.compressed_size, e.uncompressed_size, e.crc32, e.method, e.local_header_offset)
        for e in entries
    ]


def zipfile_view(source: Any) -> list[tuple[Any, ...]]:
    with zipfile.ZipFile(source) as zf:
        return [
            (i.filename, i.compress_size, i.file_size, i.CRC, i.compress_type, i.header_offset)
            for i in zf.infolist()
        ]


def real_local_header(data: bytes, offset: int) -> tuple[int, ...]:
    """(flags, crc, csize, usize, n, m) straight from the bytes."""
    fields = struct.unpack_from("<4s5H3I2H", data, offset)
    assert fields[0] == b"PK\x03\x04"
    return fields[2], *fields[6:]


# ---------------------------------------------------------------- archive builders


def savez_bytes(compressed: bool = False, names: Sequence[str] = NAMES) -> bytes:
    arrays = {name: np.arange(i * 7, dtype="<f8").reshape(-1, 1) for i, name in enumerate(names)}
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


class Unseekable(io.RawIOBase):
    """A write-only stream without tell/seek: zipfile then streams with data descriptors."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.data += bytes(b)
        return len(b)


def streamed_bytes() -> bytes:
    out = Unseekable()
    with zipfile.ZipFile(out, "w") as zf:
        for i, name in enumerate(["s.npy", "d.npy", "ünï.npy", "empty.npy"]):
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED if i % 2 else zipfile.ZIP_STORED
            with zf.open(info, "w") as f:
                f.write(b"payload %d " % i * 50 * (name != "empty.npy"))
    return bytes(out.data)


def zipfile_bytes(
    members: Sequence[tuple[str, bytes]],
    *,
    method: int = zipfile.ZIP_STORED,
    force_zip64: bool = False,
    comment: bytes = b"",
) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # duplicate names on purpose
        with zipfile.ZipFile(buf, "w", compression=method) as zf:
            for name, data in members:
                with zf.open(name, "w", force_zip64=force_zip64) as f:
                    f.write(data)
            zf.comment = comment
    return buf.getvalue()


def write_zip64(
    f: BinaryIO,
    members: Sequence[tuple[str | bytes, bytes | int]],
    *,
    comment: bytes = b"",
    only_offset: bool = False,
) -> None:
    """An archive routing every size and offset through ZIP64, written by hand.

    Local and central headers hold the 0xFFFFFFFF sentinels and ZIP64 extras; a ZIP64 end
    record, its locator and an EOCD full of sentinels close the archive. A member given as an
    int is that many zero bytes, left as a hole by seeking (a sparse file); its CRC is 0.
    Bytes names are cp437 (flag bit 11 clear), str names UTF-8. With ``only_offset`` the
    central headers keep their real sizes and move only the local header offset into the
    ZIP64 extra.
    """
    central = []
    for name, content in members:
        raw = name if isinstance(name, bytes) else name.encode()
        flags = 0 if isinstance(name, bytes) else 0x800
        size = content if isinstance(content, int) else len(content)
        crc = 0 if isinstance(content, int) else zlib.crc32(content)
        lho = f.tell()
        extra = struct.pack("<HHQQ", 1, 16, size, size)
        header = (b"PK\x03\x04", 45, flags, 0, 0, 0x21, crc, U32, U32, len(raw), len(extra))
        f.write(struct.pack("<4s5H3I2H", *header) + raw + extra)
        if isinstance(content, int):
            f.seek(content, io.SEEK_CUR)
        else:
            f.write(content)
        central.append((raw, flags, crc, size, lho))
    cd_offset = f.tell()
    for raw, flags, crc, size, lho in central:
        sizes = (size, size) if only_offset else (U32, U32)
        extra = (
            struct.pack("<HHQ", 1, 8, lho)
            if only_offset
            else struct.pack("<HHQQQ", 1, 24, size, size, lho)
        )
        fields = (45, 45, flags, 0, 0, 0x21, crc, *sizes, len(raw), len(extra), 0, 0, 0, 0, U32)
        f.write(struct.pack("<4s6H3I5H2I", b"PK\x01\x02", *fields) + raw + extra)
    record = f.tell()
    n = len(central)
    f.write(
        struct.pack(
            "<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, record - cd_offset, cd_offset
        )
    )
    f.write(struct.pack("<4sIQI", b"PK\x06\x07", 0, record, 1))
    f.write(struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, U16, U16, U32, U32, len(comment)))
    f.write(comment)


def zip64_bytes(
    members: Sequence[tuple[str | bytes, bytes | int]] = (("x.npy", b"abc"), ("日本.npy", b"")),
    *,
    comment: bytes = b"",
) -> bytes:
    buf = io.BytesIO()
    write_zip64(buf, members, comment=comment)
    return buf.getvalue()


def patched(data: bytes, offset: int, fmt: str, *values: Any) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def eocd_at(data: bytes) -> int:
    return data.rindex(b"PK\x05\x06")


def central_at(data: bytes, index: int = 0) -> int:
    pos = -1
    for _ in range(index + 1):
        pos = data.index(b"PK\x01\x02", pos + 1)
    return pos


# ---------------------------------------------------------------- numpy and zipfile archives


def test_tail_size() -> None:
    assert tail_size(10) == 10
    assert tail_size(10**9) == 256 * 1024
    assert tail_size(10**9, initial=100) == EOCD_SEARCH
    assert tail_size(0) == 0


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
def test_savez_matches_zipfile(compressed: bool) -> None:
    data = savez_bytes(compressed, NAMES * 1)
    reader = Reader.of(data)
    directory = open_directory(reader)
    assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(data))
    assert [e.name for e in directory.entries] == [n + ".npy" for n in NAMES]
    assert [e.index for e in directory.entries] == list(range(len(NAMES)))
    assert directory.end.comment == b""
    assert directory.end.zip64_record_offset is None
    assert set(directory.by_name()) == {n + ".npy" for n in NAMES}
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for entry in directory.entries:
            header = locate(reader, directory, entry)
            flags, _, _, _, n, m = real_local_header(data, entry.local_header_offset)
            assert header.data_offset == entry.local_header_offset + 30 + n + m
            assert header.header_offset == entry.local_header_offset
            assert header.name == entry.name
            assert not entry.encrypted
            assert not entry.has_data_descriptor
            assert entry.method == (zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED)
            assert inflate(entry, raw_member(reader, header)) == zf.read(entry.name)
            assert bool(flags & 0x800) == (not entry.name.isascii())
    # only the tail, one read per local header and one per member's data
    assert len(reader.reads) == 1 + 2 * len(NAMES)


def test_savez_local_zip64_extra_not_in_directory() -> None:
    data = savez_bytes(False, ["x", "ü"])
    reader = Reader.of(data)
    directory = open_directory(reader)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        central_extras = [info.extra for info in zf.infolist()]
    assert central_extras == [b"", b""]
    for entry in directory.entries:
        header = locate(reader, directory, entry)
        assert header.extra_length == 20
        start = entry.local_header_offset + 30 + len(entry.name.encode())
        assert struct.unpack_from("<HH", data, start) == (1, 16)
        assert header.data_offset == start + 20
        assert reader.read(header.data_offset, 6) == b"\x93NUMPY"


def test_local_header_needs_more_bytes() -> None:
    data = savez_bytes(False, ["long_name_" * 10])
    directory = open_directory(Reader.of(data))
    entry = directory.entries[0]
    needed = 30 + len(entry.name.encode()) + 20
    for short in (data[:30], data[: needed - 1]):
        with pytest.raises(NeedMoreBytes) as info:
            parse_local_header(short, entry, len(data), source=SRC)
        assert (info.value.offset, info.value.needed) == (0, needed)
        assert not isinstance(info.value, FormatError)
    with pytest.raises(NeedMoreBytes) as info:
        parse_local_header(data[:10], entry, len(data), source=SRC)
    assert info.value.needed == LOCAL_HEADER_SIZE
    header = parse_local_header(data[:needed], entry, len(data), source=SRC)
    assert header.data_offset == needed


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_zipfile_force_zip64(method: int) -> None:
    members = [("a.bin", b"x" * 1000), ("b/ü.bin", bytes(range(256)) * 3), ("empty", b"")]
    data = zipfile_bytes(members, method=method, force_zip64=True)
    reader = Reader.of(data)
    directory = open_directory(reader)
    assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(data))
    for entry, (_, content) in zip(directory.entries, members, strict=True):
        header = locate(reader, directory, entry)
        assert header.extra_length == 20
        assert inflate(entry, raw_member(reader, header)) == content


def test_streamed_entries_use_central_sizes() -> None:
    data = streamed_bytes()
    reader = Reader.of(data)
    directory = open_directory(reader)
    assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(data))
    assert all(e.has_data_descriptor for e in directory.entries)
    assert any(e.compressed_size > 0 for e in directory.entries)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for entry in directory.entries:
            flags, crc, csize, usize, _, _ = real_local_header(data, entry.local_header_offset)
            assert flags & 0x08
            assert (crc, csize, usize) == (0, 0, 0)
            header = locate(reader, directory, entry)
            assert inflate(entry, raw_member(reader, header)) == zf.read(entry.name)


def test_empty_archive() -> None:
    data = zipfile_bytes([])
    directory = open_directory(Reader.of(data))
    assert directory.entries == ()
    assert directory.end == EndRecord(0, 0, 0, 0, b"", None, None)


def test_cp437_names() -> None:
    data = zip64_bytes([(b"caf\x82.npy", b"1"), ("utf8_é.npy", b"2")])
    directory = open_directory(Reader.of(data))
    assert [e.name for e in directory.entries] == ["café.npy", "utf8_é.npy"]
    assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(data))
    for entry in directory.entries:
        locate(Reader.of(data), directory, entry)


# ---------------------------------------------------------------- ZIP64, big archives


@pytest.mark.parametrize("only_offset", [False, True])
def test_hand_built_zip64_matches_zipfile(only_offset: bool) -> None:
    members: list[tuple[str | bytes, bytes | int]] = [("x.npy", b"abc"), ("y.npy", b"z" * 99)]
    buf = io.BytesIO()
    write_zip64(buf, members, comment=b"hello", only_offset=only_offset)
    data = buf.getvalue()
    extra_length = struct.unpack_from("<H", data, central_at(data) + 30)[0]
    assert extra_length == (12 if only_offset else 28)
    reader = Reader.of(data)
    directory = open_directory(reader)
    end = directory.end
    assert end.zip64_locator_offset == eocd_at(data) - 20
    assert end.zip64_record_offset == end.zip64_locator_offset - 56
    assert end.comment == b"hello"
    assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(data))
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for entry in directory.entries:
            header = locate(reader, directory, entry)
            assert raw_member(reader, header) == zf.read(entry.name)


@pytest.fixture(scope="module")
def many_members() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(70_000):
            zf.writestr(f"m{i:05d}.npy", b"%d" % (i % 10))
    return buf.getvalue()


def test_more_than_65535_members(many_members: bytes) -> None:
    data = many_members
    assert struct.unpack_from("<H", data, eocd_at(data) + 10) == (U16,)
    reader = Reader.of(data)
    directory = open_directory(reader)
    assert directory.end.entries == 70_000
    assert directory.end.zip64_record_offset is not None
    assert directory.end.cd_offset < len(data) - tail_size(len(data))  # read separately
    assert len(reader.reads) == 2
    assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(data))
    for index in (0, 12_345, 65_535, 69_999):
        entry = directory.entries[index]
        header = locate(reader, directory, entry)
        assert raw_member(reader, header) == b"%d" % (index % 10)


def test_member_over_4gib_sparse(tmp_path: Path) -> None:
    big = 4_300_000_000
    path = tmp_path / "big.zip"
    with path.open("wb") as f:
        write_zip64(f, [("big.npy", big), ("after.npy", b"tail bytes")], comment=b"c")
    assert path.stat().st_size > big
    with path.open("rb") as f:
        reader = Reader(f)
        directory = open_directory(reader)
        big_entry, after = directory.entries
        assert big_entry.compressed_size == big_entry.uncompressed_size == big
        assert after.local_header_offset == 30 + 7 + 20 + big > U32
        assert directory.end.cd_offset > U32
        assert as_zipfile(directory.entries) == zipfile_view(path)
        header = locate(reader, directory, big_entry)
        assert header.data_offset == 30 + 7 + 20
        header = locate(reader, directory, after)
        assert raw_member(reader, header) == b"tail bytes"
        assert sum(n for _, n in reader.reads) < 300_000
    with zipfile.ZipFile(path) as zf:
        assert zf.read("after.npy") == b"tail bytes"


# ---------------------------------------------------------------- comments, tail edge cases


def test_long_comment_with_fake_end_record() -> None:
    members = [("a.npy", b"1"), ("b.npy", b"22")]
    plain = zipfile_bytes(members, comment=b"c" * 60_000)
    comment = b"PK\x05\x06" + b"\x00" * 30 + b"c" * 59_966  # zipfile falls for this one
    data = zipfile_bytes(members, comment=comment)
    for archive, text in [(plain, b"c" * 60_000), (data, comment)]:
        directory = open_directory(Reader.of(archive))
        assert directory.end.comment == text
        assert directory.end.trailing_bytes == 0
        assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(plain))


@pytest.mark.parametrize("initial", [0, 256 * 1024])
def test_directory_outside_the_tail_read(initial: int) -> None:
    names = [f"member_{i:04d}_" + "n" * 60 for i in range(3000 if initial else 200)]
    comment = b"#" * 60_000
    data = zipfile_bytes([(n, b"") for n in names], comment=comment)
    size = len(data)
    n = tail_size(size, initial)
    tail = data[size - n :]
    end = parse_end_record(tail, size - n, size, source=SRC)
    assert end.cd_offset < size - n
    with pytest.raises(NeedMoreBytes) as info:
        parse_central_directory(tail, size - n, end, size, source=SRC)
    assert (info.value.offset, info.value.needed) == (end.cd_offset, end.cd_size)
    cd = data[end.cd_offset : end.cd_offset + end.cd_size]
    directory = parse_central_directory(cd, end.cd_offset, end, size, source=SRC)
    assert [e.name for e in directory.entries] == names
    reader = Reader.of(data)
    assert open_directory(reader, initial=initial) == directory
    assert len(reader.reads) == 2


@pytest.mark.parametrize(
    ("comment_size", "pending"), [(65_500, True), (65_530, True), (100, False)]
)
def test_zip64_records_outside_the_tail_read(comment_size: int, pending: bool) -> None:
    data = zip64_bytes(comment=b"%" * comment_size)
    size = len(data)
    tail_offset = size - tail_size(size, 0)
    if comment_size == 65_530:  # the locator itself is cut off
        with pytest.raises(NeedMoreBytes) as info:
            parse_end_record(data[tail_offset:], tail_offset, size, source=SRC)
        assert info.value.offset == eocd_at(data) - 20
        assert info.value.offset + info.value.needed == size
        tail_offset = info.value.offset
    end = parse_end_record(data[tail_offset:], tail_offset, size, source=SRC)
    assert end.zip64_pending is pending
    record = end.zip64_record_offset
    assert record is not None
    with pytest.raises(NeedMoreBytes) as info:
        parse_zip64_end_record(data[record + 1 :], record + 1, end, size, source=SRC)
    assert (info.value.offset, info.value.needed) == (record, 56)
    complete = parse_zip64_end_record(data[record : record + 56], record, end, size, source=SRC)
    assert (complete.entries, complete.zip64_pending) == (2, False)
    assert open_directory(Reader.of(data), initial=0).end == complete


def test_end_record_needs_more_tail() -> None:
    data = zipfile_bytes([("a.npy", b"1")], comment=b"c" * 60_000)
    size = len(data)
    with pytest.raises(NeedMoreBytes) as info:
        parse_end_record(data[-1000:], size - 1000, size, source=SRC)
    assert (info.value.offset, info.value.needed) == (0, size)  # smaller than EOCD_SEARCH
    with pytest.raises(FormatError, match="tail read holds"):
        parse_end_record(data[-1000:], 0, size, source=SRC)


def test_trailing_garbage_falls_back() -> None:
    good = savez_bytes(False, ["a", "b"])
    data = good + b"\x00garbage"
    directory = open_directory(Reader.of(data))
    assert directory.end.trailing_bytes == 8
    assert as_zipfile(directory.entries) == zipfile_view(io.BytesIO(good))


# ---------------------------------------------------------------- hostile archives


def run_all(data: bytes) -> None:
    """The whole IO-layer path: directory, then every local header."""
    reader = Reader.of(data)
    directory = open_directory(reader)
    for entry in directory.entries:
        locate(reader, directory, entry)


@cache
def small_archives() -> tuple[bytes, ...]:
    return (
        savez_bytes(False, ["a", "ü"]),
        savez_bytes(True, ["a", "b", "c"]),
        streamed_bytes(),
        zip64_bytes(comment=b"note"),
    )


@pytest.mark.parametrize("which", range(4))
def test_truncated_at_every_cut_point(which: int) -> None:
    data = small_archives()[which]
    run_all(data)
    for cut in range(len(data)):
        with pytest.raises(FormatError, match=SRC):
            run_all(data[:cut])
        with pytest.raises(FormatError, match=SRC):
            run_all(data[cut + 1 :])


def test_directory_pointing_past_the_end() -> None:
    data = savez_bytes(False, ["a", "b"])
    eocd = eocd_at(data)
    size, offset = struct.unpack_from("<II", data, eocd + 12)
    for bad_size, bad_offset in [(size, len(data)), (U32 - 1, offset), (size + 1, offset)]:
        with pytest.raises(FormatError, match="central directory at offset"):
            run_all(patched(data, eocd + 12, "<II", bad_size, bad_offset))
    z64 = zip64_bytes()
    record = z64.rindex(b"PK\x06\x06")
    for field, value in [(40, 10**12), (48, len(z64)), (48, 2**64 - 1)]:
        with pytest.raises(FormatError, match="central directory at offset"):
            run_all(patched(z64, record + field, "<Q", value))
    locator = z64.rindex(b"PK\x06\x07")
    for value in [len(z64), locator - 55, 2**64 - 1]:
        with pytest.raises(FormatError, match="ZIP64 locator"):
            run_all(patched(z64, locator + 8, "<Q", value))


def test_member_data_past_the_directory() -> None:
    data = savez_bytes(False, ["a", "b"])
    at = central_at(data, 1)
    with pytest.raises(FormatError, match=r"'b\.npy'.*runs into the central directory"):
        run_all(patched(data, at + 20, "<I", 10_000))
    with pytest.raises(FormatError, match=r"'b\.npy'.*at or past|'b\.npy'.*runs into"):
        run_all(patched(data, at + 42, "<I", len(data)))


@pytest.mark.parametrize(
    ("signature", "occurrence", "message"),
    [
        (b"PK\x05\x06", -1, "not a ZIP archive"),
        (b"PK\x01\x02", 0, r"entry 0 .*expected signature"),
        (b"PK\x01\x02", 1, r"entry 1 .*expected signature"),
        (b"PK\x03\x04", 1, r"'b\.npy'.*local header signature"),
        (b"PK\x06\x06", -1, "ZIP64 end record signature"),
        (b"PK\x06\x07", -1, "ZIP64 sentinels, but no ZIP64 locator"),
    ],
)
def test_bad_signatures(signature: bytes, occurrence: int, message: str) -> None:
    zip64 = signature in (b"PK\x06\x06", b"PK\x06\x07")
    data = zip64_bytes([("a.npy", b"1"), ("b.npy", b"2")]) if zip64 else savez_bytes(False, "ab")
    positions = [i for i in range(len(data)) if data.startswith(signature, i)]
    data = patched(data, positions[occurrence], "4s", b"PK\xee\xee")
    with pytest.raises(FormatError, match=message):
        run_all(data)


@pytest.mark.parametrize("delta", [-2, -1, 1, 2])
def test_entry_count_mismatch(delta: int) -> None:
    data = savez_bytes(False, ["a", "b", "c", "x" * 40])
    eocd = eocd_at(data)
    bad = patched(data, eocd + 8, "<HH", 4 + delta, 4 + delta)
    with pytest.raises(
        FormatError, match=r"counts \d+ members|of the \d+ members the end record counts"
    ):
        run_all(bad)


def test_overlapping_members() -> None:
    data = zipfile_bytes([("a.npy", b"1" * 10), ("b.npy", b"2" * 10)])
    bad = patched(data, central_at(data, 1) + 42, "<I", 0)
    directory = parse_central_directory(
        data, 0, open_directory(Reader.of(data)).end, len(bad), source=SRC
    )
    assert directory.entries[1].local_header_offset != 0
    with pytest.raises(FormatError, match=r"'a\.npy'.*overlaps member 'b\.npy'"):
        run_all(bad)
    bad = patched(data, central_at(data, 0) + 20, "<I", 11)  # a's data runs into b's header
    with pytest.raises(FormatError, match=r"'a\.npy'.*overlaps member 'b\.npy'"):
        run_all(bad)


@pytest.mark.parametrize(
    "name",
    ["../x.npy", "/abs.npy", "a/../../b", "C:\\x", "c:x.npy", "a\\b.npy", "\\\\srv\\x", ".."],
)
def test_hostile_names(name: str) -> None:
    assert member_name_problem(name) is not None
    data = zipfile_bytes([("fine.npy", b""), (name, b"x")])
    directory = parse_central_directory(
        data, 0, parse_end_record(data, 0, len(data), source=SRC), len(data), source=SRC
    )
    assert directory.entries[1].name == name
    with pytest.raises(FormatError, match=f"member {re_repr(name)} .*hostile name"):
        check_members(directory, source=SRC)


def re_repr(name: str) -> str:
    import re

    return re.escape(repr(name))


def test_nul_and_empty_names() -> None:
    for raw, problem in [(b"a\x00b.npy", "NUL"), (b"", "empty")]:
        data = zip64_bytes([(raw, b"1")])
        with pytest.raises(FormatError, match=f"{re_repr(raw.decode())}.*{problem}"):
            run_all(data)


def test_duplicate_names() -> None:
    data = zipfile_bytes([("a.npy", b"1"), ("b.npy", b"2"), ("a.npy", b"3")])
    with pytest.raises(FormatError, match=r"'a\.npy' \(entry 2\) has the same name as entry 0"):
        run_all(data)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("a.npy", None),
        ("dir/sub/x.npy", None),
        ("..foo.npy", None),
        ("a..b/c...d", None),
        ("日本語.npy", None),
        ("dir/", None),
        ("", "empty"),
        ("x\x00.npy", "NUL"),
        ("/etc/passwd", "absolute"),
        ("\\x", "absolute"),
        ("C:/x", "drive"),
        ("z:", "drive"),
        ("a\\b", "backslash"),
        ("a/..", "'..'"),
        ("../a", "'..'"),
        ("a/../b", "'..'"),
    ],
)
def test_member_name_problem(name: str, problem: str | None) -> None:
    reason = member_name_problem(name)
    if problem is None:
        assert reason is None
    else:
        assert reason is not None
        assert problem in reason


@pytest.mark.parametrize("flag", [0x0001, 0x0040, 0x2000])
def test_encrypted_member_is_unsupported(flag: int) -> None:
    data = savez_bytes(False, ["plain", "secret"])
    at = central_at(data, 1)
    (flags,) = struct.unpack_from("<H", data, at + 8)
    with pytest.raises(UnsupportedError, match=r"'secret\.npy' is encrypted"):
        run_all(patched(data, at + 8, "<H", flags | flag))


def test_malformed_beats_unsupported() -> None:
    data = zipfile_bytes([("../x", b"1"), ("y", b"2")])
    at = central_at(data, 1)
    with pytest.raises(FormatError, match="hostile"):
        run_all(patched(data, at + 8, "<H", 1))


def test_local_name_differs() -> None:
    data = savez_bytes(False, ["a", "b"])
    local = [i for i in range(len(data)) if data.startswith(b"PK\x03\x04", i)][1]
    bad = patched(data, local + 30, "1s", b"X")
    with pytest.raises(FormatError, match=r"member 'b\.npy': the local header .* names 'X\.npy'"):
        run_all(bad)


def test_zip64_extra_missing_or_short() -> None:
    data = zip64_bytes([("a.npy", b"1")])
    extra = central_at(data) + 46 + 5
    with pytest.raises(FormatError, match=r"'a\.npy'.*no ZIP64 extra field"):
        run_all(patched(data, extra, "<H", 0x9999))
    with pytest.raises(FormatError, match=r"'a\.npy'.*local header offset is in the ZIP64"):
        run_all(patched(data, extra + 2, "<H", 16))
    with pytest.raises(FormatError, match=r"'a\.npy'.*extra field 0x0001.*claims 200 bytes"):
        run_all(patched(data, extra + 2, "<H", 200))


def test_local_header_limits() -> None:
    data = savez_bytes(False, ["a", "b"])
    directory = open_directory(Reader.of(data))
    a, b = directory.entries
    cd = directory.end.cd_offset
    late = replace(b, local_header_offset=cd - 10)
    with pytest.raises(FormatError, match=r"'b\.npy'.*local header .* runs into the directory"):
        parse_local_header(data[cd - 10 :], late, len(data), source=SRC, cd_offset=cd)
    big = replace(a, compressed_size=len(data))
    with pytest.raises(FormatError, match=r"'a\.npy'.*bytes of data .* the archive end"):
        parse_local_header(data, big, len(data), source=SRC)
    assert parse_zip64_end_record(b"", 0, directory.end, len(data), source=SRC) is directory.end
    moved = replace(directory.end, eocd_offset=len(data) - 10)
    with pytest.raises(FormatError, match="do not fit"):
        parse_central_directory(data, 0, moved, len(data), source=SRC)


def test_zip64_disk_sentinel_needs_its_field() -> None:
    data = zip64_bytes([("a.npy", b"1")])
    with pytest.raises(FormatError, match=r"'a\.npy'.*disk number is in the ZIP64 extra"):
        run_all(patched(data, central_at(data) + 34, "<H", U16))


def test_bad_utf8_name() -> None:
    data = zipfile_bytes([("ü.npy", b"1")])
    bad = patched(data, central_at(data) + 46, "1s", b"\xff")
    with pytest.raises(FormatError, match="flagged UTF-8"):
        run_all(bad)


def test_split_archives_and_limits_are_unsupported() -> None:
    data = savez_bytes(False, ["a", "b"])
    with pytest.raises(UnsupportedError, match="several disks"):
        run_all(patched(data, eocd_at(data) + 4, "<H", 1))
    z64 = zip64_bytes()
    with pytest.raises(UnsupportedError, match=r"split archive \(2 disks"):
        run_all(patched(z64, z64.rindex(b"PK\x06\x07") + 16, "<I", 2))
    with pytest.raises(UnsupportedError, match="several disks"):
        run_all(patched(z64, z64.rindex(b"PK\x06\x06") + 16, "<I", 3))
    end = parse_end_record(data, 0, len(data), source=SRC)
    with pytest.raises(UnsupportedError, match="limit of 1"):
        parse_central_directory(data, 0, end, len(data), source=SRC, max_entries=1)


def test_zip64_record_size_field() -> None:
    z64 = zip64_bytes()
    record = z64.rindex(b"PK\x06\x06")
    for value in (43, 45, 2**63):
        with pytest.raises(FormatError, match=r"ZIP64 end record at offset .* claims"):
            run_all(patched(z64, record + 4, "<Q", value))


def test_messages_name_the_source() -> None:
    data = savez_bytes(False, ["a"])
    bad = patched(data, eocd_at(data) + 8, "<HH", 5, 5)
    with pytest.raises(FormatError) as info:
        run_all(bad)
    assert str(info.value).startswith(f"{SRC}: ")


# ---------------------------------------------------------------- mutation fuzzing


@st.composite
def mutated_archives(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(small_archives())))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        size = len(data)
        # mostly the tail: end records and central directory
        pos = draw(st.integers(0, size - 1) | st.integers(max(0, size - 300), size - 1))
        kinds = ["flip"] * 3 + ["byte"] * 2 + ["sentinel"] * 2 + ["truncate", "insert", "delete"]
        kind = draw(st.sampled_from(kinds))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "sentinel":
            data[pos : pos + 4] = draw(st.sampled_from([b"\xff\xff\xff\xff", b"\xff\xff", b"\0"]))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=60))
        else:
            del data[pos : pos + draw(st.integers(1, 60))]
    return bytes(data)


def parse_anything(data: bytes) -> None:
    """Every parser on every range it asks for; only the three documented exceptions."""
    allowed = (FormatError, UnsupportedError, NeedMoreBytes)
    reader = Reader.of(data)
    try:
        directory = open_directory(reader)
    except allowed:
        return
    for entry in directory.entries:
        with contextlib.suppress(*allowed):
            locate(reader, directory, entry)


@settings(max_examples=600, deadline=None, database=None)
@given(data=mutated_archives())
def test_mutations_raise_only_documented_errors(data: bytes) -> None:
    started = time.perf_counter()
    parse_anything(data)
    assert time.perf_counter() - started < 0.2


def test_documented_exceptions_only_on_random_tails() -> None:
    rng = np.random.default_rng(0)
    calls: list[Callable[[bytes], object]] = [
        lambda b: parse_end_record(b, 0, len(b), source=SRC),
        lambda b: parse_end_record(b, 1000, 1000 + len(b), source=SRC),
    ]
    for _ in range(300):
        blob = rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8).tobytes()
        blob += b"PK\x05\x06" + rng.integers(0, 256, 18, dtype=np.uint8).tobytes()
        for call in calls:
            with contextlib.suppress(FormatError, UnsupportedError, NeedMoreBytes):
                call(blob)
