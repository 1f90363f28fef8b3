"""Selector: the compiled byte-pair merger when built, else the pure-Python twin."""

from benchc._core import select

BPE, CORE = select(__name__, "BPE")

__all__ = ["BPE", "CORE"]
