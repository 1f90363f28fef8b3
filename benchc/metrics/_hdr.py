"""Selector: the compiled HdrHistogram recorder when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.metrics._hdr_py import Histogram

    CORE: str
else:
    Histogram, CORE = select(__name__, "Histogram")

__all__ = ["Histogram", "CORE"]
