"""The JSON schemas benchc ships (benchc/schemas/*.json), read once each."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources


@cache
def load_schema(name: str) -> dict:
    """A JSON schema shipped in benchc/schemas (`spec-v1`, `result-v1`)."""
    text = resources.files("benchc").joinpath("schemas", f"{name}.json").read_text()
    return json.loads(text)
