"""The API adapters (benchc.client.apis): what each API's request looks like, and that the
request module's helpers are theirs."""

from __future__ import annotations

from benchc.client import request
from benchc.client.apis import APIS
from benchc.plan.model import Sampling, Target
from benchc.plan.workload import Prompt

SAMPLING = Sampling(temperature=0.5, top_p=0.9, max_tokens=None, min_tokens=None, ignore_eos=True, stop=[],
                    seed=7, extra_body={"repetition_penalty": 1.1})


def _target(api: str, key: str | None = "sk-secret") -> Target:
    return Target(base_url="http://h:1/v1", sim=None, api=api, model="m", api_key=key, headers={"X-A": "b"},
                  timeout_s=10, idle_timeout_s=5, tokenizer=None)


def test_chat_body_sends_messages_and_sampling():
    prompt = Prompt(text="hi", messages=None, input_tokens=1, output_tokens=12)
    body = APIS["chat"].body(_target("chat"), SAMPLING, prompt, continuous_usage=True)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12,
                    "temperature": 0.5, "top_p": 0.9, "ignore_eos": True, "seed": 7, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                    "repetition_penalty": 1.1}


def test_completions_body_joins_a_conversation_into_one_prompt():
    prompt = Prompt(text=None, messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                    input_tokens=2, output_tokens=None)
    body = APIS["completions"].body(_target("completions"), SAMPLING, prompt, stream=False, max_tokens=3)
    assert body["prompt"] == "a b" and body["max_tokens"] == 3 and "stream" not in body


def test_paths_and_headers():
    assert request.endpoint("http://h:1/v1/", "chat") == "http://h:1/v1/chat/completions"
    assert request.endpoint("http://h:1/v1", "completions") == "http://h:1/v1/completions"
    assert request.headers_for(_target("chat")) == {"Content-Type": "application/json", "X-A": "b",
                                                    "Authorization": "Bearer sk-secret"}
    assert "Authorization" not in request.headers_for(_target("chat", key=None))


def test_answer_text_per_api():
    answer = {"choices": [{"message": {"content": "a", "reasoning_content": "r"}}]}
    assert APIS["chat"].answer_text(answer) == "ar"
    assert APIS["chat"].event_text({"choices": [{"delta": {"content": "x"}}]}) == "x"
    assert APIS["completions"].answer_text({"choices": [{"text": "t"}]}) == "t"
    assert APIS["completions"].event_text({"choices": []}) == ""
