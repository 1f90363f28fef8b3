"""Selector: the compiled pre-tokenizer when built, else the pure-Python twin."""

from benchc._core import select

Scanner, CORE = select("_pretok", "Scanner")

__all__ = ["CORE", "Scanner"]
