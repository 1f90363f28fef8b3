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


def test_a_404_or_501_says_the_api_is_not_served():
    from benchc.metrics.record import HTTP, Outcome, RequestRecord
    from benchc.run.deadserver import NOT_SERVED, UNREACHABLE, ConnectStreak, stop_kind

    for status in (404, 501):
        streak = ConnectStreak(4, "messages", "http://h:1/v1/messages")
        ok = RequestRecord("a", 0, 1, None, outcome=Outcome(status=200))
        assert not streak.add(ok)
        r = RequestRecord("b", 0, 1, None,
                          outcome=Outcome(status=status, error=HTTP, error_detail=f"{status}: Not Found"))
        assert streak.add(r) and not streak.add(r)  # once
        reason = streak.reason
        assert "does not serve the messages API" in reason and "http://h:1/v1/messages" in reason
        assert stop_kind(streak.reason) == NOT_SERVED
    streak = ConnectStreak(1)
    assert not streak.add(RequestRecord("c", 0, 1, None, outcome=Outcome(status=500, error=HTTP)))
    assert stop_kind("10 requests in a row could not connect") == UNREACHABLE


def test_every_planned_api_has_an_adapter():
    from benchc.plan.model import APIS as PLANNED

    assert set(APIS) == set(PLANNED)


def test_messages_and_responses_bodies_and_headers():
    prompt = Prompt(text=None, messages=[{"role": "system", "content": "be brief"},
                                         {"role": "user", "content": "hi"}], input_tokens=3, output_tokens=5)
    sampling = SAMPLING.__class__(**{**SAMPLING.__dict__, "stop": ["\n"], "extra_body": {}})
    body = APIS["messages"].body(_target("messages"), sampling, prompt)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "system": "be brief",
                    "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "stop_sequences": ["\n"],
                    "stream": True}
    h = APIS["messages"].headers(_target("messages"))
    assert h["x-api-key"] == "sk-secret" and h["anthropic-version"] and "Authorization" not in h
    body = APIS["responses"].body(_target("responses"), sampling, prompt, max_tokens=7)
    assert body["input"] == prompt.messages and body["max_output_tokens"] == 7
    assert "stream_options" not in body
    assert request.endpoint("http://h:1/v1", "responses") == "http://h:1/v1/responses"
    assert request.endpoint("http://h:1/v1", "messages") == "http://h:1/v1/messages"
