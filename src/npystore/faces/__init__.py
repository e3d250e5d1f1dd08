"""Faces: turn :class:`~npystore.layout.ArrayLayout` values into what users hold (dask arrays).

Faces never parse bytes; they consume layouts and read through :mod:`npystore.access`.
"""
