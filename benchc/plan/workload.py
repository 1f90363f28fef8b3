"""Datasets: what a prompt is, length distributions, and the items of dataset files.

Without a tokenizer, token counts are word counts: a random prompt of N
"tokens" is N words drawn from a vocabulary of short common English words, each
of which is one token in the BPE vocabularies of current models (and exactly one
token in the embedded simulator). With a tokenizer (target.tokenizer), a random
prompt has exactly the asked number of tokens by that tokenizer. Which request sends
which prompt is plan/prompts.py's.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchc.errors import PlanError
from benchc.inputs import DATASET_BYTES, read_utf8
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
    # How the prompt may share with others of the run, by the spec: its first shared_tokens
    # tokens are sent by other requests too (prefix_tokens), None when nobody can say (a
    # user's file); reused: this very prompt was sent earlier in the run.
    shared_tokens: int | None = 0
    reused: bool = False
    # images the prompt carries (plan/images.Image: a JSONL record's, or workload.images'
    # synthetic ones, added when the request is built); the adapter puts them in its form
    images: tuple = ()
    # A request of several inputs (workload.batch, embeddings): each one's text; then `text` and
    # `messages` are None and input_tokens is their sum
    inputs: tuple[str, ...] | None = None

    def to_json(self) -> dict:
        """Its content (what a digest covers)."""
        out: dict[str, Any] = {"text": self.text, "messages": self.messages,
                               "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.images:  # only then: a prompt without images digests as it always did
            out["images"] = [im.to_json() for im in self.images]
        if self.inputs is not None:
            out["inputs"] = list(self.inputs)
        return out


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


def spread(xs: list[int]) -> dict:
    return {"min": min(xs), "mean": round(sum(xs) / len(xs), 3), "max": max(xs)}


def length_spread(length: dict, plus: int = 0) -> dict:
    """min, mean and max of a length distribution (workload.draw_length's), plus `plus`
    tokens; a normal one is cut below at 1 and has no maximum (None)."""
    if length["kind"] == "fixed":
        v = max(1, length["value"]) + plus
        return {"min": v, "mean": float(v), "max": v}
    if length["kind"] == "uniform":
        lo, hi = max(1, length["min"]), max(1, length["max"])
        return {"min": lo + plus, "mean": round((lo + hi) / 2 + plus, 3), "max": hi + plus}
    return {"min": 1 + plus, "mean": float(max(1, length["mean"]) + plus), "max": None,
            "stdev": length["stdev"]}


def load_items(dataset: str, params: dict, base_dir: str = ".") -> list[Prompt]:
    """A dataset file's prompts, in dealing order (shuffled with the seed when asked, or when
    `num_prompts` takes fewer than the file holds); deterministic for given params."""
    if dataset == "jsonl":
        return _jsonl_prompts(params, base_dir)
    if dataset == "sharegpt":
        return _sharegpt_prompts(params, base_dir)
    raise PlanError(f"unknown dataset {dataset!r}")


def _resolve(path: str, base_dir: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(base_dir) / p


def _sample(items: list, params: dict) -> list:
    """The items to deal: all (or num_prompts of them), shuffled when asked or sampled. A
    file with fewer items than requests goes round (plan/prompts.py counts the reuse)."""
    n = params.get("num_prompts")
    if params.get("shuffle", False) or (n is not None and n < len(items)):
        items = list(items)
        random.Random(params["seed"]).shuffle(items)
    return items if n is None else items[:n]


def _word_count(text: str) -> int:
    return max(1, len(text.split()))


def _read_text(path: Path, what: str) -> str:
    """A dataset file as UTF-8 text; an unreadable or undecodable one is a PlanError naming it."""
    return read_utf8(path, DATASET_BYTES, what, PlanError,
                     lambda line, at, byte: f"{path}:{line}: byte 0x{byte:02x} is not UTF-8 text "
                                            f"(a {what} is UTF-8; convert the file, e.g. with iconv)",
                     unreadable=f"{what} {{path}}: {{strerror}}")


def _output_tokens(rec: dict, path: Path, n: int) -> int | None:
    """A JSONL record's optional output_tokens: a whole number of at least 1."""
    v = rec.get("output_tokens")
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise PlanError(f"{path}:{n}: output_tokens {json.dumps(v)} is not a whole number of at least 1")
    return v


def _record_shape(rec: dict, path: Path, n: int) -> None:
    """What the readers below rely on: a string prompt, or a non-empty list of message objects."""
    if "prompt" in rec and not isinstance(rec["prompt"], str):
        raise PlanError(f"{path}:{n}: 'prompt' must be a string")
    if "messages" in rec and (not isinstance(rec["messages"], list) or not rec["messages"]
                              or not all(isinstance(m, dict) for m in rec["messages"])):
        raise PlanError(f"{path}:{n}: 'messages' must be a non-empty list of {{role, content}} objects")


def _images(rec: dict, path: Path, n: int) -> tuple:
    """A JSONL record's optional images: a list of file paths, relative to the dataset file."""
    names = rec.get("images")
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(x, str) and x for x in names):
        raise PlanError(f"{path}:{n}: 'images' must be a list of image file paths")
    from benchc.plan.images import read_image

    return tuple(read_image(x, path.parent, f"{path}:{n}") for x in names)


def _jsonl_prompts(params: dict, base_dir: str) -> list[Prompt]:
    path = _resolve(params["path"], base_dir)
    lines = _read_text(path, "jsonl dataset").splitlines()
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise PlanError(f"{path}:{n}: not a JSON object ({e.msg})") from e
        except RecursionError as e:
            raise PlanError(f"{path}:{n}: JSON nested too deep to read") from e
        if not isinstance(rec, dict) or ("prompt" in rec) == ("messages" in rec):
            raise PlanError(f"{path}:{n}: each line needs exactly one of 'prompt' or 'messages'")
        _record_shape(rec, path, n)
        out_tokens = _output_tokens(rec, path, n)
        images = _images(rec, path, n)
        if "prompt" in rec:
            items.append(Prompt(rec["prompt"], None, _word_count(rec["prompt"]), out_tokens, None,
                                images=images))
        else:
            text = " ".join(str(m.get("content", "")) for m in rec["messages"])
            items.append(Prompt(None, rec["messages"], _word_count(text), out_tokens, None, images=images))
    if not items:
        raise PlanError(f"jsonl dataset {path} has no prompts")
    return _sample(items, params)


def read_sharegpt(path_text: str, base_dir: str) -> tuple[Path, Any]:
    """(the file's path, its JSON) of a ShareGPT dataset; PlanError names what is wrong."""
    path = _resolve(path_text, base_dir)
    try:
        return path, json.loads(_read_text(path, "sharegpt dataset"))
    except json.JSONDecodeError as e:
        raise PlanError(f"sharegpt dataset {path}: not JSON ({e.msg} at line {e.lineno})") from e
    except RecursionError as e:
        raise PlanError(f"sharegpt dataset {path}: JSON nested too deep to read") from e


def _sharegpt_prompts(params: dict, base_dir: str) -> list[Prompt]:
    """ShareGPT JSON: a list of {conversations: [{from: human, value}, {from: gpt, value}, ...]}.

    As in vLLM's benchmark: the first human turn is the prompt, the reply's
    length is the output length (unless output_tokens overrides it).
    """
    path, data = read_sharegpt(params["path"], base_dir)
    override = params.get("output_tokens")
    rng = random.Random(params["seed"])
    items = []
    for conv in data if isinstance(data, list) else []:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, dict) for t in turns[:2]):
            continue
        prompt, reply = turns[0].get("value", ""), turns[1].get("value", "")
        if not prompt or not isinstance(prompt, str) or not isinstance(reply, str):
            continue
        n_out = draw_length(rng, override) if override else _word_count(reply)
        items.append(Prompt(prompt, None, _word_count(prompt), n_out, None))
    if not items:
        raise PlanError(f"sharegpt dataset {path} has no usable conversations")
    return _sample(items, params)
