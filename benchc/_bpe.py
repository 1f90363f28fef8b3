"""Selector: the compiled byte-pair merger when built, else the pure-Python twin."""

from benchc._core import select

BPE, CORE = select("_bpe", "BPE")

__all__ = ["BPE", "CORE"]
