"""VirtualiZarr interop: ``from npystore.virtualizarr import NpystoreParser``.

:class:`NpystoreParser` turns an ``.npy``, ``.npz`` (stored members) or MAT v7.3 file into
a VirtualiZarr ``ManifestStore`` (``virtualizarr.open_virtual_dataset(url,
registry=registry, parser=NpystoreParser())``), from which VirtualiZarr's own writers make
Icechunk or kerchunk references. Needs the ``virtualizarr`` extra
(``pip install 'npystore[virtualizarr]'``); ``import npystore`` never imports it.
"""

from __future__ import annotations

from npystore.faces.refs.virtual import NpystoreParser

__all__ = ["NpystoreParser"]
