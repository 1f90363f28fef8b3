"""Selector: the compiled chunked-transfer decoder when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.client._chunked_py import ChunkedDecoder

    CORE: str
else:
    ChunkedDecoder, CORE = select(__name__, "ChunkedDecoder")

__all__ = ["CORE", "ChunkedDecoder"]
