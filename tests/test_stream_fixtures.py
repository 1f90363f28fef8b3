"""Streamed responses of llama.cpp, vLLM, SGLang and TGI (tests/data/streams, written from
each server's documented format) replayed byte for byte by a loopback server through
benchc's client: both HTTP paths (the own reader on each of its transports), both parser
cores, written as the server writes them (one write per HTTP chunk) and cut at arbitrary
points. No miscounting, no false errors."""

from __future__ import annotations

import asyncio
import json
import os
import random

import pytest

import benchc.client.request as request_mod
from tests.conftest import REPO, both_cores
from tests.test_keepalive import NATIVE, Client

DATA = os.path.join(REPO, "tests", "data", "streams")
with open(os.path.join(DATA, "expected.json"), encoding="utf-8") as f:
    EXPECTED = json.load(f)
PARSERS = both_cores("benchc.client._stream")
READERS = both_cores("benchc.client._response")
# (HTTP path, core): aiohttp and the own reader's event-loop transport with either parser
# core; a receive loop reads with the cores of its own kind (rx-py the twins, rx-c compiled)
CLIENTS = [(path, core) for path in ("aiohttp", "native-asyncio") for core in ("py", "c")]
CLIENTS += [(path, path.rsplit("-", 1)[1]) for path in NATIVE if path != "native-asyncio"]


def pieces(wire: bytes, how: str, seed: int) -> list[bytes]:
    """The response as the server writes it: the head, then one write per HTTP chunk; or
    cut at seeded random points (inside heads, chunk sizes, CRLFs, UTF-8 sequences)."""
    if how == "random":
        rng, out, i = random.Random(seed), [], 0
        while i < len(wire):
            k = rng.randint(1, 23)
            out.append(wire[i:i + k])
            i += k
        return out
    end = wire.index(b"\r\n\r\n") + 4
    out, i = [wire[:end]], end
    while i < len(wire):
        eol = wire.index(b"\r\n", i)
        size = int(wire[i:eol], 16)
        j = eol + 2 + size + 2
        out.append(wire[i:j])
        i = j
    return out


async def replay(path: str, core: str, wire: bytes, how: str, close_after: bool, n: int = 2):
    """n requests one after another; the server answers each with the fixture."""
    served = []

    async def conn(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length")][0])
                await reader.readexactly(length)
                served.append(head)
                for p in pieces(wire, how, len(served)):
                    writer.write(p)
                    await writer.drain()
                    await asyncio.sleep(0)
                if close_after:
                    break  # llama.cpp: says keep-alive, closes after the stream
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(conn, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    c = Client(path)
    if path == "native-asyncio":  # the reader and parser of this core (a loop brings its own)
        c.pool.ResponseReader = READERS[core == "c"].ResponseReader
        c.pool.StreamParser = PARSERS[core == "c"].StreamParser
    try:
        return [await c.request(url) for _ in range(n)], served
    finally:
        await c.close()
        server.close()


@pytest.mark.parametrize("how", ["server-writes", "random"])
@pytest.mark.parametrize("path,core", CLIENTS, ids=[f"{p}-{c}" for p, c in CLIENTS])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_servers_streams_are_counted_exactly(name, path, core, how, monkeypatch):
    parser = PARSERS[core == "c"]
    monkeypatch.setattr(request_mod, "StreamParser", parser.StreamParser)  # aiohttp's
    with open(os.path.join(DATA, name), "rb") as f:
        wire = f.read()
    want = EXPECTED[name]
    close_after = name.startswith("llamacpp")
    records, served = asyncio.run(replay(path, core, wire, how, close_after))
    for r in records:
        assert r.ok, (r.outcome.error, r.outcome.error_detail)
        assert type(r.parser) is parser.StreamParser  # the core this case is about read it
        assert r.outcome.status == 200 and r.parser.malformed == 0 and r.parser.error_event is None
        assert r.tokens.text_chunks == want["text_chunks"]
        assert r.tokens.text_bytes == len(want["text"].encode())
        assert r.tokens.usage_output_tokens == want["usage_output_tokens"]
        assert r.tokens.usage_input_tokens == want["usage_input_tokens"]
        assert r.outcome.finish_reason == want["finish_reason"]
        assert r.tokens.multi_token_chunks == want["multi_token_chunks"]
        # issue 14's fields: cached prompt tokens (usage) and llama.cpp's timings, on every path
        assert r.cache.cached_tokens == want.get("cached_tokens")
        assert r.outcome.server_timings == want.get("server_timings")
        assert r.parser.done_ns and r.times.t0_ns <= r.times.first_text_ns <= r.times.end_ns
        line = r.to_json()
        assert 0 <= line["ttft_us"] <= line["e2e_us"]
    # a server that keeps the connection answers the second request on it; llama.cpp's
    # closes it, so the second request goes on a new one (found closed, or retried once:
    # the attempt on the closed one is never read)
    assert records[1].outcome.reused_connection is not close_after
    assert len(served) == 2 and not records[0].outcome.retried
