"""Reading a twin file (`benchc fit` writes it; sim/twin.py documents the format): the plan
compiler reads it to refuse a bad one before anything runs and to keep the batch sizes it was
fitted at (a run's points say when they went past them); the simulator reads it to run it.

Its `sim` keys are checked here by the ranges the spec schema gives target.sim and `benchc sim
--param` (spec/values.py: one statement of them), so `validate`, the plan compiler and the
simulator all refuse the same twins, naming the file and the key.
"""

from __future__ import annotations

import yaml

from benchc.inputs import TWIN_BYTES, input_problem
from benchc.spec.values import nonfinite_paths, sim_param_names, sim_param_problems

TWIN_VERSION = 1


def read_twin_file(path: str) -> dict:
    """The twin document at `path`; ValueError says what is wrong with it (unreadable, not a
    twin, a newer version, `sim` not a mapping, a parameter unknown or out of its range)."""
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
    if not isinstance(doc.get("sim"), dict):
        raise ValueError(f"{path}: `sim` must be a mapping of simulator parameters")
    if bad := nonfinite_paths(doc):  # anywhere: fitted_range's batch sizes are read as numbers too
        where = ".".join(str(p) for p in bad[0])
        raise ValueError(f"{path}: {where}: NaN and infinity are not allowed")
    unknown = sorted(str(k) for k in set(doc["sim"]) - set(sim_param_names()))
    if unknown:
        raise ValueError(f"{path}: unknown simulator parameter(s) in sim: {', '.join(unknown)}")
    if problems := sim_param_problems(doc["sim"]):
        raise ValueError(f"{path}: " + "; ".join(f"sim.{p}" for p in problems))
    return doc


def fitted_batch_max(doc: dict) -> int | None:
    """The largest batch size the twin's step time was measured at: `fitted_range.batch`, or
    for a twin written before it, the largest concurrency it was fitted from (a closed loop's
    batch); None when the file says neither."""
    fr = doc.get("fitted_range")
    if not isinstance(fr, dict):
        return None
    span = fr.get("batch", fr.get("concurrency"))
    if isinstance(span, list) and span and all(isinstance(x, int | float) and not isinstance(x, bool)
                                               for x in span):
        return int(max(span))
    return None
