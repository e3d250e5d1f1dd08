"""The read-only Zarr v3 face: the store, its data types and the MATLAB hierarchy."""
