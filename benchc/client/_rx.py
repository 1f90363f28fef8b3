"""Selector: the compiled stamped read when built, else the pure-Python twin."""

from benchc._core import select

read_stamped, CORE = select(__name__, "read_stamped")

__all__ = ["CORE", "read_stamped"]
