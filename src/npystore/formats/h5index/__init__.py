"""HDF5 superblocks, object headers and the messages npystore's own walks need.

npystore never lets libhdf5 walk a B-tree it has not checked (a node pointing to itself
crashes the process): chunk indexes (:mod:`npystore.formats.h5chunks`) and group symbol
tables (:mod:`npystore.formats.h5groups`) are parsed by npystore first, from bytes. This
package parses what leads to them, one module per structure, each with its byte layout:

- :mod:`._superblock`: the superblock (versions 0 to 3) and the B-tree K values of its
  extension;
- :mod:`._header`: object headers (versions 1 and 2), continuation blocks followed,
  checksums of version-2 headers verified;
- :mod:`._messages`: the data layout, symbol table and link info messages among an object
  header's messages;
- :mod:`._attributes`: the attributes an object header keeps itself (MATLAB's class and
  flags read without libhdf5's attribute machinery);
- :mod:`._dataset`: small plain datasets (numbers as numpy lays them out, compact or
  contiguous) read without libhdf5;
- :mod:`._fields`: little-endian integer fields and the undefined address they share.

All addresses are *relative to the base address* (the superblock's position: the user
block size for MATLAB files); callers add it. Every integer is little-endian; O and L are
the superblock's sizes of offsets and lengths.
"""

from __future__ import annotations

from npystore.formats.h5index._attributes import (
    UNDECODED,
    CompactAttributes,
    compact_attributes,
)
from npystore.formats.h5index._dataset import PLAIN_MAX_BYTES, PlainDataset, plain_dataset
from npystore.formats.h5index._fields import undefined
from npystore.formats.h5index._header import (
    HEADER_PREFIX,
    MAX_CONTINUATIONS,
    MAX_HEADER_BLOCK,
    MAX_HEADER_SIZE,
    SHARED,
    HeaderBlock,
    header_size,
    object_header_messages,
    parse_object_header,
)
from npystore.formats.h5index._messages import (
    BTREE_V1,
    BTREE_V2,
    EXTENSIBLE_ARRAY,
    FIXED_ARRAY,
    IMPLICIT,
    INDEX_NAMES,
    MAX_RANK,
    SINGLE_CHUNK,
    ChunkLayout,
    chunk_layout,
    link_storage,
    symbol_table,
)
from npystore.formats.h5index._superblock import (
    DEFAULT_CHUNK_K,
    SIGNATURE,
    SUPERBLOCK_SIZE,
    Superblock,
    btree_k_values,
    parse_superblock,
)

__all__ = [
    "BTREE_V1",
    "PLAIN_MAX_BYTES",
    "SHARED",
    "PlainDataset",
    "plain_dataset",
    "UNDECODED",
    "CompactAttributes",
    "compact_attributes",
    "BTREE_V2",
    "DEFAULT_CHUNK_K",
    "EXTENSIBLE_ARRAY",
    "FIXED_ARRAY",
    "HEADER_PREFIX",
    "IMPLICIT",
    "INDEX_NAMES",
    "MAX_CONTINUATIONS",
    "MAX_HEADER_BLOCK",
    "MAX_HEADER_SIZE",
    "MAX_RANK",
    "SIGNATURE",
    "SINGLE_CHUNK",
    "SUPERBLOCK_SIZE",
    "ChunkLayout",
    "HeaderBlock",
    "Superblock",
    "btree_k_values",
    "chunk_layout",
    "header_size",
    "link_storage",
    "object_header_messages",
    "parse_object_header",
    "symbol_table",
    "undefined",
    "parse_superblock",
]
