"""The server's own per-request timings (llama.cpp's `timings`) beside the client's figures
of the same requests: how much of TTFT the server spent on the prompt, the rest being
queueing, transport and the first decode step. Part of the point's Tally (shards add).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchc.metrics.latency import Recorder

# result block key -> attribute
_RECORDERS = {"server_prompt_us": "prompt", "server_decode_us": "decode", "ttft_us": "ttft",
              "e2e_minus_ttft_us": "client_decode", "ttft_minus_server_prompt_us": "ttft_minus_prompt"}


@dataclass
class ServerTimings:
    prompt: Recorder = field(default_factory=Recorder)  # timings.prompt_ms
    decode: Recorder = field(default_factory=Recorder)  # timings.predicted_ms
    ttft: Recorder = field(default_factory=Recorder)  # benchc's TTFT of those requests
    client_decode: Recorder = field(default_factory=Recorder)  # benchc's E2E - TTFT of them
    ttft_minus_prompt: Recorder = field(default_factory=Recorder)
    ttft_below_prompt: int = 0  # requests whose TTFT was shorter than the server's prompt time

    def add(self, t: dict, ttft_ns: int, e2e_ns: int) -> None:
        if "prompt_ms" not in t or "predicted_ms" not in t:
            return
        prompt_ns, decode_ns = int(t["prompt_ms"] * 1e6), int(t["predicted_ms"] * 1e6)
        self.prompt.record_ns(prompt_ns)
        self.decode.record_ns(decode_ns)
        self.ttft.record_ns(ttft_ns)
        self.client_decode.record_ns(e2e_ns - ttft_ns)
        if ttft_ns >= prompt_ns:
            self.ttft_minus_prompt.record_ns(ttft_ns - prompt_ns)
        else:
            self.ttft_below_prompt += 1

    @property
    def requests(self) -> int:
        return self.prompt.hist.total_count

    def merge(self, other: ServerTimings) -> None:
        for attr in _RECORDERS.values():
            getattr(self, attr).merge(getattr(other, attr))
        self.ttft_below_prompt += other.ttft_below_prompt

    def block(self) -> dict | None:
        """The point's `server_timings` block; None when no request carried timings."""
        if not self.requests:
            return None
        out: dict = {"source": "timings", "requests": self.requests}
        out.update({key: getattr(self, attr).summary() for key, attr in _RECORDERS.items()})
        out["ttft_below_server_prompt"] = self.ttft_below_prompt
        return out

    @classmethod
    def from_block(cls, block: dict | None) -> ServerTimings:
        out = cls()
        if block:
            for key, attr in _RECORDERS.items():
                setattr(out, attr, Recorder.from_summary(block[key]))
            out.ttft_below_prompt = block["ttft_below_server_prompt"]
        return out
