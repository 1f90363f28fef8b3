"""Mistral's tekken.json: a tiktoken-style vocabulary in JSON, as mistral-common's Tekkenizer
reads it. Special tokens take the first `default_num_special_tokens` ids and ordinary
tokens follow (id = rank + that number), the vocabulary cut to `default_vocab_size`; text
is encoded without matching special tokens (Tekkenizer.encode), which only decode."""

from __future__ import annotations

import base64
import hashlib
import json

from benchc.errors import UsageError
from benchc.tokenizer._tiktoken_file import build
from benchc.tokenizer.encoder import Tokenizer

# Files of versions up to v7 may omit their special tokens: mistral-common's defaults
_DEFAULT_SPECIAL = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
                    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                    "[TOOL_CONTENT]")


def is_tekken(raw_head: bytes) -> bool:
    return b'"config"' in raw_head and b'"vocab"' in raw_head


def from_tekken(path: str, core: str | None = None) -> Tokenizer:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        d = json.loads(raw)
        config = d["config"]
        pattern = config["pattern"]
        n_special = int(config["default_num_special_tokens"])
        inner = int(config["default_vocab_size"]) - n_special
        ranks = {base64.b64decode(t["token_bytes"]): t["rank"] for t in d["vocab"] if t["rank"] < inner}
        listed = d.get("special_tokens")
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path}: not a tekken tokenizer file ({e})") from e
    if sorted(ranks.values()) != list(range(inner)):
        raise UsageError(f"{path}: the vocabulary's ranks are not 0..{inner - 1}")
    names = ({t["rank"]: t["token_str"] for t in listed} if listed is not None
             else dict(enumerate(_DEFAULT_SPECIAL)))
    control = {i: names.get(i, f"<SPECIAL_{i}>").encode() for i in range(n_special)}
    tok = build(ranks, pattern, {}, kind="Mistral tekken.json", offset=n_special, core=core,
                decode_only=control)
    tok.sha256 = hashlib.sha256(raw).hexdigest()
    return tok
