import contextlib
import importlib
import os
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIRED = os.environ.get("BENCHC_REQUIRE_EXTENSIONS", "") not in ("", "0")


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow (end-to-end runs, Ray); CI runs them")
    parser.addoption("--real", action="store_true",
                     help="also run the tests marked real (against a real vLLM: BENCHC_VLLM_URL, or "
                          "one started with ../shared/tools/vllmserver/start.sh); CI leaves them out")


# marker -> the option that selects its tests (left out otherwise)
OPT_IN = {"slow": "--slow", "real": "--real"}


def pytest_collection_modifyitems(config, items):
    """The inner loop leaves the slow tests out unless --slow is given (CI gives it), and the
    real-server tests unless --real is given."""
    from tests.vllm_server import START_TIMEOUT_S

    for item in items:
        # a real server's start (start.sh, up to START_TIMEOUT_S on a busy machine) happens in
        # the first real test's setup: the suite's 240 s bound would cut it and leave the server
        if item.get_closest_marker("real") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(START_TIMEOUT_S + 600))
    for marker, option in OPT_IN.items():
        if config.getoption(option):
            continue
        left_out = [i for i in items if i.get_closest_marker(marker)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [i for i in items if not i.get_closest_marker(marker)]


def pytest_report_header(config):
    lines = []
    if not config.getoption("--slow"):
        lines.append("slow tests (end-to-end runs, Ray) are deselected: pass --slow to run them, as CI does")
    if not config.getoption("--real"):
        lines.append("real-server tests are deselected: pass --real to run them (docs/conformance.md)")
    return lines or None


@pytest.fixture(scope="session")
def vllm():
    """A real vLLM for the tests marked real (tests/vllm_server.py): the one at BENCHC_VLLM_URL,
    else one started for this session with ../shared/tools/vllmserver/start.sh (and stopped at
    its end); the tests are skipped, with the reason, when neither can be had."""
    from tests.vllm_server import session_server

    with session_server() as server:
        yield server


def _compiled(module: str):
    try:
        return importlib.import_module(f"{module}_c")
    except ImportError:
        # CI builds the extensions (BENCHC_REQUIRE_EXTENSIONS=1): a missing one is a failure there.
        if REQUIRED:
            raise
        return None


def _core(name: str, which: str):
    if which == "py":
        return importlib.import_module(f"{name}_py")
    mod = _compiled(name)
    if mod is None:
        pytest.skip(f"{name}_c is not built here (no C compiler?): the compiled core's tests are "
                    "skipped; CI requires the build")
    return mod


# Every hot-path test runs on both cores; the C one must exist where it was required.
@pytest.fixture(params=["py", "c"])
def hdr_module(request):
    return _core("benchc.metrics._hdr", request.param)


@pytest.fixture(params=["py", "c"])
def stream_modules(request):
    """(stream parser module, histogram module) of one core."""
    return _core("benchc.client._stream", request.param), _core("benchc.metrics._hdr", request.param)


@contextlib.contextmanager
def histograms_of(core: str):
    """For a block that records requests of a `core` ("py" or "c") stream parser: the compiled
    parser records its chunk gaps into compiled histograms only (the product runs one core for
    every hot module), and under BENCHC_NO_EXTENSIONS=1 the recorder picks the twin's, so for
    "c" the recorder's histograms are the compiled ones while the block runs. The twin's parser
    records into either core's, so "py" leaves them as they are."""
    import benchc.metrics.latency as latency

    kept = latency.Histogram
    if core == "c":
        latency.Histogram = _core("benchc.metrics._hdr", core).Histogram
    try:
        yield
    finally:
        latency.Histogram = kept


def core_of(module_or_obj) -> str:
    """The core of a module or of an object of one: "c" for a compiled one (benchc.client._stream_c),
    else "py"."""
    name = getattr(module_or_obj, "__name__", None) if hasattr(module_or_obj, "__file__") \
        else type(module_or_obj).__module__
    return "c" if str(name).endswith("_c") else "py"


def both_cores(name: str) -> list:
    """[pure-Python twin, compiled module], for a test that compares the two.

    Without the compiled module the calling test is skipped, with a reason that says so:
    comparing the twin with itself would pass without proving anything."""
    return [importlib.import_module(f"{name}_py"), _core(name, "c")]


@contextlib.contextmanager
def killed_after(p):
    """For a test that kills a process with SIGKILL (benchc, which then runs no cleanup of its
    own) once the body has set the scene: `p` is killed as the body ends (or fails), waited
    for, and its pipes closed."""
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)
        for pipe in (p.stdin, p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()


def wait_for(condition, what: str = "the condition", timeout_s: float = 60.0) -> None:
    """Poll until `condition()` holds: tests wait for events this way instead of racing a fixed
    sleep against a process. The timeout only turns a hang into a failure naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


# The own reader's transports (benchc.client.http1): the event loop, and the receive loop
# where the system has kernel receive stamps (Linux): its pure-Python twin, and the compiled
# loop where it is built (CI requires the build) and the compiled cores are in use (its
# parser records into the compiled histograms). Each reads with the cores of its own kind.
def transports() -> list[str]:
    """The transports a test of measured streams runs on, by name (see use_transport)."""
    from benchc._core import use_extensions
    from benchc.client import http1

    names = ["asyncio"]
    if http1.KERNEL_STAMPS:
        names.append("rx-py")
        if use_extensions() and _compiled("benchc.client._rxloop") is not None:
            names.append("rx-c")
    return names


def rx_loop_of(name: str):
    """http1.Pool's rx_loop argument that reads on transport `name`."""
    loop = {"asyncio": None, "rx-py": "benchc.client._rxloop_py", "rx-c": "benchc.client._rxloop_c"}[name]
    return importlib.import_module(loop) if loop else "off"


def use_transport(monkeypatch, name: str) -> str:
    """Every http1.Pool() made from now on with rx_loop="auto" (as `benchc run` makes them)
    reads on transport `name`; returns the RequestRecord.path its responses will carry."""
    from benchc.client import _rxloop, http1

    loop = rx_loop_of(name)
    monkeypatch.setattr(_rxloop, "MODULE", None if loop == "off" else loop)
    return http1.ASYNCIO if loop == "off" else http1.RX_LOOP
