"""client/eager.started: a coroutine's first step run at the call, a Task going on with the
rest as it would with the whole coroutine (its result, its exception, a cancel, its close);
and aiohttp's body write, started so, runs in the turn that sends the request."""

import asyncio

import pytest

from benchc.client.eager import started
from tests.test_agent_punctual import OK_HEAD, RawServer, chunked, sse


def test_its_first_step_runs_at_the_call_and_the_task_gives_its_result():
    steps: list[str] = []

    async def work(fut):
        steps.append("first")
        got = await fut
        steps.append("rest")
        return got + 1

    async def go():
        fut = asyncio.get_running_loop().create_future()
        coro = started(work(fut))
        assert steps == ["first"]  # before any Task exists
        task = asyncio.ensure_future(coro)
        await asyncio.sleep(0)
        assert steps == ["first"]  # waiting on its future, as it would
        fut.set_result(41)
        return await task

    assert asyncio.run(go()) == 42


def test_one_that_ends_or_fails_in_its_first_step_gives_that_through_its_task():
    async def ends():
        return "done"

    async def fails():
        raise ValueError("bad")

    async def go():
        assert await asyncio.ensure_future(started(ends())) == "done"
        with pytest.raises(ValueError, match="bad"):
            await asyncio.ensure_future(started(fails()))

    asyncio.run(go())


def test_an_exception_thrown_in_at_a_later_wait_reaches_the_coroutine():
    caught: list[str] = []

    async def work(fut1, fut2):
        await fut1
        try:
            await fut2
        except KeyError as e:
            caught.append(str(e))
            return "handled"

    async def go():
        loop = asyncio.get_running_loop()
        f1, f2 = loop.create_future(), loop.create_future()
        task = asyncio.ensure_future(started(work(f1, f2)))
        f1.set_result(None)
        await asyncio.sleep(0)
        f2.set_exception(KeyError("k"))
        return await task

    assert asyncio.run(go()) == "handled" and caught == ["'k'"]


async def _wait_then_clean(fut, cleaned: list[bool]) -> None:
    try:
        await fut
    finally:
        cleaned.append(True)


@pytest.mark.parametrize("when", ["before its task's first turn", "while it waits"])
def test_a_cancel_reaches_the_coroutine_at_its_wait(when):
    cleaned: list[bool] = []

    async def go():
        fut = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(started(_wait_then_clean(fut, cleaned)))
        if when == "while it waits":
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert cleaned == [True]


def test_closing_it_closes_the_coroutine():
    cleaned: list[bool] = []

    async def go():
        coro = started(_wait_then_clean(asyncio.get_running_loop().create_future(), cleaned))
        coro.close()

    asyncio.run(go())
    assert cleaned == [True]


def test_aiohttps_body_is_written_in_the_turn_that_sends_the_request():
    """On every Python (aiohttp starts its body's write eagerly from 3.12, request.py's
    request class before): the body's bytes go before ClientRequest.send returns, not after
    what the loop held at that moment (a callback queued before the send must not run first)."""
    import aiohttp
    import aiohttp.client_reqrep as reqrep

    from benchc.client.request import send
    from benchc.metrics.record import RequestRecord
    from tests.test_http1 import target
    from tests.test_keepalive import Client

    order: list[str] = []

    class Watched(aiohttp.payload.BytesPayload):
        async def write_with_length(self, writer, content_length):
            order.append("body written")
            await super().write_with_length(writer, content_length)

        async def write(self, writer):
            order.append("body written")
            await super().write(writer)

    async def answer(n, reader, writer):
        writer.write(OK_HEAD + chunked(sse(["a"])))
        await writer.drain()

    plain_send = reqrep.ClientRequest.send

    async def sending(self, conn):
        # whatever the loop held when the request went: a due write's wait must not be behind it
        asyncio.get_running_loop().call_soon(order.append, "queued before")
        try:
            return await plain_send(self, conn)
        finally:
            order.append("send returned")

    async def go():
        async with RawServer(answer) as srv:
            c = Client("aiohttp")
            try:
                r = RequestRecord("req-1", 0, 1, None)
                reqrep.ClientRequest.send = sending
                try:
                    await send(c.session, srv.url, {"Content-Type": "application/json"},
                               Watched(b'{"x": 1}'), r, target())
                finally:
                    reqrep.ClientRequest.send = plain_send
                return r
            finally:
                await c.close()

    r = asyncio.run(go())
    assert r.outcome.error is None and r.output_tokens == 1
    assert order[:2] == ["body written", "send returned"] and "queued before" in order
