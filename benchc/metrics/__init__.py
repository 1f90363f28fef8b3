"""Measurement arithmetic: the HdrHistogram recorder (compiled, with its pure-Python twin), latency
summaries and the per-point aggregation of finished requests."""
