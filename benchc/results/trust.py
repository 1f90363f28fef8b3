"""Whether a point's figures can be trusted: one small check per doubt, read from the point.

A check takes a result point (results/api.py's Point, as the runner and `benchc merge` write
it) and returns a Doubt or None. judge() runs every check of
POINT_CHECKS and writes the point's `trust` block; `benchc run --strict` fails on a point
whose block says `trusted: false`, and the run prints each doubt as a warning. To add a
check, write the function and add it to POINT_CHECKS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from benchc.metrics.cache import cache_doubts
from benchc.results.api import Point

SHARED_CPUS = "the client shares its CPUs with the server"  # run/effects.shares_cpus's cause


@dataclass(frozen=True)
class Doubt:
    check: str  # the check's name, stable (tools may key on it)
    message: str  # what a reader should know, in a sentence
    fails_strict: bool = True  # --strict fails on it
    # the figures it concerns (an SLO metric's name, `load`, ...); empty: all of them. A search
    # probe is not held back by a doubt on figures its SLO does not read (run/search.py)
    figures: tuple[str, ...] = ()


def client_limited(point: Point) -> Doubt | None:
    """The client's own self-check (run/effects.py) found figures a late client moved past their
    bounds; a result written before the check named them (no `effects`) doubts every figure."""
    client = point.client_check
    if not client["client_limited"]:
        return None
    reasons = "; ".join(client.get("reasons", []))
    effects = client.get("effects")
    if effects is None:
        return Doubt("client_limited",
                     f"the client itself was saturated ({reasons}): these figures measure benchc")
    moved = tuple(dict.fromkeys(f for e in effects.values() if e["moved"] for f in e["figures"]))
    # what made it late, where the self-check could tell: a server on the client's own CPUs
    shared = next((c for c in client.get("causes", []) if c.startswith(SHARED_CPUS)), None)
    return Doubt("client_limited", f"the client moved figures past their bounds ({reasons}): "
                                   f"{', '.join(moved)} measure benchc" + (f"; {shared}" if shared else ""),
                 figures=moved)


def output_length(point: Point) -> Doubt | None:
    """Requests that pinned their output length (ignore_eos, or min = max) and got another."""
    osl = point.output_lengths
    if not osl.get("mismatched"):
        return None
    return Doubt("output_length", f"{osl['mismatched']} of {osl['requests_checked']} requests returned "
                                  "another output length than the request pinned down (ignore_eos or "
                                  "min_tokens ignored by the server?)")


def prefix_cache(point: Point) -> Doubt | None:
    """More prompt tokens served from the server's prefix cache than the spec shares, or a
    cache reset the spec asked for and that was not done (metrics/cache.py)."""
    doubts = cache_doubts(point.cache)
    return Doubt("prefix_cache", "; ".join(doubts)) if doubts else None


def twin_extrapolated(point: Point) -> Doubt | None:
    """A point run against a twin (`benchc fit`) whose batch went past the batch sizes the twin's
    step time was measured at: its figures are the twin's extrapolation, not a fitted model's
    (docs/twin.md). A warning, not a failure: --strict keeps it."""
    twin = point.twin
    if twin is None or not twin.get("extrapolated"):
        return None
    return Doubt("twin_extrapolated",
                 f"a twin's prediction past its fitted range: its step time was measured at batch sizes "
                 f"up to {twin['fitted_batch_max']}, this point ran {twin['batch_max']} at once; beyond "
                 "the measurements the step is a guess (docs/twin.md: how far to trust it)",
                 fails_strict=False)


# What a chat template adds to a request's prompt (role markers, a generation prompt) when no
# template was rendered to say: Llama 3's adds 5 a message and 25 with its system header,
# Gemma 3's 4 a message; 32 a request covers a system, a user and an assistant turn of either.
TEMPLATE_SHARE_TOKENS = 32
# Two tokenizers' counts of one text differ, and benchc without target.tokenizer counts words:
# within 10% of what was sent is the same prompt; beyond it, something else reached the model.
PROMPT_TOLERANCE = 0.10


def prompt_tokens(point: Point) -> Doubt | None:
    """The server counted a different prompt than benchc sent, by more than the chat template's
    share (the rendered template's own overhead where benchc rendered it, else
    TEMPLATE_SHARE_TOKENS a request) and PROMPT_TOLERANCE: the figures describe another
    workload. Fewer: the server dropped what it could not render (tools, images); more: it
    counts with another tokenizer than the lengths were planned in."""
    tok = point.raw["tokens"]
    counted = tok.get("prompt_counted")
    if not counted or not counted["requests"]:
        return None
    n, sent, server = counted["requests"], counted["sent"], counted["server"]
    template = tok.get("chat_template") or {}
    share = template.get("overhead_per_request")
    share_text = "the chat template's" if share is not None else "a chat template's usual"
    share = share if share is not None else TEMPLATE_SHARE_TOKENS
    low, high = sent * (1 - PROMPT_TOLERANCE), (sent + share * n) * (1 + PROMPT_TOLERANCE)
    if server >= low and (server <= high or counted["requests_with_images"]):
        return None  # an image's tokens are its model's processor's rule: benchc sent none it could count
    per_sent, per_server = sent / n, server / n
    if server < low:
        dropped = [what for what, k in (("tools", "requests_with_tools"), ("images", "requests_with_images"))
                   if counted[k]]
        cause = (f"{' or '.join(dropped)} dropped (a chat template without a section for them ignores them)"
                 if dropped else "a different tokenizer, or a prompt the server cut")
        how = f"{per_sent - per_server:,.0f} fewer"
    else:
        cause = ("a different tokenizer (lengths were planned without the model's: set target.tokenizer)"
                 if "tokenizer" not in tok else "a different tokenizer, or a longer chat template")
        how = f"{per_server - per_sent:,.0f} more"
    return Doubt("prompt_tokens",
                 f"the server counted {per_server:,.0f} prompt tokens a request against {per_sent:,.0f} sent "
                 f"({how}, beyond {share_text} share of {share:g} and {PROMPT_TOLERANCE:.0%}; "
                 f"{n} requests): likely {cause}")


def agent_replay(point: Point) -> Doubt | None:
    """A coding-agent replay that did not keep to its trace (run/agent_replay.fidelity_of): each
    figure out of its band named (tokens, think times, spawn and join order, cached tokens)."""
    warnings = (point.agent_replay or {}).get("fidelity", {}).get("warnings")
    if not warnings:
        return None
    return Doubt("agent_replay", "the replay did not keep to its trace: " + "; ".join(warnings))


def short_answers(point: Point) -> Doubt | None:
    """Non-streamed answers with fewer results than their request's inputs (client/request.py
    `_as_asked`): the point counts what was answered, and says the server left some out."""
    stream = point.stream_counts
    if not stream.get("short_answers"):
        return None
    return Doubt("short_answers", f"{stream['short_answers']} answers carried fewer results than their "
                                  f"request's inputs ({stream['unanswered_inputs']} inputs unanswered): "
                                  "counts.inputs and inputs_s count only what was answered")


POINT_CHECKS: tuple[Callable[[Point], Doubt | None], ...] = (client_limited, output_length, prefix_cache,
                                                             twin_extrapolated, agent_replay, short_answers,
                                                             prompt_tokens)


def judge(point: Point) -> dict:
    """The point's `trust` block: every doubt the checks raise, and whether --strict accepts it."""
    doubts = [d for check in POINT_CHECKS if (d := check(point)) is not None]
    return {"trusted": not any(d.fails_strict for d in doubts),
            "doubts": [_block(d) for d in doubts]}


def _block(d: Doubt) -> dict:
    out = asdict(d)
    out["figures"] = list(d.figures)
    if not d.figures:
        del out["figures"]  # all of them, as every doubt said before doubts named figures
    return out
