"""Selector: the compiled stamped read when built, else the pure-Python twin."""

from typing import TYPE_CHECKING

from benchc._core import select

if TYPE_CHECKING:  # the twin defines the API both cores share
    from benchc.client._rx_py import peek_idle, read_stamped

    CORE: str
else:
    read_stamped, CORE = select(__name__, "read_stamped")
    peek_idle, _ = select(__name__, "peek_idle")

__all__ = ["CORE", "peek_idle", "read_stamped"]
