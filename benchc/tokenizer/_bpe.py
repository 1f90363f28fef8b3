"""Selector: the compiled byte-pair merger when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.tokenizer._bpe_py import BPE

    CORE: str
else:
    BPE, CORE = select(__name__, "BPE")

__all__ = ["BPE", "CORE"]
