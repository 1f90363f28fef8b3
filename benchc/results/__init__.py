"""Result documents: written by `benchc run`, read by compare/merge/report/export and by you.

`benchc.results.load(path)` gives typed objects (benchc/results/api.py); it is imported on first
use so that `benchc run`, which imports this package, does not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchc.results.api import Energy, Latency, Point, Probe, Result, Search, Telemetry, load

__all__ = ["Energy", "Latency", "Point", "Probe", "Result", "Search", "Telemetry", "load"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from benchc.results import api

        return getattr(api, name)
    raise AttributeError(f"module 'benchc.results' has no attribute {name!r}")
