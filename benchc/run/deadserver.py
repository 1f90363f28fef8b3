"""A server that stopped answering, told from a point's own requests.

When the server dies (or its address stops accepting connections) mid-point, every
request after that fails to connect at once, and a point would otherwise go on sending
them by the thousand and call itself complete. Requests that failed to connect are
counted since the point's last request the server answered (any status line: a 200, an
error status, a stream that broke after its 200); past the limit the point stops, is
marked incomplete, and the run records the failure (exit 3). Timeouts, cancellations and
the client's own failures neither count nor reset: they say nothing of the server.

A server that does not serve the API asked for (target.api) answers 404 Not Found or 501 Not
Implemented at its endpoint: the first such answer to a measured request stops the point
too, with a message naming the API and the endpoint (every other request would fail alike).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from benchc.metrics.record import CONNECT, RequestRecord
from benchc.results.failed import SERVER_STOPS

# Requests in a row that could not connect, at least: twice the point's in-flight target, so
# that each of its slots failed twice over (a burst as the server goes away is not enough), and
# never fewer than this many.
MIN_CONNECT_FAILURES = 10


def failure_limit(inflight: int) -> int:
    return max(MIN_CONNECT_FAILURES, 2 * inflight)


NOT_SERVED_STATUSES = (404, 501)
UNREACHABLE, NOT_SERVED = SERVER_STOPS  # the run's failure kinds (results/failed.py reads them)
_NOT_SERVED_WORDS = "does not serve the"


def stop_kind(reason: str) -> str:
    """The run failure kind of a point stopped for `reason` (ConnectStreak.reason)."""
    return NOT_SERVED if _NOT_SERVED_WORDS in reason else UNREACHABLE


def v1_hint(url: str) -> str:
    """`; the URL has no /v1 ...` for an endpoint URL without a version segment: vLLM, SGLang,
    llama.cpp and TGI serve the API under /v1, and a base URL given as http://host:8000 gets a
    bare 404 there (vLLM bench's --base-url takes the root; benchc's takes the /v1 address)."""
    if re.search(r"/v\d+(/|$)", urlsplit(url).path):
        return ""
    return ("; the URL has no /v1: OpenAI-compatible servers serve the API under it, so give the base "
            "URL with /v1 (e.g. --base-url http://host:8000/v1)")


class ConnectStreak:
    """Consecutive connect failures since the server last answered, for one point; and the
    answer of a server without the API (`api` at `url`)."""

    def __init__(self, inflight: int, api: str = "", url: str = ""):
        self.limit = failure_limit(inflight)
        self.streak = 0
        self.api, self.url = api, url
        self.reason: str | None = None  # set once, when the limit is reached

    def add(self, r: RequestRecord) -> bool:
        """Count a finished request; True once, when the streak reaches the limit (or the
        server said it does not serve the API)."""
        outcome = r.outcome
        if outcome.status in NOT_SERVED_STATUSES and self.reason is None:
            where = self.url or "the endpoint"
            self.reason = (f"the server answered {outcome.status} at {where}: it {_NOT_SERVED_WORDS} "
                           f"{self.api} API (target.api: {self.api}), or not this model; its answer: "
                           f"{(outcome.error_detail or '').strip()[:160]}" + v1_hint(self.url))
            return True
        if outcome.error == CONNECT and outcome.status is None:
            self.streak += 1
            if self.streak >= self.limit and self.reason is None:
                self.reason = (f"{self.streak} requests in a row could not connect to the server "
                               f"(last: {outcome.error_detail or 'no detail'}): the server is down or "
                               "unreachable")
                return True
        elif outcome.error is None or outcome.status is not None:
            self.streak = 0
        return False
