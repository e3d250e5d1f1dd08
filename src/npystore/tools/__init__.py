"""The command line, Zarr conversion, progress reporting and the demo."""
