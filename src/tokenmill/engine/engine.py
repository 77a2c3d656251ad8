"""LLMEngine: one model replica with text in and text out, synchronous.

The caller's side of the engine-core boundary around an in-process core:
``InputProcessor`` (tokenize, validate) -> ``EngineCore`` (token ids only;
engine/core.py) -> ``OutputProcessor`` (detokenize, stop strings). ``step()``
runs one core step and turns its ``EngineCoreOutputs`` into RequestOutput
text deltas; a stop string found in the text ends the request in the core
before the next step. ``AsyncEngine`` runs this on its own thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from tokenmill.config import EngineConfig
from tokenmill.engine.block_pool import DEFAULT_EVENT_CAPACITY
from tokenmill.engine.client import EngineStats
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import EngineCoreRequest
from tokenmill.engine.input_processor import InputProcessor
from tokenmill.engine.kv_events import KVEventBatch, KVEventBuffer
from tokenmill.engine.output_processor import OutputProcessor
from tokenmill.engine.request import RequestStatus
from tokenmill.errors import RequestError
from tokenmill.outputs import RequestOutput
from tokenmill.sampling_params import SamplingParams

log = logging.getLogger(__name__)


@dataclass
class GenerationResult:
    """A finished request from ``LLMEngine.generate``."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    logprobs: list | None = None
    prompt_logprobs: list | None = None
    """With params.prompt_logprobs: one entry per prompt token (None for the first)."""


@dataclass
class _CallerCounters:
    """Failures and events on the caller's side of the core."""

    output_failures: int = 0
    """Requests whose output processing (detokenizing, stop strings) raised."""
    kv_events: KVEventBuffer | None = None
    """The core's KV events relayed to ``take_kv_events`` (after subscribe_kv_events)."""


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.core = EngineCore(config)
        self.tokenizer = self._load_tokenizer(self.core.tokenizer_source)
        self.input_processor = InputProcessor(self.tokenizer, self.core.max_model_len, self.core.arch.vocab_size)
        self.output_processor = OutputProcessor(self.tokenizer)
        self._caller = _CallerCounters()

    @staticmethod
    def _load_tokenizer(source: str | None):
        if source is None:
            return None
        from tokenmill.model.tokenizer import load_tokenizer
        return load_tokenizer(source)

    # The core's description, for callers that size prompts or print banners.
    @property
    def config(self) -> EngineConfig:
        return self.core.config

    @property
    def model_name(self) -> str:
        return self.core.config.served_model_name

    @property
    def max_model_len(self) -> int:
        return self.core.max_model_len

    # ---- requests -------------------------------------------------------------

    def make_request(self, prompt: str | list[int], params: SamplingParams, request_id: str | None = None,
                     resume_output_ids: list[int] | None = None) -> EngineCoreRequest:
        """Validate and tokenize without touching engine state (thread-safe)."""
        return self.input_processor.process(prompt, params, request_id, resume_output_ids)

    def add(self, request: EngineCoreRequest) -> None:
        """Hand a made request to the core (RequestError for a duplicate id; then
        nothing is registered on either side)."""
        if request.request_id in self.output_processor:
            raise RequestError("request_id", f"duplicate request id {request.request_id!r}")
        self.output_processor.add(request)  # may raise: nothing registered yet
        try:
            self.core.add_request(request)
        except BaseException:
            self.output_processor.states.pop(request.request_id, None)
            raise

    def add_request(self, request_id: str | None, prompt: str | list[int], params: SamplingParams,
                    resume_output_ids: list[int] | None = None) -> str:
        """Queue a request; ``resume_output_ids``: tokens it already generated
        (it continues after them; see core_messages.ResumeState)."""
        request = self.make_request(prompt, params, request_id, resume_output_ids)
        self.add(request)
        return request.request_id

    def abort(self, request_id: str, reason: str = "abort") -> RequestOutput | None:
        """Stop a request, waiting or running, and free its blocks; returns its
        final output, or None if unknown. ``reason`` is counted in
        ``stats().aborted_requests`` (ABORT_REASONS)."""
        out, ok = self.output_processor.abort(request_id)
        if ok:
            self.core.finish_requests([request_id], RequestStatus.FINISHED_ABORTED, reason)
        else:  # flushing its text failed: it ends all the same, counted as an error
            self.core.finish_requests([request_id], RequestStatus.FINISHED_ERROR)
            self._count_output_failures(1)
        return out

    def has_unfinished_requests(self) -> bool:
        return self.core.has_unfinished_requests()

    @property
    def num_waiting(self) -> int:
        return len(self.core.scheduler.waiting)

    # ---- the loop ---------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        core_outputs = self.core.step()
        if core_outputs.kv_events is not None and self._caller.kv_events is not None:
            self._caller.kv_events.extend(core_outputs.kv_events)
        done = self.output_processor.process(core_outputs.outputs)
        for request_id, status in done.finish:
            self.core.finish_requests([request_id], status)
        self._count_output_failures(len(done.failed))
        return done.outputs

    def _count_output_failures(self, n: int) -> None:
        self._caller.output_failures += n

    def stats(self) -> EngineStats:
        """The core's stats plus the failures on this side (stage 'output', each
        also an 'error' among the requests ended early)."""
        stats = self.core.stats()
        n = self._caller.output_failures
        if not n:
            return stats
        failures, aborted = dict(stats.request_failures), dict(stats.aborted_requests)
        failures["output"] = failures.get("output", 0) + n
        aborted["error"] = aborted.get("error", 0) + n
        return replace(stats, request_failures=failures, aborted_requests=aborted)

    def subscribe_kv_events(self, capacity: int = DEFAULT_EVENT_CAPACITY) -> None:
        """Record KV events from now on (off by default: unread, they would grow
        forever); at most ``capacity`` wait for ``take_kv_events``."""
        if self._caller.kv_events is None:
            self._caller.kv_events = KVEventBuffer(capacity)
        self.core.subscribe_kv_events(capacity)

    @property
    def num_pending_kv_events(self) -> int:
        return len(self._caller.kv_events) if self._caller.kv_events is not None else 0

    def take_kv_events(self) -> KVEventBatch:
        """The KV events since the last call, with the core's sequence numbers."""
        if self._caller.kv_events is None:
            return KVEventBatch(0, ())
        return self._caller.kv_events.take()

    # ---- offline convenience ------------------------------------------------------

    def generate(self, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams],
                 use_tqdm: bool = False) -> list[GenerationResult]:
        """Run a batch to completion; results in prompt order."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError("params: need one SamplingParams per prompt")
        requests = [self.make_request(p, sp) for p, sp in zip(prompts, params_list)]
        for request in requests:
            self.add(request)
        results = {r.request_id: GenerationResult(r.request_id, list(r.prompt_token_ids), [], "", None,
                                                  [] if r.params.logprobs is not None else None)
                   for r in requests}
        bar = _progress(len(requests), use_tqdm)
        t0 = time.perf_counter()
        while self.has_unfinished_requests():
            for out in self.step():
                r = results[out.request_id]
                r.token_ids += out.new_token_ids
                r.text += out.new_text
                if out.logprobs and r.logprobs is not None:
                    r.logprobs += out.logprobs
                if out.prompt_logprobs is not None:
                    r.prompt_logprobs = out.prompt_logprobs
                if out.finished:
                    r.finish_reason = out.finish_reason
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        log.debug("generate: %d requests in %.2fs", len(requests), time.perf_counter() - t0)
        return [results[r.request_id] for r in requests]


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc="Generating", unit="req")
