"""Selector: the compiled response reader when built, else the pure-Python twin."""

from benchc._core import select

ResponseReader, CORE = select(__name__, "ResponseReader")

__all__ = ["CORE", "ResponseReader"]
