"""Selector: the compiled stream parser when built, else the pure-Python twin."""

from benchc._core import select

StreamParser, CORE = select(__name__, "StreamParser")

__all__ = ["StreamParser", "CORE"]
