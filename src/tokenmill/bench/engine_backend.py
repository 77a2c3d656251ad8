"""The in-process engine as a system under test: no HTTP, the same
``EngineClient`` interface the server uses."""

from __future__ import annotations

from typing import Callable

from tokenmill.bench.backend import QueryOutcome
from tokenmill.bench.workload import Sample
from tokenmill.engine.client import EngineClient
from tokenmill.sampling_params import SamplingParams


class EngineBackend:
    def __init__(self, engine: EngineClient, label: str = "engine"):
        self.engine = engine
        self.label = label
        self.model = engine.model_name

    async def start(self) -> None:
        """The engine is already loaded; nothing to connect."""

    async def run(self, sample: Sample, on_first_token: Callable[[], None]) -> QueryOutcome:
        # Greedy with ignore_eos, like the HTTP backend's requests, so every
        # target produces exactly max_tokens tokens per sample.
        params = SamplingParams(max_tokens=sample.max_tokens, temperature=0.0, ignore_eos=True)
        ids: list[int] = []
        text: list[str] = []
        try:
            async for out in self.engine.generate(list(sample.prompt_token_ids), params):
                if out.new_token_ids and not ids:
                    on_first_token()
                ids += out.new_token_ids
                text.append(out.new_text)
                if out.finished and out.finish_reason in ("abort", "error"):
                    return QueryOutcome(len(ids), "".join(text), prompt_tokens=len(sample.prompt_token_ids),
                                        error=f"request ended with {out.finish_reason}: {out.error or ''}".strip(),
                                        output_token_ids=ids)
        except (ValueError, RuntimeError) as exc:  # rejected at admission, or the engine failed
            return QueryOutcome(len(ids), "".join(text), error=str(exc), output_token_ids=ids)
        return QueryOutcome(len(ids), "".join(text), prompt_tokens=len(sample.prompt_token_ids),
                            output_token_ids=ids)

    async def close(self) -> None:
        """The engine outlives the run (a sweep reuses it); its owner shuts it down."""
