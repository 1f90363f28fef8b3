"""The twin file: simulator parameters fitted to a measured server (`benchc fit` writes it,
`target.sim: {preset: twin.yaml}` and `benchc sim --preset twin.yaml` read it).

A versioned YAML document:

    benchc_twin: 1                  # the format's version; a newer one is refused by name
    model: tiny-random              # the model the measured server served
    sim: {step_table: [[1, 19.8], [2, 21.0], [4, 24.1]], prefill_tok_s: 9000.0, ...}
    fitted_range: {concurrency: [1, 4], batch: [1, 4], input_tokens: [128, 128], output_tokens: [64, 64]}
    not_observed: [...]             # parameters the results could not tell, left at defaults
    warnings: [...]                 # what its predictions guess: past fitted_range.batch, the step
    sources: [...]                  # the result files it was fitted from
    residuals: [...]                # per point: measured and modelled figures

Only `sim` drives the simulator: its keys are SimConfig parameters, applied over SimConfig's
defaults (not over a named preset), so the twin says everything it assumes.
"""

from __future__ import annotations

import yaml

from benchc.plan.model import sim_preset_is_file as is_twin_path  # noqa: F401 (re-exported: one rule)
from benchc.plan.twin_file import TWIN_VERSION, read_twin_file
from benchc.sim.model import PARAMS, SimConfig, apply_overrides

__all__ = ["TWIN_VERSION", "dump_twin", "is_twin_path", "read_twin", "twin_config"]


def dump_twin(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def read_twin(path: str) -> dict:
    """The twin document at `path`; ValueError says what is wrong with it (unreadable, not a
    twin, a newer version, unknown simulator parameters)."""
    doc = read_twin_file(path)
    unknown = sorted(set(doc["sim"]) - set(PARAMS))
    if unknown:
        raise ValueError(f"{path}: unknown simulator parameter(s) in sim: {', '.join(unknown)}")
    return doc


def twin_config(path: str, **overrides: object) -> SimConfig:
    """The simulator configuration of the twin at `path`, with `overrides` (a spec's other
    target.sim keys, `--param`) applied on top."""
    sim = dict(read_twin(path)["sim"])
    sim.update(overrides)
    return apply_overrides(SimConfig(), **sim)
