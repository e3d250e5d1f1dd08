"""The ZIP central directory of ``.npz`` archives, parsed from byte ranges read back to front.

Reading order (what the IO layer does; every step gets only the bytes it names)::

    1. tail = archive[size - tail_size(size):]              -> parse_end_record
    2. if end.zip64_pending: 56 bytes at zip64_record_offset  -> parse_zip64_end_record
    3. [cd_offset, cd_offset + cd_size), often inside tail    -> parse_central_directory,
                                                                 check_members
    4. per member: 30 + len(name) + slack bytes at its local header offset
                                                              -> parse_local_header
    A NeedMoreBytes from any step says which range to read instead; it is not an error.

One module per kind of record, each with its byte layout (PKWARE APPNOTE.TXT 4.3, integers
little endian):

- :mod:`._end`: the end of central directory record (EOCD), the ZIP64 locator and the
  ZIP64 end record, found at the archive's end: where the directory is (steps 1 and 2);
- :mod:`._central`: the central directory headers, one per member, ZIP64 extra fields
  resolved (step 3);
- :mod:`._members`: the members as a whole (names, overlaps, encryption: step 3) and each
  member's local file header (step 4);
- :mod:`._blocks`: npystore's block index of independently deflated members (an extra
  field of the central directory);
- :mod:`._write`: the same records as npystore writes them (``savez``);
- :mod:`._common`: sizes, sentinels and flag bits they share.

The central directory is authoritative for method, flags, CRC and sizes; the local header
only decides where the data starts. Split (multi-disk) archives raise UnsupportedError.
Offsets are taken as absolute: data prepended to an archive (self-extracting stubs) is not
supported and shows up as a FormatError.

This package is pure: bytes in, frozen dataclasses out.
"""

from __future__ import annotations

from npystore.formats.need import NeedMoreBytes
from npystore.formats.zipdir._blocks import (
    BLOCKS_EXTRA_ID,
    DEFLATE_BLOCK,
    MAX_BLOCKS,
    BlockIndex,
    block_size,
    blocks_extra,
    parse_blocks,
)
from npystore.formats.zipdir._central import (
    ZipDirectory,
    ZipEntry,
    parse_central_directory,
)
from npystore.formats.zipdir._common import CENTRAL_HEADER_SIZE
from npystore.formats.zipdir._end import (
    EOCD_SEARCH,
    ZIP64_RECORD_SIZE,
    EndRecord,
    parse_end_record,
    parse_zip64_end_record,
    tail_size,
)
from npystore.formats.zipdir._members import (
    LOCAL_HEADER_SIZE,
    LocalHeader,
    check_members,
    member_name_problem,
    parse_local_header,
)
from npystore.formats.zipdir._write import (
    ZIP64_LIMIT,
    CentralRecord,
    central_record,
    data_descriptor,
    dos_time,
    end_records,
    local_header,
)

__all__ = [
    "BLOCKS_EXTRA_ID", "DEFLATE_BLOCK", "MAX_BLOCKS", "ZIP64_LIMIT", "BlockIndex",
    "CentralRecord", "block_size", "blocks_extra", "central_record", "data_descriptor",
    "dos_time", "end_records", "local_header", "parse_blocks",
    "CENTRAL_HEADER_SIZE", "EOCD_SEARCH", "LOCAL_HEADER_SIZE", "ZIP64_RECORD_SIZE",
    "EndRecord", "LocalHeader", "NeedMoreBytes",
    "ZipDirectory", "ZipEntry", "check_members", "member_name_problem",
    "parse_central_directory", "parse_end_record", "parse_local_header",
    "parse_zip64_end_record", "tail_size",
]  # fmt: skip
