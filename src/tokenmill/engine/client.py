"""The small typed interface every engine front (in-process or remote) offers.

The server and the benchmark talk only to this protocol, so a worker process
behind a router can implement it later without them changing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator, Protocol, runtime_checkable

from tokenmill.errors import QueueFullError  # noqa: F401  (re-exported)
from tokenmill.outputs import RequestOutput
from tokenmill.sampling_params import SamplingParams


ABORT_REASONS = {
    "client_disconnect": "the consumer of its output stream left (an HTTP client that disconnected)",
    "abort": "an explicit abort() call",
    "error": "the engine failed it (the other requests of its step went on)",
    "shutdown": "the engine stopped while it was in flight",
}
"""Why a request ended early (EngineStats.aborted_requests keys)."""


@dataclass
class EngineStats:
    """A snapshot of the engine's gauges and counters (for /metrics)."""

    num_running: int
    num_waiting: int
    kv_blocks_total: int
    kv_blocks_used: int
    prefix_cache_queries: int
    """Prompt tokens looked up in the prefix cache (cumulative)."""
    prefix_cache_hits: int
    """Prompt tokens found there (cumulative)."""
    num_preemptions: int
    """Requests preempted (cumulative)."""
    prompt_tokens: int
    """Prompt tokens computed (cumulative, excluding prefix-cache hits)."""
    generation_tokens: int
    """Tokens generated (cumulative)."""
    forward_retries: int = 0
    """Steps whose forward pass raised and was retried without the suspect requests (cumulative)."""
    request_failures: dict[str, int] = field(default_factory=dict)
    """Requests the engine failed on their own, by stage: 'forward', 'sampling', 'output' (cumulative)."""
    aborted_requests: dict[str, int] = field(default_factory=dict)
    """Requests ended before they finished, by reason (ABORT_REASONS; cumulative)."""
    prefill_tokens_queued: int = 0
    """Prompt tokens waiting or admitted whose K/V is not computed yet (a gauge)."""
    kv_blocks_held: int = 0
    """Blocks of finished prefill-only prompts waiting for a decode engine (a gauge)."""
    kv_blocks_imported: int = 0
    """Blocks written into this cache from a prefill engine (cumulative)."""
    kv_imports_recomputed: int = 0
    """Imported prompts that could not be adopted and were recomputed here (cumulative)."""
    spec_draft_tokens: int = 0
    """Speculative decoding: draft tokens verified (cumulative)."""
    spec_accepted_tokens: int = 0
    """Draft tokens the model confirmed (cumulative)."""
    spec_verifications: int = 0
    """(request, step) pairs that verified drafts (cumulative): mean accepted length =
    (accepted + verifications) / verifications tokens per such step."""
    spec_accepted_per_position: dict[str, int] = field(default_factory=dict)
    """Draft position ('0' = first draft) -> times accepted (cumulative)."""
    engine_steps: dict[str, int] = field(default_factory=dict)
    """Steps the core ran, by kind: 'prefill' (computed prompt tokens), 'decode' (cumulative;
    engine/step_stats.py)."""
    engine_step_seconds: dict[str, float] = field(default_factory=dict)
    """Their wall seconds, by kind (cumulative): scheduling, forward and sampling, not output
    processing."""
    engine_step_cpu_seconds: dict[str, float] = field(default_factory=dict)
    """The stepping thread's CPU seconds within those steps, by kind (cumulative): over the wall
    seconds, the share of its steps that thread was on a core (engine/step_stats.py)."""

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0


@runtime_checkable
class EngineClient(Protocol):
    """Submit a request, receive an async stream of its outputs, abort it."""

    model_name: str
    max_model_len: int

    def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Yield one RequestOutput delta per step until ``finished``.

        Raises ``ValueError`` (naming the field) for a bad prompt or params,
        and ``QueueFullError`` when the waiting queue is at its limit. Closing
        the iterator early aborts the request and frees its KV blocks.
        """
        ...

    async def abort(self, request_id: str) -> None:
        """Stop a request, waiting or running, and free its blocks (reason 'abort')."""
        ...

    def stats(self) -> EngineStats: ...
