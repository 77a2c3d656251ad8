"""Speculative decoding under stress, for each proposer that runs on the llama
dummy model (draft_model: the same preset as its own draft): tiny step budget
(chunked prompts), 8 KV blocks (preemption, and drafts that cannot get
blocks), prefix caching on, greedy and seeded requests mixed; repetitive
prompts so drafts are proposed and some accepted. No block stays taken, and
outputs equal decoding without drafts: all of them under exact_match; under
rejection_sampler the greedy ones, while the seeded ones (whose drafts are
drawn) repeat exactly in a second engine. (DeepSeek's mtp has its own:
tests/test_spec_mtp.py.)"""

from __future__ import annotations

import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

COMMON = dict(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", max_model_len=96,
              max_num_batched_tokens=16, num_kv_blocks=8, enable_prefix_caching=True)


METHODS = [{"method": "ngram", "prompt_lookup_max": 3},
           {"method": "self-int4", "acceptance_method": "exact_match"},
           {"method": "draft_model", "model": "dummy:tiny", "acceptance_method": "exact_match"},
           {"method": "self-int4"}, {"method": "draft_model", "model": "dummy:tiny"}]


def spec_engine(method: dict) -> LLMEngine:
    return LLMEngine(EngineConfig(**COMMON, speculative_config={**method, "num_speculative_tokens": 3,
                                                                  "adaptive": False}))


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m["method"] + "-" + m.get("acceptance_method", "default"))
def test_stress_seeded_and_greedy_mix_matches_without_drafts(method):
    plain = LLMEngine(EngineConfig(**COMMON))
    spec = spec_engine(method)
    shared = [(7 * i) % 20 + 3 for i in range(32)]
    prompts = [shared + [(11 * i + j) % 13 + 3 for j in range(30)] for i in range(4)]
    params = [SamplingParams(max_tokens=16, ignore_eos=True,
                             **({"temperature": 0.0} if i % 2 else {"temperature": 0.8, "seed": i}))
              for i in range(4)]
    want = [r.token_ids for r in plain.generate(prompts, params)]
    got = [r.token_ids for r in spec.generate(prompts, params)]
    if method["method"] == "ngram" or method.get("acceptance_method") == "exact_match":
        assert got == want
    else:
        assert got[1::2] == want[1::2]  # greedy
        assert [r.token_ids for r in spec_engine(method).generate(prompts, params)] == got  # seeded: repeatable
    stats = spec.stats()
    assert stats.num_preemptions > 0 and stats.prefix_cache_hits > 0 and stats.spec_draft_tokens > 0
    assert stats.kv_blocks_used == 0  # rejected drafts' slots went back with their requests
