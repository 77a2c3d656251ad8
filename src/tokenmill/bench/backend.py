"""The system under test, seen from the LoadGen driver: a Backend runs one
sample and reports the moment its first token arrives.

Two implementations: ``engine_backend.EngineBackend`` (the in-process engine,
no HTTP) and ``openai_backend.OpenAIBackend`` (any OpenAI-compatible endpoint).
The driver owns the clock and LoadGen; a backend only streams.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from tokenmill.bench.workload import Sample


@dataclass
class QueryOutcome:
    """What a backend returns for one sample."""

    output_tokens: int
    """Output tokens, counted on the client side (engine: tokens produced;
    HTTP: the streamed text re-encoded with the model's tokenizer)."""
    text: str = ""
    usage_output_tokens: int | None = None
    """The server's own count (usage.completion_tokens), when it reports one."""
    prompt_tokens: int = 0
    error: str | None = None
    """A one-line reason when the query failed (connection refused, HTTP 500,
    malformed stream...); the driver still completes the query with LoadGen."""
    output_token_ids: list[int] = field(default_factory=list)
    """Token ids when the backend knows them (engine); empty otherwise."""


class Backend(Protocol):
    label: str
    """Shown in reports, e.g. 'tokenmill-engine' or 'http://127.0.0.1:8000'."""
    model: str
    """Model name as the target reports it."""

    async def start(self) -> None:
        """Connect / check the target; raise BackendError with a clear message
        when it cannot be reached or does not look OpenAI-compatible."""
        ...

    async def run(self, sample: Sample, on_first_token: Callable[[], None]) -> QueryOutcome:
        """Run one sample to completion. Call ``on_first_token()`` exactly once,
        the moment the first content token arrives (not on role-only or empty
        chunks). Never raises for a per-query failure: return an outcome with
        ``error`` set instead."""
        ...

    async def close(self) -> None: ...


class BackendError(RuntimeError):
    """The target cannot be used at all (refused connection, not OpenAI-compatible,
    unknown model). Reported to the user as one line, not a traceback."""
