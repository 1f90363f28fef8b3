"""Selector: the compiled chunked-transfer decoder when built, else the pure-Python twin."""

from benchc._core import select

ChunkedDecoder, CORE = select(__name__, "ChunkedDecoder")

__all__ = ["CORE", "ChunkedDecoder"]
