"""MATLAB files: v4, v5 (Level 5) and v7.3 (HDF5 through npystore's checks) as trees of nodes.

:func:`open_mat_reader` chooses the reader from the file's first 128 bytes; each lists
the variables from their headers and turns one variable into a tree of layouts
(:mod:`npystore.files.mat.tree`) on first access. The user-facing mapping is
:class:`npystore.faces.matfile.MatFile`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from npystore.errors import FormatError, UnsupportedError, missing_dependency
from npystore.fetch import RangeReader
from npystore.files.mat.tree import MatInfo, MatNode
from npystore.formats import mat5
from npystore.formats.mat5 import CharErrors

__all__ = ["MatReader", "hdf5_superblock", "open_mat_reader"]


class MatReader(Protocol):
    """What a MAT-file reader offers (v7.3, v5, v4)."""

    source: str
    version: str
    header_text: str

    def names(self) -> Collection[str]: ...

    def infos(self) -> dict[str, MatInfo]: ...

    def node(self, name: str) -> MatNode: ...

    def loaded(self, name: str) -> MatNode | None: ...

    def close(self) -> None: ...


def open_mat_reader(
    reader: RangeReader, prefix: bytes, max_depth: int, char_errors: CharErrors = "strict"
) -> MatReader:
    """The reader of the MAT-file behind ``reader`` (v7.3, v5 or v4), chosen from its first
    128 bytes (``prefix``); a plain HDF5 file is refused (UnsupportedError), also one whose
    superblock follows a user block that is not MATLAB's header."""
    if prefix.startswith(mat5.HDF5_SIGNATURE):
        raise UnsupportedError(mat5.plain_hdf5_refused(reader.url))
    if mat5.is_v73(prefix):
        try:
            from npystore.files.mat.v73 import Mat73File  # noqa: PLC0415 - needs h5py
        except ImportError as exc:
            what = f"{reader.url}: a MATLAB v7.3 (HDF5) file"
            raise missing_dependency("h5py", "mat", what, exc) from exc
        return Mat73File(reader, max_depth=max_depth, prefix=prefix)
    from npystore.files.mat.v4 import Mat4File  # noqa: PLC0415
    from npystore.files.mat.v5 import Mat5File  # noqa: PLC0415

    try:
        header = mat5.parse_header(prefix, source=reader.url, file_size=reader.size)
        if header.version == 4:
            return Mat4File(reader)
    except FormatError:
        # no MAT-file header, not v4: HDF5 behind a user block without MATLAB's header?
        superblock = hdf5_superblock(reader)
        if superblock is not None:
            raise UnsupportedError(mat5.plain_hdf5_refused(reader.url, superblock)) from None
        raise
    if header.version != 5:  # pragma: no cover - parse_header returns 4 or 5
        raise FormatError(f"{reader.url}: MAT-file version {header.version}")
    return Mat5File(reader, header, max_depth=max_depth, char_errors=char_errors)


def hdf5_superblock(reader: RangeReader) -> int | None:
    """The offset of the HDF5 signature after a user block (512, 1024, ...), or None: what
    a file that is no MAT-file may be (read only when it failed as one; one 8-byte read per
    place HDF5 looks)."""
    for offset in mat5.hdf5_superblock_offsets(reader.size):
        if reader.read(offset, offset + len(mat5.HDF5_SIGNATURE)) == mat5.HDF5_SIGNATURE:
            return offset
    return None
