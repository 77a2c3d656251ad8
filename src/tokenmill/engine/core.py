"""EngineCore: one model replica behind typed messages (engine/core_messages.py).

Token ids in, token ids out. ``add_request(EngineCoreRequest)``,
``finish_requests(ids, status)`` (the one verb that ends a request, whatever
the reason), and ``step() -> EngineCoreOutputs``. A step is visibly three
calls: ``schedule()`` -> ``execute()`` -> ``update()``, with the sampler
between the last two. The core knows nothing of text: no tokenizer, no
detokenizer, no stop strings (the caller's input and output processors do
that), so the same core runs in-process under ``LLMEngine`` / ``AsyncEngine``
and, later, inside a worker process that exchanges msgpack-encoded messages.

One request's failure is its own: a forward pass that raises is retried
without the requests that make it raise (isolation.py), a row whose sampling
raises fails alone (sampler.py); those requests end with finish_reason
'error' and the step goes on for the others.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

import torch
from torch import nn

from tokenmill.config import EngineConfig
from tokenmill.engine.block_pool import DEFAULT_EVENT_CAPACITY, BlockPool
from tokenmill.engine.client import ABORT_REASONS, EngineStats
from tokenmill.engine.core_messages import (
    EngineCoreFinish,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    failure_message,
)
from tokenmill.engine.exact_head import ExactLogits
from tokenmill.engine.input_processor import check_prompt, check_resume
from tokenmill.engine.isolation import execute_isolating
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.kv_events import KVEventBatch
from tokenmill.engine.kv_import import adopt_kv
from tokenmill.engine.kv_transfer import KVBlocks, KVLayout, gather
from tokenmill.engine.linears import swap_linears
from tokenmill.engine.request import Request, RequestStatus
from tokenmill.engine.resolve import (
    kv_cache_bytes,
    resolve_cuda_graph_sizes,
    resolve_decode_kernel,
    resolve_deterministic,
    resolve_device,
    resolve_dtype,
    resolve_fused_ops,
    resolve_latent_kernel,
    resolve_linear_backend,
    resolve_native_decoder,
)
from tokenmill.engine.runner import ForwardResult, ModelRunner
from tokenmill.engine.sampler import Sampler, token_logprobs
from tokenmill.engine.scheduler import Scheduler, SchedulerOutput
from tokenmill.engine.step_stats import StepCounters, step_kind
from tokenmill.engine.structured_outputs import StepMasks, StructuredOutputs
from tokenmill.engine.verify import accept_exact, verification_rows
from tokenmill.errors import RequestError
from tokenmill.kernels.int4_linear import resolve_int4_activations
from tokenmill.kernels.quantize import int4_dense_copies_fit
from tokenmill.model.embedded import EMBEDDED_NAME, embedded_gguf_path
from tokenmill.model.loaders import load_model
from tokenmill.spec.config import SpeculativeConfig, parse_speculative_config
from tokenmill.spec.drafting import Drafting
from tokenmill.spec.proposer import extra_kv_bytes_per_token, make_draft_model, make_proposer

log = logging.getLogger(__name__)

_FINISH_STATUSES = {"abort": RequestStatus.FINISHED_ABORTED, "stop": RequestStatus.FINISHED_STOPPED,
                    "error": RequestStatus.FINISHED_ERROR}
"""EngineCoreFinish.status -> the status a request ends with."""


class EngineCore:
    def __init__(self, config: EngineConfig):
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        if config.num_threads and self.device.type == "cpu":
            torch.set_num_threads(config.num_threads)
        # Checked before the weights load: a configuration that cannot be
        # batch-invariant fails fast, naming the field.
        invariant_kernels = resolve_deterministic(config, self.device, self.dtype) if config.deterministic else None
        linear_backend = resolve_linear_backend(config, self.device, self.dtype)
        source = config.model or str(embedded_gguf_path())
        loaded = load_model(source, config.load_format, self.device, self.dtype, seed=config.seed)
        self.arch = loaded.arch
        self.model = loaded.model
        spec = parse_speculative_config(config.speculative_config)
        self.tokenizer_source = config.tokenizer or loaded.tokenizer_source
        """Where the caller's processors load the tokenizer from (None: dummy weights)."""
        # Before the swap below: a self-int4 draft copies the target's plain linears.
        draft_model = self._make_draft(spec, config, linear_backend) if spec is not None else None
        self.int4_dense_prefill = config.quantization == "int4" and int4_dense_copies_fit(self.model)
        """int4 keeps dense copies of its layers for prefill (kernels/int4_linear.py)."""
        self.linear_backend = swap_linears(self.model, config.quantization, config.linear_backend,
                                           linear_backend, invariant_kernels, self.int4_dense_prefill,
                                           resolve_int4_activations(config.int4_activations, self.device,
                                                                    self_int4_draft=False))
        """What runs the linears: mixed | panels | onednn | torch | invariant | int8 | int4."""
        self.config = self._resolve_limits(config, loaded.name if config.model else EMBEDDED_NAME,
                                           extra_kv_bytes_per_token(spec, self.model, draft_model, self.dtype)
                                           if spec is not None else 0)
        self.eos_token_ids = tuple(self.arch.eos_token_ids)
        """EOS ids for requests that bring none (no tokenizer on the caller's side)."""
        c = self.config
        self.pool = BlockPool(c.num_kv_blocks, c.block_size)
        self.kv = KVCacheManager(self.pool, c.enable_prefix_caching)
        self.scheduler = Scheduler(self.kv, c.max_num_seqs, c.max_num_batched_tokens, c.enable_chunked_prefill)
        # Deterministic mode needs the C++ attention and fused ops: each computes a
        # token's row the same way whatever else is in the step.
        self.attention_backend, decode_kernel = resolve_decode_kernel(
            "cpp" if c.deterministic else c.attention_backend, self.device, self.dtype)
        self.fused_ops, self.model.ops = resolve_fused_ops("cpp" if c.deterministic else c.fused_ops,
                                                          self.device, self.dtype, self.arch)
        if draft_model is not None:
            draft_model.ops = self.model.ops
        self._set_native_decoders(draft_model)
        graph_sizes = resolve_cuda_graph_sizes(c, self.device, self.model)
        self.runner = ModelRunner(self.model, c.num_kv_blocks, c.block_size, self.device, self.dtype, decode_kernel,
                                  resolve_latent_kernel(self.attention_backend), scratch_block=bool(graph_sizes))
        self.kv_layout = KVLayout.of(self.runner.kv_cache_spec, c.block_size, self.dtype)
        """What one block holds: another engine's blocks are adopted only under an equal layout."""
        self.sampler = Sampler(self.arch.vocab_size, seed=c.seed, argmax=self.model.ops.argmax,
                               row_by_row=c.deterministic)
        self.exact_head = self.model.exact_head()  # after every swap of the LM head above
        self._init_counters()
        self._publish_events = False  # drain KV events into every step's outputs (after subscribe_kv_events)
        self.structured = StructuredOutputs(self.tokenizer_source, self.arch.vocab_size)
        """Grammar matchers of constrained requests (structured outputs)."""
        self.drafting = self._make_drafting(spec, draft_model) if spec else None
        """Speculative decoding (spec/drafting.py), or None."""
        if graph_sizes:  # last: the capture sees every buffer the steps will use
            self.runner.capture_decode_graphs(graph_sizes, c.max_model_len,
                                              multi_token_runs=c.cuda_graph_mode == "full")

    def _make_drafting(self, spec: SpeculativeConfig, draft_model: nn.Module | None) -> Drafting:
        """The method's proposer over this engine's runner and cache. self-int4's
        greedy drafts are rescored on the target's own head (spec/shortlist_head.py)."""
        shortlist = getattr(draft_model, "shortlist_head", None)
        if shortlist is not None:
            shortlist.rescore_on(self.exact_head)
        return Drafting(spec, make_proposer(spec, self.model, draft_model, self.runner, self.kv, self.config.seed))

    def _set_native_decoders(self, draft_model: nn.Module | None) -> None:
        """The decoder layers in one C++ call per step (kernels/native_decoder.py), for
        the model and its draft model, where it applies."""
        for m in (self.model, draft_model):
            if m is not None and hasattr(m, "native_decoder"):
                m.native_decoder = resolve_native_decoder(self.config, self.device, self.fused_ops,
                                                          self.attention_backend, m)

    @property
    def decoder_loop(self) -> str:
        """native: the decoder layers run in one C++ call per step; python: op by op."""
        return "native" if getattr(self.model, "native_decoder", None) is not None else "python"

    def _init_counters(self) -> None:
        """The cumulative counters stats() reports."""
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_forward_retries = 0
        self.request_failures: Counter[str] = Counter()  # stage -> requests failed there
        self.aborted_requests: Counter[str] = Counter()  # reason -> requests ended before they finished
        self.kv_blocks_imported = 0
        self.kv_imports_recomputed = 0  # imports that could not be adopted: the request recomputes its prompt
        self.step_counters = StepCounters()  # steps run and their seconds, by kind (engine/step_stats.py)

    def _make_draft(self, spec: SpeculativeConfig, config: EngineConfig, linear_backend: str) -> nn.Module | None:
        """The speculative method's draft model (spec/proposer.py), or None. A
        draft_model's own weights get the target's linear backend, or the
        quantization its config names."""
        draft = make_draft_model(spec, self.model, config.quantization, tokenizer_source=self.tokenizer_source,
                                 device=self.device, dtype=self.dtype, seed=config.seed,
                                 int4_activations=resolve_int4_activations(config.int4_activations, self.device,
                                                                           self_int4_draft=True))
        if spec.method == "draft_model":
            swap_linears(draft, spec.quantization, config.linear_backend, spec.quantization or linear_backend,
                         None, spec.quantization == "int4" and int4_dense_copies_fit(draft),
                         resolve_int4_activations(config.int4_activations, self.device, self_int4_draft=False))
        return draft

    def _resolve_limits(self, config: EngineConfig, name: str, extra_bytes_per_token: int) -> EngineConfig:
        """Fill in KV block count and max_model_len; every request that passes
        admission checks then fits in the cache on its own. ``extra_bytes_per_token``:
        cache beside the model's (speculative decoding's drafter), counted too."""
        # What one token costs in the cache, per the model (K and V heads; MLA: one latent).
        spec = self.model.kv_cache_spec()
        bytes_per_token = spec.bytes_per_token(torch.finfo(self.dtype).bits // 8) + extra_bytes_per_token
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
        budget = config.max_num_batched_tokens
        if not config.enable_chunked_prefill and budget < max_len:
            log.info("chunked prefill off: the step budget is raised from %d to max_model_len %d tokens, "
                     "so that every prompt fits one step", budget, max_len)
            budget = max_len
        return replace(config, num_kv_blocks=blocks, max_model_len=max_len, max_num_batched_tokens=budget,
                       served_model_name=config.served_model_name or name)

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    # ---- messages in ------------------------------------------------------------

    def add_request(self, request: EngineCoreRequest, kv_blocks: KVBlocks | None = None) -> None:
        """Queue a request; RequestError (naming the field) for a prompt or resume
        state that breaks the limits, or a duplicate id. Nothing is registered
        when it raises.

        ``kv_blocks``: its prompt's K/V computed by a prefill engine
        (disaggregated serving; the request resumes after its first token).
        They are written into this cache and the request starts with its prompt
        computed; a ValueError (naming the field) when they do not fit the
        request or this engine's layout. When the blocks it was told it holds
        were evicted meanwhile, or the pool is short, the request recomputes
        its prompt instead (counted in ``kv_imports_recomputed``)."""
        vocab = self.arch.vocab_size
        check_prompt(request.prompt_token_ids, self.max_model_len, vocab)
        resumed = []
        if request.resume is not None:
            check_resume(request.prompt_token_ids, request.resume, request.params, self.max_model_len, vocab)
            resumed = list(request.resume.output_token_ids)
        eos = request.eos_token_ids if request.eos_token_ids is not None else self.eos_token_ids
        req = Request(request.request_id, list(request.prompt_token_ids), request.params, frozenset(eos),
                      self.max_model_len, resumed, prefill_only=request.prefill_only)
        if request.request_id in self.scheduler.requests:
            raise RequestError("request_id", f"duplicate request id {request.request_id!r}")
        if req.params.structured is not None:
            self.structured.add(req)
        try:
            if kv_blocks is not None:
                self._adopt_kv(req, kv_blocks)
        except BaseException:
            self.structured.forget(req.request_id)
            raise
        self.scheduler.add(req)

    def _adopt_kv(self, req: Request, blocks: KVBlocks) -> None:
        """Write imported prompt blocks into this cache and hand them to ``req``
        (engine/kv_import.py), or count a recompute when they cannot be used."""
        imported = adopt_kv(req, blocks, self.kv_layout, self.kv, self.pool, self.runner.kv_caches,
                            self.config.block_size)
        if imported is None:
            self.kv_imports_recomputed += 1
        else:
            self.kv_blocks_imported += imported

    def export_kv(self, request_id: str, first_block: int) -> KVBlocks | None:
        """A copy of a held prompt's blocks from ``first_block`` on (the
        receiver holds the ones before), or None when nothing is held for the
        request (it was never prefill-only, or its hold expired or was
        released). Safe from another thread than the one that steps: the hold
        is claimed first, so its blocks stay put while they are read; release
        it on the stepping thread afterwards (``release_kv``)."""
        held = self.kv.claim_held(request_id)
        if held is None:
            return None
        full = len(held.hashes)
        if not 0 <= first_block <= full:
            raise ValueError(f"first_block: must be within 0..{full} (the prompt's full blocks), got {first_block}")
        return KVBlocks(request_id, self.kv_layout, first_block, held.num_tokens, held.hashes[first_block:],
                        gather(self.runner.kv_caches, held.blocks[first_block:]))

    def release_kv(self, request_id: str) -> bool:
        """Free a held prompt's blocks (after export, or abandoned); False if none was held."""
        return self.kv.release_hold(request_id)

    def finish_requests(self, request_ids: Iterable[str], status: RequestStatus, cause: str | None = None) -> int:
        """The one verb that ends requests early: blocks freed, requests forgotten.
        For an abort, ``cause`` (an ABORT_REASONS key) is counted in the stats.
        Failures are counted where they happen: the core counts its own
        (forward, sampling) in ``_fail``; a caller that fails a request on its
        side (output processing) counts it there and ends it here with
        FINISHED_ERROR. Unknown ids (already finished) are skipped. Returns how
        many it ended."""
        request_ids = list(request_ids)
        ended = self.scheduler.finish_requests(request_ids, status)
        for rid in request_ids:  # a prefill-only request already ended: its held blocks go too
            self.kv.release_hold(rid)
            self.structured.forget(rid)
        if ended and status is RequestStatus.FINISHED_ABORTED:
            self.aborted_requests[cause or "abort"] += len(ended)
        return len(ended)

    def apply_finish(self, message: EngineCoreFinish) -> int:
        """``finish_requests`` for a message from a remote caller (checks its fields)."""
        status = _FINISH_STATUSES.get(message.status)
        if status is None:
            raise RequestError("status", f"must be one of {sorted(_FINISH_STATUSES)}, got {message.status!r}")
        if status is RequestStatus.FINISHED_ABORTED and message.cause not in ABORT_REASONS:
            raise RequestError("cause", f"must be one of {sorted(ABORT_REASONS)}, got {message.cause!r}")
        return self.finish_requests(message.request_ids, status, message.cause)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_work()

    # ---- the loop ---------------------------------------------------------------

    def step(self) -> EngineCoreOutputs:
        start, start_cpu = time.perf_counter(), time.thread_time()
        if self.kv.held:
            self.kv.expire_holds()
        if self.drafting is not None:
            self.drafting.propose(self.scheduler.running)
        out = self.scheduler.schedule()
        self.last_schedule = out  # what the last step ran (AsyncEngine.step_log reads it)
        outputs = []
        if out:
            kind = step_kind(out)  # before _run: update() moves the requests on
            outputs = self._run(out)
            self.step_counters.record(kind, time.perf_counter() - start, time.thread_time() - start_cpu)
        return EngineCoreOutputs(outputs, self.stats(), self._drain_events())

    def _run(self, out: SchedulerOutput) -> list[EngineCoreOutput]:
        start = time.perf_counter()
        masks = self.structured.start_masks(out.scheduled) if self.structured.matchers else None
        forward, failed = self._execute(out)  # the grammar masks are computed meanwhile
        self._prompt_logprobs(forward, failed)
        sampled, logprobs = self._sample(forward, failed, masks.result() if masks is not None else None)
        if self.drafting is not None:
            self.drafting.record_step(out, time.perf_counter() - start)
        # Failed requests end before update(), which then skips them.
        outputs = [self._fail(rid, stage, message) for rid, (stage, message) in failed.items()]
        # Prompt tokens computed this step (prefix hits excluded, recomputes included).
        self.num_prompt_tokens += sum(min(s.num_new_tokens, max(s.request.num_prompt_tokens - s.start, 0))
                                      for s in out.scheduled)
        advanced = self.scheduler.update(out, sampled)
        self.num_generation_tokens += sum(n for _, n in advanced)
        for req, _ in advanced:
            if req.status.finished:
                self.structured.forget(req.request_id)
        if self.drafting is not None:
            self.drafting.after_step(out, forward, self.scheduler.requests)
            for req, _ in advanced:
                if req.status.finished:
                    self.drafting.log_finished(req)
        return outputs + [_output(req, n, logprobs.get(req.request_id)) for req, n in advanced]

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

    def _prompt_logprobs(self, forward: ForwardResult | None, failed: dict[str, tuple[str, str]]) -> None:
        """Append the entries of the prompt positions computed this step to
        their requests (Request.prompt_logprobs); a request whose entries raise
        is added to ``failed`` (stage 'sampling'), the others go on."""
        for rid, (start, logits) in (forward.prompt_logits.items() if forward is not None else ()):
            req = self.scheduler.requests[rid]
            try:
                if start != req.num_prompt_logprobs:
                    raise ValueError(f"prompt logprobs from position {start}, expected {req.num_prompt_logprobs}")
                targets = req.prompt_token_ids[start + 1:start + 1 + logits.shape[0]]
                entries = token_logprobs(logits[:, :self.arch.vocab_size], targets, req.params.prompt_logprobs)
            except Exception as exc:
                failed[rid] = ("sampling", f"prompt logprobs: {type(exc).__name__}: {exc}")
                continue
            req.prompt_logprobs += entries
            req.num_prompt_logprobs += len(entries)

    def _sample(self, forward: ForwardResult | None, failed: dict[str, tuple[str, str]], masks: StepMasks | None):
        """Sample every row of the requests that reached their last known token
        (constrained rows masked first) and keep the verified run of each
        (verify.py); a request any of whose rows raises, or whose grammar fails,
        is added to ``failed``. Returns (id -> tokens to append, id -> their logprobs)."""
        if forward is None or not forward.sampling:
            return {}, {}
        rows, spans = [], []
        for s in forward.sampling:
            req = s.request
            drafts = req.draft_token_ids[:s.num_draft_tokens]
            spans.append((len(rows), drafts))
            rows += verification_rows(req, drafts)
        if masks is not None:
            failed.update((rid, ("grammar", error)) for rid, error in masks.errors.items())
            StructuredOutputs.apply(masks, forward.logits,
                                    {s.request.request_id: first for s, (first, _) in zip(forward.sampling, spans)})
        result = self.sampler(forward.logits, rows, ExactLogits(self.exact_head, forward.hidden))
        sampled, logprobs = {}, {}
        for s, (first, drafts) in zip(forward.sampling, spans):
            rid, last = s.request.request_id, first + len(drafts) + 1
            if rid in failed:  # its grammar failed while computing its mask
                continue
            error = next((result.errors[i] for i in range(first, last) if i in result.errors), None)
            if error is not None:
                failed[rid] = ("sampling", error)
                continue
            tokens = accept_exact(drafts, result.token_ids[first:last])
            error = self.structured.advance(rid, tokens) if self.structured.matchers else None
            if error is not None:
                failed[rid] = ("grammar", error)
                continue
            sampled[rid] = tokens
            if self.drafting is not None:
                self.drafting.record(s.request, len(drafts), len(tokens))
            if rows[first].params.logprobs is not None:
                logprobs[rid] = result.logprobs[first:first + len(tokens)]
        return sampled, logprobs

    def _fail(self, request_id: str, stage: str, message: str) -> EngineCoreOutput:
        """End one request with an error (its blocks freed); the others go on."""
        log.error("request %s failed (stage: %s): %s", request_id, stage, message)
        req = self.scheduler.requests[request_id]
        self.finish_requests([request_id], RequestStatus.FINISHED_ERROR)
        self.request_failures[stage] += 1
        self.aborted_requests["error"] += 1
        return EngineCoreOutput(request_id, [], RequestStatus.FINISHED_ERROR.value,
                                num_cached_tokens=max(req.num_cached_tokens, 0),
                                error=failure_message(stage, message))

    # ---- stats and events -----------------------------------------------------

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
            prefill_tokens_queued=self.scheduler.num_prefill_tokens_queued(),
            kv_blocks_held=sum(len(h.blocks) for h in list(self.kv.held.values())),
            kv_blocks_imported=self.kv_blocks_imported,
            kv_imports_recomputed=self.kv_imports_recomputed,
            engine_steps=dict(self.step_counters.steps),
            engine_step_seconds=dict(self.step_counters.seconds),
            engine_step_cpu_seconds=dict(self.step_counters.cpu_seconds),
            **(self._spec_stats() if self.drafting is not None else {}),
        )

    def _spec_stats(self) -> dict:
        d = self.drafting
        return dict(spec_draft_tokens=d.num_draft_tokens, spec_accepted_tokens=d.num_accepted_tokens,
                    spec_verifications=d.num_verifications,
                    spec_accepted_per_position={str(k): n for k, n in sorted(d.accepted_per_position.items())})

    def subscribe_kv_events(self, capacity: int = DEFAULT_EVENT_CAPACITY) -> None:
        """Record KV events from now on and hand them out with every step's
        outputs (off by default: unread, they would grow forever)."""
        self.pool.subscribe_events(capacity)
        self._publish_events = True

    def _drain_events(self) -> KVEventBatch | None:
        if not self._publish_events or not self.pool.num_pending_events:
            return None
        return self.pool.take_events()


def _output(req: Request, n: int, logprobs) -> EngineCoreOutput:
    """The step's delta for a request that got ``n`` new tokens (0: a
    max_tokens=0 request's end); its pending prompt logprobs move into it."""
    finished = req.status.finished
    prompt, req.prompt_logprobs = req.prompt_logprobs, []
    return EngineCoreOutput(
        req.request_id, req.token_ids[len(req.token_ids) - n:],
        finish_reason=req.status.value if finished else None,
        stop_reason=req.stop_reason if finished else None,
        num_cached_tokens=max(req.num_cached_tokens, 0),
        logprobs=logprobs[:n] if logprobs is not None else None,
        prompt_logprobs=prompt or None)
