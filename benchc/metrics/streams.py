"""What a point's streams carried beyond text and timing: answers that called a tool,
events of a type no API benchc reads has (skipped, so a server's new event is seen, not
mistaken for output), and non-streamed answers short of what their request asked. Part of
the point's Tally (shards add)."""

from __future__ import annotations

from dataclasses import dataclass

from benchc.metrics.record import RequestRecord

TOOL_CALLS = "tool_calls"  # the finish reason of an answer that ends in a tool call (Messages' tool_use)


@dataclass
class StreamCounts:
    tool_call_requests: int = 0  # completed requests that streamed a tool call
    tool_call_finishes: int = 0  # completed requests that finished with finish_reason tool_calls
    unknown_events: int = 0  # events of an unknown type, in every request (failed ones too)
    # completed non-streamed answers with fewer results than the request's inputs asked for
    # (an embeddings answer of 3 vectors for 8 inputs), and the inputs they left unanswered
    short_answers: int = 0
    unanswered_inputs: int = 0

    def add(self, r: RequestRecord) -> None:
        """One finished request (its unknown events count whether it completed or not)."""
        self.unknown_events += r.tokens.unknown_events
        outcome = r.outcome
        if outcome.error is None:  # r.ok, without the property's call
            self.tool_call_requests += r.times.first_tool_ns is not None
            self.tool_call_finishes += outcome.finish_reason == TOOL_CALLS
            unanswered = r.payload.unanswered
            self.short_answers += unanswered > 0
            self.unanswered_inputs += unanswered

    def merge(self, other: StreamCounts) -> None:
        self.tool_call_requests += other.tool_call_requests
        self.tool_call_finishes += other.tool_call_finishes
        self.unknown_events += other.unknown_events
        self.short_answers += other.short_answers
        self.unanswered_inputs += other.unanswered_inputs

    def block(self) -> dict | None:
        """The point's `stream` block; None when every count is zero (most points)."""
        if not (self.tool_call_requests or self.tool_call_finishes or self.unknown_events
                or self.short_answers):
            return None
        out = {"tool_call_requests": self.tool_call_requests, "tool_call_finishes": self.tool_call_finishes,
               "unknown_events": self.unknown_events}
        if self.short_answers:
            out.update(short_answers=self.short_answers, unanswered_inputs=self.unanswered_inputs)
        return out

    @classmethod
    def from_block(cls, block: dict | None) -> StreamCounts:
        if not block:
            return cls()
        return cls(block["tool_call_requests"], block["tool_call_finishes"], block["unknown_events"],
                   block.get("short_answers", 0), block.get("unanswered_inputs", 0))
