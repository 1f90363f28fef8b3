"""Ctrl-C during a coding-agent replay (run/agent_replay.py): the step's stop ends each session
at its next wait, as it ends any other session (run/loadgen.py: on Ctrl-C no new request
starts; those in flight get the grace). Before, a session's think times and its subagents'
spawns were plain sleeps that no stop woke, so its requests kept going out for the whole
grace after Ctrl-C. The sample's sessions, sent through a send that answers at once (what is
asserted is which requests went, not when)."""

import asyncio
import json
import os
import signal
from types import SimpleNamespace

import pytest

from benchc.plan.agent_trace import AgentSession, Subagent, read_agent_traces
from benchc.plan.shapes import AgentReplay
from benchc.run.agent_replay import AgentReplayDriver, Answer, _no_writes, replay_session

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "specs", "traces", "agentx-small")


def _sessions() -> list[AgentSession]:
    return list(read_agent_traces(SAMPLE))


def _with_subagents() -> AgentSession:
    return next(s for s in _sessions() if any(isinstance(e, Subagent) for e in s.entries))


async def _held(unit):
    """A step's held: the session awaited (its in-flight count is the step's, not tested here)."""
    return await unit


class _Stop:
    """A step's until: lets the first `passes` waits by, then the step is stopped."""

    def __init__(self, passes: int) -> None:
        self.passes, self.asked = passes, 0

    async def __call__(self, due_ns: int) -> bool:
        self.asked += 1
        return self.asked <= self.passes


async def _answer(req, body) -> Answer:
    return Answer(req.input_tokens, req.output_tokens, 0)


def test_a_stopped_step_sends_no_request_of_a_session_past_its_stop():
    session = _with_subagents()
    total = len(session.requests())
    for passes in (0, 1, 3):
        stop = _Stop(passes)
        sent = asyncio.run(replay_session(session, lambda req: b"{}", _answer, 0.0, None, stop))
        # each send is one wait that passed (a spawn's wait sends nothing): never more
        assert len(sent) <= passes < total


def test_a_stopped_step_leaves_no_subagent_running():
    session = _with_subagents()
    spawns = sum(isinstance(e, Subagent) for e in session.entries)
    assert spawns

    async def main():
        before = asyncio.all_tasks()
        # the parent's first request goes, then the stop: the subagents spawned after it end too
        sent = await replay_session(session, lambda req: b"{}", _answer, 0.0, None, _Stop(1))
        return sent, asyncio.all_tasks() - before

    sent, left = asyncio.run(main())
    assert len(sent) <= 1 and not left


def test_the_driver_waits_on_the_steps_until_and_counts_a_stopped_session_cut():
    session = _with_subagents()
    added: list[dict] = []

    async def measured(body, r, **_):
        r.times.t0_ns, r.times.end_ns = 1, 2

    host = SimpleNamespace(until=_Stop(1), measured=measured, held=_held, writes_first=_no_writes,
                           rec=SimpleNamespace(add_session=added.append))
    driver = AgentReplayDriver(AgentReplay(concurrency=1))
    driver.feed = SimpleNamespace(sessions=[session], body=lambda j, req: b"{}")
    asyncio.run(driver._session(host, 0))
    assert host.until.asked >= 2  # the driver's waits are the step's
    (record,) = added
    assert record["outcome"] == "cut" and record["turns"] <= 1
    assert len(driver.replayed[0]) == record["turns"]


def test_a_stopped_replays_report_holds_its_cut_sessions():
    """The point's agent_replay block is written for an interrupted point too: a session the stop
    cut (no request, or some) is in its figures as far as it went, and the verdict says the
    replay did not keep to its trace."""
    sessions = _sessions()[:2]
    added: list[dict] = []

    async def measured(body, r, **_):
        r.times.t0_ns, r.times.end_ns = 1, 2

    driver = AgentReplayDriver(AgentReplay(concurrency=2))
    driver.feed = SimpleNamespace(sessions=sessions, body=lambda j, req: b"{}")
    for j, passes in enumerate((0, 2)):
        host = SimpleNamespace(until=_Stop(passes), measured=measured, held=_held, writes_first=_no_writes,
                               rec=SimpleNamespace(add_session=added.append))
        asyncio.run(driver._session(host, j))
    report = driver.report()
    assert report["sessions_replayed"] == 2 and [s["outcome"] for s in added] == ["cut", "cut"]
    assert report["fidelity"]["warnings"]


# the shipped sample at think times 10 times the shipped spec's (a 10 s think time waits 0.1 s):
# the replay lasts several times as long as the 10 to 20 requests after which the tests' Ctrl-C
# comes
SLOW_SPEC = """\
version: 1
name: agent-stop
target:
  sim: {{preset: instant}}
  api: chat
  model: benchc-sim
workload:
  dataset:
    agent_trace: {{path: {path}, time_scale: 0.01, max_think: 1s}}
load:
  sweep: {{concurrency: [2]}}
"""


def slow_spec(tmp_path) -> str:
    f = tmp_path / "stop.yaml"
    f.write_text(SLOW_SPEC.format(path=SAMPLE))
    return str(f)


def assert_cut_and_written(point: dict, requests_file) -> None:
    """What a Ctrl-C'd replay's result holds: fewer requests than the trace's, none failed (a
    request in flight past the grace is cancelled, not an error of the server's), the sessions
    it cut counted as cut, each session's figures as far as it went, the verdict saying the
    replay did not keep to its trace, and each request sent in the requests file."""
    counts = point["counts"]
    assert 0 < counts["sent"] < 149
    assert set(counts["errors"]) <= {"cancelled"} and counts["completed"] > 0
    assert point["sessions"]["cut"] >= 1 and point["sessions"]["failed"] == 0
    block = point["agent_replay"]
    assert sum(s["requests"] for s in block["sessions"]) == counts["sent"]
    assert block["fidelity"]["warnings"]
    rows = [json.loads(x) for x in requests_file.read_text().splitlines()]
    assert len([r for r in rows if "prompt_index" in r]) == counts["sent"]


@pytest.mark.parametrize("http", ["native", "aiohttp"])
def test_ctrl_c_during_benchc_runs_replay_writes_what_went_and_the_cut_sessions(tmp_path, monkeypatch, http):
    """benchc run of a replay, Ctrl-C while a subagent's request is in flight, once 10 requests
    ended: exit 130 (interrupted), the partial result written with the requests that went
    (that one too, answered within the grace) and the sessions cut."""
    import benchc.run.loadgen as loadgen
    from benchc.cli import main
    from benchc.errors import EXIT_INTERRUPTED
    from benchc.results.document import read

    measured = loadgen.StepRun.measured
    sent: list[str] = []
    stopped: list[bool] = []

    async def ctrl_c_in_flight(self, body, r, *args, **kw):
        sent.append(r.id)
        if self.ended >= 10 and r.id.count("requests[") == 2 and not stopped:
            # a subagent's request (its path $.requests[i].requests[k]), sent: Ctrl-C then
            stopped.append(True)
            asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)
        await measured(self, body, r, *args, **kw)

    monkeypatch.setattr(loadgen.StepRun, "measured", ctrl_c_in_flight)
    out = tmp_path / "r.json"
    rc = main(["run", slow_spec(tmp_path), "--out", str(out), "--quiet", "--http", http,
               "--set", "output.requests=true"])
    assert rc == EXIT_INTERRUPTED and stopped
    doc = read(str(out))
    assert doc["interrupted"] is True
    (point,) = doc["points"]
    assert point["counts"]["sent"] <= len(sent)  # a request handed over but not yet due never went
    assert_cut_and_written(point, tmp_path / "r.requests.jsonl")
