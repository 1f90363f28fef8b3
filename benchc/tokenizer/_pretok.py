"""Selector: the compiled pre-tokenizer when built, else the pure-Python twin."""

from benchc._core import select

Scanner, CORE = select(__name__, "Scanner")
run_cuts, _ = select(__name__, "run_cuts")

__all__ = ["CORE", "Scanner", "run_cuts"]
