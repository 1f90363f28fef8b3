"""Selector: the compiled pre-tokenizer when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.tokenizer._pretok_py import Scanner, run_cuts

    CORE: str
else:
    Scanner, CORE = select(__name__, "Scanner")
    run_cuts, _ = select(__name__, "run_cuts")

__all__ = ["CORE", "Scanner", "run_cuts"]
