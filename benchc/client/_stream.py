"""Selector: the compiled stream parser when built, else the pure-Python twin."""

from benchc._core import select
from benchc.client._stream_py import ns_to_us  # one definition of the rounding, both cores

StreamParser, CORE = select(__name__, "StreamParser")

__all__ = ["StreamParser", "ns_to_us", "CORE"]
