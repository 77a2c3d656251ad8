"""Helpers the speculative-decoding tests share: engines on the embedded model,
and the check that drafting changes no token."""

from __future__ import annotations

import functools

from tokenmill.config import EngineConfig
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import EngineCoreRequest
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.request import RequestStatus
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams


def embedded_engines(speculative_config: dict) -> tuple[LLMEngine, LLMEngine]:
    """The embedded model without (shared) and with ``speculative_config``, float32 and
    batch-invariant where the C++ kernels build: a verification step computes
    k + 1 rows of a request where plain decoding computes one, and only
    batch-invariant kernels promise the same bits for a row whatever else is in
    its GEMM (default mode gives the same tokens unless rounding flips a
    near-tie, as any batching can)."""
    common = dict(dtype="float32", deterministic=load_cpu_kernels() is not None)
    return _plain_engine(), LLMEngine(EngineConfig(**common, speculative_config=speculative_config))


@functools.cache
def _plain_engine() -> LLMEngine:
    """One engine without drafts for every test module that compares against it."""
    return LLMEngine(EngineConfig(dtype="float32", deterministic=load_cpu_kernels() is not None))


def chat(engine: LLMEngine, text: str) -> list[int]:
    tok = engine.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]), add_special_tokens=False)


def assert_same_alone_and_batched(plain, spec, prompts, params) -> list[list[int]]:
    """``spec`` gives ``plain``'s tokens for each prompt alone and for all of them
    in one batch; returns those tokens."""
    want = [r.token_ids for r in plain.generate(prompts, params)]
    assert [spec.generate([p], params)[0].token_ids for p in prompts] == want
    assert [r.token_ids for r in spec.generate(prompts, params)] == want
    return want


def greedy_drafts_on_everyday_prompts(plain: LLMEngine, spec: LLMEngine) -> tuple[int, int]:
    """Two chat prompts and a raw one, greedy, alone and batched: the same tokens
    with drafts as without, and no block left taken. Returns (drafts verified,
    drafts accepted) over these runs."""
    prompts = [chat(plain, "Why is the sky blue?"), chat(plain, "Write a haiku about rain."),
               plain.tokenizer.encode("Once upon a time, in a small village by the sea,")]
    before = spec.stats()
    assert_same_alone_and_batched(plain, spec, prompts, SamplingParams(max_tokens=32, temperature=0.0))
    after = spec.stats()
    assert after.kv_blocks_used == 0
    return (after.spec_draft_tokens - before.spec_draft_tokens,
            after.spec_accepted_tokens - before.spec_accepted_tokens)


def assert_abort_with_drafts_pending_frees_every_block(core: EngineCore) -> None:
    """Drafting grows a request's blocks before the step that verifies them; an
    abort between the two gives all of them back (three requests, on ``core``)."""
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    for i in range(3):
        core.add_request(EngineCoreRequest(f"r{i}", [3 + i, 5, 7, 9, 11, 13], params))
    core.step()  # prompts computed, first tokens sampled
    core.drafting.propose(core.scheduler.running)  # what the next step does before scheduling
    pending = [r for r in core.scheduler.running if r.draft_token_ids]
    assert len(pending) == 3 and core.pool.num_used_blocks > 0
    assert core.finish_requests([r.request_id for r in pending], RequestStatus.FINISHED_ABORTED) == 3
    assert core.pool.num_used_blocks == 0 and not core.scheduler.has_work()
