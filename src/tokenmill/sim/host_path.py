"""The host's response path: what a streamed token waits for between the GPU and the client.

An engine step ends with a token for each running sequence, but a client sees it only when the
host has turned it into a response: TensorRT-LLM detokenizes it, builds the OpenAI protocol object,
passes it between processes and writes it to the stream, in Python, for every response of the step
(TensorRT-LLM's wide-EP blog, "Support Stream Interval"; the LLM API's proxy and postprocess
workers, then ``trtllm-serve``'s HTTP stream, then the MLPerf harness's client). At thousands of
sequences per instance (attention DP: batch per GPU x 8) that is tens of thousands of responses a
second, and the first tokens of new requests queue behind them. ``stream_interval`` N cuts the
load: a sequence responds every N-th decoding iteration, on its first token and when it finishes.

The model: one FIFO server per instance at ``rate`` responses per second. A step's responses
join it when the step ends and leave together once it has handled them all; a request's first
token (TTFT) and its last (its finish) are seen then. The engine's schedule does not wait for
the host (TensorRT-LLM's overlap scheduler forms the next step meanwhile), so the path delays
what the client sees, not the steps; while its load stays below ``rate`` a response waits at
most about one step, and past it the backlog, and every TTFT with it, grows without bound. So a
host slower than the engine's token rate, not the GPU, sets a streamed Server scenario's peak.

The rate is an input (``--host-stream-rate``, ``Deployment.host_stream_rate``), not derived; the
MLPerf rows read it in the published runs (docs/SIMULATOR-LOG.md, "The host's response path").
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class HostPath:
    rate: float
    """Responses per second the instance's host turns into client-visible tokens."""
    stream_interval: int = 1
    """A sequence responds every ``stream_interval``-th decoding iteration (besides its first and last)."""

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"--host-stream-rate: must be a finite number > 0 responses/s, got {self.rate}")
        if self.stream_interval < 1:
            raise ValueError(f"--stream-interval: must be >= 1, got {self.stream_interval}")


class HostQueue:
    """One instance's response queue over a run: ``deliver`` each step's responses in step order."""

    def __init__(self, path: HostPath):
        self.path = path
        self.free_at = -math.inf
        """When the host has handled every response given so far."""

    def deliver(self, ready_s: float, responses: int) -> float:
        """``responses`` ready at ``ready_s`` (a step's end): when the client sees them."""
        if responses <= 0:
            return ready_s
        self.free_at = max(self.free_at, ready_s) + responses / self.path.rate
        return self.free_at
