"""Prompt logprobs (SamplingParams.prompt_logprobs) and max_tokens=0 in the engine.

Every prompt position's entry must equal the log-softmax of a full, uncached
forward pass over the prompt, whether the prompt is computed in one step or
in chunks, after a prefix of it was cached, or across a preemption; a request
beside it gets the same tokens as alone; max_tokens=0 scores a prompt and
generates nothing.
"""

from __future__ import annotations

import pytest
import torch
from _reference import paged_logits

import tokenmill.engine.core as core_module
from tokenmill.config import EngineConfig
from tokenmill.engine.client import EngineStats
from tokenmill.engine.core_messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    decode_outputs,
    decode_request,
    encode,
)
from tokenmill.engine.engine import LLMEngine
from tokenmill.errors import RequestError
from tokenmill.outputs import RequestOutput, TokenLogprob, merge_outputs
from tokenmill.sampling_params import SamplingParams

TINY = dict(model="dummy:tiny", load_format="dummy", device="cpu", dtype="float32", num_kv_blocks=64,
            max_model_len=256)
PROMPT = [(7 * i + 3) % 200 + 5 for i in range(45)]  # 45 tokens: two full 16-token blocks and a partial one
GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
SCORED = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, prompt_logprobs=3)


def make_engine(**overrides) -> LLMEngine:
    return LLMEngine(EngineConfig(**{**TINY, **overrides}))


def run(engine: LLMEngine, prompts: list[list[int]], params: list[SamplingParams]) -> list[list[RequestOutput]]:
    """Every output of each request, in order."""
    ids = [engine.add_request(None, p, sp) for p, sp in zip(prompts, params)]
    got = {rid: [] for rid in ids}
    while engine.has_unfinished_requests():
        for out in engine.step():
            got[out.request_id].append(out)
    return [got[rid] for rid in ids]


@pytest.fixture(scope="module")
def reference() -> torch.Tensor:
    """log-softmax [P, V] of one uncached forward over PROMPT (row p: the distribution of token p + 1)."""
    model = make_engine().core.model  # dummy weights are seeded: every engine gets the same ones
    return torch.log_softmax(paged_logits(model, PROMPT, chunk=len(PROMPT)).float(), dim=-1)


def check_prompt_logprobs(entries: list[TokenLogprob | None], prompt: list[int], reference: torch.Tensor,
                          n_top: int) -> None:
    assert len(entries) == len(prompt) and entries[0] is None
    for p, entry in enumerate(entries[1:]):
        want = reference[p]  # position p predicts prompt token p + 1
        assert entry.token_id == prompt[p + 1]
        assert entry.logprob == pytest.approx(want[prompt[p + 1]].item(), abs=1e-4)
        top_vals, top_ids = want.topk(n_top)
        assert [t for t, _ in entry.top] == top_ids.tolist()
        assert [lp for _, lp in entry.top] == pytest.approx(top_vals.tolist(), abs=1e-4)


@pytest.mark.parametrize("chunk", [1024, 8, 13])
def test_prompt_logprobs_equal_a_full_forward_chunked_or_not(reference, chunk):
    engine = make_engine(max_num_batched_tokens=chunk)
    [outs] = run(engine, [PROMPT], [SCORED])
    assert outs[0].prompt_logprobs is not None and all(o.prompt_logprobs is None for o in outs[1:])
    check_prompt_logprobs(outs[0].prompt_logprobs, PROMPT, reference, 3)
    assert sum(len(o.new_token_ids) for o in outs) == 4


def test_a_cached_prefix_still_gets_every_position_and_its_blocks_serve_others(reference):
    engine = make_engine()
    run(engine, [PROMPT], [GREEDY])  # caches the prompt's two full blocks
    hits = engine.stats().prefix_cache_hits
    [outs] = run(engine, [PROMPT], [SCORED])
    check_prompt_logprobs(outs[0].prompt_logprobs, PROMPT, reference, 3)
    assert engine.stats().prefix_cache_hits == hits  # it took no hit

    fresh = make_engine()
    run(fresh, [PROMPT], [SCORED])
    run(fresh, [PROMPT], [GREEDY])
    assert fresh.stats().prefix_cache_hits == 32  # the scored request's blocks were indexed


def test_preemption_reports_each_position_once(reference):
    # 6 blocks x 16 tokens: a 60-token prompt decoding to 90 tokens beside the
    # scored 45-token one cannot leave it room: the scored one (the newest) is
    # preempted mid-prompt and recomputed later, taking back only the cached
    # blocks of positions it already reported; no entry comes twice.
    engine = make_engine(num_kv_blocks=6, max_model_len=96, max_num_batched_tokens=16)
    long = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    outs = run(engine, [list(range(100, 160)), PROMPT], [long, SCORED])
    assert engine.stats().num_preemptions > 0
    firsts = [o.prompt_logprobs for o in outs[1] if o.prompt_logprobs is not None]
    assert len(firsts) == 1
    check_prompt_logprobs(firsts[0], PROMPT, reference, 3)
    assert engine.stats().kv_blocks_used == 0


@pytest.mark.parametrize("other", [GREEDY, SamplingParams(max_tokens=6, temperature=0.9, seed=11, logprobs=2)])
def test_a_request_beside_a_scored_one_gets_the_same_tokens(other):
    prompt = list(range(30, 62))
    alone = run(make_engine(max_num_batched_tokens=24), [prompt], [other])[0]
    batched = run(make_engine(max_num_batched_tokens=24), [PROMPT, prompt], [SCORED, other])[1]
    beside_plain = run(make_engine(max_num_batched_tokens=24), [PROMPT, prompt], [GREEDY, other])[1]
    assert [t for o in batched for t in o.new_token_ids] == [t for o in alone for t in o.new_token_ids]
    assert all(o.prompt_logprobs is None for o in batched)
    # The same batch with the neighbour unscored: bit for bit the same (batch
    # shape alone moves float32 sums in their last bits, hence approx vs alone).
    assert [(o.new_token_ids, o.logprobs) for o in batched] == [(o.new_token_ids, o.logprobs) for o in beside_plain]
    if other.logprobs is not None:
        got, want = [lp for o in batched for lp in o.logprobs], [lp for o in alone for lp in o.logprobs]
        assert [lp.logprob for lp in got] == pytest.approx([lp.logprob for lp in want], abs=1e-5)


def test_max_tokens_zero_scores_the_prompt_and_generates_nothing(reference):
    engine = make_engine(max_num_batched_tokens=16)
    [outs] = run(engine, [PROMPT], [SamplingParams(max_tokens=0, prompt_logprobs=2)])
    [out] = outs
    assert out.finished and out.finish_reason == "length"
    assert out.new_token_ids == [] and out.num_output_tokens == 0 and out.new_text == ""
    check_prompt_logprobs(out.prompt_logprobs, PROMPT, reference, 2)
    stats = engine.stats()
    assert stats.kv_blocks_used == 0 and stats.generation_tokens == 0 and stats.prompt_tokens == len(PROMPT)


def test_a_one_token_prompt_has_just_the_null_entry():
    [outs] = run(make_engine(), [[42]], [SamplingParams(max_tokens=0, prompt_logprobs=0)])
    assert outs[0].prompt_logprobs == [None] and outs[0].finish_reason == "length"


def test_a_failure_computing_prompt_logprobs_fails_that_request_alone(monkeypatch):
    def boom(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(core_module, "token_logprobs", boom)
    engine = make_engine()
    prompt = list(range(30, 62))
    scored, plain = run(engine, [PROMPT, prompt], [SCORED, GREEDY])
    assert scored[-1].finish_reason == "error" and "boom" in scored[-1].error
    assert plain[-1].finish_reason == "length" and sum(len(o.new_token_ids) for o in plain) == 4
    stats = engine.stats()
    assert stats.request_failures == {"sampling": 1} and stats.kv_blocks_used == 0


@pytest.mark.parametrize("kwargs, field", [
    (dict(prompt_logprobs=21), "prompt_logprobs"),
    (dict(prompt_logprobs=-1), "prompt_logprobs"),
    (dict(prompt_logprobs=True), "prompt_logprobs"),
    (dict(prompt_logprobs=2.0), "prompt_logprobs"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=0, logprobs=2), "max_tokens"),
    (dict(max_tokens=-1, prompt_logprobs=2), "max_tokens"),
])
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(RequestError) as info:
        SamplingParams(**kwargs)
    assert info.value.param == field and str(info.value).startswith(field)


def test_messages_carry_prompt_logprobs_through_msgpack():
    request = EngineCoreRequest("r", [1, 2, 3], SamplingParams(max_tokens=0, prompt_logprobs=2))
    assert decode_request(encode(request)) == request
    entries = [TokenLogprob(2, -1.25, [(9, -0.5), (2, -1.25)]), TokenLogprob(3, -3.0, [(3, -3.0), (4, -3.5)])]
    outputs = EngineCoreOutputs([EngineCoreOutput("r", [], "length", prompt_logprobs=entries),
                                 EngineCoreOutput("s", [5])], EngineStats(0, 0, 0, 0, 0, 0, 0, 0, 0))
    decoded = decode_outputs(encode(outputs))
    assert decoded == outputs
    assert decoded.outputs[0].prompt_logprobs == entries and decoded.outputs[1].prompt_logprobs is None


def test_real_model_prompt_logprobs_match_its_forward(fp32_engine):
    prompt = fp32_engine.tokenizer.encode("The capital of France is Paris, and the capital of Italy is")
    [outs] = run(fp32_engine, [prompt], [SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)])
    ref = torch.log_softmax(paged_logits(fp32_engine.core.model, prompt, chunk=len(prompt)).float(), dim=-1)
    check_prompt_logprobs(outs[0].prompt_logprobs, prompt, ref, 1)


def test_merged_deltas_keep_the_first_outputs_prompt_logprobs():
    entries = [None, TokenLogprob(6, -2.0, [])]
    first = RequestOutput("r", [1], "a", False, prompt_logprobs=entries)
    merged = merge_outputs([first, RequestOutput("r", [2], "b", True, "length")])
    assert merged.prompt_logprobs == entries and merged.new_token_ids == [1, 2] and merged.new_text == "ab"


def test_generate_collects_prompt_logprobs():
    engine = make_engine()
    [scored, plain] = engine.generate([PROMPT, PROMPT], [SamplingParams(max_tokens=0, prompt_logprobs=1), GREEDY])
    assert len(scored.prompt_logprobs) == len(PROMPT) and scored.prompt_logprobs[0] is None
    assert scored.token_ids == [] and scored.finish_reason == "length"
    assert plain.prompt_logprobs is None
