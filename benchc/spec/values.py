"""Checks of single values a JSON schema cannot say: finite numbers, usable URLs, header
text, output lengths, simulator parameters.

Shared by spec validation and the command line (`--base-url`, `benchc sim --param`), so a
value is judged the same way wherever it comes from.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any
from urllib.parse import urlsplit

import jsonschema

from benchc.errors import SpecProblem
from benchc.redact import redact_url
from benchc.spec.schemas import load_schema
from benchc.units import parse_duration, parse_tokens

# server.metrics_interval's floor: a scrape costs the server a /metrics render (vLLM's is ~100 kB)
# and benchc a parse, so one every few milliseconds would load both; AIPerf's finest is 100 ms
MIN_METRICS_INTERVAL_S = 0.05
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# RFC 9110 token: the characters a header name may hold
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _json_path(path: tuple) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def nonfinite_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every NaN or infinity below `value` (JSON holds neither)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nonfinite_paths(v, path + (k,))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nonfinite_paths(v, path + (i,))]
    return []


def nonfinite_problems(spec: Any, data: dict) -> list[SpecProblem]:
    return [spec.problem(p, "NaN and infinity are not numbers benchc accepts (give a finite number)")
            for p in nonfinite_paths(data)]


def base_url_problem(url: str) -> str | None:
    """What is wrong with `url` as the root of an OpenAI-compatible server, or None.

    A query or fragment is refused: benchc appends the API's paths (/chat/completions,
    /models, the readiness path) to this URL, and a credential in a query string ends up
    in server and proxy logs; give it as target.api_key or target.headers instead.
    `{free}` stands for a port benchc picks at launch.
    """
    shown = repr(redact_url(url))  # the message must not repeat a credential
    if _CONTROL.search(url) or " " in url:
        return f"{shown} holds a space or control character"
    try:
        u = urlsplit(url.replace("{free}", "1"))
        port = u.port
    except ValueError as e:
        return f"{shown} is not a URL ({e})"
    if "://" not in url:
        return f"{shown} has no scheme: write http://{redact_url(url)} (or https://)"
    if u.scheme not in ("http", "https"):
        return f"{shown} is not an http(s) URL"
    if not u.hostname:
        return f"{shown} names no host"
    if port == 0:
        return f"{shown}: port 0 is not a port a server listens on"
    if u.query or u.fragment or url.endswith(("?", "#")):
        return (f"{shown} has a query or fragment: benchc appends API paths to base_url, so give "
                "credentials as target.api_key or target.headers, not in the URL")
    return None


def _credentials_problems(spec: Any, target: dict) -> list[SpecProblem]:
    out = []
    url = target.get("base_url")
    if url:
        problem = base_url_problem(url)
        if problem:
            out.append(spec.problem(("target", "base_url"), problem))
        else:
            u = urlsplit(url.replace("{free}", "1"))
            has_auth_header = any(k.lower() == "authorization" for k in target.get("headers", {}))
            if u.username is not None and (target.get("api_key") or has_auth_header):
                out.append(spec.problem(("target", "base_url"), "user:password in the URL and "
                                        f"{'api_key' if target.get('api_key') else 'an Authorization header'}"
                                        " both give credentials; keep one"))
    if _CONTROL.search(target.get("api_key") or ""):
        out.append(spec.problem(("target", "api_key"), "holds a control character or line break"))
    for name, value in target.get("headers", {}).items():
        if not _TOKEN.match(name):
            out.append(spec.problem(("target", "headers", name), f"{name!r} is not a header name "
                                    "(letters, digits and !#$%&'*+.^_`|~-)", key=True))
        elif _CONTROL.search(str(value).replace("\t", " ")):
            out.append(spec.problem(("target", "headers", name), "holds a control character or line break"))
    return out


def _at_least_one(length: Any) -> bool:
    """A spec length whose every draw is at least 1 token."""
    if isinstance(length, dict) and "mean" in length:
        return parse_tokens(length["mean"]) >= 1
    if isinstance(length, dict):
        return parse_tokens(length["min"]) >= 1
    return parse_tokens(length) >= 1


def _output_length_problems(spec: Any, d: dict) -> list[SpecProblem]:
    out = []
    zero = "an output of 0 tokens measures nothing; ask for at least 1"
    for kind, cfg in d["workload"]["dataset"].items():
        if "output_tokens" in cfg and not _at_least_one(cfg["output_tokens"]):
            out.append(spec.problem(("workload", "dataset", kind, "output_tokens"), zero))
    sampling = d["workload"].get("sampling", {})
    if "max_tokens" in sampling and parse_tokens(sampling["max_tokens"]) < 1:
        out.append(spec.problem(("workload", "sampling", "max_tokens"), zero))
    for i, check in enumerate((d.get("smoke") or {}).get("checks", [])):
        if "max_tokens" in check and parse_tokens(check["max_tokens"]) < 1:
            out.append(spec.problem(("smoke", "checks", i, "max_tokens"), zero))
    return out


# output.path's placeholders: a fixed set, filled by results/document.output_path through
# fill_output_path, never by str.format (whose fields reach attributes: {name.__class__})
OUTPUT_PLACEHOLDERS = ("name", "timestamp", "plan_hash")
# a model name goes into a server's command line and every request: past this it is no name
# (a path is at most PATH_MAX, 4096; the kernel refuses one argument past 128 KiB)
MAX_MODEL_NAME = 4096


def _output_fields(template: str) -> list[tuple[str, str | None]]:
    """(literal text, placeholder or None) pieces of output.path; ValueError when a brace
    is unbalanced or a placeholder is not one of OUTPUT_PLACEHOLDERS, as written."""
    import string

    pieces: list[tuple[str, str | None]] = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        if field is not None and (field not in OUTPUT_PLACEHOLDERS or spec or conversion):
            whole = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            whole += "}"
            known = ", ".join("{" + p + "}" for p in OUTPUT_PLACEHOLDERS)
            raise ValueError(f"{whole} is not a placeholder of output.path (they are {known}; "
                             "{{ and }} write braces)")
        pieces.append((literal, field))
    return pieces


def output_path_problem(template: str) -> str | None:
    try:
        _output_fields(template)
    except ValueError as e:
        return str(e)
    return None


def fill_output_path(template: str, values: dict[str, str]) -> str:
    """output.path with its placeholders filled from `values` (keys: OUTPUT_PLACEHOLDERS)."""
    return "".join(literal + (values[field] if field else "") for literal, field in _output_fields(template))


def _name_problems(spec: Any, d: dict) -> list[SpecProblem]:
    out = []
    path = (d.get("output") or {}).get("path")
    if isinstance(path, str) and (why := output_path_problem(path)):
        out.append(spec.problem(("output", "path"), why))
    model = d["target"].get("model")
    if isinstance(model, str) and len(model) > MAX_MODEL_NAME:
        out.append(spec.problem(("target", "model"), f"a model name of {len(model):,} characters is longer "
                                f"than the {MAX_MODEL_NAME:,} a name or path may have (README: Limits)"))
    return out


def _interval_problems(spec: Any, d: dict) -> list[SpecProblem]:
    interval = (d.get("server") or {}).get("metrics_interval")
    if interval is not None and parse_duration(interval) < MIN_METRICS_INTERVAL_S:
        return [spec.problem(("server", "metrics_interval"), f"{interval!r} is shorter than the "
                             f"{MIN_METRICS_INTERVAL_S * 1000:.0f}ms a /metrics sample may be apart")]
    return []


def combination_problems(spec: Any, d: dict) -> list[SpecProblem]:
    """Value problems of one expanded, schema-valid combination."""
    return (_credentials_problems(spec, d["target"]) + _output_length_problems(spec, d)
            + _name_problems(spec, d) + _interval_problems(spec, d) + _sim_problems(spec, d))


# The simulator parameters the spec schema leaves out of target.sim (a twin file or `sim
# --param` may still set them): their ranges, in the schema's terms, so that every way a
# parameter reaches the simulator is judged by one table (the schema's target.sim and this).
_SIM_ONLY: dict[str, dict] = {
    "model": {"type": "string", "minLength": 1},
    "prefix_cache": {"type": "boolean"},
    "block_size": {"type": "integer", "minimum": 1},
    "prefix_cache_tokens": {"type": ["integer", "null"], "minimum": 1},
    "usage_cached_tokens": {"type": "boolean"},
    "reset_endpoints": {"type": "boolean"},
    "timings": {"type": "boolean"},
    "trace_text": {"type": "boolean"},
    "gpus": {"type": "integer", "minimum": 1},
    "machine_gpus": {"type": "integer", "minimum": 0},
    "gpu_idle_w": {"type": "number", "minimum": 0},
    "gpu_busy_w": {"type": "number", "minimum": 0},
    "gpu_w_per_seq": {"type": "number", "minimum": 0},
    "gpu_max_w": {"type": "number", "minimum": 0},
}
# null where SimConfig's default is None (a twin file writes the default it kept)
_NULLABLE = ("step_table", "ttft_ms", "kv_tokens", "tokenizer")
# where the simulator may listen unless `benchc sim --host` says otherwise: a twin file, a
# spec's target.sim or --param never open it beyond this machine
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def _sim_schema() -> dict:
    sim = load_schema("spec-v1")["properties"]["target"]["properties"]["sim"]
    props = {k: v for k, v in sim["properties"].items() if k != "preset"}
    return {"type": "object", "properties": {**props, **_SIM_ONLY}}


def sim_param_names() -> list[str]:
    """Every simulator parameter the ranges describe (sim/model.py's PARAMS: a test keeps
    the two the same)."""
    return list(_sim_schema()["properties"])


def _increasing(pairs: Any) -> bool:
    firsts = [p[0] for p in pairs]
    return all(a < b for a, b in zip(firsts, firsts[1:], strict=False))


def sim_order_problems(params: dict) -> list[tuple[tuple, str]]:
    """(path within the parameters, message) for what a schema cannot say of schema-valid
    parameters: a table's first column strictly increasing (the engine interpolates between
    neighbours; a repeated batch divides by zero, an unsorted one gives nonsense), and a
    listening address on this machine."""
    out: list[tuple[tuple, str]] = []
    for key, what in (("step_table", "batch sizes"), ("frontend_growth", "held counts")):
        table = params.get(key)
        if isinstance(table, list) and not _increasing(table):
            got = ", ".join(str(p[0]) for p in table[:8]) + (", ..." if len(table) > 8 else "")
            out.append(((key,), f"the {what} must increase from pair to pair, each once (got {got})"))
    host = params.get("host")
    if isinstance(host, str) and host not in LOOPBACK_HOSTS:
        out.append((("host",), f"{host!r} is not this machine ({', '.join(LOOPBACK_HOSTS)}): the simulator "
                    "would listen beyond it; `benchc sim --host` is the way to open it wider"))
    return out


def sim_param_problems(params: dict, names: list[str] | None = None) -> list[str]:
    """Simulator parameters (`benchc sim --param`, a twin file's `sim`) checked against the
    spec schema's target.sim and the ranges of the parameters it leaves out: the one
    statement of their ranges. `names`: the parameters the simulator has (default: those the
    ranges describe); an unknown one is named, with the closest known."""
    schema = _sim_schema()
    names = names if names is not None else list(schema["properties"])
    out = [f"{_json_path(p)[2:]}: NaN and infinity are not allowed" for p in nonfinite_paths(params)]
    for name in params:
        if name not in names and name not in schema["properties"]:
            close = difflib.get_close_matches(name, names, n=1)
            out.append(f"unknown parameter {name!r}" + (f"; did you mean {close[0]!r}?" if close else
                                                         f"; known: {', '.join(names)}"))
    described = {k: v for k, v in params.items() if k in schema["properties"]
                 and not (v is None and k in _NULLABLE)}
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(described))
    for err in errors:
        where = _json_path(tuple(err.absolute_path))[2:] or "parameters"
        out.append(f"{where}: {err.message}")
    if not errors:
        out += [f"{_json_path(p)[2:]}: {m}" for p, m in sim_order_problems(described)]
    return out


def _sim_problems(spec: Any, d: dict) -> list[SpecProblem]:
    sim = d["target"].get("sim")
    if not isinstance(sim, dict):
        return []
    return [spec.problem(("target", "sim") + p, m) for p, m in sim_order_problems(sim)]
