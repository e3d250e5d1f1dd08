"""Pure format parsers: bytes in, frozen dataclasses out. No fsspec, dask or zarr imports here."""
