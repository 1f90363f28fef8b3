"""Normalizers: HF tokenizer.json's (and its Metaspace pre-tokenizer, which is a
normalization too), and SentencePiece's own. Each is built once into one function
(segment, at_start) -> text; `at_start` says whether the segment begins the text
(Metaspace's prepend_scheme "first")."""

from __future__ import annotations

import unicodedata
from functools import partial

import regex

from benchc.errors import UsageError
from benchc.tokenizer.encoder import Normalizer

SPACE = "▁"


def nfc(text: str, at_start: bool) -> str:
    return unicodedata.normalize("NFC", text)


def chain(steps: list[Normalizer]) -> Normalizer | None:
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]

    def run(text: str, at_start: bool) -> str:
        for step in steps:
            text = step(text, at_start)
        return text
    return run


def _unicode_form(form: str, text: str, _: object) -> str:
    return unicodedata.normalize(form, text)  # type: ignore[arg-type]  # form is one of the four


def hf_steps(spec: dict | None, where: str) -> list[Normalizer]:
    """The steps of a tokenizer.json `normalizer` (Sequence flattened)."""
    if not spec:
        return []
    kind = spec.get("type")
    if kind == "Sequence":
        return [s for n in spec.get("normalizers", []) for s in hf_steps(n, where)]
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return [partial(_unicode_form, kind)]
    if kind == "Lowercase":
        return [lambda t, _: t.lower()]
    if kind == "Prepend":
        prefix = spec["prepend"]
        return [lambda t, _: prefix + t if t else t]  # HF prepends to non-empty text only
    if kind == "Replace":
        pattern, content = spec["pattern"], spec["content"]
        if "String" in pattern:
            old = pattern["String"]
            return [lambda t, _: t.replace(old, content)]
        compiled = regex.compile(pattern["Regex"])
        return [lambda t, _: compiled.sub(lambda m: content, t)]
    raise UsageError(f"{where}: normalizer {kind!r} is not supported yet")


def metaspace(spec: dict) -> Normalizer:
    """HF's Metaspace pre-tokenizer, less its split: spaces become the replacement, which is
    prepended where prepend_scheme says (older files: add_prefix_space) unless already there."""
    repl = spec.get("replacement", SPACE)
    scheme = spec.get("prepend_scheme") or ("always" if spec.get("add_prefix_space", True) else "never")
    if scheme not in ("always", "first", "never"):
        raise UsageError(f"Metaspace prepend_scheme {scheme!r} is not one of always, first, never")

    def run(text: str, at_start: bool) -> str:
        text = text.replace(" ", repl)
        if text and (scheme == "always" or (scheme == "first" and at_start)) and not text.startswith(repl):
            text = repl + text
        return text
    return run


def sentencepiece(add_dummy_prefix: bool, remove_extra_whitespaces: bool,
                  escape_whitespaces: bool) -> Normalizer:
    """SentencePiece's normalizer with the identity character map (normalizer.cc): leading
    spaces dropped and runs of spaces made one, a space put first, spaces written as "▁",
    and then trailing "▁" dropped (an escaped input "▁" too, as sentencepiece does)."""

    def run(text: str, at_start: bool) -> str:
        if remove_extra_whitespaces:
            text = _SPACE_RUN.sub(" ", text.lstrip(" "))
        if not text:
            return text
        if add_dummy_prefix and at_start:
            text = " " + text
        if escape_whitespaces:
            text = text.replace(" ", SPACE)
        if remove_extra_whitespaces:
            text = text.rstrip(SPACE if escape_whitespaces else " ")
        return text
    return run


_SPACE_RUN = regex.compile(" {2,}")
