"""File descriptors against concurrency, before the first request.

Every request in flight holds a socket, on either client; a process that runs out of
descriptors fails its connects with EMFILE, which would look like a server refusing them.
Before a local run starts, the widest in-flight count of the plan plus a margin (the event
loop, log files, the control session, telemetry pipes) is compared with RLIMIT_NOFILE (a
session whose agent loop fans out holds one socket per sub-agent while a round runs, so its
step counts sessions x fan_out: plan_sockets): the soft limit is raised toward the hard one
when it is lower (any process may do that), and when even the hard limit is too low the run
is refused (exit 2) with what to do.
"""

from __future__ import annotations

import logging
import resource

from benchc.errors import UsageError
from benchc.plan.model import Plan

FD_MARGIN = 64  # descriptors beside the measured sockets: loop, logs, control session, telemetry
log = logging.getLogger(__name__)


def plan_sockets(plan: Plan) -> tuple[int, str]:
    """The most sockets one step of `plan` holds at once, and what says so: its units in
    flight, times the fan-out of its agent loop (each sub-agent is a request of its own)."""
    widest, what = 1, "1 request in flight"
    fan_outs = {c.index: int((c.workload.agent or {}).get("fan_out", 1)) for c in plan.combinations}
    for s in plan.steps:
        fan_out = fan_outs.get(s.combination, 1)
        n = s.inflight_target * fan_out
        if n > widest:
            widest = n
            what = (f"{s.inflight_target} sessions x fan-out {fan_out}" if fan_out > 1
                    else f"{n} requests in flight") + " (the plan's widest point)"
    return widest, what


def needed_fds(widest_inflight: int) -> int:
    return widest_inflight + FD_MARGIN


def ensure_fds(widest_inflight: int, what: str = "") -> int:
    """Make the soft RLIMIT_NOFILE at least needed_fds(widest_inflight); returns the soft limit
    in force. Raises UsageError when the hard limit does not allow it."""
    need = needed_fds(widest_inflight)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        raise UsageError(
            f"{what or f'{widest_inflight} requests in flight'} need about {need} file descriptors (one "
            f"socket each, and {FD_MARGIN} more), but this process may open at most {hard} (ulimit -Hn): "
            f"raise the hard limit (e.g. `ulimit -n {need}` as root, or nofile in "
            "/etc/security/limits.conf) or lower the concurrency")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    log.info("raised the open-file limit from %d to %d (hard limit %s) for %d requests in flight",
             soft, need, "unlimited" if hard == resource.RLIM_INFINITY else hard, widest_inflight)
    return need
