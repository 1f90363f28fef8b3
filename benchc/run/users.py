"""The user-centric driver (plan/shapes.Users; the protocol: run/drivers.py): `users`
sessions at once, each user sending its session's next turn turn_interval_s after its
previous turn's send (not before that turn ended), a new session when one ends."""

from __future__ import annotations

from benchc.client.request import CLOCK
from benchc.plan.shapes import Users
from benchc.run.drivers import Host


class UsersDriver:
    scheduled = False
    speedup = 1.0

    def __init__(self, shape: Users) -> None:
        self.shape = shape
        self.pace_s: float | None = shape.turn_interval_s

    def next_due_ns(self, now_ns: int) -> int | None:
        return None  # each user's turns wait on its own answers

    async def drive(self, host: Host) -> None:
        """Start the users, spread evenly over one turn interval, so that the turns arrive at
        users / turn_interval from the start (AIPerf staggers its users likewise; benchc's
        all start at their sessions' first turn); returns when the first user is done."""
        start = CLOCK()
        gap = int(self.shape.turn_interval_s * 1e9) // self.shape.users
        for u in range(self.shape.users):
            host.start(self._user(host, start + u * gap))
        await host.room_or_stop()

    async def _user(self, host: Host, start_ns: int) -> None:
        """One user: sessions back to back, each turn at the pace."""
        due = start_ns
        pace_ns = int(self.shape.turn_interval_s * 1e9)
        while await host.until(due) and host.may_issue():
            last_send = await host.session(host.issue(), due, max(due, CLOCK()))
            due = last_send + pace_ns


__all__ = ["UsersDriver"]
