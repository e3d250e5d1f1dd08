"""The file level: the 128-byte header (or a Level-4 matrix type) and top-level elements.

Steps 1 and 2 of the reading order in the package docstring: :func:`parse_header` reads
the prefix, :func:`scan_elements` lists the variables from their tags alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from npystore.errors import FormatError, UnsupportedError
from npystore.formats.mat5._tags import (
    HEADER_SIZE,
    MI_COMPRESSED,
    MI_MATRIX,
    TAG_SIZE,
    _Bytes,
    _mi,
    _pair,
)
from npystore.formats.need import NeedMoreBytes
from npystore.formats.sniff import HDF5_SIGNATURE


@dataclass(frozen=True, slots=True)
class MatHeader:
    """What the start of a MAT-file says.

    Attributes
    ----------
    version : int
        4 (Level 4, no header) or 5 (Level 5: ``-v6`` and ``-v7`` files).
    text : str
        The descriptive text, latin-1, trailing blanks and NULs removed ("" for v4).
    byte_order : str
        ``"<"`` or ``">"``: from the endian indicator (v5) or the first matrix's type (v4).
    subsys_offset : int or None
        Absolute offset of the subsystem data element, None when there is none.
    data_start : int
        Offset of the first data element (128) or v4 matrix (0).
    """

    version: int
    text: str
    byte_order: str
    subsys_offset: int | None
    data_start: int


@dataclass(frozen=True, slots=True)
class Mopt:
    """A Level-4 matrix type, ``MOPT = M*1000 + O*100 + P*10 + T``.

    Attributes
    ----------
    byte_order : str
        ``"<"`` (M = 0) or ``">"`` (M = 1).
    precision : int
        P: 0 double, 1 single, 2 int32, 3 int16, 4 uint16, 5 uint8.
    kind : int
        T: 0 full, 1 text, 2 sparse.
    """

    byte_order: str
    precision: int
    kind: int

    @property
    def value(self) -> int:
        """The MOPT integer."""
        return (0 if self.byte_order == "<" else 1000) + self.precision * 10 + self.kind


def decode_mopt(word: _Bytes, *, source: str) -> Mopt:
    """Read a Level-4 matrix type from its 4 bytes, working out their byte order.

    The same 4 bytes are read little and big endian; the reading whose M digit names the
    byte order it was read in wins (MOPT 0, little-endian double, reads 0 both ways).

    Parameters
    ----------
    word : bytes
        The 4 bytes of the type field.
    source : str
        Name of the file, for messages.

    Returns
    -------
    Mopt

    Raises
    ------
    FormatError
        Neither reading is a valid MOPT.
    UnsupportedError
        A valid MOPT for VAX or Cray floating point (M = 2, 3, 4).
    """
    if len(word) < 4:
        raise FormatError(f"{source}: a v4 matrix type needs 4 bytes, found {len(word)}")
    readings = [(order, int.from_bytes(word[:4], "little" if order == "<" else "big"))
                for order in "<>"]  # fmt: skip
    for order, value in readings:
        if value >= 5000:
            continue
        m, rest = divmod(value, 1000)
        o, rest = divmod(rest, 100)
        p, t = divmod(rest, 10)
        if o == 0 and p <= 5 and t <= 2 and m == "<>".index(order):
            return Mopt(order, p, t)
    for _, value in readings:
        m, o, p, t = value // 1000, value // 100 % 10, value // 10 % 10, value % 10
        if 2 <= m <= 4 and o == 0 and p <= 5 and t <= 2:
            raise UnsupportedError(
                f"{source}: v4 matrix type {value} stores VAX or Cray floating point "
                f"(M = {m}), expected IEEE little (0) or big (1) endian"
            )
    raise FormatError(
        f"{source}: {bytes(word[:4])!r} is not a v4 matrix type MOPT (M in 0..4, O = 0, "
        "P in 0..5, T in 0..2) in either byte order"
    )


def plain_hdf5_refused(source: str, superblock: int = 0) -> str:
    """The message refusing a plain HDF5 file: HDF5 signature at byte 0, or at
    ``superblock`` (512, 1024, ...) after a user block that is not a MAT-file header.

    MATLAB writes v7.3 files as HDF5 behind a 512-byte user block that starts with the
    128-byte MAT-file header; a file without it is not read as a MAT-file, because MATLAB's
    shapes and types (column-major dims, ``MATLAB_class``) are not HDF5's.
    """
    where = (
        "it starts with the HDF5 signature instead of"
        if not superblock
        else f"its HDF5 superblock is at byte {superblock}, after a user block that does not "
        f"start with"
    )
    return (
        f"{source}: a plain HDF5 file, not a MATLAB v7.3 MAT-file: {where} the 128-byte "
        f"MAT-file header (text, version 0x0200, 'IM') that MATLAB writes in a 512-byte user "
        f"block. npystore reads HDF5 only as MAT-files, whose shapes and types follow "
        f"MATLAB's attributes, not HDF5's; read plain HDF5 with h5py, or xarray's h5netcdf "
        f"engine"
    )


def hdf5_superblock_offsets(size: int) -> list[int]:
    """Where HDF5 looks for its signature after a user block in a file of ``size`` bytes:
    512, 1024, 2048, ... (every offset that still holds the 8-byte signature).

    >>> hdf5_superblock_offsets(3000)
    [512, 1024, 2048]
    """
    out: list[int] = []
    offset = 512
    while offset + len(HDF5_SIGNATURE) <= size:
        out.append(offset)
        offset *= 2
    return out


def v73_header(text: str = "MATLAB 7.3 MAT-file, HDF5 schema 1.00 .") -> bytes:
    """The 128-byte header MATLAB writes at the start of a v7.3 file's 512-byte user block:
    ``text`` (ASCII, padded with spaces to 116 bytes), 8 bytes of subsystem offset (zeros),
    version 0x0200 and the ``IM`` endian indicator (little-endian).

    >>> h = v73_header()
    >>> len(h), is_v73(h)
    (128, True)
    """
    raw = text.encode("ascii")
    if len(raw) > 116:
        raise ValueError(f"MAT header text of {len(raw)} bytes, at most 116")
    return raw.ljust(116) + bytes(8) + (0x0200).to_bytes(2, "little") + b"IM"


def is_v73(prefix: _Bytes) -> bool:
    """Whether the first 128 bytes are the header of a v7.3 (HDF5) MAT-file.

    Such files are refused by :func:`parse_header`; read them as HDF5 (user block of 512).
    """
    if len(prefix) < HEADER_SIZE or 0 in bytes(prefix[:4]):
        return False
    indicator = bytes(prefix[126:128])
    if indicator not in (b"IM", b"MI"):
        return False
    return int.from_bytes(prefix[124:126], "little" if indicator == b"IM" else "big") == 0x0200


def parse_header(prefix: _Bytes, *, source: str, file_size: int | None = None) -> MatHeader:
    """Parse the start of a MAT-file: the Level-5 header, or the first Level-4 matrix type.

    Like scipy (and as the format document requires), a zero byte among the first 4 bytes
    marks a Level-4 file, which has no header; its byte order is that of the first matrix.

    Parameters
    ----------
    prefix : bytes
        The first ``min(128, file size)`` bytes of the file (more is fine).
    source : str
        Name of the file (URL), for messages.
    file_size : int, optional
        Size of the file; lets a short prefix be told apart from a short file.

    Returns
    -------
    MatHeader

    Raises
    ------
    FormatError
        Neither a v5 header nor a v4 matrix type; bad endian indicator or version.
    UnsupportedError
        A v7.3 (HDF5) file, or a v4 file of VAX or Cray numbers.
    NeedMoreBytes
        ``prefix`` holds fewer than 128 bytes of a file that may be longer.
    """
    if len(prefix) >= 4 and 0 in bytes(prefix[:4]):
        try:
            mopt = decode_mopt(prefix[:4], source=source)
        except FormatError:
            raise FormatError(
                f"{source}: not a MAT-file: the first bytes {bytes(prefix[:4])!r} hold a zero, "
                "so no v5 header, and are not a v4 matrix type MOPT (M in 0..4, O = 0, "
                "P in 0..5, T in 0..2) either"
            ) from None
        return MatHeader(4, "", mopt.byte_order, None, 0)
    if len(prefix) < HEADER_SIZE:
        if file_size is None or file_size > len(prefix):
            raise NeedMoreBytes(
                f"{source}: {len(prefix)} bytes are too few for a MAT-file header, read "
                f"{HEADER_SIZE}",
                offset=0,
                needed=HEADER_SIZE,
            )
        raise FormatError(
            f"{source}: not a MAT-file: {len(prefix)} bytes, expected a {HEADER_SIZE}-byte "
            "v5 header (or a v4 matrix type: a zero among the first 4 bytes)"
        )
    indicator = bytes(prefix[126:128])
    if indicator not in (b"IM", b"MI"):
        raise FormatError(
            f"{source}: not a MAT-file: endian indicator {indicator!r} at byte 126, "
            "expected b'IM' or b'MI'"
        )
    order = "<" if indicator == b"IM" else ">"
    endian: Literal["little", "big"] = "little" if order == "<" else "big"
    version = int.from_bytes(prefix[124:126], endian)
    text = bytes(prefix[:116]).decode("latin-1").rstrip(" \t\n\x00")
    if version == 0x0200:
        raise UnsupportedError(
            f"{source}: a v7.3 MAT-file (version 0x0200, {text[:40]!r}...) is an HDF5 file "
            "with a 512-byte user block; this parser reads v4, v6 and v7 files"
        )
    if version != 0x0100:
        raise FormatError(
            f"{source}: MAT-file version 0x{version:04x} at byte 124, expected 0x0100 "
            "(Level 5) or 0x0200 (v7.3)"
        )
    raw = bytes(prefix[116:124])
    subsys = None if raw in (b"\x00" * 8, b" " * 8) else int.from_bytes(raw, endian)
    return MatHeader(5, text, order, subsys, HEADER_SIZE)


class VariableEntry(NamedTuple):
    """One top-level data element, known from its tag alone (a named tuple: a file may have
    hundreds of thousands).

    Attributes
    ----------
    offset : int
        Absolute offset of the tag.
    total_size : int
        Tag + data bytes (top-level elements are not padded).
    compressed : bool
        miCOMPRESSED: the data is a zlib stream holding the variable's element.
    data_type : int
        14 (miMATRIX) or 15 (miCOMPRESSED).
    is_subsystem : bool
        The element at the header's subsystem offset (not a user variable).
    """

    offset: int
    total_size: int
    compressed: bool
    data_type: int = MI_MATRIX
    is_subsystem: bool = False

    @property
    def data_offset(self) -> int:
        """Absolute offset of the data (the zlib stream of a compressed element)."""
        return self.offset + TAG_SIZE

    @property
    def data_size(self) -> int:
        """Bytes of data after the tag."""
        return self.total_size - TAG_SIZE

    @property
    def end(self) -> int:
        """Absolute offset just past the element: the next element's tag."""
        return self.offset + self.total_size


def scan_elements(
    data: _Bytes,
    data_offset: int,
    file_size: int,
    byte_order: str,
    *,
    source: str,
    subsys_offset: int | None = None,
) -> tuple[list[VariableEntry], int | None]:
    """Walk the top-level data element tags inside a window of the file.

    Only the 8-byte tags are read; an element's data may lie outside ``data``.

    Parameters
    ----------
    data : bytes
        ``file[data_offset:data_offset + len(data)]``; the first tag at ``data_offset``.
    data_offset : int
        Absolute offset of ``data[0]``, a tag: ``header.data_start`` or a returned offset.
    file_size : int
        Size of the file.
    byte_order : str
        ``header.byte_order``.
    source : str
        Name of the file, for messages.
    subsys_offset : int, optional
        ``header.subsys_offset``: that element is flagged ``is_subsystem``.

    Returns
    -------
    entries : list of VariableEntry
        The elements whose tags lie in ``data``, in file order.
    next_offset : int or None
        Absolute offset of the next tag, not in ``data``: scan a window read there. None
        when the last element ends exactly at ``file_size``.

    Raises
    ------
    FormatError
        A tag that is not miMATRIX or miCOMPRESSED, an element running past the end of
        the file, or fewer than 8 bytes left after the last element.
    """
    pair = _pair(byte_order)
    entries: list[VariableEntry] = []
    pos = data_offset
    stop = data_offset + len(data)
    while pos < file_size:
        if pos + TAG_SIZE > file_size:
            raise FormatError(
                f"{source}: {file_size - pos} bytes after the last element at offset {pos}, "
                f"expected an {TAG_SIZE}-byte tag or the end of the file (truncated?)"
            )
        if pos + TAG_SIZE > stop:
            return entries, pos
        mdtype, nbytes = pair.unpack_from(data, pos - data_offset)
        if mdtype not in (MI_MATRIX, MI_COMPRESSED):
            raise FormatError(
                f"{source}: top-level element at offset {pos} has data type {_mi(mdtype)}, "
                f"expected miMATRIX (14) or miCOMPRESSED (15)"
            )
        end = pos + TAG_SIZE + nbytes
        if end > file_size:
            raise FormatError(
                f"{source}: top-level element at offset {pos} claims {nbytes} bytes, only "
                f"{file_size - pos - TAG_SIZE} are left in the {file_size}-byte file (truncated?)"
            )
        entries.append(
            VariableEntry(
                pos, TAG_SIZE + nbytes, mdtype == MI_COMPRESSED, mdtype, pos == subsys_offset
            )
        )
        pos = end
    return entries, None
