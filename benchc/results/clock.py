"""Wall-clock times for the points of a result, derived from its monotonic windows.

A point's window (`start_ns`, `end_ns`) is on `time.perf_counter_ns` (CLOCK_MONOTONIC), which
has no relation to the calendar. The one calendar time a result carries is `created`, stamped
in whole UTC seconds when the document was put together, after the last point ended. So the
latest window end of the document is placed at `created` and every other instant at its
monotonic offset before that:

    wall(t_ns) = created - (max end_ns over the points - t_ns)

Durations and the order and spacing of points are exact. The absolute times are approximate:
late by the time between the last request's end and the document's assembly (telemetry, the
server's shutdown), and early by less than a second (`created` is truncated to the second).
A merged result was created when it was merged, maybe days later: its anchor is the latest
of its shards' `created` (shards of one plan run side by side on one clock).
"""

from __future__ import annotations

import datetime


def parse_created(doc: dict) -> datetime.datetime | None:
    """The document's `created` as an aware UTC datetime, or None when absent or unreadable."""
    text = doc.get("created")
    if not isinstance(text, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _anchor(doc: dict) -> tuple[datetime.datetime, int] | None:
    parts = [parse_created(m) for m in doc.get("merged_from") or [] if isinstance(m, dict)]
    created = max((p for p in parts if p is not None), default=None) if parts else parse_created(doc)
    ends = [p["window"].get("end_ns") for p in doc.get("points", [])]
    ends = [e for e in ends if isinstance(e, int)]
    if created is None or not ends:
        return None
    return created, max(ends)


def point_span(doc: dict, point: dict) -> tuple[datetime.datetime, datetime.datetime] | None:
    """(start, end) of a point's window in UTC, or None when the window or `created` is missing
    (a point that sent nothing has no window)."""
    anchor = _anchor(doc)
    start_ns, end_ns = point["window"].get("start_ns"), point["window"].get("end_ns")
    if anchor is None or not isinstance(start_ns, int) or not isinstance(end_ns, int):
        return None
    created, last_end = anchor

    def wall(ns: int) -> datetime.datetime:
        return created - datetime.timedelta(microseconds=(last_end - ns) / 1000)

    return wall(start_ns), wall(end_ns)


def iso(when: datetime.datetime) -> str:
    """RFC 3339 in UTC with milliseconds, e.g. 2026-11-29T18:18:20.130Z."""
    return when.astimezone(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_duration(seconds: float) -> str:
    """An ISO-8601 duration, e.g. PT3.069694S."""
    return f"PT{seconds:.6f}".rstrip("0").rstrip(".") + "S"
