"""LLMEngine: one model replica. ``add_request`` / ``step`` / ``abort``.

A step is visibly three calls: ``schedule()`` -> ``execute()`` -> ``update()``,
then the sampled tokens become text deltas (RequestOutput) per request.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace

import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.block_pool import DEFAULT_EVENT_CAPACITY, BlockPool
from tokenmill.engine.client import EngineStats
from tokenmill.engine.exact_head import ExactLogits
from tokenmill.engine.isolation import execute_isolating
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.kv_events import KVEventBatch
from tokenmill.engine.output_processor import RequestTextState
from tokenmill.engine.request import Request, RequestStatus
from tokenmill.engine.resolve import (
    kv_cache_bytes,
    resolve_decode_kernel,
    resolve_deterministic,
    resolve_device,
    resolve_dtype,
    resolve_fused_ops,
)
from tokenmill.engine.runner import ForwardResult, ModelRunner
from tokenmill.engine.sampler import Sampler, SamplingRow, make_generator
from tokenmill.engine.scheduler import Scheduler, SchedulerOutput
from tokenmill.errors import RequestError
from tokenmill.kernels.invariant_linear import make_batch_invariant
from tokenmill.kernels.quantize import quantize_model
from tokenmill.model.embedded import EMBEDDED_NAME, embedded_gguf_path
from tokenmill.model.loaders import load_model
from tokenmill.outputs import RequestOutput
from tokenmill.sampling_params import SamplingParams

log = logging.getLogger(__name__)

_STAGE_VERBS = {"forward": "running the model on", "sampling": "sampling", "output": "detokenizing"}
"""Where a request can fail on its own (EngineStats.request_failures keys)."""


@dataclass
class GenerationResult:
    """A finished request from ``LLMEngine.generate``."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    logprobs: list | None = None


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        if config.num_threads and self.device.type == "cpu":
            torch.set_num_threads(config.num_threads)
        # Checked before the weights load: a configuration that cannot be
        # batch-invariant fails fast, naming the field.
        invariant_kernels = resolve_deterministic(config, self.device, self.dtype) if config.deterministic else None
        source = config.model or str(embedded_gguf_path())
        loaded = load_model(source, config.load_format, self.device, self.dtype, seed=config.seed)
        self.arch = loaded.arch
        self.model = loaded.model
        if config.quantization is not None:
            quantize_model(self.model, config.quantization)
        if invariant_kernels is not None:
            make_batch_invariant(self.model, invariant_kernels)
        self.tokenizer = self._load_tokenizer(config.tokenizer or loaded.tokenizer_source)
        self.config = self._resolve_limits(config, loaded.name if config.model else EMBEDDED_NAME)
        self.model_name = self.config.served_model_name
        self.max_model_len = self.config.max_model_len
        self.eos_token_ids = frozenset(self.tokenizer.eos_token_ids if self.tokenizer else self.arch.eos_token_ids)
        c = self.config
        self.pool = BlockPool(c.num_kv_blocks, c.block_size)
        self.kv = KVCacheManager(self.pool, c.enable_prefix_caching)
        self.scheduler = Scheduler(self.kv, c.max_num_seqs, c.max_num_batched_tokens)
        # Deterministic mode needs the C++ attention and fused ops: each computes a
        # token's row the same way whatever else is in the step.
        self.attention_backend, decode_kernel = resolve_decode_kernel(
            "cpp" if c.deterministic else c.attention_backend, self.device, self.dtype)
        self.fused_ops, self.model.ops = resolve_fused_ops("cpp" if c.deterministic else c.fused_ops,
                                                          self.device, self.dtype)
        self.runner = ModelRunner(self.model, c.num_kv_blocks, c.block_size, self.device, self.dtype, decode_kernel)
        self.sampler = Sampler(self.arch.vocab_size, seed=c.seed, argmax=self.model.ops.argmax,
                               row_by_row=c.deterministic)
        self.exact_head = self.model.exact_head()  # after every swap of the LM head above
        self.requests: dict[str, Request] = {}
        self.text_states: dict[str, RequestTextState] = {}
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_forward_retries = 0
        self.request_failures: Counter[str] = Counter()  # stage -> requests the engine failed there
        self.aborted_requests: Counter[str] = Counter()  # reason -> requests ended before they finished

    @staticmethod
    def _load_tokenizer(source: str | None):
        if source is None:
            return None
        from tokenmill.model.tokenizer import load_tokenizer
        return load_tokenizer(source)

    def _resolve_limits(self, config: EngineConfig, name: str) -> EngineConfig:
        """Fill in KV block count and max_model_len; every request that passes
        admission checks then fits in the cache on its own."""
        bytes_per_token = self.arch.kv_bytes_per_token(torch.finfo(self.dtype).bits // 8)
        blocks = config.num_kv_blocks or max(
            1, kv_cache_bytes(config.kv_cache_memory_gib, self.device) // (bytes_per_token * config.block_size))
        capacity = blocks * config.block_size
        limit = self.arch.max_position_embeddings
        if self.arch.sliding_window:
            limit = min(limit, self.arch.sliding_window)
        max_len = config.max_model_len or min(limit, capacity)
        if max_len > limit:
            raise ValueError(f"max_model_len: {max_len} exceeds the model's context length {limit}")
        if max_len > capacity:
            raise ValueError(f"max_model_len: {max_len} tokens do not fit in the KV cache "
                             f"({blocks} blocks x {config.block_size} = {capacity} tokens); "
                             "raise kv_cache_memory_gib or num_kv_blocks")
        return replace(config, num_kv_blocks=blocks, max_model_len=max_len,
                       served_model_name=config.served_model_name or name)

    # ---- requests -------------------------------------------------------------

    def make_request(self, prompt: str | list[int], params: SamplingParams,
                     request_id: str | None = None) -> Request:
        """Validate and tokenize without touching engine state (thread-safe)."""
        if not isinstance(params, SamplingParams):
            raise TypeError("params must be a SamplingParams")
        token_ids = self._tokenize(prompt)
        if not token_ids:
            raise RequestError("prompt", "the prompt is empty")
        if len(token_ids) >= self.max_model_len:
            raise RequestError("prompt", f"the prompt has {len(token_ids)} tokens; this model's maximum "
                               f"context length is {self.max_model_len} tokens (prompt + at least 1 output)")
        bad = next((t for t in token_ids if not 0 <= t < self.arch.vocab_size), None)
        if bad is not None:
            raise RequestError("prompt", f"token id {bad} is outside the vocabulary [0, {self.arch.vocab_size})")
        return Request(request_id or uuid.uuid4().hex, token_ids, params, self.eos_token_ids,
                       self.max_model_len, make_generator(params.seed))

    def _tokenize(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("prompt", "this model has no tokenizer (dummy weights): pass token ids")
            return self.tokenizer.encode(prompt)
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        raise RequestError("prompt", "must be a string or a list of token ids")

    def add(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise RequestError("request_id", f"duplicate request id {request.request_id!r}")
        text_state = RequestTextState(request, self.tokenizer)  # may raise: nothing registered yet
        self.requests[request.request_id] = request
        self.text_states[request.request_id] = text_state
        self.scheduler.add(request)

    def add_request(self, request_id: str | None, prompt: str | list[int], params: SamplingParams) -> str:
        request = self.make_request(prompt, params, request_id)
        self.add(request)
        return request.request_id

    def abort(self, request_id: str, reason: str = "abort") -> RequestOutput | None:
        """Stop a request, waiting or running, and free its blocks; returns its
        final output, or None if unknown. ``reason`` is counted in
        ``stats().aborted_requests`` (ABORT_REASONS)."""
        req = self.requests.get(request_id)
        if req is None:
            return None
        self.scheduler.finish(req, RequestStatus.FINISHED_ABORTED)
        try:
            out = self._finalize(req, RequestStatus.FINISHED_ABORTED, None)[0]
        except Exception as exc:  # flushing its text failed: it ends all the same (counted as an error)
            log.exception("output processing failed for aborted request %s", request_id)
            return self._fail(req, "output", f"{type(exc).__name__}: {exc}")
        self.aborted_requests[reason] += 1
        return out

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_work()

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    # ---- the loop ---------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        out = self.scheduler.schedule()
        if not out:
            return []
        forward, failed = self._execute(out)
        sampled, logprobs = self._sample(forward, failed)
        # Failed requests end before update(), which then skips them.
        outputs = [self._fail(self.requests[rid], stage, message) for rid, (stage, message) in failed.items()]
        # Prompt tokens computed this step (prefix hits excluded, recomputes included).
        self.num_prompt_tokens += sum(min(s.num_new_tokens, max(s.request.num_prompt_tokens - s.start, 0))
                                      for s in out.scheduled)
        advanced = self.scheduler.update(out, sampled)
        self.num_generation_tokens += len(advanced)
        return outputs + [self._emit(req, logprobs.get(req.request_id)) for req in advanced]

    def _execute(self, out: SchedulerOutput) -> tuple[ForwardResult | None, dict[str, tuple[str, str]]]:
        """The forward pass; if it raises, retried without the requests that make
        it raise (isolation.py). Returns (result, request id -> (stage, error))."""
        def run(scheduled):
            return self.runner.execute(SchedulerOutput(scheduled), self.kv)

        forward, errors, attempts = execute_isolating(run, out.scheduled)
        if attempts:
            self.num_forward_retries += 1
            log.error("a forward pass over %d requests raised; retried in parts (%d failed attempts), "
                      "failing %d request(s): %s", len(out.scheduled), attempts, len(errors), ", ".join(errors))
        return forward, {rid: ("forward", message) for rid, message in errors.items()}

    def _sample(self, forward: ForwardResult | None, failed: dict[str, tuple[str, str]]):
        """Sample every request that reached its last known token; a request whose
        sampling raises is added to ``failed``. Returns (id -> token, id -> logprob)."""
        if forward is None or not forward.sampling:
            return {}, {}
        sampling = forward.sampling
        rows = [SamplingRow(s.request.params, s.request.prompt_token_ids, s.request.output_token_ids,
                            s.request.generator) for s in sampling]
        result = self.sampler(forward.logits, rows, ExactLogits(self.exact_head, forward.hidden))
        for i, message in result.errors.items():
            failed[sampling[i].request.request_id] = ("sampling", message)
        ids = [s.request.request_id for s in sampling]
        sampled = {rid: t for i, (rid, t) in enumerate(zip(ids, result.token_ids)) if i not in result.errors}
        logprobs = {rid: lp for rid, lp in zip(ids, result.logprobs) if lp is not None}
        return sampled, logprobs

    def _emit(self, req: Request, logprob) -> RequestOutput:
        status = req.status if req.status.finished else None
        try:
            out, stop_hit = self.text_states[req.request_id].process(status, [logprob] if logprob else None)
        except Exception as exc:  # detokenizer / stop strings: this request's problem only
            log.exception("output processing failed for request %s", req.request_id)
            return self._fail(req, "output", f"{type(exc).__name__}: {exc}")
        if stop_hit is not None and status is None:
            self.scheduler.finish(req, RequestStatus.FINISHED_STOPPED)
        if out.finished:
            self._forget(req)
        return out

    def _fail(self, req: Request, stage: str, message: str) -> RequestOutput:
        """End one request with an error (its blocks freed); the others go on."""
        log.error("request %s failed (stage: %s): %s", req.request_id, stage, message)
        self.request_failures[stage] += 1
        self.aborted_requests["error"] += 1
        self.scheduler.finish(req, RequestStatus.FINISHED_ERROR)
        self._forget(req)
        return RequestOutput(
            request_id=req.request_id, new_token_ids=[], new_text="", finished=True,
            finish_reason=RequestStatus.FINISHED_ERROR.value, num_prompt_tokens=req.num_prompt_tokens,
            num_output_tokens=req.num_output_tokens, num_cached_tokens=max(req.num_cached_tokens, 0),
            error=f"the engine failed while {_STAGE_VERBS[stage]} this request ({message})")

    def _finalize(self, req: Request, status: RequestStatus, logprob):
        state = self.text_states.get(req.request_id)
        out, hit = state.process(status, logprob)
        self._forget(req)
        return out, hit

    def _forget(self, req: Request) -> None:
        self.requests.pop(req.request_id, None)
        self.text_states.pop(req.request_id, None)

    def stats(self) -> EngineStats:
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_blocks_total=self.pool.num_blocks,
            kv_blocks_used=self.pool.num_used_blocks,
            prefix_cache_queries=self.kv.queries,
            prefix_cache_hits=self.kv.hits,
            num_preemptions=self.scheduler.num_preemptions,
            prompt_tokens=self.num_prompt_tokens,
            generation_tokens=self.num_generation_tokens,
            forward_retries=self.num_forward_retries,
            request_failures=dict(self.request_failures),
            aborted_requests=dict(self.aborted_requests),
        )

    def subscribe_kv_events(self, capacity: int = DEFAULT_EVENT_CAPACITY) -> None:
        """Record KV events from now on (off by default: unread, they would grow forever)."""
        self.pool.subscribe_events(capacity)

    def take_kv_events(self) -> KVEventBatch:
        return self.pool.take_events()

    # ---- offline convenience ------------------------------------------------------

    def generate(self, prompts: list[str | list[int]], params: SamplingParams | list[SamplingParams],
                 use_tqdm: bool = False) -> list[GenerationResult]:
        """Run a batch to completion; results in prompt order."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError("params: need one SamplingParams per prompt")
        ids = [self.add_request(None, p, sp) for p, sp in zip(prompts, params_list)]
        results = {rid: GenerationResult(rid, self.requests[rid].prompt_token_ids, [], "", None,
                                         [] if sp.logprobs is not None else None)
                   for rid, sp in zip(ids, params_list)}
        bar = _progress(len(ids), use_tqdm)
        t0 = time.perf_counter()
        while self.has_unfinished_requests():
            for out in self.step():
                r = results[out.request_id]
                r.token_ids += out.new_token_ids
                r.text += out.new_text
                if out.logprobs and r.logprobs is not None:
                    r.logprobs += out.logprobs
                if out.finished:
                    r.finish_reason = out.finish_reason
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        log.debug("generate: %d requests in %.2fs", len(ids), time.perf_counter() - t0)
        return [results[rid] for rid in ids]


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc="Generating", unit="req")
