"""Selector: the compiled HdrHistogram recorder when built, else the pure-Python twin."""

from benchc._core import select

Histogram, CORE = select(__name__, "Histogram")

__all__ = ["Histogram", "CORE"]
