"""How many GPUs a combination's server uses, and which: what per-GPU figures divide by.

In this order, the first that says wins (the result states which, `combinations[].gpus`):
1. `server.gpus` in the spec: a count, or the GPUs' indices;
2. the matrix's parallelism axes (`tp`, `pp`, `dp`, `ep`, or vLLM's long names) with integer
   values, multiplied: TP=4 x DP=2 is 8 GPUs. A value that is not an integer (`ep: enable`,
   a flag) says nothing about a count and is left out;
3. the simulator's own (its preset's `gpus`), read from its GET /sim/power;
4. a launched server's CUDA_VISIBLE_DEVICES (server.env, else benchc's own environment).
The indices (which of the machine's GPUs are the server's, for the power sampler) come from
server.gpus as a list, else CUDA_VISIBLE_DEVICES, else the simulator's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import aiohttp

from benchc.client.bounded import MODELS_BYTES, BodyTooLarge, read_json
from benchc.plan.model import Combination

PARALLEL_AXES = {"tp": "tp", "tensor_parallel_size": "tp", "pp": "pp", "pipeline_parallel_size": "pp",
                 "dp": "dp", "data_parallel_size": "dp", "ep": "ep", "expert_parallel_size": "ep"}


def visible_devices(env: Mapping[str, str]) -> tuple[int | None, list[int] | None]:
    """(count, indices) of CUDA_VISIBLE_DEVICES; indices None when it names GPUs by UUID."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None or not value.strip():
        return None, None
    items = [x.strip() for x in value.split(",") if x.strip()]
    if all(x.isdigit() for x in items):
        return len(items), [int(x) for x in items]
    return len(items), None


def matrix_gpus(matrix: Mapping[str, Any]) -> tuple[int, list[str]] | None:
    """(product, the axes multiplied) of the matrix's integer parallelism axes, None without one."""
    used = [(k, v) for k, v in matrix.items()
            if k.lower() in PARALLEL_AXES and isinstance(v, int) and not isinstance(v, bool) and v >= 1]
    if not used:
        return None
    return math.prod(v for _, v in used), [k for k, _ in used]


def combination_gpus(combo: Combination, sim: dict | None,
                     launch_env: Mapping[str, str] | None) -> dict | None:
    """The result's `gpus` of a combination: {"count", "source", "indices"}, or None when nothing
    says. `sim`: the simulator's GET /sim/power reading, when the target is benchc's simulator;
    `launch_env`: the environment a launched server got (None: not launched here)."""
    indices: list[int] | None = None
    sim_indices = [g["index"] for g in sim["gpus"] if g["server"]] if sim else None
    cuda_count, cuda_indices = visible_devices(launch_env) if launch_env is not None else (None, None)
    declared = combo.server.gpus if combo.server is not None else None
    if isinstance(declared, list):
        indices = list(declared)
    else:
        indices = cuda_indices or sim_indices
    count: int | None
    if declared is not None:
        count, source = (len(declared) if isinstance(declared, list) else declared), "server.gpus"
    elif (m := matrix_gpus(combo.matrix)) is not None:
        count, source = m[0], "matrix: " + " x ".join(m[1])
    elif sim_indices:
        count, source = len(sim_indices), "simulator"
    elif cuda_count is not None:
        count, source = cuda_count, "CUDA_VISIBLE_DEVICES"
    else:
        return None
    if indices is not None and len(indices) != count:
        indices = None  # the indices describe another count: which GPUs are the server's is unknown
    return {"count": count, "source": source, "indices": indices}


async def read_sim_power(session: aiohttp.ClientSession, root: str) -> dict | None:
    """The simulator's GET /sim/power reading (sim/power.py); None from any other server."""
    try:
        async with session.get(root + "/sim/power", allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status != 200:
                return None
            doc = await read_json(r, MODELS_BYTES, "/sim/power")
    except (aiohttp.ClientError, TimeoutError, BodyTooLarge, ValueError, RecursionError):
        return None
    ok = isinstance(doc, dict) and isinstance(doc.get("gpus"), list) and all(_gpu_ok(g) for g in doc["gpus"])
    return doc if ok else None


def _gpu_ok(g: Any) -> bool:
    return (isinstance(g, dict) and isinstance(g.get("index"), int) and isinstance(g.get("server"), bool)
            and _reading(g.get("power_w")) and _reading(g.get("energy_j")))


def _reading(v: Any) -> bool:
    """A power (W) or energy (J) figure benchc may take: a finite, non-negative JSON number.
    A NaN or Infinity (json reads both) would reach the point's energy and the decision."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return False
    try:
        return 0 <= float(v) < math.inf
    except OverflowError:  # an integer no double holds
        return False
