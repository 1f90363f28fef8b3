"""Whether a load point failed, and so whether a run may say it succeeded: the one rule, used by
`benchc run` for its exit code (7, errors.PointFailed) and by whatever shows the failure.

A point fails when no request of it completed, when more than MAX_ERROR_FRACTION of the
requests it sent failed, when a session of it ended on an answer benchc could not read
(run/sessions.py: its figures miss the turns that session would have sent), or, for a point of
multi-turn sessions, when no session completed or no request of some turn depth did: a
conversation whose every second turn fails (a history the server refuses) loses exactly half
the requests, and no figure of it describes a conversation. Its figures stay in the result as
measured (a failed point is a finding, not a damaged document); only the run's exit code says
so. Probes of a capacity search are left out: a probe past the server's capacity is how a
search finds its answer.
"""

from __future__ import annotations

from benchc.metrics.record import CANCELLED

MAX_ERROR_FRACTION = 0.5  # more than half of a point's requests failed: no load figure describes it
# The run errors (result `errors[].kind`) of a point whose requests stopped connecting, or whose
# server does not serve the API (run/deadserver.py's stop kinds): the point stopped itself, and
# what it cancelled in flight then was lost to the server, not to a Ctrl-C.
SERVER_STOPS = ("server_unreachable", "api_not_served")


def point_failure(point: dict, ctrl_c_cancels: bool = True) -> str | None:
    """Why a result point failed, in a sentence; None when it did not (or is a search probe).
    `ctrl_c_cancels`: whether its error kind `cancelled` may be a Ctrl-C's (an older result's
    way of counting them); False where the run was not interrupted or the server stopped the
    point (failed_points says which)."""
    if point["params"].get("probe") is not None:
        return None
    counts = point["counts"]
    # Ctrl-C's cancels are the user's doing, not failures: a result counts them as cancelled
    # (the `cancelled` block's `interrupted`), an older one as the error kind `cancelled`. A
    # dead server's stop cancels what is in flight as that error kind too (run/loadgen.py's
    # wind-down): those are failures, and a result that was not interrupted holds no Ctrl-C's.
    interrupted = (counts.get("errors") or {}).get(CANCELLED, 0) if ctrl_c_cancels else 0
    sent, completed, failed = counts["sent"], counts["completed"], counts["failed"] - interrupted
    interrupted += (point.get("cancelled") or {}).get("interrupted", 0)
    if completed == 0:
        if interrupted and not failed:
            return None  # stopped by Ctrl-C before a request completed: partial, not failed
        return f"no request completed ({_failures(counts)})" if sent else "no request was sent"
    unread = (point.get("sessions") or {}).get("answer_errors")
    if unread:
        return (f"{sum(unread.values())} sessions ended on an answer benchc could not read "
                f"({', '.join(f'{n} {name}' for name, n in unread.items())})")
    if sent and failed / sent > MAX_ERROR_FRACTION:
        return (f"{failed} of {sent} requests failed ({_failures(counts)}), more than the "
                f"{MAX_ERROR_FRACTION:.0%} a point may lose")
    return _session_failure(point.get("sessions"))


def _session_failure(sessions: dict | None) -> str | None:
    """A sessions point (metrics/sessions.py's block) none of whose sessions completed, or with a
    turn depth none of whose requests did."""
    if not sessions or not sessions.get("started"):
        return None
    for turn in sessions["by_turn"]:
        if turn["sent"] and not turn["completed"]:
            return (f"no request of turn {turn['turn']} completed ({turn['sent']} sent): "
                    f"{_outcomes(sessions)}")
    if not sessions["completed"]:
        return f"no session completed: {_outcomes(sessions)}"
    return None


def _outcomes(sessions: dict) -> str:
    parts = [f"{sessions[k]} {k}" for k in ("completed", "failed", "cut") if sessions.get(k)]
    return f"of {sessions['started']} sessions {', '.join(parts) or 'none ended'}"


def failed_points(doc: dict) -> list[str]:
    """`<point id>: <why>` for every failed point of a result document, in its order."""
    return [f"{p['id']}: {why}" for p in doc.get("points", [])
            if (why := point_failure(p, _ctrl_c_cancels(doc, p))) is not None]


def _ctrl_c_cancels(doc: dict, point: dict) -> bool:
    """Whether a Ctrl-C may have cancelled some of the point's requests: the run was interrupted
    (a document without the flag: as before, it may have been) and no run error says the server
    stopped this point."""
    stopped = any(e.get("point") == point["id"] and e.get("kind") in SERVER_STOPS
                  for e in doc.get("errors") or ())
    return bool(doc.get("interrupted", True)) and not stopped


def _failures(counts: dict) -> str:
    kinds = sorted((counts.get("errors") or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    if not kinds and counts.get("cancelled"):  # load.cancel's, or load.graceful_stop's at the cap
        return f"{counts['failed']} failed, {counts['cancelled']} cancelled on purpose"
    if not kinds:
        return f"{counts['failed']} failed"
    return ", ".join(f"{n} {kind}" for kind, n in kinds[:3]) + (", ..." if len(kinds) > 3 else "")
