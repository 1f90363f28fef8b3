import importlib
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _compiled(module: str):
    try:
        return importlib.import_module(f"benchc.{module}_c")
    except ImportError:
        # CI builds the extensions (BENCHC_REQUIRE_EXTENSIONS=1): a missing one is a failure there.
        if os.environ.get("BENCHC_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            raise
        return None


@pytest.fixture(params=["py", "c"])
def sse_module(request):
    """Every hot-path test runs on both cores; the C one must exist where it was required."""
    if request.param == "py":
        return importlib.import_module("benchc._sse_py")
    mod = _compiled("_sse")
    if mod is None:
        pytest.skip("Cython core not built here (no C compiler); CI requires it")
    return mod
