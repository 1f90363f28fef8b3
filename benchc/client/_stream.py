"""Selector: the compiled stream parser when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.client._stream_py import StreamParser

    CORE: str
else:
    StreamParser, CORE = select(__name__, "StreamParser")

__all__ = ["StreamParser", "CORE"]
