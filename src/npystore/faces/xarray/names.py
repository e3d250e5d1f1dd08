"""Names in the engine's datasets: variables, default dimensions, ``dims=`` and
``drop_variables``.

Dimension names default to ``<variable>_dim_<i>`` (``dim_<i>`` for the one variable of an
``.npy`` file), built from the variable's own name (its ``.npz`` key or MATLAB name). The
Zarr face names them otherwise, from percent-encoded node names (see
:func:`npystore.faces.tree.node_name`): an ``.npz`` member ``run1/x`` has dimensions
``run1/x_dim_<i>`` here and ``run1%2Fx_dim_<i>`` there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from npystore.faces.xarray.array import VariableMaker

__all__ = ["NPY_VARIABLE", "check_dims", "default_dims", "drop_set"]

#: Name of the one variable of an ``.npy`` file.
NPY_VARIABLE: Final = "data"


def default_dims(name: str | None, ndim: int) -> tuple[str, ...]:
    """The default dimension names of variable ``name`` (``None``: an ``.npy`` file's).

    Parameters
    ----------
    name : str or None
        The variable's name as the dataset shows it.
    ndim : int
        Its number of dimensions.

    Returns
    -------
    tuple of str
        ``<name>_dim_0``, ``<name>_dim_1``, ... (``dim_0``, ... for ``None``).
    """
    prefix = "" if name is None else f"{name}_"
    return tuple(f"{prefix}dim_{i}" for i in range(ndim))


def check_dims(
    url: str,
    dims: Mapping[str, Sequence[str]],
    variables: Mapping[str, VariableMaker],
    absent: Iterable[str],
) -> None:
    """Check the ``dims=`` overrides against the variables of one dataset.

    Parameters
    ----------
    url : str
        The file, for messages.
    dims : mapping of str to sequence of str
        Dimension names per variable, as the caller gave them.
    variables : mapping of str to VariableMaker
        The variables of the dataset.
    absent : iterable of str
        Variables of the file left out (dropped or skipped): ``dims`` may name them.

    Raises
    ------
    ValueError
        ``dims`` names an unknown variable, gives a string instead of a sequence, or the
        wrong number of names.
    """
    known = set(absent)
    for name, names in dims.items():
        if isinstance(names, str):
            raise ValueError(
                f"{url}: dims[{name!r}] is the string {names!r}, expected a sequence of "
                f"dimension names"
            )
        if name not in variables:
            if name in known:
                continue
            raise ValueError(
                f"{url}: dims names {name!r}, which is not a variable of the file "
                f"(variables: {sorted(variables)})"
            )
        ndim = variables[name].ndim
        if len(names) != ndim:
            raise ValueError(
                f"{url}: dims[{name!r}] has {len(names)} names {tuple(names)}, the variable "
                f"has {ndim} dimensions"
            )


def drop_set(drop_variables: str | Iterable[str] | None) -> frozenset[str]:
    """The names of ``drop_variables`` (one name, several, or none) as a set."""
    if drop_variables is None:
        return frozenset()
    if isinstance(drop_variables, str):
        return frozenset({drop_variables})
    return frozenset(drop_variables)
