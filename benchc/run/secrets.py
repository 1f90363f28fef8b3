"""The known secrets of a run, for benchc.redact's scrubber: what every combination of
the plan sends or starts with (api keys, credential headers, URL credentials, secret
environment values, secrets on the server's command line)."""

from __future__ import annotations

from benchc.plan.model import Plan
from benchc.redact import Scrubber


def run_scrubber(plan: Plan, base_url: str | None = None) -> Scrubber:
    """A Scrubber of every secret value `plan` (run against `base_url`, when given) holds."""
    combos = plan.combinations
    servers = [c.server for c in combos if c.server is not None]
    return Scrubber.of(
        api_keys=[c.target.api_key for c in combos],
        headers=[c.target.headers for c in combos],
        urls=[base_url] + [c.target.base_url for c in combos],
        env=[s.env for s in servers],
        argv=[s.command for s in servers if s.command],
    )
