"""The simulator's pooling APIs (adapters of sim/adapter.py), as vLLM's pooling runner serves
them: /v1/embeddings, /v1/rerank and /score (and its /v1/score alias). Each is one JSON
answer, never a stream, written once the request's prefill step ran (the engine's cost
model: sim/server.py); a request's prompt tokens are those of its inputs (embeddings) or of
each query-document pair (rerank, score), as a cross-encoder reads them.
"""

from __future__ import annotations

import base64
import json
import random
import struct
import time
from typing import Any

from benchc.sim.adapter import Context, SimApi, bad_request


class PooledSim(SimApi):
    """A pooling API: `inputs` reads a request, `answer` writes its one answer."""

    pooled, agentic = True, False

    def inputs(self, body: dict) -> list[int]:
        """The token count of each input (pair) of a valid request; Reject with vLLM's 400."""
        raise NotImplementedError

    def answer(self, seq: Any, body: dict) -> bytes:
        """The request's one JSON answer."""
        raise NotImplementedError


class EmbeddingsSim(PooledSim):
    """vLLM's embeddings answer (usage last): the server's one vector for every input. The
    vector is drawn from the seed and encoded once (a client is measured on the answer's size
    and timing, not on its values), as JSON floats or base64 (`encoding_format: base64`)."""

    name, paths, id_prefix = "embeddings", ("/v1/embeddings",), "embd-"

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        dim = ctx.cfg.embed_dim
        rng = random.Random(ctx.cfg.seed ^ 0xE3B)
        floats = [round(rng.uniform(-0.1, 0.1), 8) for _ in range(dim)]
        self._vector = json.dumps(floats, separators=(",", ":")).encode()
        self._vector_b64 = b'"' + base64.b64encode(struct.pack(f"<{dim}f", *floats)) + b'"'

    def inputs(self, body: dict) -> list[int]:
        """An input is a string, or token ids; `input` one or a list."""
        inputs = body.get("input")
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs:
            raise bad_request("input must be a string, a list of strings or token ids")
        limit = self.ctx.cfg.max_model_len
        counts = []
        for x in inputs:
            if isinstance(x, str):
                counts.append(self.ctx.count(x))
            elif isinstance(x, list) and all(isinstance(i, int) for i in x):
                counts.append(len(x))
            else:
                raise bad_request("input must be a string, a list of strings or token ids")
            if counts[-1] > limit:
                raise bad_request(
                    f"This model's maximum context length is {limit} tokens. However, you "
                    f"requested {counts[-1]} tokens in the input for embedding generation. Please reduce "
                    "the length of the input.")
        return counts

    def answer(self, seq: Any, body: dict) -> bytes:
        vector = self._vector_b64 if body.get("encoding_format") == "base64" else self._vector
        usage = {"prompt_tokens": seq.input_tokens, "total_tokens": seq.input_tokens,
                 "completion_tokens": 0, "prompt_tokens_details": None}
        created = str(int(time.time())).encode()
        return (b'{"id":"' + seq.id.encode() + b'","object":"list","created":' + created
                + b',"model":' + json.dumps(self.ctx.cfg.model).encode() + b',"data":['
                + b",".join(b'{"index":%d,"object":"embedding","embedding":%s}' % (i, vector)
                            for i in range(seq.inputs))
                + b'],"usage":' + json.dumps(usage, separators=(",", ":")).encode() + b"}")


class RerankSim(PooledSim):
    """vLLM's /v1/rerank (Jina's and Cohere's shape): the documents by relevance to the query."""

    name, paths, id_prefix = "rerank", ("/v1/rerank",), "rerank-"

    def inputs(self, body: dict) -> list[int]:
        query, docs = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not isinstance(docs, list) or not docs \
                or not all(isinstance(d, str) for d in docs):
            raise bad_request("query must be a string and documents a non-empty list of strings")
        q = self.ctx.count(query)
        return [q + self.ctx.count(d) for d in docs]

    def answer(self, seq: Any, body: dict) -> bytes:
        """The documents (their text too), most relevant first, `top_n` of them (0 or absent:
        all), scores drawn from the request's id; usage.total_tokens only."""
        rng = random.Random(seq.id)
        docs = body["documents"]
        order = sorted(((rng.random(), i) for i in range(len(docs))), reverse=True)
        top_n = body.get("top_n") or len(docs)
        results = [{"index": i, "document": {"text": docs[i]}, "relevance_score": round(score, 8)}
                   for score, i in order[:top_n]]
        return json.dumps({"id": seq.id, "model": self.ctx.cfg.model,
                           "usage": {"total_tokens": seq.input_tokens}, "results": results},
                          separators=(",", ":")).encode()


class ScoreSim(PooledSim):
    """vLLM's /score (at the server's root, and its /v1/score alias): a score per (text_1,
    text_2) pair, paired as vLLM pairs them: one text_1 with every text_2, or lists of one
    length pairwise."""

    name, paths, id_prefix = "score", ("/score", "/v1/score"), "score-"

    def inputs(self, body: dict) -> list[int]:
        one, two = body.get("text_1"), body.get("text_2")
        one = [one] if isinstance(one, str) else one
        two = [two] if isinstance(two, str) else two
        if not (isinstance(one, list) and isinstance(two, list) and one and two
                and all(isinstance(t, str) for t in one + two)):
            raise bad_request("text_1 and text_2 must be strings or non-empty lists of strings")
        if len(one) == 1:
            one = one * len(two)
        if len(one) != len(two):
            raise bad_request("text_1 and text_2 must be of the same length (or text_1 one text)")
        return [self.ctx.count(a) + self.ctx.count(b) for a, b in zip(one, two, strict=True)]

    def answer(self, seq: Any, body: dict) -> bytes:
        """Scores in the pairs' order, drawn from the request's id; usage.prompt_tokens the
        tokens of every pair."""
        rng = random.Random(seq.id)
        data = [{"index": i, "object": "score", "score": round(rng.random(), 8)} for i in range(seq.inputs)]
        usage = {"prompt_tokens": seq.input_tokens, "total_tokens": seq.input_tokens, "completion_tokens": 0,
                 "prompt_tokens_details": None}
        answer = {"id": seq.id, "object": "list", "created": int(time.time()), "model": self.ctx.cfg.model,
                  "data": data, "usage": usage}
        return json.dumps(answer, separators=(",", ":")).encode()
