"""References to a file's bytes for peer tools: kerchunk JSON and VirtualiZarr manifests.

- :mod:`~npystore.faces.refs.plan`: which chunks are byte ranges of the file (and which
  must be inlined), chosen once for both;
- :mod:`~npystore.faces.refs.kerchunk`: :func:`to_kerchunk` (Zarr v2 or v3 form);
- :mod:`~npystore.faces.refs.virtual`: :class:`NpystoreParser`, a VirtualiZarr parser
  (imported by :mod:`npystore.virtualizarr`; it needs the ``virtualizarr`` extra).
"""

from __future__ import annotations

from npystore.faces.refs.kerchunk import to_kerchunk

__all__ = ["to_kerchunk"]
