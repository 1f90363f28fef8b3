"""Tools in the workload: the function definitions every request offers the model, and
`tool_choice`.

`workload.tools` gives the definitions in one of three ways, compiled here into the plan's
`Workload.tools` (the definitions themselves, so that a worker needs no file):
- definitions: a list in OpenAI's chat form, {type: function, function: {name,
  description, parameters}};
- file: a JSON file holding such a list (relative to the spec);
- synthetic: {count: N, tokens: T}: N definitions of about T tokens each (the JSON text of
  one definition, counted by target.tokenizer, else in words as the simulator counts),
  built from the dataset's seed: the same spec gives the same tools on any machine.
`choice`: auto (the server's default), none, required, or a defined tool's name (that
function is forced).

The definitions are kept in chat form; each API's adapter (client/apis.py) writes them in its
own (chat: tools and tool_choice; Responses: flat function tools; Messages: name,
description, input_schema). Every request of the workload carries the same tools, so a
server's prefix cache holds them after the first request, as it does for a coding agent's.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from benchc.errors import PlanError
from benchc.inputs import TOOLS_BYTES, input_problem
from benchc.plan.workload import VOCABULARY

CHOICES = ("auto", "none", "required")
_PARAM_TYPES = ("string", "integer", "number", "boolean")


def definition_text(definition: dict) -> str:
    """The text a definition's size is counted on: its JSON, as chat templates write it
    (json.dumps' default separators: `", "` and `": "`, so words are whitespace-separated)."""
    return json.dumps(definition, ensure_ascii=False)


def _count(text: str, tokenizer: Any) -> int:
    return tokenizer.count(text) if tokenizer is not None else len(text.split())


def _synthetic_one(rng: random.Random, k: int, tokens: int, tokenizer: Any) -> dict:
    """Definition k: a name, 1-4 typed parameters, and a description grown (or cut) one
    word at a time until the definition's JSON is `tokens` long, or as near as words allow."""
    name = f"tool_{k}_{rng.getrandbits(32):08x}"
    props = {}
    for i in range(rng.randint(1, 4)):
        props[f"arg{i}"] = {"type": rng.choice(_PARAM_TYPES),
                            "description": " ".join(rng.choices(VOCABULARY, k=3))}
    params = {"type": "object", "properties": props, "required": sorted(props)[:1]}
    fn: dict[str, Any] = {"name": name, "description": "", "parameters": params}
    definition = {"type": "function", "function": fn}
    base = _count(definition_text(definition), tokenizer)
    words = rng.choices(VOCABULARY, k=max(0, tokens - base))  # one token each, about
    fn["description"] = " ".join(words)
    n = _count(definition_text(definition), tokenizer)
    while n > tokens and words:  # a tokenizer may merge: trim to the size asked
        words.pop()
        fn["description"] = " ".join(words)
        n = _count(definition_text(definition), tokenizer)
    while n < tokens:
        words.append(rng.choice(VOCABULARY))
        fn["description"] = " ".join(words)
        n = _count(definition_text(definition), tokenizer)
    return definition


def synthetic_tools(count: int, tokens: int, seed: int, tokenizer: Any = None) -> list[dict]:
    """`count` definitions of about `tokens` tokens each (at least the skeleton's own: a
    name and its parameters), deterministic for (count, tokens, seed, tokenizer)."""
    rng = random.Random((seed << 16) ^ 0x7001)
    return [_synthetic_one(rng, k, tokens, tokenizer) for k in range(count)]


def _check_definitions(defs: Any, where: str) -> list[dict]:
    """A list of OpenAI chat-form function definitions, with unique names; PlanError otherwise."""
    if not isinstance(defs, list) or not defs:
        raise PlanError(f"{where}: expected a non-empty list of tool definitions")
    names = set()
    for i, d in enumerate(defs):
        fn = d.get("function") if isinstance(d, dict) else None
        if not isinstance(d, dict) or d.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise PlanError(f"{where}[{i}]: a tool is {{type: function, function: {{name, description, "
                            f"parameters}}}} (OpenAI's chat form)")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise PlanError(f"{where}[{i}]: function.parameters must be a JSON Schema object")
        if fn["name"] in names:
            raise PlanError(f"{where}[{i}]: tool name {fn['name']!r} is defined twice")
        names.add(fn["name"])
    return defs


def _read_file(path_text: str, base_dir: str) -> tuple[list[dict], str]:
    p = Path(path_text).expanduser()
    path = p if p.is_absolute() else Path(base_dir) / p
    if why := input_problem(path, TOOLS_BYTES, "tools file"):
        raise PlanError(f"workload.tools.file: {why}")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise PlanError(f"workload.tools.file {path}: {e.strerror}") from e
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise PlanError(f"workload.tools.file {path}: not a JSON list of tool definitions ({e})") from e
    return _check_definitions(data, str(path)), hashlib.sha256(raw).hexdigest()


def compile_tools(cfg: dict | None, seed: int, base_dir: str, tokenizer: Any = None) -> dict | None:
    """workload.tools as the plan keeps it: {source, definitions, choice, tokens[, file,
    sha256]} (`tokens`: the definitions' JSON text, counted as their sizes are), or None."""
    if not cfg:
        return None
    out: dict[str, Any] = {}
    if "synthetic" in cfg:
        syn = cfg["synthetic"]
        defs = synthetic_tools(syn["count"], syn["tokens"], seed, tokenizer)
        out.update(source="synthetic", count=syn["count"], tokens_each=syn["tokens"])
    elif "file" in cfg:
        defs, sha = _read_file(cfg["file"], base_dir)
        out.update(source="file", file=cfg["file"], sha256=sha)
    else:
        defs = _check_definitions(cfg["definitions"], "workload.tools.definitions")
        out.update(source="spec")
    choice = cfg.get("choice", "auto")
    names = [d["function"]["name"] for d in defs]
    if choice not in CHOICES and choice not in names:
        raise PlanError(f"workload.tools.choice: {choice!r} is neither auto, none, required nor a defined "
                        f"tool (defined: {', '.join(names[:8])}{' ...' if len(names) > 8 else ''})")
    out.update(choice=choice, tokens=sum(_count(definition_text(d), tokenizer) for d in defs),
               definitions=defs)
    return out


def chat_choice(choice: str) -> Any:
    """tool_choice in the chat API's form: a keyword, or the forced function by name."""
    return choice if choice in CHOICES else {"type": "function", "function": {"name": choice}}


__all__ = ["compile_tools", "synthetic_tools", "definition_text", "chat_choice", "CHOICES"]
