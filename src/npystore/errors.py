"""The exception hierarchy of npystore.

Every error npystore raises on purpose derives from :class:`NpystoreError`. Malformed input is a
:class:`FormatError` (also a :class:`ValueError`); valid input that npystore does not handle is an
:class:`UnsupportedError` (also a :class:`NotImplementedError` and, as :func:`numpy.load` raises
:class:`ValueError` for an unsupported format version or a refused pickle, a
:class:`ValueError`: code written against numpy's exceptions keeps working). Messages name the
URL or member, what arrived and what was expected.
"""

from __future__ import annotations

__all__ = [
    "ConsistencyError",
    "FetchError",
    "FormatError",
    "NpystoreError",
    "UnsupportedError",
]


class NpystoreError(Exception):
    """Base class of every error that npystore raises deliberately."""


class FormatError(NpystoreError, ValueError):
    """The bytes are not a well-formed file of the expected format (truncated, garbage, hostile)."""


class UnsupportedError(NpystoreError, NotImplementedError, ValueError):
    """The file is well formed, but npystore does not (yet) handle what it holds."""


class ConsistencyError(NpystoreError):
    """The object changed between opening it and reading from it (size, mtime, ETag or version)."""


class FetchError(NpystoreError, OSError):
    """A byte range could not be read completely (short or failed reads after retries)."""
