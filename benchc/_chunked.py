"""Selector: the compiled chunked-transfer decoder when built, else the pure-Python twin."""

from benchc._core import select

ChunkedDecoder, CORE = select("_chunked", "ChunkedDecoder")

__all__ = ["CORE", "ChunkedDecoder"]
