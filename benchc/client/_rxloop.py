"""Selector: the module of the compiled receive loop on Linux when built, else None (the
asyncio transports of benchc.client.http1 read every stream, as without the loop).

Unlike the other selectors, the pure-Python twin is never chosen here: it defines what the
loop does (tests run both and compare), but a thread running Python bytecode per read would
be slower than the asyncio path it stands in for."""

import importlib
import sys
from types import ModuleType

from benchc._core import select

_, CORE = select(__name__, "RxLoop")
MODULE: ModuleType | None = None
if CORE == "cython" and sys.platform.startswith("linux"):
    MODULE = importlib.import_module("benchc.client._rxloop_c")

__all__ = ["CORE", "MODULE"]
