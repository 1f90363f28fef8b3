"""Selector: the module of the compiled receive loop on Linux when built, else None (the
asyncio transports of benchc.client.http1 read every stream, as without the loop).

Unlike the other selectors, the pure-Python twin is never chosen here: it defines what the
loop does (tests run both and compare), but a thread running Python bytecode per read would
be slower than the asyncio path it stands in for."""

import sys

from benchc._core import select

_, CORE = select(__name__, "RxLoop")
if CORE == "cython" and sys.platform.startswith("linux"):
    from benchc.client import _rxloop_c as MODULE
else:
    MODULE = None

__all__ = ["CORE", "MODULE"]
