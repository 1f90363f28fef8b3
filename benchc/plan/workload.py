"""Datasets: prompts and their requested output lengths, rebuilt identically from a seed.

Without a tokenizer, token counts are word counts: a random prompt of N
"tokens" is N words drawn from a vocabulary of short common English words, each
of which is one token in the BPE vocabularies of current models (and exactly one
token in the embedded simulator). With a tokenizer (target.tokenizer), a random
prompt has exactly the asked number of tokens by that tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchc.errors import PlanError
from benchc.units import parse_tokens

# Short, common words: single tokens in GPT-2/cl100k/Llama/Qwen/DeepSeek vocabularies
# when preceded by a space.
VOCABULARY = (
    "the of and to in is was for on that with as by at from his it an were are which this be "
    "or has had not but first one their its new after who they have her she two been other when "
    "there all during into school time may years more most only over city some world would where "
    "later up such used many can state about national out known university united then made "
    "south under people what great river north him we part so game well team house also state "
    "same three team work music could like each film year back long off war age under high name "
    "good end day life end line while small place air old way down power body show home field "
    "last own best tree light play set still word side hand book point young land city dark cold "
    "red blue green white black open close run walk read write sound water fire stone wind rain"
).split()


@dataclass(frozen=True)
class Prompt:
    """One request's input, and the output length asked for it (None: sampling decides)."""

    text: str | None  # completions prompt, or the user message of a chat
    messages: list[dict] | None  # chat messages when the dataset gave them
    input_tokens: int  # exact with a tokenizer, else the word count
    output_tokens: int | None

    def to_json(self) -> dict:
        return {"text": self.text, "messages": self.messages,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


def normalise_length(value: Any) -> dict:
    """A spec length (512, '1k', {mean, stdev}, {min, max}) as {kind, ...} with ints."""
    if isinstance(value, dict) and "mean" in value:
        return {"kind": "normal", "mean": parse_tokens(value["mean"]), "stdev": float(value["stdev"])}
    if isinstance(value, dict):
        return {"kind": "uniform", "min": parse_tokens(value["min"]), "max": parse_tokens(value["max"])}
    return {"kind": "fixed", "value": parse_tokens(value)}


def draw_length(rng: random.Random, length: dict) -> int:
    """One length from a normalised distribution; never below 1."""
    if length["kind"] == "fixed":
        return max(1, length["value"])
    if length["kind"] == "uniform":
        return max(1, rng.randint(length["min"], length["max"]))
    return max(1, round(rng.gauss(length["mean"], length["stdev"])))


def build_prompts(dataset: str, params: dict, base_dir: str = ".", tokenizer=None) -> list[Prompt]:
    """The dataset's prompts, in order; deterministic for given params (and tokenizer)."""
    if dataset == "random":
        return _exact_random_prompts(params, tokenizer) if tokenizer else _random_prompts(params)
    if dataset == "jsonl":
        return _jsonl_prompts(params, base_dir)
    if dataset == "sharegpt":
        return _sharegpt_prompts(params, base_dir)
    raise PlanError(f"unknown dataset {dataset!r}")


def prompts_sha256(prompts: list[Prompt]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps(p.to_json(), sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(n))


def _random_prompts(params: dict) -> list[Prompt]:
    rng = random.Random(params["seed"])
    # The shared prefix (prefix caching) comes from its own stream so that
    # changing prefix_tokens leaves the per-prompt parts unchanged.
    prefix_rng = random.Random(params["seed"] ^ 0x5EED)
    prefix_n = params["prefix_tokens"]
    prefix = _words(prefix_rng, prefix_n) if prefix_n else ""
    out = []
    for i in range(params["num_prompts"]):
        n_in = draw_length(rng, params["input_tokens"])
        n_out = draw_length(rng, params["output_tokens"])
        # Prompt i starts with its index so no two prompts share more than the
        # declared prefix (servers with prefix caching would otherwise hit more).
        body = f"{i}" + (" " + _words(rng, n_in - 1) if n_in > 1 else "")
        text = f"{prefix} {body}" if prefix else body
        out.append(Prompt(text, None, prefix_n + n_in, n_out))
    return out


def _exact_random_prompts(params: dict, tok) -> list[Prompt]:
    """Random prompts of exactly the asked number of tokens by `tok`.

    Words are drawn from those of VOCABULARY that are one token with their leading space
    in this vocabulary; a pre-tokenizer splits before each such word, so each adds exactly
    one token, and the total is checked by counting the finished prompt. Counted is the
    prompt text alone: a chat template's own tokens (role markers) come on top, as the
    server's usage.prompt_tokens shows.
    """
    words = [w for w in VOCABULARY if tok.count(" " + w) == 1]
    if not words:
        raise PlanError("the tokenizer has none of benchc's one-token words; use a jsonl dataset")
    rng = random.Random(params["seed"])
    prefix_rng = random.Random(params["seed"] ^ 0x5EED)

    def extend(text: str, target: int, r: random.Random) -> str:
        n = tok.count(text) if text else 0
        while n < target:
            text += " " + r.choice(words)
            n += 1
        if tok.count(text) != target:
            raise PlanError(f"could not build a prompt of exactly {target} tokens with this tokenizer")
        return text

    prefix_n = params["prefix_tokens"]
    prefix = extend("", prefix_n, prefix_rng) if prefix_n else ""
    out = []
    for i in range(params["num_prompts"]):
        n_in = draw_length(rng, params["input_tokens"])
        n_out = draw_length(rng, params["output_tokens"])
        # the prompt's own index first, so no two prompts share more than the declared prefix
        head = f"{prefix} {i}" if prefix else f"{i}"
        if tok.count(head) > prefix_n + n_in:
            raise PlanError(f"{n_in} input tokens is too short for prompt {i}'s index and prefix")
        text = extend(head, prefix_n + n_in, rng)
        out.append(Prompt(text, None, prefix_n + n_in, n_out))
    return out


def _resolve(path: str, base_dir: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(base_dir) / p


def _sample(items: list, params: dict) -> list:
    n = params.get("num_prompts")
    if params.get("shuffle", False) or (n is not None and n < len(items)):
        items = list(items)
        random.Random(params["seed"]).shuffle(items)
    if n is None:
        return items
    # Fewer items than asked: cycle, as vLLM's benchmark does with small datasets.
    return [items[i % len(items)] for i in range(n)]


def _word_count(text: str) -> int:
    return max(1, len(text.split()))


def _jsonl_prompts(params: dict, base_dir: str) -> list[Prompt]:
    path = _resolve(params["path"], base_dir)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise PlanError(f"jsonl dataset {path}: {e.strerror}") from e
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlanError(f"{path}:{n}: not a JSON object ({e.msg})") from e
        if not isinstance(rec, dict) or ("prompt" in rec) == ("messages" in rec):
            raise PlanError(f"{path}:{n}: each line needs exactly one of 'prompt' or 'messages'")
        out_tokens = rec.get("output_tokens")
        if "prompt" in rec:
            items.append(Prompt(rec["prompt"], None, _word_count(rec["prompt"]), out_tokens))
        else:
            text = " ".join(str(m.get("content", "")) for m in rec["messages"])
            items.append(Prompt(None, rec["messages"], _word_count(text), out_tokens))
    if not items:
        raise PlanError(f"jsonl dataset {path} has no prompts")
    return _sample(items, params)


def _sharegpt_prompts(params: dict, base_dir: str) -> list[Prompt]:
    """ShareGPT JSON: a list of {conversations: [{from: human, value}, {from: gpt, value}, ...]}.

    As in vLLM's benchmark: the first human turn is the prompt, the reply's
    length is the output length (unless output_tokens overrides it).
    """
    path = _resolve(params["path"], base_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PlanError(f"sharegpt dataset {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise PlanError(f"sharegpt dataset {path}: not JSON ({e.msg} at line {e.lineno})") from e
    override = params.get("output_tokens")
    rng = random.Random(params["seed"])
    items = []
    for conv in data if isinstance(data, list) else []:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not turns or len(turns) < 2:
            continue
        prompt, reply = turns[0].get("value", ""), turns[1].get("value", "")
        if not prompt:
            continue
        n_out = draw_length(rng, override) if override else _word_count(reply)
        items.append(Prompt(prompt, None, _word_count(prompt), n_out))
    if not items:
        raise PlanError(f"sharegpt dataset {path} has no usable conversations")
    return _sample(items, params)
