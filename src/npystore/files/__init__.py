"""One reader per file format, over the fetch layer: what a file holds, as layouts and trees
of nodes."""
