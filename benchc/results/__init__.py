"""Stage 4, results: the versioned result document (write, read, validate), the trust checks of
a point, and the tools that read results: compare, merge, export, report."""
