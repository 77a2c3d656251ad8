"""Speculative decoding with DeepSeek's MTP layer as drafter (spec/mtp.py), on
the tiny DeepSeek preset with random weights: outputs token-identical to
decoding without drafts (greedy and seeded; batch 1 and batched; prefix
hits, chunked prefill, preemption), each draft the one a from-scratch MTP pass
over the whole sequence gives (the incrementally kept MTP cache is right),
its cache layer counted in the KV memory, and a model without MTP refused."""

from __future__ import annotations

import pytest
import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import EngineCoreRequest
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.request import Request
from tokenmill.engine.runner import ModelRunner
from tokenmill.engine.scheduler import Scheduler
from tokenmill.sampling_params import SamplingParams

TINY = dict(model="dummy:deepseek-v3-tiny", dtype="float32", device="cpu", max_model_len=128, seed=3)


def mtp(k: int, acceptance: str = "exact_match") -> dict:
    return {"method": "mtp", "num_speculative_tokens": k, "adaptive": False, "acceptance_method": acceptance}


def prompts(n: int, length: int = 40) -> list[list[int]]:
    return [[(7 * i + 3 * j) % 200 + 5 for j in range(length + 3 * i)] for i in range(n)]


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_and_seeded_outputs_are_identical(k):
    plain = LLMEngine(EngineConfig(**TINY, num_kv_blocks=64))
    spec = LLMEngine(EngineConfig(**TINY, num_kv_blocks=64, speculative_config=mtp(k)))
    batch = prompts(4)
    params = [SamplingParams(max_tokens=20, ignore_eos=True,
                             **({"temperature": 0.0} if i % 2 else {"temperature": 0.9, "seed": i}))
              for i in range(4)]
    want = [r.token_ids for r in plain.generate(batch, params)]
    assert [r.token_ids for r in spec.generate(batch, params)] == want
    assert [spec.generate([p], q)[0].token_ids for p, q in zip(batch, params)] == want
    stats = spec.stats()
    assert stats.spec_draft_tokens > 0 and stats.kv_blocks_used == 0


def test_rejection_sampler_keeps_greedy_outputs_and_repeats_seeded_ones():
    """Sampled drafts: greedy requests still match decoding without drafts; the
    seeded ones (their drafts drawn from the MTP distribution) repeat exactly."""
    plain = LLMEngine(EngineConfig(**TINY, num_kv_blocks=64))
    runs = [LLMEngine(EngineConfig(**TINY, num_kv_blocks=64, speculative_config=mtp(2, "rejection_sampler")))
            for _ in range(2)]
    batch = prompts(4)
    params = [SamplingParams(max_tokens=20, ignore_eos=True,
                             **({"temperature": 0.0} if i % 2 else {"temperature": 0.9, "seed": i}))
              for i in range(4)]
    want = [r.token_ids for r in plain.generate(batch, params)]
    first, second = ([r.token_ids for r in e.generate(batch, params)] for e in runs)
    assert first[1::2] == want[1::2] and second == first
    stats = runs[0].stats()
    assert stats.spec_draft_tokens > 0 and stats.kv_blocks_used == 0


def test_stress_chunked_prefill_preemption_and_prefix_hits():
    stress = dict(max_num_batched_tokens=16, num_kv_blocks=10, block_size=16, enable_prefix_caching=True)
    plain = LLMEngine(EngineConfig(**TINY, **stress))
    spec = LLMEngine(EngineConfig(**TINY, **stress, speculative_config=mtp(2)))
    shared = [(5 * j) % 90 + 7 for j in range(32)]
    batch = [shared + p[:20] for p in prompts(4)]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    want = [r.token_ids for r in plain.generate(batch, params)]
    assert [r.token_ids for r in spec.generate(batch, params)] == want
    stats = spec.stats()
    assert stats.num_preemptions > 0 and stats.prefix_cache_hits > 0 and stats.spec_draft_tokens > 0
    assert stats.kv_blocks_used == 0


def reference_draft_logits(model, ids: list[int]) -> torch.Tensor:
    """MTP logits of row len(ids) - 2 (hidden at that position, token ids[-1])
    from one fresh prefill of ``ids`` and one MTP pass over all of its rows (the
    last row, which needs the token after ids, gets the main model's greedy one)."""
    n, block_size = len(ids), 16
    num_blocks = -(-n // block_size) + 1
    kv = KVCacheManager(BlockPool(num_blocks, block_size))
    sched = Scheduler(kv, 4, n)
    runner = ModelRunner(model, num_blocks, block_size, torch.device("cpu"), torch.float32)
    sched.add(Request("ref", ids, SamplingParams(max_tokens=1)))
    inputs = runner.prepare(sched.schedule(), kv)
    with torch.inference_mode():
        hidden = model(inputs.input_ids, inputs.positions, inputs.meta, runner.kv_caches)  # [n, h]
        nxt = model.compute_logits(hidden[-1:]).argmax(dim=-1)
        h = model.mtp_hidden(0, torch.cat([inputs.input_ids[1:], nxt]), hidden, inputs.positions, inputs.meta,
                             torch.zeros_like(runner.kv_caches[0]))
        return model.compute_logits(h[-2:-1])[0]


def test_each_first_draft_is_what_a_fresh_mtp_pass_gives():
    """After every step, the request's first draft is the argmax (up to a tie
    within float error) of the MTP logits recomputed from scratch over its
    tokens: the MTP cache rows the drafter keeps step by step are right."""
    core = EngineCore(EngineConfig(**TINY, num_kv_blocks=32, max_num_batched_tokens=24,
                                   speculative_config=mtp(2)))
    core.add_request(EngineCoreRequest("r", prompts(1, 50)[0], SamplingParams(max_tokens=12, temperature=0.0,
                                                                                ignore_eos=True)))
    drafter, checked = core.drafting.proposer, 0
    while core.has_unfinished_requests():
        core.step()
        req = core.scheduler.requests.get("r")
        if req is None or "r" not in drafter.drafts:
            continue
        ref = reference_draft_logits(core.model, req.token_ids)
        assert ref[drafter.drafts["r"][0][0]] >= ref.max() - 1e-4
        checked += 1
    assert checked >= 3


def test_mtp_cache_layer_is_counted_in_kv_memory():
    plain = EngineCore(EngineConfig(**TINY, kv_cache_memory_gib=0.01))
    spec = EngineCore(EngineConfig(**TINY, kv_cache_memory_gib=0.01, speculative_config=mtp(1)))
    layers = plain.model.kv_cache_spec().num_layers
    assert spec.config.num_kv_blocks < plain.config.num_kv_blocks
    assert spec.config.num_kv_blocks == pytest.approx(plain.config.num_kv_blocks * layers / (layers + 1), abs=1)


def test_model_without_mtp_is_refused():
    with pytest.raises(ValueError, match="speculative_config.method: mtp needs"):
        EngineCore(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                                speculative_config=mtp(1)))
