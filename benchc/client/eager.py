"""Eager start of a coroutine before Python 3.12 (asyncio's eager tasks): its first step runs
now, in the caller's turn, and a Task goes on with the rest.

Why: aiohttp writes a request's body in a task of its own (ClientRequest.write_bytes), started
eagerly on Python 3.12+ and queued on 3.11, where the write waits behind whatever the loop
holds: the other requests' preparing, when several are due at once (a coding-agent replay's
subagents spawned together). benchmarks/think_lateness.py measured it: on 3.11 the send
stretch (aiohttp's preparing to the write) was 0.5-2.2 ms of a late request's 0.6-2.7 ms."""

from __future__ import annotations

import collections.abc
from collections.abc import Coroutine
from typing import Any


class _Started(collections.abc.Coroutine):
    """A coroutine whose first step already ran: the first send gives the Task what that step
    yielded (the future it waits on), returned or raised; the rest is the coroutine's own."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: tuple[str, Any]) -> None:
        self._coro = coro
        self._first: tuple[str, Any] | None = first

    def send(self, value: Any) -> Any:
        first, self._first = self._first, None
        if first is None:
            return self._coro.send(value)
        kind, got = first
        if kind == "yield":
            return got
        if kind == "return":
            raise StopIteration(got)
        raise got

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        first, self._first = self._first, None
        if first is not None and first[0] != "yield":  # it ended in its first step
            raise typ if val is None else val
        # suspended at its first wait (a cancel before the Task's first turn lands there too)
        return self._coro.throw(typ, val, tb) if val is not None else self._coro.throw(typ)

    def close(self) -> None:
        self._first = None
        self._coro.close()

    def __await__(self) -> Any:
        return self

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        return self.send(None)


def started(coro: Coroutine[Any, Any, Any]) -> Coroutine[Any, Any, Any]:
    """`coro` with its first step run now: for asyncio.create_task to go on with."""
    try:
        first: tuple[str, Any] = ("yield", coro.send(None))
    except StopIteration as e:
        first = ("return", e.value)
    except BaseException as e:  # noqa: BLE001 - the Task raises it, as an eager one does
        first = ("raise", e)
    return _Started(coro, first)
