"""Selector: the compiled SentencePiece merger when built, else the pure-Python twin."""

from benchc._core import select

SPM, CORE = select(__name__, "SPM")

__all__ = ["CORE", "SPM"]
