"""Selector: the compiled response reader when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.client._response_py import ResponseReader

    CORE: str
else:
    ResponseReader, CORE = select(__name__, "ResponseReader")

__all__ = ["CORE", "ResponseReader"]
