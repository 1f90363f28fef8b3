"""Bounds on a chat template's rendering: a template is code from a model repository, and one
that loops for ever, or asks for a string of a terabyte, must fail with a clear error instead
of hanging benchc or taking the machine's memory.

Rendering stays in-process, on the thread that asks for it (a request's body is built on the
event loop, ahead of its send): a worker process would put a round trip on every request,
about twice the render itself (benchmarks/template_render.py). The bounds, per render:

- time: RENDER_S of wall clock. A watchdog thread raises RenderBound in the rendering thread
  (PyThreadState_SetAsyncExc, delivered between two bytecodes of the template's compiled
  Python), so an endless `for` ends;
- signals: outside an event loop Ctrl-C raises KeyboardInterrupt in the render as anywhere.
  `benchc run` renders on its event loop, whose handlers only note a signal for the loop to
  act on once the render returns (up to RENDER_S later): while it runs (stop_renders_on), a
  stop signal cancels the render in progress in the main thread at its next bytecode, and
  every later one as it starts (RenderInterrupted, an asyncio.CancelledError: the request it
  was for is not sent, as a cancelled task's);
- output: the characters the template writes, at most OUTPUT_FACTOR x its input (the
  messages and tools as JSON) + OUTPUT_BASE_CHARS, counted as it writes them;
- single operations that would allocate past OPERATION_ITEMS before the output is counted
  (`'x' * 10**12`, a string doubled by `+` or `~` in a loop, `'x'.ljust(10**12)`,
  `'{:>999999999}'.format(1)`, `'%999999999d' % 1`, `10 ** 99999`, a filter given such a
  width) are refused before they run: the sandbox intercepts `+`, `*`, `**` and `%`, `~`'s
  join, every call, `str.format`, and every filter's integer arguments. (`range` is bounded
  by the Jinja sandbox itself, 100,000.)
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import re
import signal
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

RENDER_S = 5.0  # wall clock per render
OUTPUT_BASE_CHARS = 1 << 20  # characters a render may write whatever its input
OUTPUT_FACTOR = 4  # ... plus this many times its input's characters
OPERATION_ITEMS = 16 << 20  # one operation's result (a repeated string, a width), in items or characters
POWER_BITS = 1 << 16  # an integer power past this many bits (a 19,729-digit number) is refused


_PERCENT_WIDTH = re.compile(r"%[-#0 +]*(\d+)")


class RenderBound(Exception):  # noqa: N818 - what went past its bound; the message says which
    """A render went past one of its bounds; the message names the bound."""


class RenderInterrupted(asyncio.CancelledError):
    """A stop signal cancelled a render (stop_renders_on): what asked for it is cancelled, as a
    task is; never an error of the template."""


class _Stops:
    """What stop_renders_on knows, all in the main thread (where Python runs signal handlers):
    whether a stop signal came, and whether a render is running there now."""

    def __init__(self) -> None:
        self.signum = 0  # the first stop signal's number (0: none came)
        self.rendering = False

    def handler(self, signum: int, frame: Any) -> None:
        """A stop signal's Python-level handler (the event loop's own, a no-op, stood in for:
        the loop still hears of the signal through its wakeup fd)."""
        self.signum = self.signum or signum
        if self.rendering:
            self.rendering = False  # here, not in the render: the raise may land before its own reset
            raise RenderInterrupted(f"signal {signal.Signals(signum).name} during a chat template's render")

    def enter(self) -> None:
        if self.signum:
            raise RenderInterrupted("a stop signal came before this chat template's render")
        self.rendering = True


_STOPS: _Stops | None = None  # set while stop_renders_on is entered


@contextlib.contextmanager
def stop_renders_on(signals: Iterable[int]) -> Iterator[_Stops]:
    """While entered (in the main thread, after the event loop's handlers for `signals` were
    added, and left before they are removed): any of `signals` cancels the render running in
    the main thread at its next bytecode, and every later render there as it starts
    (RenderInterrupted). The event loop hears of the signal as before. What it yields says
    which signal came first (`signum`; 0: none): a cancelled render may end a task before the
    event loop ran its handler."""
    global _STOPS
    stops, previous = _Stops(), {}
    for sig in signals:
        previous[sig] = signal.signal(sig, stops.handler)
    _STOPS = stops
    try:
        yield stops
    finally:
        _STOPS = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Watchdog:
    """One daemon thread for the process: every render registers its thread and deadline; a
    render past its deadline gets RenderBound raised in its thread. The lock makes raising
    and a render's end exclusive, so the exception never lands outside the render."""

    PERIOD_S = 0.05

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._renders: dict[int, list] = {}  # id(entry) -> [thread ident, deadline, seconds, raised]
        self._thread: threading.Thread | None = None

    def start(self, seconds: float) -> list:
        entry = [threading.get_ident(), time.monotonic() + seconds, seconds, False]
        with self._lock:
            self._renders[id(entry)] = entry
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="benchc-template-watchdog",
                                                daemon=True)
                self._thread.start()
        return entry

    def end(self, entry: list) -> None:
        with self._lock:
            del self._renders[id(entry)]
            if entry[3]:  # raised, maybe not delivered yet: it must never land outside the render
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(entry[0]), None)

    def _run(self) -> None:
        while True:
            time.sleep(self.PERIOD_S)
            now = time.monotonic()
            with self._lock:
                for entry in self._renders.values():
                    tid, due, seconds, raised = entry
                    if not raised and now >= due:
                        entry[3] = True
                        _raise_in(tid, seconds)


def _raise_in(tid: int, seconds: float) -> None:
    exc = type("RenderTimeout", (RenderBound,), {"seconds": seconds})
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(exc))


_WATCHDOG = _Watchdog()


def render_bounded(template: Any, input_chars: Callable[[], int], variables: dict[str, Any]) -> str:
    """`template` (a jinja2 Template of bounded_environment()) rendered with `variables`,
    within RENDER_S and the output bound (`input_chars()` is asked only when the output
    passes OUTPUT_BASE_CHARS). Raises RenderBound naming the bound it passed."""
    pieces: list[str] = []
    written, limit = 0, OUTPUT_BASE_CHARS
    stops = _STOPS if threading.current_thread() is threading.main_thread() else None
    try:
        watched = _WATCHDOG.start(RENDER_S)
        try:
            if stops is not None:
                stops.enter()
            try:
                for piece in template.generate(**variables):
                    written += len(piece)
                    if written > limit:
                        if limit == OUTPUT_BASE_CHARS:
                            limit += OUTPUT_FACTOR * input_chars()
                        if written > limit:
                            raise RenderBound(f"it wrote more than {limit:,} characters (the bound: "
                                              f"{OUTPUT_FACTOR} x its input + {OUTPUT_BASE_CHARS:,})")
                    pieces.append(piece)
            finally:  # (a stop signal's raise may land here too: the watchdog's end is one level out)
                if stops is not None:
                    stops.rendering = False
        finally:
            _WATCHDOG.end(watched)
    except RenderBound as e:
        if hasattr(e, "seconds"):
            raise RenderBound(f"it took more than {RENDER_S:g} s (the bound on one render)") from None
        raise
    return "".join(pieces)


def _check_ints(what: str, values: tuple) -> None:
    """An integer argument past OPERATION_ITEMS (a width, a count) would make one operation
    allocate past the bound before the output is counted."""
    for v in values:
        if type(v) is int and abs(v) > OPERATION_ITEMS:
            raise RenderBound(f"{what} was given {v:,} (the bound on one operation: {OPERATION_ITEMS:,})")


@functools.cache
def bounded_environment() -> type:
    """The sandbox class chat templates render in: jinja2's ImmutableSandboxedEnvironment with
    `*`, `**`, calls and filters checked before they run."""
    import operator

    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"+", "*", "**", "%"})

        def from_string(self, *args: Any, **kwargs: Any) -> Any:
            # every filter checked, those added after __init__ too (a template looks them up
            # in self.filters as it runs)
            for name, f in list(self.filters.items()):
                if not hasattr(f, "_bounded"):
                    self.filters[name] = _checked_filter(name, f)
            template = super().from_string(*args, **kwargs)
            # `~` compiles to a call of the module's str_join (markup_join with autoescape):
            # the template's own namespace gets checked ones
            namespace = template.root_render_func.__globals__
            for name in ("str_join", "markup_join"):
                if name in namespace:
                    namespace[name] = _checked_join(namespace[name])
            return template

        def wrap_str_format(self, value: Any) -> Any:
            wrapped = super().wrap_str_format(value)  # str.format / format_map, sandboxed
            if wrapped is None:
                return None
            fmt = value.__self__

            def checked(*args: Any, **kwargs: Any) -> Any:
                for _, _, spec, _ in string.Formatter().parse(fmt):  # `{:>999999999}`: a width in the text
                    _check_ints("a format width", tuple(int(w) for w in re.findall(r"\d+", spec or "")))
                _check_ints("str.format", (*args, *kwargs.values()))
                return wrapped(*args, **kwargs)

            return checked

        def call_binop(self, context: Any, op: str, left: Any, right: Any) -> Any:
            if op == "+":
                if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)) and \
                        len(left) + len(right) > OPERATION_ITEMS:
                    raise RenderBound(f"'+' asked for {len(left) + len(right):,} characters or items (the "
                                      f"bound on one operation: {OPERATION_ITEMS:,})")
                return operator.add(left, right)
            if op == "%" and isinstance(left, str):
                _check_ints("a %-format width", tuple(int(w) for w in _PERCENT_WIDTH.findall(left)))
                _check_ints("%-formatting", right if isinstance(right, tuple) else (right,))
                return operator.mod(left, right)
            if op == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and type(n) is int and \
                            len(seq) * n > OPERATION_ITEMS:
                        raise RenderBound(f"'*' asked for {len(seq) * n:,} characters or items (the bound "
                                          f"on one operation: {OPERATION_ITEMS:,})")
                return operator.mul(left, right)
            if op == "**" and type(left) is int and type(right) is int and right > 0 and \
                    abs(left) > 1 and right * abs(left).bit_length() > POWER_BITS:
                raise RenderBound(f"'**' asked for an integer of about {right * abs(left).bit_length():,} "
                                  f"bits (the bound: {POWER_BITS:,})")
            return super().call_binop(context, op, left, right)

        def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            _check_ints(f"a call of {getattr(__obj, '__name__', 'a function')}", (*args, *kwargs.values()))
            return super().call(__context, __obj, *args, **kwargs)

    return BoundedEnvironment


def _checked_filter(name: str, f: Callable) -> Callable:
    @functools.wraps(f)  # keeps jinja's pass_context / pass_environment marks
    def checked(*args: Any, **kwargs: Any) -> Any:
        _check_ints(f"the filter {name}", (*args, *kwargs.values()))
        return f(*args, **kwargs)

    checked._bounded = True  # type: ignore[attr-defined]
    return checked


def _checked_join(join: Callable) -> Callable:
    def checked(seq: Any) -> Any:
        parts = list(seq)
        size = sum(len(p) for p in parts if isinstance(p, str))
        if size > OPERATION_ITEMS:
            raise RenderBound(f"'~' asked for {size:,} characters (the bound on one operation: "
                              f"{OPERATION_ITEMS:,})")
        return join(parts)

    return checked
