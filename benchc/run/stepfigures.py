"""What a step counts of each ended request beside the point's recorder (metrics/recorder.py):
its send check (run/sendcheck.py), an open loop's send skew and late sends, the transports
that read its requests, and the client's series per interval (metrics/timeline.py). The
step's client summary (run/selfcheck.py) reads them at its end."""

from __future__ import annotations

from collections import Counter

from benchc.client.request import CLOCK
from benchc.metrics.latency import Recorder
from benchc.metrics.record import RequestRecord
from benchc.metrics.timeline import ClientSeries
from benchc.run.sendcheck import SendCheck

LATE_SEND_US = 1_000  # open loop: a send this much after its scheduled time is counted late


class StepFigures:
    __slots__ = ("series", "skew", "sends", "late", "paths")

    def __init__(self, series_interval_s: float | None) -> None:
        # in flight and sends per interval, beside the server's /metrics samples
        self.series = ClientSeries(int(series_interval_s * 1e9), CLOCK()) if series_interval_s else None
        self.skew = Recorder()  # schedule -> first write, open loop
        self.sends = SendCheck()
        self.late = 0  # open loop: sends LATE_SEND_US or more after their time
        self.paths: Counter = Counter()  # requests by the transport that read them (Outcome.path)

    def add(self, r: RequestRecord) -> None:
        """One ended request's part (called once per request, in the turn's batch)."""
        self.sends.add(r)
        times = r.times
        series = self.series
        if series is not None:
            if times.first_sent_ns is not None:
                series.sent(times.first_sent_ns)
            if times.scheduled_ns is not None:
                series.scheduled(times.scheduled_ns)
        if r.outcome.path is not None:
            self.paths[r.outcome.path] += 1
        # the first attempt's write (a keep-alive retry's own is later, and a request that
        # never connected has none): as the self-check's send delay (sendcheck) counts it
        if times.scheduled_ns is not None and times.first_sent_ns is not None:
            skew_ns = times.first_sent_ns - times.scheduled_ns
            self.skew.record_ns(max(0, skew_ns))
            if skew_ns >= LATE_SEND_US * 1000:
                self.late += 1
