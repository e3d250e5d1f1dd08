"""Faces: turn :class:`~npystore.read.layout.ArrayLayout` values into what users hold (dask arrays).

Faces never parse bytes; they consume layouts and read through :mod:`npystore.read.access`.
"""
