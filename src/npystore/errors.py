"""The exception hierarchy of npystore.

Every error npystore raises on purpose derives from :class:`NpystoreError`. Malformed input is a
:class:`FormatError` (also a :class:`ValueError`); valid input that npystore does not handle is an
:class:`UnsupportedError` (also a :class:`NotImplementedError` and, as :func:`numpy.load` raises
:class:`ValueError` for an unsupported format version or a refused pickle, a
:class:`ValueError`: code written against numpy's exceptions keeps working). A missing optional
package is a :class:`MissingDependencyError` (an :class:`UnsupportedError` and an
:class:`ImportError`) naming the package and the extra that installs it. Messages name the URL
or member, what arrived and what was expected.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = [
    "ConsistencyError",
    "FetchError",
    "FormatError",
    "MissingDependencyError",
    "NpystoreError",
    "UnsupportedError",
    "missing_dependency",
    "require",
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


class MissingDependencyError(UnsupportedError, ImportError):
    """An optional package that this file, URL or operation needs is not installed.

    Also an :class:`ImportError` (code that caught the bare import error keeps working), whose
    ``name`` is the missing package.

    Attributes
    ----------
    name : str or None
        The package that could not be imported (``ImportError.name``).
    extra : str or None
        The npystore extra that installs it (``pip install 'npystore[extra]'``), if any.
    """

    def __init__(self, message: str, package: str | None = None, extra: str | None = None):
        super().__init__(message)
        self.msg = message
        self.name = package
        self.extra = extra

    def __reduce__(self) -> tuple[type[MissingDependencyError], tuple[str, str | None, str | None]]:
        return (type(self), (self.msg, self.name, self.extra))


def missing_dependency(
    package: str, extra: str | None, what: str, cause: BaseException | None = None
) -> MissingDependencyError:
    """The error for ``what`` needing ``package``, which could not be imported.

    Parameters
    ----------
    package : str
        The distribution to install (``"zarr"``, ``"h5py"``, ``"scipy"``, ...).
    extra : str or None
        The npystore extra that brings it (``pip install 'npystore[extra]'``); None: install
        the package itself.
    what : str
        What needs it (a URL and variable, an operation), starting the message.
    cause : BaseException, optional
        The import error (its text is included: a package that is installed but fails to
        import says why).
    """
    install = f"pip install 'npystore[{extra}]'" if extra else f"pip install {package}"
    detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
    return MissingDependencyError(
        f"{what} needs {package}, which is not installed or cannot be imported{detail}; "
        f"install it with: {install}",
        package,
        extra,
    )


def require(module: str, package: str, extra: str | None, what: str) -> ModuleType:
    """Import ``module`` (an optional dependency) or raise :class:`MissingDependencyError`.

    Parameters
    ----------
    module : str
        The module to import, e.g. ``"scipy.sparse"``.
    package, extra, what
        As :func:`missing_dependency` takes them.

    Returns
    -------
    module
        The imported module.

    Examples
    --------
    >>> require("json", "json", None, "this example").__name__
    'json'
    >>> require("no_such_xyz", "xyz", "mat", "/tmp/a.mat: 'x'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    npystore.errors.MissingDependencyError: /tmp/a.mat: 'x' needs xyz, ...'npystore[mat]'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_dependency(package, extra, what, exc) from exc
