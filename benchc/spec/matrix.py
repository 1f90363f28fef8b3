"""Matrix axes: combinations (minus exclusions) and `${matrix.NAME}` substitution."""

from __future__ import annotations

import itertools
import re
from typing import Any

PLACEHOLDER = re.compile(r"\$\{matrix\.([A-Za-z_][A-Za-z0-9_]*)\}")
# Sections of a spec where ${matrix.NAME} is substituted (issue: server.command,
# target and workload fields).
SUBSTITUTED_SECTIONS = ("target", "server", "workload")


class UnknownAxis(Exception):
    def __init__(self, path: tuple, name: str):
        self.path, self.name = path, name
        super().__init__(name)


def axes_of(matrix: dict | None) -> dict[str, list]:
    """The named axes of a spec's `matrix` section, in the spec's order."""
    return {k: v for k, v in (matrix or {}).items() if k != "exclude"}


def combinations(matrix: dict | None) -> list[dict[str, Any]]:
    """Every combination of the axes in order (last axis fastest), minus `exclude`.

    An exclude entry is a partial assignment: `{tp: 4, ep: true}` drops every
    combination with tp=4 and ep=true, whatever the other axes are.
    """
    axes = axes_of(matrix)
    if not axes:
        return [{}]
    excludes = (matrix or {}).get("exclude", [])
    out = []
    for values in itertools.product(*axes.values()):
        combo = dict(zip(axes, values, strict=True))
        if any(all(combo.get(k) == v for k, v in ex.items()) for ex in excludes):
            continue
        out.append(combo)
    return out


def substitute(value: Any, combo: dict[str, Any], path: tuple = ()) -> Any:
    """Replace `${matrix.NAME}` in every string below `value`.

    A string that is only a placeholder takes the axis value with its type
    (so `max_num_seqs: ${matrix.seqs}` stays an integer); a placeholder inside
    a longer string is formatted into it.
    """
    if isinstance(value, dict):
        return {k: substitute(v, combo, path + (k,)) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, combo, path + (i,)) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${matrix." not in value:
        return value
    for name in PLACEHOLDER.findall(value):
        if name not in combo:
            raise UnknownAxis(path, name)
    whole = PLACEHOLDER.fullmatch(value)
    if whole:
        return combo[whole.group(1)]
    return PLACEHOLDER.sub(lambda m: format_value(combo[m.group(1)]), value)


def format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def expand(data: dict, combo: dict[str, Any]) -> dict:
    """A copy of a spec's data with `combo` substituted into the matrix-aware sections."""
    out = dict(data)
    for section in SUBSTITUTED_SECTIONS:
        if section in out:
            out[section] = substitute(out[section], combo, (section,))
    return out


def find_placeholders(value: Any, path: tuple = ()) -> list[tuple[tuple, str]]:
    """(path, axis name) of every placeholder below `value`."""
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in find_placeholders(v, path + (k,))]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in find_placeholders(v, path + (i,))]
    if isinstance(value, str):
        return [(path, name) for name in PLACEHOLDER.findall(value)]
    return []
