"""The measured request: benchc's own HTTP/1.1 reader (and aiohttp), the stream parser (SSE,
deltas, usage, chunk gaps), de-chunking and kernel-stamped reads; compiled cores with twins."""
