"""Writing ``.npy`` and ``.npz`` files: :func:`save`, :func:`savez`, :func:`savez_compressed`.

The layer between reading and the faces: it turns numpy and dask arrays into the bytes
``numpy.save`` writes (headers from :mod:`npystore.formats.npy_write`, ZIP records from
:mod:`npystore.formats.zipdir`), computes their blocks in parallel with dask, and writes
them through a sink of the fetch layer (:mod:`npystore.fetch.sink`), which makes the
object visible only when everything was written.

- :mod:`~npystore.write.source`: arrays as contiguous slabs, block bytes, failures named;
- :mod:`~npystore.write.npy`: ``save`` (positional parts, written by the tasks themselves);
- :mod:`~npystore.write.npz`: ``savez`` and ``savez_compressed`` (members streamed in
  order, deflated in parallel as independent blocks with a block index).
"""

from __future__ import annotations

from npystore.write.npy import save
from npystore.write.npz import savez, savez_compressed
from npystore.write.source import WriteError

__all__ = ["WriteError", "save", "savez", "savez_compressed"]
