"""The simulated GPUs' power: what the engine's state draws, recorded as ground truth.

The server's GPUs draw `gpu_idle_w` while the engine has nothing to run and, from the moment
a step is planned until the next one is, `gpu_idle_w + gpu_busy_w + gpu_w_per_seq x batch`
(at most `gpu_max_w`); the machine's other GPUs draw `gpu_idle_w` throughout. The draw is
piecewise constant, so every GPU's energy since the start is exact at any instant, and the
log of changes lets a test integrate the modelled power over any window itself.

GET /sim/power serves a reading (sim/server.py): per GPU its draw now and its energy counter
(as NVML's total energy consumption), which benchc's power sampler reads (run/power.py).
"""

from __future__ import annotations

from collections import deque

from benchc.sim.model import SimConfig

LOG_CHANGES = 1_000_000  # changes kept (the oldest dropped): hours of steps


class PowerMeter:
    def __init__(self, cfg: SimConfig, t0_ns: int):
        self.cfg = cfg
        self.machine = max(cfg.machine_gpus, cfg.gpus)
        self.watts = cfg.gpu_idle_w  # each server GPU's draw now
        self.since_ns = t0_ns
        self.t0_ns = t0_ns
        self.joules = 0.0  # each server GPU's energy up to since_ns
        self.log: deque[tuple[int, float]] = deque([(t0_ns, self.watts)], maxlen=LOG_CHANGES)

    def draw(self, batch: int) -> float:
        """One server GPU's draw while a step of `batch` sequences runs (0: idle)."""
        c = self.cfg
        if batch <= 0:
            return c.gpu_idle_w
        return min(c.gpu_max_w, c.gpu_idle_w + c.gpu_busy_w + c.gpu_w_per_seq * batch)

    def set(self, t_ns: int, batch: int) -> None:
        """From t_ns on, the server's GPUs run a step of `batch` sequences (0: nothing)."""
        watts = self.draw(batch)
        if watts == self.watts or t_ns < self.since_ns:
            return
        self.joules += self.watts * (t_ns - self.since_ns) / 1e9
        self.watts, self.since_ns = watts, t_ns
        self.log.append((t_ns, watts))

    def reading(self, t_ns: int, with_log: bool = False) -> dict:
        """Every GPU of the simulated machine at t_ns: index, whether the server's, draw (W) and
        energy since the simulator started (J); with_log: the server GPUs' changes of draw."""
        server_j = self.joules + self.watts * max(0, t_ns - self.since_ns) / 1e9
        idle_j = self.cfg.gpu_idle_w * max(0, t_ns - self.t0_ns) / 1e9
        gpus = [{"index": i, "name": "benchc-sim GPU", "server": i < self.cfg.gpus,
                 "power_w": self.watts if i < self.cfg.gpus else self.cfg.gpu_idle_w,
                 "energy_j": server_j if i < self.cfg.gpus else idle_j}
                for i in range(self.machine)]
        out: dict = {"t_ns": t_ns, "gpus": gpus}
        if with_log:
            out["log"] = {"idle_w": self.cfg.gpu_idle_w, "server_changes": [list(x) for x in self.log]}
        return out
