"""No secret stored (issue 15, class 6): by name in plans and results, by value wherever a
server echoes one back or a command line carries one."""

import asyncio
import base64
import json
import os
from urllib.parse import quote

import pytest
from aiohttp import web

from benchc import redact
from benchc.cli import main
from benchc.client import bounded
from benchc.plan.compiler import compile_spec
from benchc.redact import Scrubber, redact_argv
from benchc.results.document import write_atomic
from benchc.run.logpump import LineScrubber
from benchc.run.secrets import run_scrubber
from benchc.spec import loader as spec
from tests.conftest import killed_after, wait_for
from tests.hostile import FakeServer, answered
from tests.test_hardening_redirects import SECRET
from tests.test_keepalive import PATHS

SPEC = """\
version: 1
name: t
target:
  base_url: {url}
  model: m
  api_key: sk-apikey-0001
  headers: {{X-Api-Key: xk-header-0002, X-Trace: "on"}}
{server}workload:
  dataset:
    random: {{input_tokens: 8, output_tokens: 4}}
load:
  warmup: {{requests: 0}}
  sweep:
    concurrency: [1]
  requests: 3
output:
  path: {out}
  requests: true
"""
SECRETS = ("sk-apikey-0001", "xk-header-0002", "hf_token_0003")


def write_spec(tmp_path, url="http://localhost:8000/v1", server=""):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.format(url=url, server=server, out=tmp_path / "r.json"))
    return str(path)


def assert_clean(text: str, where: str) -> None:
    for s in SECRETS:
        assert s not in text, f"{s} in {where}"


# --------------------------------------------------------------------------- by name


@pytest.mark.parametrize("argv, shown", [
    (["env", "HF_TOKEN=hf_token_0003", "vllm", "serve", "m"], ["env", "HF_TOKEN=***", "vllm", "serve", "m"]),
    (["/bin/sh", "-c", "HF_TOKEN=hf_token_0003 vllm serve m"],
     ["/bin/sh", "-c", "HF_TOKEN=*** vllm serve m"]),
    (["/bin/sh", "-c", "export HF_TOKEN='hf_token_0003'; vllm serve --api-key=k1 m"],
     ["/bin/sh", "-c", "export HF_TOKEN=***; vllm serve --api-key=*** m"]),
    (["vllm", "serve", "--hf-token", "hf_token_0003", "--download-dir=/x", "OMP=4"],
     ["vllm", "serve", "--hf-token", "***", "--download-dir=/x", "OMP=4"]),
    (["curl", "http://u:pw@h/x"], ["curl", "http://***@h/x"]),
    # every secret word in a shell string's flags, as in list form (credential, passwd, cookie were kept)
    (["/bin/sh", "-c", "srv --credential c1 --db-passwd=p1 --cookie 'a b' --port 8"],
     ["/bin/sh", "-c", "srv --credential *** --db-passwd=*** --cookie *** --port 8"]),
])
def test_commands_lose_their_secrets_by_name(argv, shown):
    assert redact_argv(argv) == shown


@pytest.mark.parametrize("command", [
    '"HF_TOKEN=hf_token_0003 vllm serve m --port {free}"',
    "[env, HF_TOKEN=hf_token_0003, vllm, serve, m]",
])
def test_a_token_in_server_command_never_reaches_the_printed_plan(tmp_path, capsys, command):
    path = write_spec(tmp_path, "http://127.0.0.1:{free}/v1", f"server:\n  command: {command}\n")
    assert main(["plan", path]) == 0
    out = capsys.readouterr().out
    assert_clean(out, "the plan")
    assert "HF_TOKEN=***" in json.dumps(json.loads(out)["combinations"][0]["server"]["command"])


# --------------------------------------------------------------------------- by value


def test_the_scrubber_knows_every_secret_of_a_run(tmp_path):
    server = "server:\n  command: HF_TOKEN=hf_token_0003 vllm serve m\n  env: {MY_SECRET: env-value-4}\n"
    path = write_spec(tmp_path, "http://127.0.0.1:{free}/v1", server)
    plan = compile_spec(spec.load(path, env={}))
    s = run_scrubber(plan, "http://user:pw-0005@127.0.0.1:9/v1")
    for secret in SECRETS + ("env-value-4", "pw-0005", "user:pw-0005"):
        assert secret in s.secrets
    assert "dXNlcjpwdy0wMDA1" in s.secrets  # the Basic credential a client sends for user:pw-0005


def test_json_scrubbing_touches_strings_only_and_leaves_histograms_whole():
    s = Scrubber(["4096", 'se"cr\\et-é', "HISTFAAA"])
    doc = {"n": 4096, "t0_ns": 140960000, "e": 'echo se"cr\\et-é and 4096', "hdr": "HISTFAAAx4096y",
           "4096": "k"}
    for ensure_ascii in (True, False):
        out = json.loads(s.json(json.dumps(doc, ensure_ascii=ensure_ascii)))
        assert out == {"n": 4096, "t0_ns": 140960000, "e": "echo *** and ***", "hdr": "HISTFAAAx4096y",
                       "***": "k"}


def test_write_atomic_scrubs_only_inside_a_run(tmp_path):
    text = json.dumps({"error": "401: Authorization: Bearer sk-apikey-0001"}) + "\n"
    write_atomic(str(tmp_path / "a.json"), text)
    assert "sk-apikey-0001" in (tmp_path / "a.json").read_text()
    with redact.scrubbing(Scrubber(["sk-apikey-0001"])):
        write_atomic(str(tmp_path / "b.json"), text)
    assert json.loads((tmp_path / "b.json").read_text()) == {"error": "401: Authorization: Bearer ***"}


def test_the_terminal_gets_every_line_scrubbed(capsys):
    """Console.say printed as given: a cache-reset warning quoted the server's root with its
    URL credentials."""
    from benchc.run.console import Console

    url = "http://bench:pw-0007@10.0.0.1:8000/v1?token=tk-0008"
    with redact.scrubbing(Scrubber.of(urls=[url])):
        Console(quiet=False, live=False).say(f"no cache reset on {url}")
    err = capsys.readouterr().err
    assert "pw-0007" not in err and "tk-0008" not in err and "no cache reset on http://" in err


def test_a_server_log_is_scrubbed_as_written_keeping_other_bytes():
    lines = LineScrubber(Scrubber(["hf_token_0003"]))
    out = lines.feed(b"start \xff\nargs: --hf-token hf_tok") + lines.feed(b"en_0003\nready\rdone")
    assert out == b"start \xff\nargs: --hf-token ***\nready\r"  # a line is written when it ends
    assert lines.finish() == b"done"


def _pumped(chunks: list[bytes], scrubber: Scrubber, piece_bytes: int) -> tuple[bytes, int]:
    """What a LineScrubber writes for `chunks`, and the most it held at once."""
    lines, out, held = LineScrubber(scrubber, piece_bytes), [], 0
    for c in chunks:
        out.append(lines.feed(c))
        held = max(held, len(lines._held))
    out.append(lines.finish())
    return b"".join(out), held


def test_the_log_pump_writes_the_same_whatever_the_reads_and_never_a_piece_of_a_key():
    """Lines past the bound are written in pieces; a key across a piece's end is kept back
    whole, in every form, at every split of the reads."""
    key = "sk-live/k3y+0004-abcdef"
    scrubber = Scrubber([key])
    forms = [key, key.replace("/", "\\/"), quote(key, safe=""), base64.b64encode(key.encode()).decode()]
    stream = b"".join(b"." * (37 + i) + f.encode() + b"_" * i + (b"\n" if i % 2 else b"")
                      for i, f in enumerate(forms * 3))  # fillers no form holds
    whole, _ = _pumped([stream], scrubber, 48)
    for f in forms:
        assert f.encode() not in whole
    assert whole == scrubber.text(stream.decode()).encode()  # as if it had been read at once
    for at in range(0, len(stream), 7):
        for piece_bytes in (40, 48, 64):
            out, held = _pumped([stream[:at], stream[at:]], scrubber, piece_bytes)
            for f in forms:
                assert f.encode()[:8] not in out, (at, piece_bytes)
            assert out == whole, (at, piece_bytes)


def test_an_endless_line_holds_at_most_a_piece_and_a_read():
    scrubber = Scrubber(["sk-apikey-0001"])
    chunk = b"z" * 65536
    out, held = _pumped([chunk] * 160, scrubber, 65536)  # 10 MiB, no newline
    assert len(out) == 160 * 65536 and held <= 65536 + 65536


def test_open_end_finds_the_longest_start_of_a_secret_at_the_end():
    s = Scrubber(["sk-apikey-0001"])
    assert s.open_end("text sk-api") == 6 and s.open_end("text s") == 1 and s.open_end("text") == 0
    assert s.open_end("text sk-apikey-0001") == 0  # whole: scrubbed, nothing to keep back
    assert s.open_end("text s", shortest=4) == 0


# --------------------------------------------------------------------------- end to end


class EchoGateway(FakeServer):
    """A gateway that answers every completion with 401 and echoes the request's headers in
    the body, as some do; /v1/models lists the model. Runs in a thread of its own."""

    def __init__(self):
        super().__init__({"/v1/chat/completions": self._deny})

    async def _deny(self, request):
        echoed = "; ".join(f"{k}: {v}" for k, v in request.headers.items())
        return web.Response(status=401, text=f"unauthorized, you sent {echoed}")


@pytest.mark.slow
def test_secrets_echoed_in_error_bodies_are_stored_nowhere(tmp_path, capsys):
    gateway = EchoGateway()
    try:
        smoke = "smoke:\n  continue_on_fail: true\n  checks: [{prompt: hi}]\n"
        path = write_spec(tmp_path, gateway.url, smoke)
        # every request is refused (401, the key echoed): a failed point, exit 7 (issue 29, class 7)
        assert main(["run", path, "--json"]) == 7
    finally:
        gateway.close()
    out, err = capsys.readouterr()
    doc = json.loads((tmp_path / "r.json").read_text())  # a failed run prints no document
    point = doc["points"][0]
    assert point["counts"]["errors"] == {"http_status": 3}
    assert "c=1: no request completed (3 http_status)" in err
    example = point["counts"]["error_examples"]["http_status"]
    assert "Bearer ***" in example and "X-Api-Key: ***" in example  # what was echoed, scrubbed
    assert "Bearer ***" in doc["combinations"][0]["smoke"]["checks"][0]["non_streaming"]["error"]
    records = (tmp_path / "r.requests.jsonl").read_text()
    assert len(records.splitlines()) == 3 and "Bearer ***" in records
    for name, text in (("stdout", out), ("stderr", err), ("the result", (tmp_path / "r.json").read_text()),
                       ("the per-request file", records)):
        assert_clean(text, name)


@pytest.mark.slow
def test_a_token_a_launched_server_prints_is_scrubbed_from_result_log_and_messages(tmp_path, capsys):
    # the "server" prints its token and dies before it is ready
    command = ("\"HF_TOKEN=hf_token_0003 sh -c 'echo starting with token $HF_TOKEN; exit 3'\"\n"
               "  ready: {timeout: 60s, interval: 50ms}\n")
    path = write_spec(tmp_path, "http://127.0.0.1:{free}/v1", f"server:\n  command: {command}")
    assert main(["run", path]) == 3
    err = capsys.readouterr().err
    assert "starting with token ***" in err
    doc = json.loads((tmp_path / "r.json").read_text())
    combo = doc["combinations"][0]
    assert combo["status"] == "server_failed" and "starting with token ***" in combo["log_tail"]
    assert combo["server"]["command"] == ["/bin/sh", "-c", "HF_TOKEN=*** sh -c 'echo starting with token "
                                          "$HF_TOKEN; exit 3'"]
    with open(combo["server"]["log"], encoding="utf-8") as f:
        log = f.read()
    assert "starting with token ***" in log
    for name, text in (("stderr", err), ("the result", json.dumps(doc)), ("the server log", log)):
        assert_clean(text, name)
    assert os.path.basename(combo["server"]["log"]) == "r.server-0.log"


def test_readiness_says_at_once_when_its_request_cannot_be_made():
    """user:password in the URL and an Authorization header: aiohttp refuses to build the
    request, and readiness used to ask again until ready.timeout (20 min by default)."""
    from benchc.plan.model import Server
    from benchc.run.server import ServerFailed, wait_ready

    server = Server(attach=False, command=None, env={}, cwd=None, ready_path="/health",
                    ready_timeout_s=3600.0, ready_interval_s=1.0, log=None, stop_timeout_s=1.0)

    async def ready() -> None:
        await wait_ready(None, "http://u:pw@127.0.0.1:9/v1", server, "m",
                         {"Authorization": "Bearer sk-apikey-0001"}, asyncio.Event())

    with pytest.raises(ServerFailed, match="the readiness check cannot be sent .*a configuration error"):
        asyncio.run(ready())


# --------------------------------------------------------------------------- issue 29, class 1

KEY = "sk-live/4f+9Qz=key-0042"


@pytest.mark.parametrize("echoed", [
    KEY.replace("/", "\\/"),  # JSON with escaped slashes (PHP, some gateways)
    "sk-live%2F4f%2B9Qz%3Dkey-0042",  # percent-encoded (a URL, a form body)
    "sk-live/4f%2B9Qz%3Dkey-0042",  # as urllib's quote() leaves a slash
])
def test_the_scrubber_catches_a_secret_written_back_escaped_or_percent_encoded(echoed):
    s = Scrubber([KEY])
    text = f'{{"error": "bad key {echoed} given"}}'
    assert s.text(text) == s.json(text) == '{"error": "bad key *** given"}'



@pytest.mark.parametrize("prefix", [b"", b"a", b"ab", b"Basic user:", b'{"auth": "'])
def test_the_scrubber_catches_a_secret_inside_base64_at_any_alignment(prefix):
    blob = base64.b64encode(prefix + KEY.encode() + b" trailing words").decode()
    scrubbed = Scrubber([KEY]).text(f"echo: {blob}")
    assert "***" in scrubbed
    # what is left decodes to nothing holding the key's middle
    assert base64.b64encode(KEY.encode()[3:-3]).decode()[4:-4] not in scrubbed


def test_a_body_cut_to_length_never_shows_part_of_a_secret():
    """The error body was cut to 300 bytes, then scrubbed: a key across the cut left its first
    characters in the result."""
    s = Scrubber([KEY])
    body = "x" * 290 + KEY + " and more"
    cut = s.cut(body, 300)
    assert cut == "x" * 290 + "*** and mo" and "sk-live" not in cut
    assert s.cut("y" * 10 + KEY[:6], 16) == "y" * 10 + "***"  # a read that ended mid-secret
    assert s.cut("nothing secret here", 300) == "nothing secret here"


def test_an_error_body_with_the_key_across_the_bound_is_scrubbed_on_every_path():
    body = ("e" * (bounded.ERROR_BODY_BYTES - 5) + SECRET + " echoed").encode()

    h = {"Content-Type": "application/json", "Authorization": f"Bearer {SECRET}"}
    with redact.scrubbing(Scrubber([SECRET])):
        for path in PATHS:
            r = answered(path, b"HTTP/1.1 401 Unauthorized\r\n", body, headers=h)
            assert r.outcome.status == 401 and r.outcome.error_detail.startswith("401: eeee"), \
                (path, r.outcome.error_detail)
            assert "***" in r.outcome.error_detail and SECRET[:4] not in r.outcome.error_detail, \
                (path, r.outcome.error_detail)


def test_a_launched_servers_log_is_created_readable_by_its_owner_only(tmp_path):
    """It was created 0644 (the umask's), holding in clear what the server printed until
    benchc scrubbed it when the server stopped: a SIGKILL left it so for anyone to read."""
    import sys

    from benchc.plan.model import Server
    from benchc.run.server import launch

    server = Server(attach=False, command=None, env={}, cwd=None, ready_path="/health",
                    ready_timeout_s=60.0, ready_interval_s=1.0, log=None, stop_timeout_s=1.0)
    log = tmp_path / "server.log"

    async def go() -> None:
        launched = await launch(server, [sys.executable, "-c", "print('token sk-apikey-0001')"], str(log))
        await launched.proc.wait()

    asyncio.run(go())
    assert os.stat(log).st_mode & 0o777 == 0o600


LOG_KEY = "sk-live/k3y+0004-abcdef"
KEY_FORMS = {"raw": LOG_KEY, "json": LOG_KEY.replace("/", "\\/"), "percent": quote(LOG_KEY, safe=""),
             "basic": base64.b64encode(f"bench:{LOG_KEY}".encode()).decode(),
             "base64": base64.b64encode(LOG_KEY.encode()).decode()}
PRINTING_SERVER = """\
import os, sys, time
forms = {forms!r}
for i, (name, form) in enumerate(forms.items()):
    print(f"{{name}}: {{form}}", file=(sys.stdout, sys.stderr)[i % 2], flush=True)
print("x" * 200000 + forms["raw"] + "y" * 10, flush=True)  # a line past any bound, the key inside
print("all printed", file=sys.stderr, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_launched_servers_log_holds_no_form_of_the_key_after_benchc_is_killed(tmp_path):
    """The log was scrubbed only when benchc stopped the server: benchc killed with SIGKILL
    left the key in clear, in every form the server printed it."""
    import subprocess
    import sys

    script = tmp_path / "server.py"
    script.write_text(PRINTING_SERVER.format(forms=KEY_FORMS))
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(url="http://127.0.0.1:{free}/v1", out=tmp_path / "r.json",
                                server=f"server:\n  command: [{sys.executable}, {script}]\n"
                                       "  ready: {timeout: 10m, interval: 100ms}\n")
                    .replace("sk-apikey-0001", LOG_KEY))
    log = tmp_path / "r.server-0.log"
    with killed_after(subprocess.Popen([sys.executable, "-m", "benchc", "run", str(spec)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)) as p:
        for line in p.stderr:
            if "launched the server (pid " in line:
                server_pid = int(line.split("(pid ")[1].split(")")[0])
                break
        else:
            raise AssertionError("benchc ended before it launched the server")
        wait_for(lambda: log.exists() and "all printed" in log.read_text(errors="replace"),
                 "the server's last line in its log")
    wait_for(lambda: not os.path.exists(f"/proc/{server_pid}"), "the server to be stopped")
    text = log.read_text(errors="replace")
    assert os.stat(log).st_mode & 0o777 == 0o600
    for name, form in KEY_FORMS.items():
        assert form not in text, f"the key's {name} form is in the log"
        assert any(line.startswith(f"{name}: ") and "***" in line for line in text.splitlines()), name
    assert "x" * 1000 in text and "***" + "y" * 10 in text
