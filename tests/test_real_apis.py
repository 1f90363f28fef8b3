"""Every API benchc serves, against a real vLLM 0.32 (issue 27's real check): chat, completions,
Responses and Messages on the session's generate-mode server (tests/vllm_server.py), embeddings
on an embed-mode server this module starts with start.sh (`VLLMSERVER_MODE=embed`, stopped at
the module's end; BENCHC_VLLM_EMBED_URL attaches to a running one instead). Deselected unless
--real (docs/conformance.md):

    BENCHC_VLLM_URL=http://127.0.0.1:8020/v1 python -m pytest -q --real -m real tests/test_real_apis.py

Random prompts pin their lengths (`ignore_eos` and `max_tokens`, the spec's default for them),
so each request's output tokens must be what it asked, as the server's own usage counts them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from tests.test_real_vllm import run
from tests.vllm_server import free_port, started, tokenizer_path

pytestmark = pytest.mark.real

OUTPUT_TOKENS = 8


def _assert_every_request_completed(doc: dict, records: list[dict]) -> None:
    """Both points (c=1 and c=4, 8 requests each) completed every request, with no error."""
    assert [p["counts"]["completed"] for p in doc["points"]] == [8, 8]
    for p in doc["points"]:
        assert p["counts"]["failed"] == 0 and p["counts"]["errors"] == {}, p["counts"]
    assert len(records) == 16 and all(r["error"] is None for r in records)


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_each_generation_api_runs_without_errors_and_with_the_lengths_usage_reports(tmp_path, vllm, api):
    doc, records = run(tmp_path, vllm, f"api-{api}", f"""\
workload:
  dataset:
    random: {{input_tokens: 40, output_tokens: {OUTPUT_TOKENS}, seed: SEED}}
load:
  warmup: {{requests: 1}}
  sweep:
    concurrency: [1, 4]
  requests: 8
""", api=api)
    _assert_every_request_completed(doc, records)
    for p in doc["points"]:
        assert p["tokens"]["output_method"] == "usage", p["tokens"]
        assert p["tokens"]["output"] == 8 * OUTPUT_TOKENS
        assert p["tokens"]["osl"] == {"requests_checked": 8, "mismatched": 0}, p["tokens"]["osl"]
    # each request's own figure is the server's usage, and the length it asked for
    lengths = {(r["output_tokens"], r["usage_output_tokens"]) for r in records}
    assert lengths == {(OUTPUT_TOKENS, OUTPUT_TOKENS)}, lengths
    assert all(r["ttft_us"] is not None and r["ttft_us"] <= r["e2e_us"] for r in records)
    print(f"{api}: {len(records)} requests, 0 errors, output tokens {OUTPUT_TOKENS} each by usage; TTFT p50 "
          f"{[round(p['latency']['ttft_us']['p50'] / 1000, 1) for p in doc['points']]} ms at c=1, 4")


@pytest.fixture(scope="module")
def embed_server() -> Iterator[SimpleNamespace]:
    """An embed-mode vLLM (start.sh with VLLMSERVER_MODE=embed: `--runner pooling --convert
    embed`, served as tiny-random-embed), for this module only: ~1.5 to 4 minutes to start."""
    url = os.environ.get("BENCHC_VLLM_EMBED_URL")
    if url:
        yield SimpleNamespace(base_url=url.rstrip("/"), model="tiny-random-embed", tokenizer=tokenizer_path())
        return
    with started(free_port(), VLLMSERVER_MODE="embed") as base_url:
        yield SimpleNamespace(base_url=base_url, model="tiny-random-embed", tokenizer=tokenizer_path())


def test_embeddings_run_without_errors_and_count_the_inputs_the_server_embedded(tmp_path, embed_server):
    doc, records = run(tmp_path, embed_server, "embeddings", """\
workload:
  batch: 4
  dataset:
    random: {input_tokens: 32, output_tokens: 1, seed: SEED}
load:
  warmup: {requests: 1}
  sweep:
    concurrency: [1, 4]
  requests: 8
""", api="embeddings")
    _assert_every_request_completed(doc, records)
    assert [p["counts"]["inputs"] for p in doc["points"]] == [8 * 4, 8 * 4]
    # the server's usage counts each request's 4 inputs of 32 tokens (a BOS each where it adds one)
    prompt = {r["usage_input_tokens"] for r in records}
    assert len(prompt) == 1 and 4 * 32 <= prompt.pop() <= 4 * 33, records[0]
    print(f"embeddings: {len(records)} requests of 4 inputs, 0 errors; server's prompt tokens per request "
          f"{records[0]['usage_input_tokens']}; E2E p50 "
          f"{[round(p['latency']['e2e_us']['p50'] / 1000, 1) for p in doc['points']]} ms at c=1, 4")
