"""Speculative decoding with the ``draft_model`` proposer: a separate model with
the same vocabulary drafts over its own KV cache (addressed through the
target's block tables) and catches up on what the target accepted. Outputs
token-identical to decoding without drafts (batch 1 and batched, chat and raw
prompts; prefix hits, chunked prefill, preemption and seeded sampling in
tests/test_spec_stress.py); a draft identical to the target has every greedy
draft accepted, which holds only if its cache is caught up right; the draft's
cache is counted in the KV memory; bad drafts are refused naming the field."""

from __future__ import annotations

import pytest
from _spec_helpers import (
    assert_abort_with_drafts_pending_frees_every_block,
    embedded_engines,
    greedy_drafts_on_everyday_prompts,
)

from tokenmill.config import EngineConfig
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import EngineCoreRequest
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.int4_linear import Int4Linear
from tokenmill.kernels.int8_linear import Int8Linear
from tokenmill.model.embedded import embedded_gguf_path
from tokenmill.model.tokenizer import Tokenizer
from tokenmill.model.word_tokenizer import save_word_tokenizer
from tokenmill.sampling_params import SamplingParams
from tokenmill.spec import draft_model
from tokenmill.spec.config import parse_speculative_config

DUMMY = dict(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", max_model_len=96)
TINY_DRAFT = {"method": "draft_model", "model": "dummy:tiny", "num_speculative_tokens": 3, "adaptive": False}
"""The same random weights as the target (same preset, same seed): its greedy drafts
are the target's own tokens wherever its cache holds the right K/V. Not adaptive: the
counts asserted below must not depend on this machine's step times."""


@pytest.mark.parametrize("value, field", [
    ({"method": "draft_model", "num_speculative_tokens": 2}, "speculative_config.model"),
    ({"method": "ngram", "num_speculative_tokens": 2, "model": "x.gguf"}, "speculative_config.model"),
    ({"method": "draft_model", "model": "x.gguf", "num_speculative_tokens": 2, "quantization": "fp8"},
     "speculative_config.quantization"),
    ({"method": "self-int4", "num_speculative_tokens": 2, "quantization": "int4"}, "speculative_config.quantization"),
])
def test_bad_draft_config_names_the_field(value, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        parse_speculative_config(value)


def test_a_draft_with_a_larger_vocabulary_is_refused():
    with pytest.raises(ValueError, match=r"speculative_config\.model: its vocabulary \(49152"):
        EngineCore(EngineConfig(**DUMMY, speculative_config={**TINY_DRAFT, "model": "dummy:smollm2-135m"}))


def test_vocabularies_compare_token_by_token(tmp_path):
    for name, size in (("a", 64), ("b", 64), ("c", 32)):
        (tmp_path / name).mkdir()
        save_word_tokenizer(tmp_path / name, size)
    a, b, c = (Tokenizer.from_hf_dir(tmp_path / n) for n in "abc")
    assert a.same_vocabulary(b) and not a.same_vocabulary(c)


@pytest.mark.parametrize("quantization", ["int8", "int4"])
def test_a_quantized_draft_is_quantized_whatever_the_targets_backend(quantization):
    core = EngineCore(EngineConfig(**DUMMY, speculative_config={**TINY_DRAFT, "quantization": quantization}))
    layer_type = Int4Linear if quantization == "int4" else Int8Linear
    draft = core.drafting.proposer.draft
    assert all(isinstance(getattr(o, a), layer_type) for o, a in draft.decoder_linears())
    assert not any(isinstance(getattr(o, a), layer_type) for o, a in core.model.decoder_linears())
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    core.add_request(EngineCoreRequest("r", [3, 5, 7, 9], params))
    while core.has_unfinished_requests():
        core.step()
    assert core.drafting.num_draft_tokens > 0


def test_the_draft_cache_is_counted_in_the_kv_memory():
    """Same memory, the tiny draft's cache costs as much per token as the target's: half the blocks."""
    memory = dict(kv_cache_memory_gib=1 / 1024, max_model_len=64)
    plain = EngineCore(EngineConfig(**{**DUMMY, **memory}))
    spec = EngineCore(EngineConfig(**{**DUMMY, **memory}, speculative_config=TINY_DRAFT))
    assert spec.config.num_kv_blocks == plain.config.num_kv_blocks // 2
    drafter = spec.drafting.proposer
    assert drafter.caches[0].shape[0] == spec.config.num_kv_blocks
    assert drafter.caches[0].data_ptr() != spec.runner.kv_caches[0].data_ptr()


def test_an_identical_draft_has_every_greedy_draft_accepted_through_preemption(monkeypatch):
    """8 blocks for 4 requests of ~70 tokens: they preempt each other and restart
    their draft caches; a prefix shared by all hits the prefix cache (whose
    blocks' draft rows the drafter recomputes); catch-up passes of 7 rows split
    prompts across passes and share a pass between requests."""
    monkeypatch.setattr(draft_model, "CATCH_UP_ROWS", 7)
    common = dict(**DUMMY, max_num_batched_tokens=16, num_kv_blocks=8, enable_prefix_caching=True)
    plain, spec = LLMEngine(EngineConfig(**common)), LLMEngine(EngineConfig(**common, speculative_config=TINY_DRAFT))
    shared = [(7 * i) % 20 + 3 for i in range(32)]
    prompts = [shared + [(11 * i + j) % 13 + 3 for j in range(30)] for i in range(4)]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    assert [r.token_ids for r in spec.generate(prompts, params)] == \
        [r.token_ids for r in plain.generate(prompts, params)]
    stats = spec.stats()
    assert stats.num_preemptions > 0 and stats.prefix_cache_hits > 0 and stats.spec_draft_tokens > 20
    # Equal weights, float32: only a near-tie decided differently by another batch shape could reject one.
    assert stats.spec_accepted_tokens >= 0.95 * stats.spec_draft_tokens
    assert stats.kv_blocks_used == 0 and not spec.core.drafting.proposer.states


def test_abort_with_drafts_pending_frees_every_block_and_forgets_the_request():
    core = EngineCore(EngineConfig(**DUMMY, speculative_config=TINY_DRAFT))
    assert_abort_with_drafts_pending_frees_every_block(core)
    assert {"r0", "r1", "r2"} <= set(core.drafting.proposer.states)  # their draft caches, until the next step
    core.add_request(EngineCoreRequest("next", [3, 5, 7], SamplingParams(max_tokens=4)))
    core.step()  # the drafter forgets ended requests after the next step that runs
    assert not set(core.drafting.proposer.states) & {"r0", "r1", "r2"}


def test_greedy_outputs_are_identical_with_a_gguf_draft_in_int4():
    """The embedded model's GGUF file loaded again as its own draft, in int4: a
    real file through the tokenizer check, its own weights (quantized) and cache."""
    plain, spec = embedded_engines({"method": "draft_model", "model": str(embedded_gguf_path()),
                                    "quantization": "int4", "num_speculative_tokens": 3, "adaptive": False})
    draft = spec.core.drafting.proposer.draft
    assert draft is not spec.core.model
    assert all(isinstance(getattr(o, a), Int4Linear) for o, a in draft.decoder_linears())
    drafts, accepted = greedy_drafts_on_everyday_prompts(plain, spec)
    # An int4 copy of the model agrees with it far more often than not.
    assert drafts > 40 and accepted > 0.5 * drafts
