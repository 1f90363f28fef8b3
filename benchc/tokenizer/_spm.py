"""Selector: the compiled SentencePiece merger when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.tokenizer._spm_py import SPM

    CORE: str
else:
    SPM, CORE = select(__name__, "SPM")

__all__ = ["CORE", "SPM"]
