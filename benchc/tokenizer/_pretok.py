"""Selector: the compiled pre-tokenizer when built, else the pure-Python twin."""

from benchc._core import select

Scanner, CORE = select(__name__, "Scanner")

__all__ = ["CORE", "Scanner"]
