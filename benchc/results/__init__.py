"""Stage 4, results: the versioned result document (write, read, validate) and the tools that read
it: compare, merge, export, report."""
