"""The members: checks across the whole directory (names, overlaps, encryption) and each
member's local file header, which decides where its data starts.

Byte layout (PKWARE APPNOTE.TXT 4.3, integers little endian)::

    Local file header: at the local header offset, directly followed by the data
    0   4  signature b"PK\\x03\\x04"; 4 2 version needed; 6 2 flags; 8 2 method
    10  4  DOS time and date; 14 4 CRC-32; 18 4 compressed size; 22 4 uncompressed size
           (CRC and sizes are 0 with flag bit 3: the data descriptor after the data has them)
    26  2  name length n; 28 2 extra length m
    30  n  name, the same bytes as in the central directory
    30+n m  extra; it may differ from the central one: numpy.savez writes a 20-byte ZIP64
           extra into every local header and none into the directory
    30+n+m  the member's data, compressed size bytes
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Final

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.deflate import MAX_INFLATE_RATIO, max_inflated_size
from npystore.formats.need import NeedMoreBytes
from npystore.formats.zipdir._central import ZipDirectory, ZipEntry
from npystore.formats.zipdir._common import F_PATCHED, F_UTF8, short

__all__ = [
    "LOCAL_HEADER_SIZE", "LocalHeader", "check_members", "member_name_problem",
    "parse_local_header",
]  # fmt: skip

#: Fixed part of a local file header.
LOCAL_HEADER_SIZE: Final = 30
_LOCAL: Final = struct.Struct("<4s5H3I2H")
_LOCAL_SIG: Final = b"PK\x03\x04"
_DEFLATED: Final = 8
_DRIVE: Final = re.compile(r"[A-Za-z]:")


@dataclass(frozen=True, slots=True)
class LocalHeader:
    """A member's local file header: where its data starts.

    Attributes
    ----------
    entry : ZipEntry
        The central directory entry it belongs to.
    header_offset, data_offset : int
        Absolute offsets of the header (``entry.local_header_offset``) and of the member's
        (compressed) data, ``header_offset + 30 + n + m``.
    name : str
        The local header's name, equal to ``entry.name``.
    extra_length : int
        Length ``m`` of the local extra field.
    """

    entry: ZipEntry
    header_offset: int
    data_offset: int
    name: str
    extra_length: int


def parse_local_header(
    data: bytes,
    entry: ZipEntry,
    archive_size: int,
    *,
    source: str,
    cd_offset: int | None = None,
) -> LocalHeader:
    """Parse a member's local file header and locate its data.

    Parameters
    ----------
    data : bytes
        Archive bytes from ``entry.local_header_offset`` on: at least 30, best
        ``30 + len(name) + slack``.
    entry : ZipEntry
        The member's central directory entry.
    archive_size : int
        Size of the archive.
    source : str
        URL of the archive, for messages.
    cd_offset : int, optional
        Offset of the central directory: the member must end before it (else before the end
        of the archive).

    Returns
    -------
    LocalHeader

    Raises
    ------
    FormatError
        A bad signature, a name other than the central one, or a header or data running
        into the central directory (or past the archive).
    NeedMoreBytes
        ``data`` is too short for the name and extra; ``needed`` counts from the header.
    """
    lho = entry.local_header_offset
    limit, region = (archive_size, "archive end") if cd_offset is None else (cd_offset, "directory")
    member = f"{source}: member {short(entry.name)!r}"
    if lho + LOCAL_HEADER_SIZE > limit:
        raise FormatError(
            f"{member}: a {LOCAL_HEADER_SIZE}-byte local header at offset {lho} runs into the "
            f"{region} at offset {limit}"
        )
    if len(data) < LOCAL_HEADER_SIZE:
        raise NeedMoreBytes(
            f"{member}: {len(data)} bytes of local header, expected {LOCAL_HEADER_SIZE}",
            offset=lho,
            needed=LOCAL_HEADER_SIZE,
        )
    sig, _, flags, _, _, _, _, _, _, name_len, extra_len = _LOCAL.unpack_from(data, 0)
    if sig != _LOCAL_SIG:
        raise FormatError(
            f"{member}: expected the local header signature {_LOCAL_SIG!r} at offset {lho}, "
            f"found {sig!r}"
        )
    data_offset = lho + LOCAL_HEADER_SIZE + name_len + extra_len
    if data_offset > limit:
        raise FormatError(
            f"{member}: the local header at offset {lho} ({name_len}-byte name, {extra_len}-"
            f"byte extra) runs into the {region} at offset {limit}"
        )
    if len(data) < data_offset - lho:
        raise NeedMoreBytes(
            f"{member}: {len(data)} bytes of local header, expected {data_offset - lho}",
            offset=lho,
            needed=data_offset - lho,
        )
    raw = bytes(data[LOCAL_HEADER_SIZE : LOCAL_HEADER_SIZE + name_len])
    if raw != entry.raw_name:
        local = raw.decode("utf-8" if flags & F_UTF8 else "cp437", errors="replace")
        raise FormatError(
            f"{member}: the local header at offset {lho} names {short(local)!r} instead"
        )
    if data_offset + entry.compressed_size > limit:
        raise FormatError(
            f"{member}: {entry.compressed_size} bytes of data at offset {data_offset} run into "
            f"the {region} at offset {limit}"
        )
    return LocalHeader(entry, lho, data_offset, entry.name, extra_len)


def member_name_problem(name: str) -> str | None:
    """Return why a member name is unsafe as a relative path, or None if it is fine.

    Parameters
    ----------
    name : str
        A member name.

    Returns
    -------
    str or None
        A reason for empty names, NUL characters, absolute paths (leading ``/`` or ``\\``,
        drive letters such as ``C:``), backslashes and ``..`` path components.
    """
    if not name:
        return "the name is empty"
    if "\x00" in name:
        return "the name contains a NUL character"
    if name[0] in "/\\":
        return "the name is an absolute path"
    if _DRIVE.match(name):
        return "the name starts with a drive letter"
    if "\\" in name:
        return "the name contains a backslash, a path separator on Windows"
    if ".." in name.split("/"):
        return "the name has a '..' path component"
    return None


def check_members(directory: ZipDirectory, *, source: str) -> None:
    """Reject hostile, duplicate, overlapping, misplaced and encrypted members.

    Each member takes at least ``[local_header_offset, local_header_offset + 30 + len(name)
    + compressed_size)`` (its local extra is unknown until read); that range must not run
    into the next member's local header or into the central directory.

    Parameters
    ----------
    directory : ZipDirectory
        The parsed central directory.
    source : str
        URL of the archive, for messages.

    Raises
    ------
    FormatError
        A hostile or duplicate name, overlapping members, a member at or past the
        central directory, or a deflated member declaring more bytes than deflate can
        produce from its compressed size; checked for every member before any
        UnsupportedError.
    UnsupportedError
        An encrypted member, or one with compressed patched data (flag bit 5).
    """
    seen: dict[str, int] = {}
    for entry in directory.entries:
        member = f"{source}: member {short(entry.name)!r} (entry {entry.index})"
        if (problem := member_name_problem(entry.name)) is not None:
            raise FormatError(f"{member} has a hostile name: {problem}")
        if entry.name in seen:
            raise FormatError(f"{member} has the same name as entry {seen[entry.name]}")
        seen[entry.name] = entry.index
    cd_offset = directory.end.cd_offset
    ordered = sorted(directory.entries, key=lambda e: (e.local_header_offset, e.index))
    for after, entry in enumerate(ordered, start=1):
        lho = entry.local_header_offset
        stop = lho + LOCAL_HEADER_SIZE + len(entry.raw_name) + entry.compressed_size
        member = f"{source}: member {short(entry.name)!r} at [{lho}, {stop})"
        if after < len(ordered) and stop > (nxt := ordered[after]).local_header_offset:
            raise FormatError(
                f"{member} overlaps member {short(nxt.name)!r} at offset {nxt.local_header_offset}"
            )
        if stop > cd_offset:
            raise FormatError(f"{member} runs into the central directory at offset {cd_offset}")
    for entry in directory.entries:
        if entry.method == _DEFLATED and entry.uncompressed_size > max_inflated_size(
            entry.compressed_size
        ):
            raise FormatError(
                f"{source}: member {short(entry.name)!r} (entry {entry.index}) declares "
                f"{entry.uncompressed_size} bytes deflated into {entry.compressed_size}, "
                f"expected at most {MAX_INFLATE_RATIO} per compressed byte"
            )
    for entry in directory.entries:
        if entry.encrypted or entry.flags & F_PATCHED:
            what = "is encrypted" if entry.encrypted else "holds compressed patched data"
            raise UnsupportedError(
                f"{source}: member {short(entry.name)!r} {what} (flags 0x{entry.flags:04x})"
            )
