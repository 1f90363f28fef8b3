"""The content of a coding-agent trace's requests (plan/agent_trace.py): each hash id is one
block of exactly `block_size` tokens, the same text wherever the id recurs within its session
(`hash_id_scope: local`) and nowhere else, and each request's prompt is exactly its `in`
tokens, so that a server's prefix cache sees the trace's own reuse and nothing more.

A block's words are a pure function of (seed, session, hash id): the run's seed (drawn per run
unless the spec pins one, so two runs against one server share nothing) and the session's
place in the set. A request's tokens beyond its blocks (a trace may give fewer ids than `in`
fills) are words of its own, drawn from (seed, session, the request's JSON path). Every word
is one the target's tokenizer makes one token after a space (plan/prompts.one_token_words);
without a tokenizer a word is a token, as everywhere in benchc.

With a chat template (target.tokenizer's, the chat API), the message the server renders is the
request's `in` tokens: the template's own tokens are taken off the request's last words (its
tail, past its last whole block where there is one), and the rendered count is checked.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import random
import struct
import sys
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchc.errors import PlanError
from benchc.plan.agent_trace import AgentRequest, AgentSession, read_agent_traces, trace_files
from benchc.plan.prompts import one_token_words

_MASK64 = (1 << 64) - 1
_BLOCK_CACHE = 4096  # blocks kept built: a session's context re-sends its earlier blocks every turn
_TABLE = 1 << 16  # WordTable.ones: two random bytes pick one


def _key(*parts: int) -> bytes:
    return struct.pack(f"<{len(parts)}Q", *(p & _MASK64 for p in parts))


def _path_key(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "big")


class WordTable:
    """A vocabulary's words as a JSON string's bytes, each after a space (b" word", escaped as
    json.dumps escapes it, so that pieces join into a body's string as they are): 256 runs of
    four words (`fours`, one random byte picks one) and every word alone (`ones`, 65,536
    entries that two random bytes pick from, each word 65,536 / n times to one). A block of n
    words is n // 4 + n % 4 lookups and one join, in C: drawing each word by random.choices
    was most of the CPU a 200k-token request cost, and a larger table of fours costs more in
    cache misses than it saves (65,536 fours: 10-27 ms for 400 blocks of 512 words, 256: 2).
    256 ** (n // 4) blocks of n words, still: no two blocks of a run share content. The runs
    are the vocabulary's (a fixed seed), so a block's words are still a pure function of its
    key."""

    FOURS = 256

    def __init__(self, words: Sequence[str]):
        one = [json.dumps(" " + w)[1:-1].encode() for w in words]
        if any(b" " in w[1:] for w in one):  # a prefix's length is found by its spaces (prefix_len)
            raise PlanError("a prompt word with a space in it cannot be drawn for a coding-agent trace")
        rng = random.Random(0x5EED)
        self.ones = (one * (_TABLE // len(one) + 1))[:_TABLE]
        self.fours = [b"".join(rng.choices(one, k=4)) for _ in range(self.FOURS)]

    def words(self, key: bytes, n: int) -> tuple[bytes, bytes]:
        """`n` words drawn from `key` (any bytes): their text, and the random bytes that drew
        them (a byte per four of the first n // 4 * 4 words, then two per word of the rest)."""
        fours = n // 4
        drawn = hashlib.shake_128(key).digest(fours + 2 * (n % 4))
        return (b"".join(map(self.fours.__getitem__, drawn[:fours]))
                + b"".join(map(self.ones.__getitem__, _indices(drawn[fours:])))), drawn

    def prefix_len(self, drawn: bytes, n: int, k: int) -> int:
        """The bytes of the first `k` (< n) of the `n` words `drawn` drew."""
        fours, whole, rest = n // 4, k // 4, k % 4
        size = sum(map(len, map(self.fours.__getitem__, drawn[:whole])))
        if rest and whole < fours:  # into a four: its words' spaces say where each ends
            size += _nth_space(self.fours[drawn[whole]], rest)
        elif rest:
            size += sum(map(len, map(self.ones.__getitem__, _indices(drawn[fours:])[:rest])))
        return size


def _nth_space(text: bytes, n: int) -> int:
    """Where the n-th word after the first of `text` (b" a b c") starts: its space's index."""
    at = 0
    for _ in range(n):
        at = text.index(b" ", at + 1)
    return at


def _indices(random_bytes: bytes) -> array:
    """Two random bytes an index, the same on every machine (little-endian)."""
    idx = array("H", random_bytes)
    if sys.byteorder == "big":
        idx.byteswap()
    return idx


@functools.lru_cache(maxsize=4)
def _table(words: tuple[str, ...]) -> WordTable:
    """One WordTable per vocabulary per process."""
    return WordTable(words)


class AgentTracePrompts:
    """Builds the prompt text of any request of a trace's sessions, in any order, alone."""

    def __init__(self, seed: int, tokenizer: Any = None, template: Any = None):
        self.seed, self.tok, self.template = seed, tokenizer, template
        self.words = one_token_words(tokenizer)
        self._table = _table(tuple(self.words))
        self._blocks: OrderedDict[tuple[int, int], tuple[bytes, bytes]] = OrderedDict()
        self._overhead: int | None = None

    def block(self, session_index: int, hash_id: int, block_size: int) -> bytes:
        """The `block_size` words of a hash id in session `session_index` (as JSON string bytes)."""
        return self._block(session_index, hash_id, block_size)[0]

    def _block(self, session_index: int, hash_id: int, block_size: int) -> tuple[bytes, bytes]:
        key = (session_index, hash_id)
        built = self._blocks.get(key)
        if built is None:
            built = self._table.words(_key(self.seed, 1, session_index, hash_id), block_size)
            self._blocks[key] = built
            if len(self._blocks) > _BLOCK_CACHE:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(key)
        return built

    def content(self, session: AgentSession, session_index: int, req: AgentRequest) -> bytes:
        """The request's prompt as the bytes of a JSON string, without its quotes: exactly its
        `in` tokens (rendered through the chat template when there is one; PlanError when the
        tokenizer cannot make it so), to be put in a body as they are."""
        where = f"{session.file}: session {session.id!r}: {req.path}"
        n = req.input_tokens - self.template_tokens()
        if n < 1:
            raise PlanError(f"{where}: in = {req.input_tokens} is no more than the chat template's own "
                            f"{self.template_tokens()} tokens")
        data = self._words(session, session_index, req, n)
        if self.tok is not None:
            text = _decoded(data)
            got = (self.template.count([{"role": "user", "content": text}]) if self.template is not None
                   else self.tok.count(text))
            if got != req.input_tokens:
                raise PlanError(f"{where}: could not build a prompt of exactly {req.input_tokens} tokens "
                                f"with this tokenizer (got {got})")
        return data

    def text(self, session: AgentSession, session_index: int, req: AgentRequest) -> str:
        """The request's prompt (content(), as text)."""
        return _decoded(self.content(session, session_index, req))

    def template_tokens(self) -> int:
        """The tokens the chat template adds around one user message (0 without one)."""
        if self.template is None or self.tok is None:
            return 0
        if self._overhead is None:
            probe = " " + " ".join(self.words[:8])
            self._overhead = self.template.count([{"role": "user", "content": probe}]) - self.tok.count(probe)
        return self._overhead

    def _words(self, session: AgentSession, session_index: int, req: AgentRequest, n: int) -> bytes:
        bs = session.block_size
        parts, left = [], n
        for hid in req.hash_ids:
            if left <= 0:
                break
            data, idx = self._block(session_index, hid, bs)
            parts.append(data if left >= bs else data[:self._table.prefix_len(idx, bs, left)])
            left -= bs
        if left > 0:  # tokens beyond its blocks: words no other request sends
            parts.append(self._table.words(_key(self.seed, 2, session_index, _path_key(req.path)), left)[0])
        return b"".join(parts)


def _decoded(data: bytes) -> str:
    return json.loads(b'"' + data + b'"')


# The set read last, by its files' identity: `benchc run` builds the source at compile and again
# at prepare in one process, and a 1,000-session set takes seconds to read and check; the second
# build finds it here. One set only, so a process holds no more sessions than its run replays.
_LAST_READ: tuple[tuple, list[AgentSession], bytes] | None = None


def _identity(files: list[Path]) -> tuple:
    """What changes when a trace file does (its path, inode, size and mtime in ns)."""
    out = []
    for f in files:
        st = f.stat()
        out.append((str(f.resolve()), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector off while a set is read (and as it was after): a
    1,000-session set is millions of new objects, and the collections they set off traversed
    the growing heap again and again (a seventh of the read's CPU); what the read makes holds
    no cycle for a collection to find, and reference counting frees the rest."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_once(path: str, base_dir: str) -> tuple[list[AgentSession], bytes]:
    """The trace's sessions, read and checked, and its files' sha256 digests (concatenated);
    read from the files only when they changed since the last read in this process."""
    global _LAST_READ
    files = trace_files(path, base_dir)
    key = _identity(files)
    if _LAST_READ is not None and _LAST_READ[0] == key:
        return _LAST_READ[1], _LAST_READ[2]
    with _no_cyclic_gc():
        sessions = list(read_agent_traces(path, base_dir))
    digests = b"".join(hashlib.sha256(f.read_bytes()).digest() for f in files)
    if _identity(files) == key:  # not changed while it was read: safe to keep
        _LAST_READ = (key, sessions, digests)
    return sessions, digests


class AgentTraceSource:
    """workload.dataset.agent_trace's prompt source: the trace's sessions, read and checked at
    compile time (exit 2 names the file, the session, the JSON path; once per process while the
    files stay the same: _read_once), each request's prompt
    built when it is sent (AgentTracePrompts, with the run's tokenizer and chat template).
    A session is a unit of the load: it has no single prompt (`prompt` says so)."""

    mode = "fresh"  # a session's blocks are its own, fresh per run unless the seed is pinned

    def __init__(self, params: dict, base_dir: str = "."):
        self.params = params
        self.agent_sessions, files_digest = _read_once(params["path"], base_dir)
        h = hashlib.sha256(f"{params['seed']}\n".encode())
        h.update(files_digest)
        self._digest = h.hexdigest()

    @classmethod
    def shipped(cls, params: dict, sessions: list[AgentSession], digest: str) -> AgentTraceSource:
        """The source as a Ray worker rebuilds it, from the sessions the driver read and checked
        and their digest (run/prepare.Kit): no trace file is read where it may not be."""
        source = cls.__new__(cls)
        source.params, source.agent_sessions, source._digest = params, sessions, digest
        return source

    @property
    def pool_size(self) -> int:
        return len(self.agent_sessions)

    def prompt(self, stream: int, index: int, deal: Any = None) -> Any:
        raise PlanError("workload.dataset.agent_trace: a session is replayed whole, it has no single prompt")

    def digest(self) -> str:
        """sha256 of the seed and the trace files' bytes (what every prompt is a function of)."""
        return self._digest

    def prompts(self, tokenizer: Any = None, template: Any = None) -> AgentTracePrompts:
        """The builder of its requests' prompts, with the run's tokenizer and chat template."""
        return AgentTracePrompts(self.params["seed"], tokenizer, template)


__all__ = ["AgentTracePrompts", "AgentTraceSource"]
