"""--deterministic: a request's tokens do not depend on its batch.

Property tests draw random mixes of requests (how many, prompt lengths, shared
prefixes for prefix-cache hits, output lengths, greedy or seeded sampling) and
run them together on a "stress" engine (a tiny step budget, so prompts are
chunked and decodes share steps with prefills; a KV cache small enough to
force preemption; prefix caching on), then each request alone on a "plain"
engine (no chunking, no preemption, no prefix cache). The tokens must be
identical, in float32 and bfloat16, on a small dummy model and the embedded one.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams

pytestmark = pytest.mark.skipif(load_cpu_kernels() is None, reason="--deterministic needs the C++ kernels")

MAX_PROMPT, MAX_OUTPUT = 70, 10
STRESS = dict(max_num_batched_tokens=16, num_kv_blocks=8, max_model_len=96, enable_prefix_caching=True)
PLAIN = dict(max_num_batched_tokens=1024, num_kv_blocks=64, max_model_len=96, enable_prefix_caching=False)
MODELS = {"dummy": dict(model="dummy:tiny", load_format="dummy"), "embedded": {}}


class Engines(dict):
    """(model, dtype, kind) -> LLMEngine, built on first use and shared by the module."""

    def get(self, model: str, dtype: str, kind: str) -> LLMEngine:
        key = (model, dtype, kind)
        if key not in self:
            shape = STRESS if kind == "stress" else PLAIN
            self[key] = LLMEngine(EngineConfig(**MODELS[model], **shape, dtype=dtype, device="cpu",
                                               deterministic=True, num_threads=torch.get_num_threads()))
        return self[key]


@pytest.fixture(scope="module")
def engines() -> Engines:
    return Engines()


@st.composite
def request_mixes(draw, vocab: int):
    """[(prompt token ids, SamplingParams)]: 1-6 requests, some sharing a prefix."""
    shared = draw(st.lists(st.integers(3, vocab - 1), min_size=16, max_size=48))
    mix = []
    for _ in range(draw(st.integers(1, 6))):
        own = draw(st.lists(st.integers(3, vocab - 1), min_size=1, max_size=MAX_PROMPT))
        prompt = (shared + own)[:MAX_PROMPT] if draw(st.booleans()) else own
        max_tokens = draw(st.integers(1, MAX_OUTPUT))
        if draw(st.booleans()):
            params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        else:
            params = SamplingParams(max_tokens=max_tokens, temperature=draw(st.sampled_from([0.6, 1.0, 1.5])),
                                    top_p=draw(st.sampled_from([1.0, 0.9])), top_k=draw(st.sampled_from([-1, 20])),
                                    seed=draw(st.integers(0, 2 ** 31)), ignore_eos=True)
        mix.append((prompt, params))
    return mix


def check_mix(engines: Engines, model: str, dtype: str, mix) -> None:
    prompts, params = [p for p, _ in mix], [sp for _, sp in mix]
    together = engines.get(model, dtype, "stress").generate(prompts, params)
    plain = engines.get(model, dtype, "plain")
    for (prompt, sp), got in zip(mix, together):
        alone = plain.generate([prompt], sp)[0]
        assert got.token_ids == alone.token_ids, (prompt, sp)


def examples(divisor: int) -> int:
    return max(3, settings.default.max_examples // divisor)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@settings(max_examples=examples(5))
@given(data=st.data())
def test_dummy_model_tokens_do_not_depend_on_the_batch(engines, dtype, data):
    check_mix(engines, "dummy", dtype, data.draw(request_mixes(vocab=512)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@settings(max_examples=examples(25))
@given(data=st.data())
def test_embedded_model_tokens_do_not_depend_on_the_batch(engines, dtype, data):
    check_mix(engines, "embedded", dtype, data.draw(request_mixes(vocab=49152)))


@pytest.mark.parametrize("model, vocab", [("dummy", 512), ("embedded", 49152)])
def test_preempted_chunked_and_prefix_hit_requests_match_alone(engines, model, vocab):
    """A fixed mix that surely preempts and hits the prefix cache (random mixes may not)."""
    shared = [(7 * i) % (vocab - 3) + 3 for i in range(32)]
    mix = [(shared + [(11 * i + j) % (vocab - 3) + 3 for j in range(30)],
            SamplingParams(max_tokens=MAX_OUTPUT, ignore_eos=True,
                           **({"temperature": 0.0} if i % 2 else {"temperature": 0.9, "seed": i})))
           for i in range(4)]
    stress = engines.get(model, "bfloat16", "stress")
    before = stress.stats()
    check_mix(engines, model, "bfloat16", mix)
    after = stress.stats()
    assert after.num_preemptions > before.num_preemptions
    assert after.prefix_cache_hits > before.prefix_cache_hits


def test_greedy_answer_unchanged_by_batch_on_chat_prompt(engines):
    """The issue's case: concurrent chat requests vs one at a time, bf16."""
    stress = engines.get("embedded", "bfloat16", "stress")
    tok = stress.tokenizer
    questions = ["What is the capital of France?", "Name three primary colors.", "Why is the sea salty?",
                 "Give me a haiku about rain."]
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True),
                          add_special_tokens=False) for q in questions]
    params = SamplingParams(max_tokens=MAX_OUTPUT, temperature=0.0, ignore_eos=True)
    together = stress.generate(prompts, params)
    for prompt, got in zip(prompts, together):
        assert got.token_ids == engines.get("embedded", "bfloat16", "plain").generate([prompt], params)[0].token_ids


def test_deterministic_refuses_what_it_cannot_make_invariant():
    with pytest.raises(ValueError, match="^deterministic: .*quantization"):
        LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                               deterministic=True, quantization="int8", num_kv_blocks=8))
    with pytest.raises(ValueError, match="^deterministic: .*attention_backend"):
        LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                               deterministic=True, attention_backend="torch", num_kv_blocks=8))
    with pytest.raises(ValueError, match="^deterministic: .*float16"):
        LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float16", device="cpu",
                               deterministic=True, num_kv_blocks=8))
