"""The twin file: simulator parameters fitted to a measured server (`benchc fit` writes it,
`target.sim: {preset: twin.yaml}` and `benchc sim --preset twin.yaml` read it).

A versioned YAML document:

    benchc_twin: 1                  # the format's version; a newer one is refused by name
    model: tiny-random              # the model the measured server served
    sim: {step_table: [[1, 19.8], [2, 21.0], [4, 24.1]], prefill_tok_s: 9000.0, ...}
    fitted_range: {concurrency: [1, 4], input_tokens: [128, 128], output_tokens: [64, 64]}
    not_observed: [...]             # parameters the results could not tell, left at defaults
    sources: [...]                  # the result files it was fitted from
    residuals: [...]                # per point: measured and modelled figures

Only `sim` drives the simulator: its keys are SimConfig parameters, applied over SimConfig's
defaults (not over a named preset), so the twin says everything it assumes.
"""

from __future__ import annotations

import yaml

from benchc.inputs import TWIN_BYTES, input_problem
from benchc.plan.model import sim_preset_is_file as is_twin_path  # noqa: F401 (re-exported: one rule)
from benchc.sim.model import PARAMS, SimConfig, apply_overrides

TWIN_VERSION = 1


def dump_twin(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def read_twin(path: str) -> dict:
    """The twin document at `path`; ValueError says what is wrong with it (unreadable, not a
    twin, a newer version, unknown simulator parameters)."""
    if why := input_problem(path, TWIN_BYTES, "twin"):
        raise ValueError(why)
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as e:
        raise ValueError(f"cannot read the twin {path}: {e.strerror or e}") from e
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{path} is not a twin file ({e.__class__.__name__}: {e})") from e
    if not isinstance(doc, dict) or "benchc_twin" not in doc:
        raise ValueError(f"{path} is not a twin file (no benchc_twin version; `benchc fit` writes one)")
    version = doc["benchc_twin"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"{path}: benchc_twin must be a whole number from 1, not {version!r}")
    if version > TWIN_VERSION:
        raise ValueError(f"{path} is twin version {version}, newer than this benchc reads "
                         f"({TWIN_VERSION}); upgrade benchc")
    sim = doc.get("sim")
    if not isinstance(sim, dict):
        raise ValueError(f"{path}: `sim` must be a mapping of simulator parameters")
    unknown = sorted(set(sim) - set(PARAMS))
    if unknown:
        raise ValueError(f"{path}: unknown simulator parameter(s) in sim: {', '.join(unknown)}")
    return doc


def twin_config(path: str, **overrides: object) -> SimConfig:
    """The simulator configuration of the twin at `path`, with `overrides` (a spec's other
    target.sim keys, `--param`) applied on top."""
    sim = dict(read_twin(path)["sim"])
    sim.update(overrides)
    return apply_overrides(SimConfig(), **sim)
