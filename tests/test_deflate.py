"""Deflate checkpoint indexes and inflating from them, against zlib as the oracle."""

from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npystore import FormatError
from npystore.fetch import open_reader
from npystore.formats import deflate
from npystore.formats.deflate import Checkpoint, DeflateIndex
from npystore.read import inflate
from npystore.read.inflate import build_index, inflate_into, inflate_range
from npystore.read.layout import DeflatedMember
from npystore.read.slot import IndexSlot
from npystore.read.stream import StreamInflater


def _payload(n: int = 12_000_000, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.standard_normal(n // 4)).astype("<f4")
    return walk.tobytes()


def _member(tmp_path: Path, data: bytes, level: int = 6) -> tuple[Any, DeflatedMember]:
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    raw = c.compress(data) + c.flush()
    prefix = b"junk-before-the-member" * 3
    path = tmp_path / "member.bin"
    path.write_bytes(prefix + raw + b"trailing")
    member = DeflatedMember("m.npy", len(prefix), len(raw), len(data), zlib.crc32(data))
    return open_reader(str(path)), member


@pytest.mark.parametrize("builder", ["rapidgzip", "indexed_gzip"])
def test_index_builders_agree_with_zlib(tmp_path: Path, builder: str) -> None:
    pytest.importorskip(builder)
    data = _payload()
    reader, member = _member(tmp_path, data)
    with mock.patch.object(inflate, "index_builder_name", return_value=builder):
        index = build_index(reader, member)
    assert index is not None
    assert len(index.checkpoints) >= 2
    assert index.uncompressed_size == len(data)
    raw = reader.read(member.offset, member.offset + member.compressed_size)
    for cp in index.checkpoints:
        # windows may be sparse (rapidgzip zeroes bytes no back-reference uses): what counts
        # is that inflating from them gives the data
        assert len(cp.window) == (0 if cp.out_offset == 0 else deflate.WINDOW_SIZE)
        got = deflate.inflate_from(cp, raw[cp.bit_offset // 8 :], 0, 5000)
        assert got == data[cp.out_offset : cp.out_offset + 5000]
    slot = IndexSlot(index)
    rng = np.random.default_rng(1)
    for _ in range(30):
        a = int(rng.integers(0, len(data)))
        b = int(min(len(data), a + rng.integers(0, 3_000_000)))
        assert inflate_range(reader, member, slot, a, b) == data[a:b]
    assert inflate_range(reader, member, slot, len(data) - 10, len(data)) == data[-10:]


def test_index_roundtrips_through_bytes(tmp_path: Path) -> None:
    pytest.importorskip("rapidgzip")
    data = _payload(4_000_000)
    reader, member = _member(tmp_path, data)
    index = build_index(reader, member)
    assert index is not None
    again = DeflateIndex.from_bytes(index.to_bytes())
    assert again == index
    with pytest.raises(FormatError):
        DeflateIndex.from_bytes(index.to_bytes()[:-1])
    with pytest.raises(FormatError):
        DeflateIndex.from_bytes(b"garbage")


def test_slot_builds_once_and_pickles_with_its_index(tmp_path: Path) -> None:
    import pickle

    data = _payload(2_000_000)
    reader, member = _member(tmp_path, data)
    slot = IndexSlot()
    calls = []

    def counting() -> DeflateIndex | None:
        calls.append(1)
        return build_index(reader, member)

    for _ in range(3):
        slot.ensure(counting)
    assert len(calls) == 1
    copy = pickle.loads(pickle.dumps(slot))
    assert copy.get() == slot.get()


def test_without_an_index_builder_ranges_stream_from_the_start(tmp_path: Path) -> None:
    data = _payload(3_000_000)
    reader, member = _member(tmp_path, data)
    slot = IndexSlot()
    with mock.patch.object(inflate, "index_builder_name", return_value=None):
        assert (
            inflate_range(reader, member, slot, 1_000_000, 1_000_100) == data[1_000_000:1_000_100]
        )
        assert slot.get() is None
        assert inflate_range(reader, member, slot, 0, len(data)) == data


def test_inflate_into_checks_crc_and_size(tmp_path: Path) -> None:
    data = _payload(1_000_000)
    reader, member = _member(tmp_path, data)
    out = bytearray(len(data))
    inflate_into(reader, member, memoryview(out))
    assert bytes(out) == data
    bad_crc = DeflatedMember(member.name, member.offset, member.compressed_size, len(data), 1234)
    with pytest.raises(FormatError, match="CRC-32"):
        inflate_into(reader, bad_crc, memoryview(out))
    with pytest.raises(FormatError, match=r"CRC"):
        build_index(reader, bad_crc)
    # a directory that declares less than the stream inflates to (a zip bomb's lie)
    short = DeflatedMember(member.name, member.offset, member.compressed_size, len(data) - 1, 0)
    with pytest.raises(FormatError, match="more than"):
        inflate_into(reader, short, memoryview(bytearray(len(data) - 1)))
    long = DeflatedMember(member.name, member.offset, member.compressed_size, len(data) + 5, 0)
    with pytest.raises(FormatError, match="ended after"):
        inflate_into(reader, long, memoryview(bytearray(len(data) + 5)))


def test_corrupt_stream_is_format_error(tmp_path: Path) -> None:
    data = _payload(200_000)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    raw = bytearray(c.compress(data) + c.flush())
    raw[len(raw) // 2 : len(raw) // 2 + 50] = b"\xff" * 50
    path = tmp_path / "bad.bin"
    path.write_bytes(bytes(raw))
    member = DeflatedMember("m", 0, len(raw), len(data), zlib.crc32(data))
    with pytest.raises(FormatError, match=r"bad\.bin:m"):
        inflate_into(open_reader(str(path)), member, memoryview(bytearray(len(data))))


def _inflaters() -> list[Any]:
    mods: list[Any] = [zlib]
    for name in ("isal.isal_zlib", "zlib_ng.zlib_ng"):
        try:
            mods.append(__import__(name, fromlist=["_"]))
        except ImportError:
            continue
    return mods


def _fixed_block_then_stored(shift: int, stored: bytes) -> tuple[bytes, Checkpoint]:
    """A fixed-Huffman block of literals ending at bit ``shift`` of a byte, then a stored
    block of ``stored`` (byte-aligned, as deflate has it), then an empty final block; and the
    checkpoint at the stored block."""
    # 9-bit literals (144..255) and 8-bit ones (0..143): 3 + bits + 7 = 8 k + shift
    n9 = next(n for n in range(8) if (10 + 9 * n) % 8 == shift)
    literals = bytes(range(150, 150 + n9)) + b"\x20" * 8
    bits: list[int] = [0, 1, 0]  # not final, fixed Huffman

    def code(value: int, length: int) -> None:
        bits.extend((value >> (length - 1 - i)) & 1 for i in range(length))

    for b in literals:
        if b < 144:
            code(0x30 + b, 8)
        else:
            code(0x190 + b - 144, 9)
    code(0, 7)  # end of block
    start = len(bits)
    assert start % 8 == shift
    bits.extend([0, 0, 0])  # stored, not final
    bits.extend([0] * (-len(bits) % 8))
    head = bytearray((len(bits) + 7) // 8)
    for i, bit in enumerate(bits):
        head[i // 8] |= bit << (i % 8)
    n = len(stored)
    body = bytes(head) + n.to_bytes(2, "little") + (n ^ 0xFFFF).to_bytes(2, "little") + stored
    body += b"\x03\x00"  # final fixed block, end of block
    return body, Checkpoint(start, len(literals), literals)


@pytest.mark.parametrize("shift", range(1, 8))
def test_resume_before_a_stored_block_mid_byte(shift: int) -> None:
    """A checkpoint within a byte followed by stored blocks (a flush's ``00 00 FF FF``, an
    incompressible region): shifting the bytes misaligned the stored block ("invalid stored
    block lengths"); the resume head keeps every byte boundary where the stream has it."""
    stored = bytes(range(256)) * 3
    stream, cp = _fixed_block_then_stored(shift, stored)
    whole = zlib.decompress(stream, -15)
    assert whole[cp.out_offset :] == stored
    got = deflate.inflate_from(cp, stream[cp.bit_offset // 8 :], 5, len(stored) - 5)
    assert got == stored[5:]
    for mod in _inflaters():  # the head is empty blocks every implementation accepts
        d = mod.decompressobj(wbits=-15, zdict=cp.window)
        rest = d.decompress(deflate.resume_head(stream[cp.bit_offset // 8], shift))
        rest += d.decompress(stream[cp.bit_offset // 8 + 1 :])
        assert (rest, d.eof) == (stored, True), mod


def _pieces_joined_by_full_flushes(data: bytes, pieces: int) -> bytes:
    """What parallel compressors (pigz) write: pieces compressed alone, joined by full
    flushes, the last finishing the stream."""
    step = -(-len(data) // pieces)
    out = []
    for k in range(pieces):
        c = zlib.compressobj(1, zlib.DEFLATED, -15)
        last = k == pieces - 1
        out.append(
            c.compress(data[k * step : (k + 1) * step])
            + c.flush(zlib.Z_FINISH if last else zlib.Z_FULL_FLUSH)
        )
    return b"".join(out)


def test_pieces_joined_by_full_flushes_read_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24 item 4: indexed_gzip puts a checkpoint at the empty stored block that joins
    two pieces; resuming there failed with "invalid stored block lengths"."""
    pytest.importorskip("indexed_gzip")
    monkeypatch.setattr(inflate, "INDEX_SPACING", 2**18)
    monkeypatch.setattr("npystore.read.index.INDEX_SPACING", 2**18)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 2, 4 * (2**18 + 32), dtype=np.uint8).tobytes()
    raw = _pieces_joined_by_full_flushes(data, 4)
    path = tmp_path / "pigz.bin"
    path.write_bytes(raw)
    member = DeflatedMember("m.npy", 0, len(raw), len(data), zlib.crc32(data))
    reader = open_reader(str(path))
    with mock.patch.object(inflate, "index_builder_name", return_value="indexed_gzip"):
        index = build_index(reader, member)
    assert index is not None
    aligned = [cp for cp in index.checkpoints if cp.out_offset % (2**18 + 32) == 0]
    assert any(cp.bit_offset % 8 for cp in aligned[1:])  # a checkpoint within a byte
    slot = IndexSlot(index)
    for cp in index.checkpoints:
        for at in (cp.out_offset, cp.out_offset + 7):
            want = data[at : at + 100_000]
            assert inflate_range(reader, member, slot, at, at + 100_000) == want
            # the forwards stream of npz:// file objects resumes there too
            assert StreamInflater(reader, member, slot).read(at, at + 100_000) == want


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_gzidx_parser_rejects_garbage(blob: bytes) -> None:
    for data in (blob, b"GZIDX\x01\x00" + blob):
        try:
            index = deflate.parse_gzidx(data, header_size=10, compressed_size=10**6)
        except FormatError:
            continue
        assert index.checkpoints[0] == Checkpoint(0, 0, b"")


def test_index_invariants_are_checked() -> None:
    with pytest.raises(FormatError, match="start"):
        DeflateIndex(10, 10, (Checkpoint(8, 0, b""),))
    with pytest.raises(FormatError, match="increasing"):
        DeflateIndex(
            100, 100, (Checkpoint(0, 0, b""), Checkpoint(16, 5, b"x"), Checkpoint(8, 9, b"y"))
        )
    with pytest.raises(FormatError, match="beyond"):
        DeflateIndex(1, 100, (Checkpoint(0, 0, b""), Checkpoint(16, 5, b"x")))


def test_member_gzip_file_is_a_valid_gzip_stream(tmp_path: Path) -> None:
    import gzip

    data = _payload(500_000)
    reader, member = _member(tmp_path, data)
    gz = inflate.MemberGzipFile(reader, member)
    with pytest.raises(io.UnsupportedOperation):
        gz.fileno()
    assert gzip.decompress(gz.read()) == data


@pytest.mark.parametrize("index", [False, True])
def test_output_held_back_at_a_call_limit_is_drained(tmp_path: Path, index: bool) -> None:
    # numpy.savez_compressed of 4 MiB of zeros: ISA-L consumes the whole 4 KB stream in the
    # call that stops at the 4 MiB output limit and holds the last 112 bytes back; reading
    # stopped there ("deflate stream ended after 4194304 bytes") on a valid archive
    import npystore

    want = np.zeros(4 * 2**20 - 16, dtype=np.uint8)
    want[-1] = 7
    path = tmp_path / "zeros.npz"
    np.savez_compressed(path, a=want)
    np.testing.assert_array_equal(npystore.load(str(path))["a"], want)
    z = npystore.open_npz(str(path), index_cache=False)
    if index:
        z.build_index("a")
    np.testing.assert_array_equal(z["a"][-5:].compute(), want[-5:])
    np.testing.assert_array_equal(z["a"].compute(), want)
