import importlib
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _compiled(module: str):
    try:
        return importlib.import_module(f"{module}_c")
    except ImportError:
        # CI builds the extensions (BENCHC_REQUIRE_EXTENSIONS=1): a missing one is a failure there.
        if os.environ.get("BENCHC_REQUIRE_EXTENSIONS", "") not in ("", "0"):
            raise
        return None


def _core(name: str, which: str):
    if which == "py":
        return importlib.import_module(f"{name}_py")
    mod = _compiled(name)
    if mod is None:
        pytest.skip("Cython core not built here (no C compiler); CI requires it")
    return mod


# Every hot-path test runs on both cores; the C one must exist where it was required.
@pytest.fixture(params=["py", "c"])
def hdr_module(request):
    return _core("benchc.metrics._hdr", request.param)


@pytest.fixture(params=["py", "c"])
def stream_modules(request):
    """(stream parser module, histogram module) of one core."""
    return _core("benchc.client._stream", request.param), _core("benchc.metrics._hdr", request.param)


def both_cores(name: str) -> list:
    """The Python module, and the compiled one when built (for tests that compare the two)."""
    mods = [importlib.import_module(f"{name}_py")]
    c = _compiled(name)
    if c is not None:
        mods.append(c)
    return mods
