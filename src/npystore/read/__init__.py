"""Reading arrays out of files: layouts and read plans, selection reads, HDF5 chunks, inflating
deflate streams, CRC ledgers."""
