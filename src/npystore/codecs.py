"""numcodecs codecs for peer tools that read npystore's references (``pip install npystore``).

:class:`RawDeflate` (codec id ``"npystore.raw_deflate"``) decodes one chunk stored as an
independent raw deflate block (RFC 1951, no zlib or gzip wrapper): how
``npystore.savez_compressed`` writes members, one block per chunk, so that kerchunk
references and VirtualiZarr manifests point at the compressed blocks of an ``.npz``
instead of inlining its values. numcodecs has ``zlib`` (zlib-wrapped) and ``gzip``, no raw
deflate.

Readers find it by id through entry points, with nothing to import:

- ``numcodecs.codecs``: ``npystore.raw_deflate`` (zarr v2 metadata, kerchunk, xarray's
  ``engine="kerchunk"``);
- ``zarr.codecs``: ``numcodecs.npystore.raw_deflate`` (Zarr v3 metadata, VirtualiZarr), the
  numcodecs wrapper of zarr-python (:class:`RawDeflateZarr3`).

Importing this module also registers both in the running process.

>>> import numpy as np, numcodecs
>>> from npystore.codecs import RawDeflate
>>> codec = numcodecs.get_codec({"id": "npystore.raw_deflate", "size": 16})
>>> data = np.arange(4, dtype="<i4")
>>> bytes(codec.decode(codec.encode(data))) == data.tobytes()
True
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import numpy as np

from npystore.errors import missing_dependency
from npystore.formats.deflate import inflate_chunk
from npystore.formats.deflate_write import deflate_block

try:
    from numcodecs.abc import Codec
    from numcodecs.compat import ensure_contiguous_ndarray, ndarray_copy
    from numcodecs.registry import register_codec
except ImportError as exc:  # numcodecs comes with zarr
    raise missing_dependency("zarr", "numcodecs", "npystore's numcodecs codecs", exc) from exc

__all__ = ["RAW_DEFLATE_ID", "RawDeflate", "RawDeflateZarr3"]

#: numcodecs id of :class:`RawDeflate` (Zarr v3: ``numcodecs.`` before it).
RAW_DEFLATE_ID: Final = "npystore.raw_deflate"


class RawDeflate(Codec):  # type: ignore[misc]
    """One chunk as an independent raw deflate block (RFC 1951, no wrapper).

    Decoding inflates at most ``size`` bytes (a block that inflates past it is refused
    before more memory is taken) and zero-pads a stream that ends early to ``size``: the
    array's last chunk, which Zarr stores at full size. A block that stops short without
    ending its stream, or has bytes after its end, is refused.

    Parameters
    ----------
    size : int
        Bytes of one decoded chunk (its elements times the item size).

    Examples
    --------
    >>> codec = RawDeflate(size=8)
    >>> codec.decode(codec.encode(b"abc"))
    b'abc\\x00\\x00\\x00\\x00\\x00'
    """

    codec_id: ClassVar[str] = RAW_DEFLATE_ID

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"{RAW_DEFLATE_ID}: size must be a non-negative int, got {size!r}")
        self.size = size

    def encode(self, buf: Any) -> bytes:
        """``buf`` as one raw deflate stream, ended (as ``savez_compressed`` deflates)."""
        data = ensure_contiguous_ndarray(buf).view(np.uint8)
        return deflate_block(memoryview(data).cast("B"), final=True)

    def decode(self, buf: Any, out: Any = None) -> Any:
        """The chunk's ``size`` bytes (into ``out`` when given)."""
        data = memoryview(ensure_contiguous_ndarray(buf).view(np.uint8)).cast("B")
        raw = inflate_chunk(data, self.size, source=RAW_DEFLATE_ID)
        if len(raw) < self.size:
            raw += bytes(self.size - len(raw))
        return ndarray_copy(raw, out) if out is not None else raw

    def get_config(self) -> dict[str, Any]:
        """``{"id": "npystore.raw_deflate", "size": ...}``."""
        return {"id": self.codec_id, "size": self.size}

    def __repr__(self) -> str:
        return f"RawDeflate(size={self.size})"


register_codec(RawDeflate)

try:
    from zarr.codecs.numcodecs import _NumcodecsBytesBytesCodec
    from zarr.registry import register_codec as _register_zarr_codec
except ImportError:  # zarr-python < 3.1.3 or not installed: Zarr v2 readers only
    RawDeflateZarr3: Any = None
else:

    class RawDeflateZarr3(_NumcodecsBytesBytesCodec, codec_name=RAW_DEFLATE_ID):  # type: ignore[no-redef]
        """:class:`RawDeflate` as a Zarr v3 bytes-to-bytes codec
        (``{"name": "numcodecs.npystore.raw_deflate", "configuration": {"size": ...}}``)."""

    _register_zarr_codec(
        f"numcodecs.{RAW_DEFLATE_ID}", RawDeflateZarr3, qualname="npystore.codecs.RawDeflateZarr3"
    )
