"""Which format a file is, from its first bytes: every magic npystore knows, in one place.

========  =============================================================================
format    first bytes
========  =============================================================================
``npy``   ``\\x93NUMPY`` (:data:`npystore.formats.npy.MAGIC`)
``npz``   a ZIP signature: ``PK\\x03\\x04`` (local header), ``PK\\x05\\x06`` (an empty
          archive's end record), ``PK\\x07\\x08`` (spanned marker)
``mat``   a Level-5 header (v6/v7: version 0x0100; v7.3: 0x0200, HDF5 after a 512-byte
          user block): 116 bytes of text, subsystem offset, version and the ``IM``/``MI``
          endian indicator at bytes 124-127; a plausible Level-4 first matrix header (no
          magic: type word, sizes, a NUL-ended printable name); or the HDF5 signature
          ``\\x89HDF\\r\\n\\x1a\\n`` at byte 0 (a plain HDF5 file, which the MAT reader refuses
          with a message saying so)
========  =============================================================================

The extension never decides. :func:`sniff` is pure; :func:`unknown_format` is the one
message for bytes that are none of these.
"""

from __future__ import annotations

from typing import Final, Literal

from npystore.errors import FormatError, UnsupportedError

__all__ = [
    "HDF5_SIGNATURE",
    "PREFIX_SIZE",
    "ZIP_MAGICS",
    "Kind",
    "is_matlab_text",
    "sniff",
    "unknown_format",
]

#: Bytes :func:`sniff` needs (the MAT header is 128).
PREFIX_SIZE: Final = 128
ZIP_MAGICS: Final = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_MAT_TEXTS: Final = (b"MATLAB 5.0 MAT-file", b"MATLAB 7.3 MAT-file")
#: The HDF5 superblock signature (at byte 0, or after a user block of 512, 1024, ... bytes).
HDF5_SIGNATURE: Final = b"\x89HDF\r\n\x1a\n"

#: What :func:`sniff` names.
Kind = Literal["npy", "npz", "mat", "unknown"]


def sniff(prefix: bytes) -> Kind:
    """Name the format of a file from its first bytes: ``"npy"``, ``"npz"``, ``"mat"``.

    Parameters
    ----------
    prefix : bytes
        The first bytes of the file (at least 128 for MATLAB files).

    Returns
    -------
    str
        The format name, or ``"unknown"``.
    """
    from npystore.formats import npy  # noqa: PLC0415 - not for open_mat (PREFIX_SIZE only)

    if npy.is_npy(prefix):
        return "npy"
    if prefix[:4] in ZIP_MAGICS:
        return "npz"
    if prefix[:19] in _MAT_TEXTS or prefix[:8] == HDF5_SIGNATURE or _is_mat(prefix):
        return "mat"
    return "unknown"


def _is_mat(prefix: bytes) -> bool:
    """A Level-5/7.3 header (version and endian indicator at bytes 124-128, any text), or a
    plausible Level-4 first matrix header (no magic: type, sizes and a NUL-ended name)."""
    if len(prefix) >= 128 and prefix[126:128] in (b"IM", b"MI") and 0 not in prefix[:4]:
        version = int.from_bytes(prefix[124:126], "little" if prefix[126:128] == b"IM" else "big")
        return version in (0x0100, 0x0200)
    from npystore.formats import mat4  # noqa: PLC0415 - only for files no magic names

    try:
        found, _ = mat4.scan_v4(prefix, 0, 1 << 62, source="<prefix>")
    except (FormatError, UnsupportedError, ValueError):
        return False
    return bool(found) and found[0].name.isprintable()


def is_matlab_text(prefix: bytes) -> bool:
    """Whether the file starts with MATLAB's own header text (for a cheap guess by name)."""
    return prefix[:19] in _MAT_TEXTS


def unknown_format(url: str, prefix: bytes) -> FormatError:
    """The error for a file that is none of the formats npystore reads."""
    from npystore.formats import npy  # noqa: PLC0415 - as in sniff

    return FormatError(
        f"{url}: not a .npy, .npz or MAT-file (unknown format): the first bytes are "
        f"{bytes(prefix[:8])!r}, "
        f"expected the .npy magic {npy.MAGIC!r}, a ZIP signature (PK\\x03\\x04) or a MATLAB "
        f"header"
    )
