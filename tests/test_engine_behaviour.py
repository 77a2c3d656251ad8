"""Engine behaviour on the embedded model: prefix hits, chunked prefill and
preemption give the same tokens as a cold run; bad input is refused with a
ValueError naming the field while other requests carry on."""

import asyncio

import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.async_engine import AsyncEngine
from tokenmill.engine.engine import LLMEngine
from tokenmill.errors import RequestError
from tokenmill.sampling_params import SamplingParams

PROMPTS = [
    "The history of the printing press begins",
    "A recipe for a simple tomato soup: first,",
    "In computer science, a hash table is",
    "The three laws of thermodynamics state that",
]
SYSTEM = "You are a careful assistant. Answer briefly and precisely. " * 4
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


def make_engine(**overrides):
    base = dict(dtype="float32", device="cpu", max_num_seqs=16, max_num_batched_tokens=1024,
                num_kv_blocks=256, enable_prefix_caching=False)
    base.update(overrides)
    return LLMEngine(EngineConfig(**base))


@pytest.fixture(scope="module")
def cold():
    """Reference tokens: no prefix cache, no chunking, no preemption."""
    engine = make_engine()
    prompts = PROMPTS + [SYSTEM + p for p in PROMPTS]
    results = engine.generate(prompts, GREEDY)
    assert engine.stats().num_preemptions == 0
    return engine, {p: r.token_ids for p, r in zip(prompts, results)}


def test_prefix_cache_hit_matches_cold(cold):
    _, expected = cold
    engine = make_engine(enable_prefix_caching=True)
    first = engine.generate([SYSTEM + PROMPTS[0]], GREEDY)[0]
    rest = engine.generate([SYSTEM + p for p in PROMPTS[1:]], GREEDY)
    stats = engine.stats()
    ids = [engine.tokenizer.encode(SYSTEM + p) for p in PROMPTS]
    shared = min(next(i for i, (a, b) in enumerate(zip(ids[0], other)) if a != b) for other in ids[1:])
    assert shared >= 32
    assert stats.prefix_cache_hits == 3 * (shared // 16) * 16  # whole shared blocks, for 3 requests
    assert all(r.token_ids == expected[SYSTEM + p] for r, p in zip(rest, PROMPTS[1:]))
    assert first.token_ids == expected[SYSTEM + PROMPTS[0]]
    # The exact same prompt again: all but the last block come from the cache.
    again = engine.generate([SYSTEM + PROMPTS[0]], GREEDY)[0]
    assert again.token_ids == expected[SYSTEM + PROMPTS[0]]
    assert engine.core.pool.num_used_blocks == 0


def test_chunked_prefill_matches_cold(cold):
    _, expected = cold
    engine = make_engine(max_num_batched_tokens=7)  # every prompt is split into 7-token chunks
    prompts = [SYSTEM + p for p in PROMPTS]
    results = engine.generate(prompts, GREEDY)
    assert [r.token_ids for r in results] == [expected[p] for p in prompts]


def test_preempted_then_resumed_matches_cold(cold):
    _, expected = cold
    # 12 blocks x 16 tokens: four ~80-token requests cannot all stay resident.
    engine = make_engine(num_kv_blocks=12, max_model_len=192)
    prompts = [SYSTEM + p for p in PROMPTS]
    results = engine.generate(prompts, GREEDY)
    assert engine.stats().num_preemptions > 0
    assert [r.token_ids for r in results] == [expected[p] for p in prompts]
    assert engine.core.pool.num_used_blocks == 0


@pytest.mark.parametrize("make_params, field", [
    (lambda: SamplingParams(max_tokens=0), "max_tokens"),
    (lambda: SamplingParams(top_p=0.0), "top_p"),
    (lambda: SamplingParams(top_p=1.5), "top_p"),
    (lambda: SamplingParams(temperature=-1), "temperature"),
    (lambda: SamplingParams(stop=[1, 2]), "stop"),
    (lambda: SamplingParams(stop=("",)), "stop"),
    (lambda: SamplingParams(logprobs=99), "logprobs"),
    (lambda: SamplingParams(presence_penalty=3), "presence_penalty"),
])
def test_bad_sampling_params_name_the_field(make_params, field):
    with pytest.raises(ValueError, match=f"^{field}:") as info:
        make_params()
    assert info.value.param == field


def test_bad_prompts_refused_and_engine_keeps_serving(fp32_engine):
    engine = fp32_engine
    good = engine.add_request(None, "Hello there,", SamplingParams(max_tokens=8, temperature=0))
    for prompt, message in [("", "empty"), ([], "empty"), ([1, 10**9], "vocabulary"),
                            ("word " * (engine.max_model_len + 5), str(engine.max_model_len)),
                            (3.5, "string or a list")]:
        with pytest.raises(RequestError, match=message) as info:
            engine.add_request(None, prompt, SamplingParams(max_tokens=4))
        assert info.value.param == "prompt"
    with pytest.raises(ValueError, match="request_id"):
        engine.add_request(good, "again", SamplingParams())
    finished = []
    while engine.has_unfinished_requests():
        finished += [o for o in engine.step() if o.finished]
    assert [o.request_id for o in finished] == [good] and finished[0].num_output_tokens == 8
    assert engine.core.pool.num_used_blocks == 0


def test_abort_frees_blocks(fp32_engine):
    engine = fp32_engine
    rid = engine.add_request(None, PROMPTS[0], SamplingParams(max_tokens=64))
    engine.step()
    assert engine.core.pool.num_used_blocks > 0
    out = engine.abort(rid)
    assert out.finished and out.finish_reason == "abort"
    assert engine.core.pool.num_used_blocks == 0 and not engine.has_unfinished_requests()
    assert engine.abort(rid) is None


def test_stop_strings_cut_text(fp32_engine):
    (base,) = fp32_engine.generate([PROMPTS[2]], GREEDY)
    words = base.text.split()
    stop = words[3]
    (cut,) = fp32_engine.generate([PROMPTS[2]], SamplingParams(max_tokens=24, temperature=0, stop=[stop]))
    assert cut.finish_reason == "stop"
    assert cut.text == base.text[:base.text.index(stop)]
    assert stop not in cut.text


def test_async_engine_streams_and_aborts(fp32_engine):
    engine = AsyncEngine(fp32_engine)

    async def collect(prompt, n):
        text, count = "", 0
        async for out in engine.generate(prompt, SamplingParams(max_tokens=n, temperature=0)):
            text += out.new_text
            count += len(out.new_token_ids)
        return text, count

    async def abandon():
        agen = engine.generate(PROMPTS[1], SamplingParams(max_tokens=200))
        await agen.__anext__()
        await agen.aclose()  # the client goes away mid-stream

    async def main():
        results = await asyncio.gather(*(collect(p, 12) for p in PROMPTS), abandon())
        with pytest.raises(RequestError):
            await collect("", 4)
        return results

    try:
        results = asyncio.run(main())
    finally:
        engine.shutdown()  # the loop thread applies the pending abort before it exits
    assert fp32_engine.core.pool.num_used_blocks == 0
    expected = fp32_engine.generate(PROMPTS, SamplingParams(max_tokens=12, temperature=0))
    assert [r[0] for r in results[:4]] == [e.text for e in expected]
    assert all(r[1] == len(e.token_ids) for r, e in zip(results, expected))
