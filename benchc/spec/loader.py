"""Load and validate a spec: YAML with source positions, ${env:VAR}, --set overrides.

Every problem found is collected and reported together, each located as
`file:line:col: $.json.path: message` (see errors.SpecProblem).
Nothing in here runs anything the spec names: no command, no network.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import yaml

from benchc import __version__
from benchc.errors import SpecError, SpecProblem, UsageError
from benchc.inputs import SPEC_BYTES, input_problem
from benchc.spec import limits, matrix, values, yaml_bounds
from benchc.spec.schemas import load_schema
from benchc.spec.thresholds import parse_slo
from benchc.units import parse_duration, parse_rate, parse_tokens

Path = tuple  # a JSON path as a tuple of keys and indices
_ENV = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_ENV_ANY = re.compile(r"\$\{env:([^}]*)\}?")  # every ${env: ...} written, well-formed or not


@dataclass
class Spec:
    """A loaded, validated spec: its data and where each value came from."""

    file: str
    data: dict
    sha256: str  # of the file's bytes, before interpolation and overrides
    positions: dict[Path, tuple[str, int, int]] = field(default_factory=dict)
    key_positions: dict[Path, tuple[str, int, int]] = field(default_factory=dict)

    def locate(self, path: Path, key: bool = False) -> tuple[str, int, int]:
        """(file, line, col) of the value (or key) at `path`, or its nearest ancestor."""
        if key and path in self.key_positions:
            return self.key_positions[path]
        p = tuple(path)
        while p:
            if p in self.positions:
                return self.positions[p]
            p = p[:-1]
        return self.positions.get((), (self.file, 1, 1))

    def problem(self, path: Path, message: str, key: bool = False) -> SpecProblem:
        file, line, col = self.locate(path, key)
        return SpecProblem(file, line, col, json_path(path), message)


def json_path(path: Path) -> str:
    out = "$"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


# --------------------------------------------------------------------------- loading


def load(
    file: str,
    overrides: list[str] | tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> Spec:
    """Read, interpolate, override and validate the spec in `file`.

    Raises SpecError with every problem found; UsageError if the file is unreadable.
    """
    if why := input_problem(file, None, "spec"):  # its size is a spec error, below
        raise UsageError(why)
    try:
        with open(file, "rb") as f:
            raw = f.read(SPEC_BYTES + 1)  # no more than the bound, whatever the file holds
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise UsageError(f"cannot read spec {file}: {e.strerror}") from e
    try:
        yaml_bounds.check_size(raw, size)
        text = yaml_bounds.decode(raw)
    except yaml_bounds.YamlLimitError as e:
        raise SpecError([SpecProblem(file, e.line, e.col, "$", e.message)]) from e
    return load_text(text, file, overrides, env, sha256=hashlib.sha256(raw).hexdigest())


def load_text(
    text: str,
    file: str = "<spec>",
    overrides: list[str] | tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    sha256: str | None = None,
) -> Spec:
    env = os.environ if env is None else env
    spec = Spec(file, {}, sha256 or hashlib.sha256(text.encode()).hexdigest())
    problems: list[SpecProblem] = []
    try:
        loader, node = yaml_bounds.compose(text)
        if node is None:
            raise SpecError([SpecProblem(file, 1, 1, "$", "the spec is empty")])
        # building resolves `<<:` merges, which can still find a YAML error (a merge of a scalar)
        data = _Builder(loader, spec, env, problems).build(node, ())
    except yaml_bounds.YamlLimitError as e:
        raise SpecError([SpecProblem(file, e.line, e.col, "$", e.message)]) from e
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        what = e.problem or e.context or "invalid YAML"
        if e.context and e.context_mark and e.problem:
            cm = e.context_mark
            what += f" ({e.context} that starts at line {cm.line + 1}, column {cm.column + 1})"
        raise SpecError([SpecProblem(file, line, col, "$", f"YAML syntax error: {what}")]) from e
    if not isinstance(data, dict):
        raise SpecError([spec.problem((), "a spec is a mapping of keys (version, name, target, ...)")])
    for item in overrides:
        _apply_override(spec, data, item)
    spec.data = data
    problems += validate(spec)
    if problems:
        raise SpecError(_sorted_unique(problems))
    return spec


class _Builder:
    """Builds plain Python data from a composed YAML node tree, keeping positions."""

    def __init__(self, loader: yaml.SafeLoader, spec: Spec, env: Mapping[str, str], problems: list):
        self.loader, self.spec, self.env, self.problems = loader, spec, env, problems

    def mark(self, node: yaml.Node) -> tuple[str, int, int]:
        return (self.spec.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def build(self, node: yaml.Node, path: Path) -> Any:
        self.spec.positions[path] = self.mark(node)
        if isinstance(node, yaml.MappingNode):
            self.loader.flatten_mapping(node)  # resolves `<<: *anchor` merges
            out: dict[str, Any] = {}
            first_seen: dict[str, int] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    self.problems.append(SpecProblem(*self.mark(knode), json_path(path),
                                                     "a key must be a plain name, not a list or mapping"))
                    continue
                key = self.scalar(knode, path)
                key = key if isinstance(key, str) else _scalar_text(key)
                if key in out:
                    self.problems.append(SpecProblem(
                        *self.mark(knode), json_path(path + (key,)),
                        f"duplicate key '{key}' (first given on line {first_seen[key]})"))
                    continue
                first_seen[key] = knode.start_mark.line + 1
                self.spec.key_positions[path + (key,)] = self.mark(knode)
                out[key] = self.build(vnode, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(child, path + (i,)) for i, child in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)  # the third and last kind of node
        value = self.scalar(node, path)
        if isinstance(value, str) and "${env:" in value:
            value = self.interpolate(value, node, path)
        return value

    def scalar(self, node: yaml.ScalarNode, path: Path) -> Any:
        """A scalar's value; one a tag cannot make (`!!int x`) or that JSON cannot hold
        (`!!binary`) is a problem at its position, and its text stands in for it."""
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, LookupError, AttributeError) as e:
            what = getattr(e, "problem", None) or str(e)
            self.problems.append(SpecProblem(*self.mark(node), json_path(path),
                                             f"cannot read {node.value[:40]!r} as {_tag(node.tag)}: {what}"))
            return node.value
        if isinstance(value, (datetime.date, datetime.datetime)):
            return node.value  # keep dates as written; the schema wants strings
        if isinstance(value, bytes):
            self.problems.append(SpecProblem(*self.mark(node), json_path(path),
                                             "binary values (!!binary) are not allowed in a spec"))
            return node.value
        return value

    def interpolate(self, value: str, node: yaml.ScalarNode, path: Path) -> Any:
        missing = []
        for m in _ENV_ANY.finditer(value):
            if not _ENV.match(value, m.start()):
                self.problems.append(SpecProblem(
                    *self.mark(node), json_path(path),
                    f"{m.group(0)!r} is not an environment reference: write ${{env:NAME}} or "
                    "${env:NAME:-default}, NAME of letters, digits and '_'"))
                missing.append(m.group(0))

        def replace(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            if name in self.env:
                return self.env[name]
            if default is not None:
                return default
            missing.append(name)
            self.problems.append(SpecProblem(
                *self.mark(node), json_path(path),
                f"environment variable {name} is not set "
                f"(set it, or write ${{env:{name}:-default}} to give a default)"))
            return ""

        out = _ENV.sub(replace, value)
        # An unquoted `${env:N}` alone takes the YAML type of its value (4 -> int),
        # as if the value had been written in its place.
        if node.style is None and not missing and out and _ENV.fullmatch(value):
            try:
                typed = yaml_bounds.load_value(out)
            except (yaml.YAMLError, yaml_bounds.YamlLimitError):
                return out
            if isinstance(typed, (int, float, bool)) or typed is None:
                return typed
        return out


def _tag(tag: str) -> str:
    return tag.replace("tag:yaml.org,2002:", "!!")


def _scalar_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_OVERRIDE_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _parse_override_path(text: str) -> Path:
    parts: list = []
    for seg in text.split("."):
        if not seg:
            raise UsageError(f"--set {text}: empty path segment")
        pos = 0
        for m in _OVERRIDE_PART.finditer(seg):
            if m.start() != pos:
                raise UsageError(f"--set {text}: cannot read path segment {seg!r}")
            pos = m.end()
            if m.group(1) is not None:
                parts.append(m.group(1))
            else:
                parts.append(int(m.group(2)))
        if pos != len(seg):
            raise UsageError(f"--set {text}: cannot read path segment {seg!r}")
    return tuple(parts)


def _apply_override(spec: Spec, data: dict, item: str) -> None:
    """Apply `--set dotted.path=YAML_VALUE` (list items as `a.b[2]`) to `data`."""
    if "=" not in item:
        raise UsageError(f"--set {item!r}: expected dotted.path=VALUE, e.g. load.requests=100")
    key_text, value_text = item.split("=", 1)
    path = _parse_override_path(key_text.strip())
    try:
        value = yaml_bounds.load_value(value_text) if value_text.strip() else ""
    except yaml_bounds.YamlLimitError as e:
        raise UsageError(f"--set {key_text}: the value is refused ({e.message})") from e
    except yaml.YAMLError as e:
        raise UsageError(f"--set {item!r}: the value is not valid YAML ({e})") from e
    node: Any = data
    for i, part in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, dict):
            if not isinstance(node.get(part), (dict, list)):
                node[part] = [] if isinstance(nxt, int) else {}
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            raise UsageError(f"--set {key_text}: {json_path(path[:i + 1])} does not exist")
    last = path[-1]
    removal = value is None and path[:2] != ("target", "sim")
    if removal and isinstance(node, dict) and not isinstance(last, int):
        # `--set workload.dataset.random.seed=null`: as if the spec had not given the key (its
        # default, a seed drawn per run); a simulator parameter takes null as a value
        if last not in node:
            raise UsageError(f"--set {key_text}=null removes a key, and the spec has no {json_path(path)}"
                             + (_vllm_hint(path) or ""))
        del node[last]
    elif isinstance(node, dict) and not isinstance(last, int):
        node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and last <= len(node):
        if last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        raise UsageError(f"--set {key_text}: {json_path(path)} cannot be set")
    # The overridden subtree no longer comes from the file.
    for table in (spec.positions, spec.key_positions):
        for p in [p for p in table if p[: len(path)] == path]:
            del table[p]
    spec.positions[path] = (f"--set {key_text}", 0, 0)
    spec.key_positions[path] = (f"--set {key_text}", 0, 0)


# --------------------------------------------------------------------------- validation


def validate(spec: Spec) -> list[SpecProblem]:
    """Every schema and semantic problem of `spec.data`, once each."""
    data = spec.data
    # Values holding ${matrix.X} are checked once substituted, per combination.
    problems = values.nonfinite_problems(spec, data)
    problems += [pr for pr, path, inst in _schema_problems_with_instances(spec, data)
                 if not (path and path[0] in matrix.SUBSTITUTED_SECTIONS
                         and matrix.find_placeholders(inst))]
    if problems:
        # Expansion and semantic rules assume the shape the schema promises.
        return problems
    problems = limits.count_problems(spec, data)
    if problems:
        # refused before a combination is enumerated or a prompt built
        return problems
    for path, name in matrix.find_placeholders(data):
        axes = matrix.axes_of(data.get("matrix"))
        if path[0] not in matrix.SUBSTITUTED_SECTIONS:
            problems.append(spec.problem(path, f"${{matrix.{name}}} is only substituted in "
                                         "target, server and workload"))
        elif name not in axes:
            problems.append(spec.problem(path, _unknown_axis_message(name, axes)))
    problems += _matrix_problems(spec, data.get("matrix"))
    if problems:
        return problems
    # Each combination is validated as the data it expands to; a problem
    # that only some combinations have says which.
    combos = matrix.combinations(data.get("matrix"))
    found: dict[tuple, list[str]] = {}
    for combo in combos:
        expanded = matrix.expand(data, combo)
        label = ",".join(f"{k}={matrix.format_value(v)}" for k, v in combo.items())
        # the semantic rules assume schema-valid data, which a substituted value may break
        found_here = _schema_problems(spec, expanded) or (
            _semantic_problems(spec, expanded) + values.combination_problems(spec, expanded)
            + limits.combination_problems(spec, expanded))
        for pr in found_here:
            found.setdefault((pr.file, pr.line, pr.col, pr.path, pr.message), []).append(label)
    for (file, line, col, path, message), labels in found.items():
        if len(labels) < len(combos):
            message += f" (with matrix {'; '.join(labels)})"
        problems.append(SpecProblem(file, line, col, path, message))
    return problems


def _unknown_axis_message(name: str, axes: dict) -> str:
    if not axes:
        return f"${{matrix.{name}}} names an axis, but the spec has no matrix"
    return f"${{matrix.{name}}}: no axis named {name!r}" + _suggest(name, axes)


def _matrix_problems(spec: Spec, m: dict | None) -> list[SpecProblem]:
    if not m:
        return []
    axes = matrix.axes_of(m)
    problems = []
    if not axes:
        problems.append(spec.problem(("matrix",), "a matrix needs at least one axis, e.g. tp: [4, 8]"))
    for i, ex in enumerate(m.get("exclude", [])):
        for k, v in ex.items():
            if k not in axes:
                problems.append(spec.problem(("matrix", "exclude", i, k),
                                             f"no axis named {k!r}" + _suggest(k, axes), key=True))
            elif v not in axes[k]:
                problems.append(spec.problem(("matrix", "exclude", i, k),
                                             f"{v!r} is not a value of axis {k} ({axes[k]})"))
    if axes and not matrix.combinations(m):
        problems.append(spec.problem(("matrix", "exclude"), "exclude removes every combination"))
    return problems


# vLLM bench serve's names where a spec written from habit puts them: the benchc key each means
_VLLM_NAMES: dict[tuple[str, ...], str] = {
    ("load", "num_prompts"): "load.requests (requests per point)",
    ("load", "request_rate"): "load.sweep.rate (a list of rates, requests/s)",
    ("load", "max_concurrency"): "load.sweep.concurrency (a closed loop) or load.sweep.max_concurrency "
                                 "(the cap of an open loop)",
    ("workload", "num_prompts"): "load.requests (requests per point)",
    ("workload", "seed"): "workload.dataset.<kind>.seed",
}


def _vllm_hint(path: Path) -> str:
    """` — vLLM's name; benchc's is load.requests` for a key vLLM bench users write."""
    name = _VLLM_NAMES.get(tuple(str(p) for p in path))
    return f" — vLLM's name; benchc's is {name}" if name else ""


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" — did you mean '{close[0]}'?" if close else ""


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, (dict, list, bool)) or value is None:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):  # what YAML made but JSON has not: a !!binary key (bytes)
            return repr(value)
    return str(value)


_TYPE_NAMES = {"integer": "an integer", "number": "a number", "string": "a string",
               "boolean": "true or false", "array": "a list", "object": "a mapping", "null": "null"}


def _schema_problems(spec: Spec, data: dict) -> list[SpecProblem]:
    return [pr for pr, _, _ in _schema_problems_with_instances(spec, data)]


def _schema_problems_with_instances(spec: Spec, data: dict) -> list[tuple[SpecProblem, Path, Any]]:
    """(problem, JSON path, offending instance) for every schema error."""
    validator = jsonschema.Draft202012Validator(load_schema("spec-v1"))
    out = []
    for err in validator.iter_errors(data):
        for p, msg, key in _explain(err, tuple(err.absolute_path)):
            out.append((spec.problem(p, msg, key=key), p, err.instance))
    return out


def _explain(err: jsonschema.ValidationError, path: Path) -> list[tuple[Path, str, bool]]:
    """Turn one jsonschema error into (path, human message, points-at-key) items."""
    # jsonschema types these as maybe-unset; an error from iter_errors has them all set
    v: Any = err.validator
    schema: Any = err.schema
    inst: Any = err.instance
    value: Any = err.validator_value
    if "x-message" in schema and v not in ("additionalProperties", "required"):
        return [(path, f"{_show(inst)} {schema['x-message']}", False)]
    if v == "additionalProperties" and isinstance(schema.get("properties"), dict):
        allowed = list(schema["properties"])
        extra = [k for k in inst if k not in allowed]
        out = []
        for k in extra:
            hint = (_vllm_hint(path + (k,)) or _suggest(k, allowed)
                    or f"; allowed here: {', '.join(allowed)}")
            out.append((path + (k,), f"unknown key '{k}'{hint}", True))
        return out
    if v == "required":
        missing = re.match(r"'(.+)' is a required property", err.message)
        return [(path, f"missing required key '{missing.group(1) if missing else err.message}'", False)]
    if "propertyNames" in err.relative_schema_path or "propertyNames" in err.schema_path:
        allowed = value if v == "enum" else []
        hint = _suggest(inst, allowed) or (f"; allowed here: {', '.join(allowed)}" if allowed else "")
        if v == "pattern":
            return [(path + (inst,), f"'{inst}' is not a valid name (letters, digits and '_')", True)]
        return [(path + (inst,), f"unknown key '{inst}'{hint}", True)]
    if v == "enum":
        return [(path, f"{_show(inst)} is not one of {', '.join(map(_show, value))}"
                 + _suggest(inst, value), False)]
    if v == "type":
        want = value
        names = [_TYPE_NAMES.get(t) or t for t in (want if isinstance(want, list) else [want])]
        return [(path, f"expected {' or '.join(names)}, got {_show(inst)}", False)]
    if v in ("maxProperties", "minProperties") and path and path[-1] == "dataset":
        kinds = list(schema.get("properties", {}))
        return [(path, f"give exactly one dataset: {', '.join(kinds[:-1])} or {kinds[-1]}", False)]
    if v == "pattern":
        return [(path, f"{_show(inst)} does not match the pattern {value}", False)]
    return [(path, err.message, False)]


def _semantic_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    """Rules a JSON schema cannot say (or says badly); data is schema-valid here."""
    return [pr for rule in _SEMANTIC_RULES for pr in rule(spec, d)]


def _target_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    if ("base_url" in d["target"]) == ("sim" in d["target"]):
        return [spec.problem(("target",), "give exactly one of base_url (a running server) "
                                          "or sim (the embedded simulator)")]
    return []


def _server_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    server = d.get("server")
    if server is None:
        return []
    out, p = [], spec.problem
    has_cmd, attach = "command" in server, server.get("attach", False)
    if has_cmd and attach:
        out.append(p(("server", "attach"), "attach: true and command exclude each other"))
    # a section that only describes the server (metrics_interval, gpus) is about the server
    # the target names, as attach: true
    if not has_cmd and not attach and set(server) - {"metrics_interval", "gpus"}:
        out.append(p(("server",), "give server.command to launch a server, or attach: true"))
    if has_cmd and "sim" in d["target"]:
        out.append(p(("server", "command"), "target.sim starts its own server; "
                     "use target.base_url with server.command"))
    if not has_cmd:
        out += [p(("server", k), f"{k} only applies to a launched server (server.command)", key=True)
                for k in ("env", "cwd", "ready", "log", "stop_timeout") if k in server]
    return out


def _smoke_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    out = []
    for i, check in enumerate((d.get("smoke") or {}).get("checks", [])):
        if ("prompt" in check) == ("messages" in check):
            out.append(spec.problem(("smoke", "checks", i), "give exactly one of prompt or messages"))
        if "expect" in check:
            try:
                re.compile(check["expect"])
            except re.error as e:
                out.append(spec.problem(("smoke", "checks", i, "expect"),
                                        f"not a valid regular expression: {e}"))
    return out


def _workload_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    out = []
    for name, cfg in d["workload"]["dataset"].items():
        if name == "trace":
            out += _trace_problems(spec, cfg)
        for k in ("input_tokens", "output_tokens", "suffix_tokens"):
            length = cfg.get(k)
            if isinstance(length, dict) and "min" in length:
                if parse_tokens(length["min"]) > parse_tokens(length["max"]):
                    out.append(spec.problem(("workload", "dataset", name, k), "min is greater than max"))
    out += _agentic_problems(spec, d)
    out += _pool_problems(spec, d)
    sampling = d["workload"].get("sampling", {})
    if "min_tokens" in sampling and "max_tokens" in sampling:
        if parse_tokens(sampling["min_tokens"]) > parse_tokens(sampling["max_tokens"]):
            out.append(spec.problem(("workload", "sampling", "min_tokens"),
                                    "min_tokens is greater than max_tokens"))
    return out


# Datasets that generate their prompts: num_prompts there sizes the set `prompts: shared` deals
# again and again, and means nothing to fresh prompts (vLLM's --num-prompts is load.requests)
_GENERATED = ("random", "prefix_groups")


def _pool_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    w = d["workload"]
    if w.get("prompts", "fresh") == "shared":
        return []
    return [spec.problem(("workload", "dataset", name, "num_prompts"),
                         "num_prompts sizes the set of prompts that `workload.prompts: shared` sends again "
                         "and again; with fresh prompts (the default) every request has its own, and it "
                         "would be ignored. The number of requests per point is load.requests (vLLM's "
                         "--num-prompts; `benchc run --num-prompts N`)", key=True)
            for name, cfg in w["dataset"].items() if name in _GENERATED and "num_prompts" in cfg
            # one problem per value: one past benchc's ceiling is told by the ceiling (spec/limits.py)
            and cfg["num_prompts"] <= limits.MAX_REQUESTS]


# What one request may carry: tool definitions past a million tokens, or images past 2^26
# pixels (about 200 MB of raw RGB to encode), are beyond any served model's context
_MAX_TOOL_TOKENS = 1 << 20
_MAX_IMAGE_PIXELS = limits.MAX_IMAGE_PIXELS


def _agentic_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    """workload.tools, images and agent: one source of tools, and what each needs."""
    out, p, w = [], spec.problem, d["workload"]
    api = d["target"].get("api", "chat")
    tools = w.get("tools")
    if tools is not None and sum(k in tools for k in ("definitions", "file", "synthetic")) != 1:
        out.append(p(("workload", "tools"), "give exactly one of definitions (a list), file (a JSON file "
                                            "of them) or synthetic ({count, tokens})"))
    for key in ("tools", "images"):
        if key in w and api == "completions":
            out.append(p(("workload", key), f"{key} go in chat-style requests: the completions API sends "
                                            "a bare prompt (use target.api: chat)", key=True))
    if "agent" in w:
        if not _multi_turn(d):
            out.append(p(("workload", "agent"), "agent loops run in sessions: they need a sessions workload "
                                                "(workload.dataset.sessions, or sharegpt or trace with "
                                                "sessions: true)", key=True))
        if tools is None:
            out.append(p(("workload", "agent"), "an agent loop answers tool calls: give workload.tools too",
                         key=True))
    if w.get("history", "full") != "full":  # previous_response_id: the Responses API keeps it
        if api != "responses":
            out.append(p(("workload", "history"), "previous_response_id is the Responses API's: it "
                                                  "needs target.api: responses"))
        if not _multi_turn(d):
            out.append(p(("workload", "history"), "a history is a session's: previous_response_id needs a "
                                                  "sessions workload (workload.dataset.sessions, or "
                                                  "sharegpt or trace with sessions: true)"))
    syn = (tools or {}).get("synthetic")
    if syn and syn["count"] * syn["tokens"] > _MAX_TOOL_TOKENS:
        out.append(p(("workload", "tools", "synthetic"), f"{syn['count']} x {syn['tokens']} tokens of tool "
                                                         f"definitions is more than {_MAX_TOOL_TOKENS:,} in "
                                                         "every request (benchc's ceiling)"))
    img = w.get("images")
    if img and img["count"] * img["width"] * img["height"] > _MAX_IMAGE_PIXELS:
        out.append(p(("workload", "images"), f"{img['count']} images of {img['width']} x {img['height']} is "
                                             f"more than {_MAX_IMAGE_PIXELS:,} pixels in every request "
                                             "(benchc's ceiling)"))
    return out


def _trace_problems(spec: Spec, cfg: dict) -> list[SpecProblem]:
    """Keys of workload.dataset.trace that only one format has."""
    at = ("workload", "dataset", "trace")
    only = {"block_size": "mooncake", "filter": "burstgpt"}
    return [spec.problem(at + (k,), f"{k} applies to format: {fmt}", key=True)
            for k, fmt in only.items() if k in cfg and cfg["format"] != fmt]


def _load_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    out, p = [], spec.problem
    load = d["load"]
    schema = load_schema("spec-v1")["properties"]["load"]
    out += _one_of(spec, ("load",), load, schema["x-one-of"])
    if "graceful_stop" in load and "duration" not in load:
        out.append(p(("load", "graceful_stop"), "graceful_stop applies past load.duration: give a duration "
                     "(a point bound by requests alone ends when they do)", key=True))
    sweep = load.get("sweep", {})
    trace = "trace" in d["workload"]["dataset"]
    if "sweep" in load:
        out += _one_of(spec, ("load", "sweep"), sweep, schema["properties"]["sweep"]["x-one-of"], named=False)
    out += _session_load_problems(spec, d)
    if trace and "search" in load:
        out.append(p(("load", "search"), "a capacity search over a trace replay is not built yet: sweep "
                                         "the trace's speedup, or search with a random dataset", key=True))
    if "concurrency" in sweep:
        out += [p(("load", "sweep", k), f"{k} applies to a rate sweep, not to concurrency", key=True)
                for k in ("arrival", "burstiness", "max_concurrency") if k in sweep]
    if "burstiness" in sweep and sweep.get("arrival", "poisson") != "gamma":
        out.append(p(("load", "sweep", "burstiness"), "burstiness applies to arrival: gamma", key=True))
    agent = "agent_trace" in d["workload"]["dataset"]
    if agent:
        return out + _agent_load_problems(spec, d)
    if "speedup" in sweep and not trace:
        out.append(p(("load", "sweep", "speedup"), "speedup replays a trace: it needs workload.dataset.trace",
                     key=True))
    if trace:
        out += [p(("load", "sweep", k), f"a trace gives the arrival times; {k} does not apply", key=True)
                for k in ("arrival", "burstiness") if k in sweep]
        out += [p(("load", k), f"every point of a trace sends its slice once; choose the requests with "
                               f"workload.dataset.trace.slice, not load.{k}", key=True)
                for k in ("requests", "duration", "sessions") if k in load]
    elif not any(k in load for k in schema["x-stops"]):
        out.append(p(("load",), "say when each point stops: give requests, duration, or both"
                                + (" (or sessions)" if _multi_turn(d) else "")))
    return out + _search_problems(spec, d) + _saturation_problems(spec, d) + _stages_problems(spec, d)


def _stages_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    """load.stages: one kind of load through the profile, each stage a rate or a concurrency,
    its ramp within its own duration (a longer one would overlap the stage before), a profile
    of some length; the stages say when each point stops."""
    load = d["load"]
    stages = load.get("stages")
    if not stages:
        return []
    out, p = [], spec.problem
    out += [p(("load", k), f"each stage says its own {k.replace('_', '-')}: {k} does not apply to stages",
              key=True) for k in ("duration", "requests", "ramp_up") if k in load]
    if {"trace", "agent_trace"} & set(d["workload"]["dataset"]):
        out.append(p(("load", "stages"), "stages over a trace dataset is not built yet: sweep the trace's "
                                         "speedup (an agent trace's concurrency, rate or speedup)", key=True))
    kinds = [k for k in ("concurrency", "rate") if k in stages[0]]
    total = 0.0
    for i, st in enumerate(stages):
        at = ("load", "stages", i)
        given = [k for k in ("concurrency", "rate") if k in st]
        if len(given) != 1:
            out.append(p(at, "give a stage exactly one of concurrency (closed loop) or rate (open loop)"))
        elif given != kinds:
            out.append(p(at + (given[0],), f"a profile is of one kind: stage 1 gives {kinds[0]}, this one "
                                           f"{given[0]}", key=True))
        if "concurrency" in st:
            out += [p(at + (k,), f"{k} applies to a rate stage, not to concurrency", key=True)
                    for k in ("arrival", "max_concurrency") if k in st]
        duration = parse_duration(st["duration"])
        if duration <= 0:  # its point's stop is its duration: a stage of none would never stop
            out.append(p(at + ("duration",), f"{_show(st['duration'])}: a stage of zero length: give it a "
                                             "duration above 0"))
        ramp = parse_duration(st.get("ramp", 0))
        if ramp > duration:
            out.append(p(at + ("ramp",), f"{_show(st['ramp'])}: a ramp longer than its stage's duration "
                                         f"({_show(st['duration'])}) would overlap the stage before (a ramp "
                                         "is within its stage)"))
        total += duration
    if total <= 0:
        out.append(p(("load", "stages"), "a profile of zero length: give its stages a duration above 0"))
    return out


def _one_of(spec: Spec, at: tuple, obj: dict, table: dict[str, str], named: bool = True) -> list[SpecProblem]:
    """The schema's `x-one-of` table (a key: what it is) of the object at `at`: exactly one of
    its keys. Several given: the message names those (`named`), else every one; so a new load
    shape adds its key to the schema's table, not a branch here."""
    given = [k for k in table if k in obj]
    if len(given) == 1:
        return []
    keys = given if named and given else list(table)
    says = [f"{k} ({table[k]})" for k in keys]
    return [spec.problem(at, f"give exactly one of {', '.join(says[:-1])} or {says[-1]}")]


def _agent_load_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    """A coding-agent replay (workload.dataset.agent_trace): every point replays the trace's
    sessions once (load.sessions: its first ones), started at a concurrency, a rate or the
    traces' own times."""
    p, load = spec.problem, d["load"]
    sweep = load.get("sweep", {})
    out = [p(("load", k), f"every point replays the trace's sessions once; choose how many with "
                          f"load.sessions, not load.{k}", key=True)
           for k in ("requests", "duration") if k in load]
    if "search" in load:
        out.append(p(("load", "search"), "a capacity search over a coding-agent replay is not built yet: "
                                         "sweep concurrency, rate or speedup", key=True))
    out += [p(("load", "sweep", k), f"a coding-agent replay starts sessions at a concurrency, a Poisson rate "
                                    f"or the traces' own times (speedup); {k} does not apply", key=True)
            for k in ("users", "turn_interval", "arrival", "burstiness", "max_concurrency") if k in sweep]
    if "cancel" in load:
        out.append(p(("load", "cancel"), "load.cancel with a coding-agent replay is not built yet", key=True))
    if "warmup" in load:
        out.append(p(("load", "warmup"), "no warm-up runs before a coding-agent replay: it would put the "
                                         "sessions' blocks in the server's cache before they are measured",
                     key=True))
    return out


def _multi_turn(d: dict) -> bool:
    """The workload is sessions (multi-turn conversations)."""
    (name, cfg), = d["workload"]["dataset"].items()
    return name == "sessions" or (name in ("sharegpt", "trace") and bool(cfg.get("sessions")))


def _session_load_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    """Load keys that only sessions have: the session count, the user-centric pace."""
    out, p = [], spec.problem
    load = d["load"]
    sweep = load.get("sweep", {})
    multi = _multi_turn(d) or "agent_trace" in d["workload"]["dataset"]  # its load.sessions: how many
    if not multi:
        out += [p(at, "sessions count the sessions of a sessions workload (workload.dataset.sessions, or "
                      "sharegpt or trace with sessions: true)", key=True)
                for at, has in ((("load", "sessions"), "sessions" in load),
                                (("load", "warmup", "sessions"), "sessions" in (load.get("warmup") or {})))
                if has]
        if "users" in sweep:
            out.append(p(("load", "sweep", "users"), "users send sessions at a per-user pace: they need a "
                                                     "sessions workload", key=True))
    if "users" in sweep and "turn_interval" not in sweep:
        out.append(p(("load", "sweep"), "users needs turn_interval: each user's pace between its turns"))
    if "turn_interval" in sweep and "users" not in sweep:
        out.append(p(("load", "sweep", "turn_interval"), "turn_interval is the pace of users", key=True))
    if "users" in sweep:
        out += [p(("load", "sweep", k), f"{k} applies to a rate sweep, not to users", key=True)
                for k in ("arrival", "burstiness", "max_concurrency") if k in sweep]
    return out


def _search_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    """load.search: loads of the kind it searches over, a range, a tolerance, an SLO to decide."""
    load = d["load"]
    search = load.get("search")
    if search is None:
        return []
    out, p, over = [], spec.problem, search["over"]
    at = ("load", "search")
    bounds = {}
    for k in ("min", "max"):
        v = search[k]
        if over == "concurrency" and not isinstance(v, int):
            out.append(p(at + (k,), f"{_show(v)}: a concurrency search takes an integer {k}"))
            continue
        try:
            bounds[k] = v if over == "concurrency" else parse_rate(v)
        except ValueError as e:
            out.append(p(at + (k,), str(e)))
    if len(bounds) == 2 and bounds["min"] >= bounds["max"]:
        out.append(p(at + ("max",), "max must be greater than min"))
    tol = search.get("tolerance")
    if tol is not None and over == "concurrency" and not (isinstance(tol, int) and tol >= 1):
        out.append(p(at + ("tolerance",), f"{_show(tol)}: a concurrency search's tolerance is an integer "
                                          ">= 1 (1: the exact largest concurrency)"))
    if over == "concurrency":
        out += [p(at + (k,), f"{k} applies to a rate search, not to concurrency", key=True)
                for k in ("arrival", "burstiness", "max_concurrency") if k in search]
    if "burstiness" in search and search.get("arrival", "poisson") != "gamma":
        out.append(p(at + ("burstiness",), "burstiness applies to arrival: gamma", key=True))
    if not search.get("slo") and not d.get("slo"):
        out.append(p(at, "a search needs an SLO to hold: give load.search.slo or the spec's slo"))
    for metric, exprs in (search.get("slo") or {}).items():
        items = exprs if isinstance(exprs, list) else [exprs]
        for i, expr in enumerate(items):
            try:
                parse_slo(metric, expr)
            except ValueError as e:
                where = ("slo", metric, i) if isinstance(exprs, list) else ("slo", metric)
                out.append(p(at + where, str(e)))
    if load.get("repeats", 1) > 1:
        out.append(p(("load", "repeats"), "repeats with a search is not built yet: each probe runs "
                                          "once; repeat the run, or sweep around the answer with repeats"))
    return out


def _saturation_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    """load.saturation: a rule to apply, to a sweep whose loads rise."""
    load = d["load"]
    rule = load.get("saturation")
    if rule is None:
        return []
    out, p = [], spec.problem
    if "min_gain" not in rule and "max_error_rate" not in rule:
        out.append(p(("load", "saturation"), "give min_gain (stop when throughput stops rising), "
                                             "max_error_rate, or both"))
    if "latency" in rule and "min_gain" not in rule:
        out.append(p(("load", "saturation", "latency"), "latency applies with min_gain", key=True))
    sweep = load.get("sweep")
    if sweep is None:
        out.append(p(("load", "saturation"), "saturation stops a sweep; a search stops by itself", key=True))
        return out
    try:
        loads = sweep.get("concurrency") or [parse_rate(r) for r in sweep.get("rate", [])]
    except ValueError:
        return out  # the sweep's own rule says what is wrong with the rate
    if any(b <= a for a, b in zip(loads, loads[1:], strict=False)):
        out.append(p(("load", "sweep"), "saturation needs the sweep's loads in rising order: each point "
                                        "is compared with the one before"))
    return out


def _slo_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    out = []
    for metric, exprs in (d.get("slo") or {}).items():
        items = exprs if isinstance(exprs, list) else [exprs]
        for i, expr in enumerate(items):
            at = ("slo", metric, i) if isinstance(exprs, list) else ("slo", metric)
            try:
                parse_slo(metric, expr)
            except ValueError as e:
                out.append(spec.problem(at, str(e)))
    return out


def _version_problems(spec: Spec, d: dict) -> list[SpecProblem]:
    want = d.get("minimum_benchc_version")
    if want and _version_tuple(want) > _version_tuple(__version__):
        return [spec.problem(("minimum_benchc_version",), f"this spec needs benchc >= {want}; "
                             f"this is {__version__} (pip install -U benchc)")]
    return []


# one function per section of the spec, each returning its problems
_SEMANTIC_RULES = (_target_problems, _server_problems, _smoke_problems, _workload_problems, _load_problems,
                   _slo_problems, _version_problems)


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _sorted_unique(problems: list[SpecProblem]) -> list[SpecProblem]:
    seen, out = set(), []
    for pr in sorted(problems, key=lambda x: (x.file, x.line, x.col, x.path)):
        key = (pr.file, pr.line, pr.col, pr.path, pr.message)
        if key not in seen:
            seen.add(key)
            out.append(pr)
    return out
