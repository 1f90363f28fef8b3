"""The simulator's parameters and presets (no I/O here; sim.py serves them).

Step-time model of a continuous-batching engine: one engine step decodes
`tokens_per_step` tokens for every running sequence and takes
    step_ms(batch) = piecewise-linear interpolation of `step_table`, or
                     base_ms + per_seq_ms * batch when there is no table,
times (1 + jitter * u), u uniform in [-1, 1] from the seeded generator, plus
the prefill of sequences admitted at that step: the tokens its prefix cache did not
hold, sum(input_tokens - cached_tokens) / prefill_tok_s.

The prefix cache (sim/prefix_cache.py, on by default as vLLM's, SGLang's and llama.cpp's
are): `block_size`-token blocks, hash-chained, LRU within `prefix_cache_tokens` (default:
`kv_tokens` when set, else DEFAULT_PREFIX_CACHE_TOKENS).
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field, fields, replace

APIS = ("chat", "completions", "responses", "messages")  # what the simulator can serve

# MiniMax-M2.5 FP8, TP=4 (deployment log): 84.4, 142.6, 254.2, 353.2 tok/s at C=1, 2, 4, 8
# with ~512-token outputs -> step = C / tok_s: 11.85, 14.03, 15.74, 22.65 ms. A line cannot fit
# all four within 3%, hence a table. Beyond 8 the growth is sublinear, as batching on a GPU is,
# reaching ~2,200 tok/s at 256 sequences.
MINIMAX_TABLE = [(1, 11.85), (2, 14.03), (4, 15.74), (8, 22.65), (16, 27.0), (32, 34.0),
                 (64, 48.0), (128, 72.0), (256, 118.0)]
# What the prefix cache holds when neither prefix_cache_tokens nor kv_tokens says: about the
# KV room one 80 GB GPU leaves a mid-size model.
DEFAULT_PREFIX_CACHE_TOKENS = 1 << 20
# Kimi-K2.5 NVFP4, TP=8: ~61 tok/s single-stream and weaker scaling (~380 tok/s at 64).
KIMI_TABLE = [(1, 16.4), (2, 20.5), (4, 27.0), (8, 40.0), (16, 62.0), (32, 100.0), (64, 170.0),
              (128, 300.0)]


@dataclass(frozen=True)
class SimConfig:
    model: str = "benchc-sim"
    max_num_seqs: int = 256
    base_ms: float = 10.0
    per_seq_ms: float = 0.1
    step_table: list[tuple[int, float]] | None = None
    jitter: float = 0.0  # relative, uniform in [-jitter, +jitter]
    tokens_per_step: int = 1
    chunks_per_write: int = 1  # SSE events coalesced into one write per stream
    prefill_tok_s: float = 20000.0  # 0 means prefill is free
    ttft_ms: float | None = None  # fixed wait before a request joins, instead of prefill cost
    # fixed wait before a request joins, besides its prefill: a real server's front end
    # (tokenizing, queueing between processes), which runs beside the engine's steps
    frontend_ms: float = 0.0
    # the front end's wait grows with the requests the server holds (running or waiting) when
    # one arrives: [[held, extra ms], ...], piecewise linear, flat past the last pair (one API
    # process streams every running request's tokens and hands over the others; a new
    # request's tokenizing waits behind that work: a real vLLM's on a busy host). None: no growth
    frontend_growth: list[tuple[int, float]] | None = None
    kv_tokens: int | None = None  # KV budget: running sequences' input+max_tokens must fit
    max_model_len: int = 32768
    eos_prob: float = 0.0  # chance per token of drawing EOS (unless ignore_eos / min_tokens)
    seed: int = 0
    faults: list[str] = field(default_factory=list)
    # request fields the server silently ignores, as some real servers do with
    # `ignore_eos` and `min_tokens`: lets tests see benchc notice (`stream_options`: a stream
    # without usage, whatever include_usage asked)
    ignored_params: list[str] = field(default_factory=list)
    # a tokenizer.json (or its folder): chunks are real tokens of it and usage is exact;
    # without one, one word is one token
    tokenizer: str | None = None
    host: str = "127.0.0.1"
    prefix_cache: bool = True  # vLLM-style automatic prefix caching (sim/prefix_cache.py)
    block_size: int = 16  # tokens per cached block (vLLM's default)
    prefix_cache_tokens: int | None = None  # cache capacity; None: kv_tokens, else 1 Mi tokens
    # report the cached prompt tokens as usage.prompt_tokens_details.cached_tokens (what vLLM
    # does with --enable-prompt-tokens-details, SGLang with --enable-cache-report)
    usage_cached_tokens: bool = True
    # answer POST /reset_prefix_cache (vLLM, with VLLM_SERVER_DEV_MODE=1) and POST /flush_cache
    # (SGLang); false plays a server without a way to empty its cache (llama.cpp)
    reset_endpoints: bool = True
    # llama.cpp's per-response `timings` object (cache_n, prompt_n, prompt_ms, predicted_n,
    # predicted_ms) on the last chunk
    timings: bool = False
    # a reasoning model behind vLLM's reasoning parser: the first reasoning_tokens tokens of
    # every output (within max_tokens) stream as `reasoning_content` deltas, the rest as
    # `content`; usage.completion_tokens_details.reasoning_tokens counts them
    reasoning_tokens: int = 0
    # agents' traffic: this fraction of chat, Responses and Messages answers (drawn per request,
    # seeded) is a tool call instead of text: after any reasoning, one token naming the tool,
    # then tool_call_tokens tokens of arguments; finish_reason tool_calls (Messages: tool_use)
    tool_call_fraction: float = 0.0
    tool_call_tokens: int = 16
    # parallel calls: a tool-call answer carries this many calls (each a name token and
    # tool_call_tokens argument tokens), their tokens interleaved one by one (call 0's name,
    # call 1's name, ..., call 0's first argument token, ...), as a server streaming parallel
    # calls side by side does: chat's tool_calls[].index, Responses' output_index and item id,
    # Messages' content block index tell them apart
    parallel_tool_calls: int = 1
    # the APIs it serves (a request to another answers 404, as a server without it does)
    apis: list[str] = field(default_factory=lambda: list(APIS))
    # the trace keeps each request's messages (or prompt) and its streamed answer and
    # reasoning text: tests compare what a session sent back with what was streamed
    trace_text: bool = False
    # images in a chat prompt count as Qwen2-VL counts them (sim/prompt_tokens.py): one token
    # per image_patch_px-square patch of the image resized to the nearest multiple of the
    # patch, at most image_max_tokens (an image whose size it cannot read counts the most)
    image_patch_px: int = 28
    image_max_tokens: int = 16384
    # /v1/embeddings: the floats of each input's vector
    embed_dim: int = 384
    # the Responses API's stored responses (a later request's previous_response_id,
    # sim/responses_store.py): each kept this long after it ended, and this many at most
    responses_kept_s: float = 600.0
    responses_kept: int = 10000

    # The connection as llama.cpp's server (cpp-httplib) treats it: every streamed response says
    # `Keep-Alive: timeout=5, max=100`, then the server closes the connection anyway, after a
    # seeded random delay of 0..close_delay_ms; a request sent on it meanwhile is never read
    # (the keep-alive race a client must retry).
    close_after_stream: bool = False
    close_delay_ms: float = 0.0
    # whose metric names /metrics uses: vllm, sglang, llamacpp or tgi (server_metrics.py)
    metrics_names: str = "vllm"
    # The GPUs the simulated server runs on (its TP x PP x DP), and the machine's: the others
    # idle beside it, as a node's unused GPUs do (0: as many as the server's).
    gpus: int = 1
    machine_gpus: int = 0
    # Power per simulated GPU (sim/power.py): gpu_idle_w while the engine has nothing to run;
    # while a step runs, gpu_idle_w + gpu_busy_w + gpu_w_per_seq x the step's batch, at most
    # gpu_max_w. Modelled figures of the order of an H100/H200's, not measured ones.
    gpu_idle_w: float = 60.0
    gpu_busy_w: float = 250.0
    gpu_w_per_seq: float = 1.5
    gpu_max_w: float = 700.0

    def prefix_cache_capacity_tokens(self) -> int:
        return self.prefix_cache_tokens or self.kv_tokens or DEFAULT_PREFIX_CACHE_TOKENS

    def step_ms(self, batch: int) -> float:
        if self.step_table:
            xs = [b for b, _ in self.step_table]
            ys = [ms for _, ms in self.step_table]
            if batch <= xs[0]:
                return ys[0]
            if batch >= xs[-1]:
                # beyond the table: continue the last segment's slope
                if len(xs) == 1:
                    return ys[0]
                slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
                return ys[-1] + slope * (batch - xs[-1])
            i = bisect.bisect_left(xs, batch)
            if xs[i] == batch:
                return ys[i]
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return y0 + (y1 - y0) * (batch - x0) / (x1 - x0)
        return self.base_ms + self.per_seq_ms * batch

    def frontend_wait_ms(self, held: int) -> float:
        """The front end's wait for a request arriving while the server holds `held` others:
        frontend_ms, and frontend_growth's extra interpolated at `held` (flat past its last
        pair: no growth beyond what was measured)."""
        growth = self.frontend_growth
        if not growth:
            return self.frontend_ms
        xs, ys = [h for h, _ in growth], [ms for _, ms in growth]
        if held <= xs[0]:
            return self.frontend_ms + ys[0]
        if held >= xs[-1]:
            return self.frontend_ms + ys[-1]
        i = bisect.bisect_right(xs, held)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return self.frontend_ms + y0 + (y1 - y0) * (held - x0) / (x1 - x0)

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, SimConfig] = {
    "minimax-m2.5-tp4": SimConfig(model="MiniMaxAI/MiniMax-M2.5", max_num_seqs=256,
                                  step_table=MINIMAX_TABLE, prefill_tok_s=40000.0,
                                  max_model_len=196608, gpus=4, machine_gpus=8),
    "kimi-k2.5-nvfp4-tp8": SimConfig(model="moonshotai/Kimi-K2.5", max_num_seqs=128,
                                     step_table=KIMI_TABLE, prefill_tok_s=15000.0,
                                     max_model_len=262144, gpus=8, machine_gpus=8, gpu_max_w=1000.0),
    # No delays at all: the engine runs steps back to back; a load source for client tests.
    "instant": SimConfig(model="benchc-sim", max_num_seqs=4096, base_ms=0.0, per_seq_ms=0.0,
                         prefill_tok_s=0.0, chunks_per_write=16),
}

PARAMS = [f.name for f in fields(SimConfig)]
METRICS_NAMES = ("vllm", "sglang", "llamacpp", "tgi")


def make_config(preset: str = "minimax-m2.5-tp4", **overrides) -> SimConfig:
    """A preset with `overrides` applied; ValueError names an unknown preset or parameter."""
    if preset not in PRESETS:
        raise ValueError(f"unknown simulator preset {preset!r}; known: {', '.join(PRESETS)} "
                         "(or a twin file, *.yaml, that `benchc fit` wrote)")
    return apply_overrides(PRESETS[preset], **overrides)


def apply_overrides(base: SimConfig, **overrides) -> SimConfig:
    """`base` with `overrides` applied; ValueError names an unknown or invalid parameter."""
    unknown = set(overrides) - set(PARAMS)
    if unknown:
        raise ValueError(f"unknown simulator parameter(s): {', '.join(sorted(unknown))}")
    if overrides.get("metrics_names", "vllm") not in METRICS_NAMES:
        raise ValueError(f"metrics_names must be one of {', '.join(METRICS_NAMES)}")
    if overrides.get("reasoning_tokens", 0) < 0:
        raise ValueError("reasoning_tokens must be at least 0")
    if overrides.get("image_patch_px", 28) < 1 or overrides.get("image_max_tokens", 1) < 1:
        raise ValueError("image_patch_px and image_max_tokens must be at least 1")
    if not 0 <= overrides.get("tool_call_fraction", 0) <= 1:
        raise ValueError("tool_call_fraction must be between 0 and 1")
    if overrides.get("tool_call_tokens", 1) < 1:
        raise ValueError("tool_call_tokens must be at least 1")
    if overrides.get("parallel_tool_calls", 1) < 1:
        raise ValueError("parallel_tool_calls must be at least 1")
    if set(overrides.get("apis", APIS)) - set(APIS):
        raise ValueError(f"apis: the simulator serves {', '.join(APIS)}")
    if overrides.get("embed_dim", 1) < 1:
        raise ValueError("embed_dim must be at least 1")
    if overrides.get("gpus", 1) < 1 or overrides.get("machine_gpus", 0) < 0:
        raise ValueError("gpus must be at least 1 and machine_gpus at least 0")
    if any(overrides.get(k, 0) < 0 for k in ("gpu_idle_w", "gpu_busy_w", "gpu_w_per_seq", "gpu_max_w")):
        raise ValueError("gpu_idle_w, gpu_busy_w, gpu_w_per_seq and gpu_max_w must be at least 0")
    if overrides.get("responses_kept_s", 0) < 0 or overrides.get("responses_kept", 0) < 0:
        raise ValueError("responses_kept_s and responses_kept must be at least 0")
    if overrides.get("frontend_ms", 0) < 0:
        raise ValueError("frontend_ms must be at least 0")
    if overrides.get("frontend_growth") is not None:
        overrides["frontend_growth"] = [tuple(x) for x in overrides["frontend_growth"]]
        held = [h for h, _ in overrides["frontend_growth"]]
        if held != sorted(set(held)):
            raise ValueError("frontend_growth: the held counts must increase, pair by pair")
    if overrides.get("close_delay_ms", 0) < 0:
        raise ValueError("close_delay_ms must be at least 0")
    if "step_table" in overrides and overrides["step_table"] is not None:
        overrides["step_table"] = [tuple(x) for x in overrides["step_table"]]
    return replace(base, **overrides)
