"""What a point's streams carried beyond text and timing: answers that called a tool, and
events of a type no API benchc reads has (skipped, so a server's new event is seen, not
mistaken for output). Part of the point's Tally (shards add)."""

from __future__ import annotations

from dataclasses import dataclass

from benchc.metrics.record import RequestRecord

TOOL_CALLS = "tool_calls"  # the finish reason of an answer that ends in a tool call (Messages' tool_use)


@dataclass
class StreamCounts:
    tool_call_requests: int = 0  # completed requests that streamed a tool call
    tool_call_finishes: int = 0  # completed requests that finished with finish_reason tool_calls
    unknown_events: int = 0  # events of an unknown type, in every request (failed ones too)

    def add(self, r: RequestRecord) -> None:
        """One finished request (its unknown events count whether it completed or not)."""
        self.unknown_events += r.unknown_events
        if r.ok:
            self.tool_call_requests += r.first_tool_ns is not None
            self.tool_call_finishes += r.finish_reason == TOOL_CALLS

    def merge(self, other: StreamCounts) -> None:
        self.tool_call_requests += other.tool_call_requests
        self.tool_call_finishes += other.tool_call_finishes
        self.unknown_events += other.unknown_events

    def block(self) -> dict | None:
        """The point's `stream` block; None when every count is zero (most points)."""
        if not (self.tool_call_requests or self.tool_call_finishes or self.unknown_events):
            return None
        return {"tool_call_requests": self.tool_call_requests, "tool_call_finishes": self.tool_call_finishes,
                "unknown_events": self.unknown_events}

    @classmethod
    def from_block(cls, block: dict | None) -> StreamCounts:
        if not block:
            return cls()
        return cls(block["tool_call_requests"], block["tool_call_finishes"], block["unknown_events"])
