"""Why open-loop sends are late: `benchc run` of one spec in this process (pin it with
taskset), its alarm (run/alarm.py) watched, and each send's lateness split into
- the wake: the timerfd's callback ran after the due time; of it, the time the thread waited
  runnable in the kernel's run queue since the alarm was armed (/proc/thread-self/schedstat:
  another process had the core), the rest the event loop busy with other work;
- fire to write: the callback to the request's write (a task's step, the write itself);
- no wake: the write came after its due time without the alarm (the connect, or the issue
  5 ms ahead, ran past it).

    taskset -c 1 python benchmarks/send_lateness.py SPEC [--base-url URL] [--http native]

Prints per run: sends, skew p50/p99, late sends (>= 1 ms) and, for those, the medians of
each part and how many the run queue explains (its wait at least 80% of the lateness).
Linux only (timerfd, schedstat).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

CLOCK = time.perf_counter_ns
LATE_NS = 1_000_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--base-url")
    ap.add_argument("--http", default="native")
    a = ap.parse_args()
    import benchc.run.alarm as alarm
    import benchc.run.loadgen as loadgen
    from benchc.cli import main as benchc_main

    sched = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def run_queue_ns() -> int:  # the thread's time runnable but not running, so far
        return int(os.pread(sched, 128, 0).split()[1])

    armed_at = [0]
    fires: dict[int, tuple[int, int]] = {}  # due -> (the callback's time, run-queue wait since armed)
    arm, rang, record = alarm.Alarm._arm, alarm.Alarm._rang, loadgen.StepRun._record

    def watched_arm(self, due_ns: int) -> None:
        armed_at[0] = run_queue_ns()
        arm(self, due_ns)

    def watched_rang(self) -> None:
        now, waited = CLOCK(), run_queue_ns() - armed_at[0]
        for due, _, _ in self._due:
            if due <= now:
                fires[due] = (now, waited)
        rang(self)

    sends: list[tuple[int, int, tuple[int, int] | None]] = []

    def watched_record(self, r) -> None:
        if r.times.scheduled_ns is not None and r.times.first_sent_ns is not None:
            sends.append((r.times.scheduled_ns, r.times.first_sent_ns, fires.get(r.times.scheduled_ns)))
        record(self, r)

    alarm.Alarm._arm, alarm.Alarm._rang, loadgen.StepRun._record = watched_arm, watched_rang, watched_record
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        args = ["run", a.spec, "--quiet", "--force", "--out", os.path.join(d, "r.json"), "--http", a.http]
        rc = benchc_main(args + (["--base-url", a.base_url] if a.base_url else []))
    skews = sorted(sent - due for due, sent, _ in sends)
    if not skews:
        sys.exit(f"no open-loop sends (exit {rc})")
    late = [(due, sent, f) for due, sent, f in sends if sent - due >= LATE_NS]
    woken = [(due, sent, f) for due, sent, f in late if f is not None]

    def ms(xs: list[float]) -> str:
        return f"{statistics.median(xs) / 1e6:.2f} ms" if xs else "-"

    explained = sum(1 for due, _, f in woken if f[1] >= 0.8 * (f[0] - due))
    print(f"send_lateness: {os.path.basename(a.spec)} (exit {rc}); load average {load[0]:.2f} at start; "
          f"{len(skews)} sends, skew p50 {skews[len(skews) // 2] / 1e3:.0f} us, "
          f"p99 {skews[int(len(skews) * 0.99)] / 1e3:.0f} us; {len(late)} late (>= 1 ms)")
    wake = ms([f[0] - due for due, _, f in woken])
    print(f"  late sends woken late: {len(woken)}; wake lateness median {wake}, "
          f"run-queue wait median {ms([f[1] for _, _, f in woken])}, fire to write median "
          f"{ms([sent - f[0] for _, sent, f in woken])}; the run queue explains {explained} of them")
    print(f"  late sends without a wake (connect or issue past the due time): {len(late) - len(woken)}")


if __name__ == "__main__":
    main()
