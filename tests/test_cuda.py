"""The engine on a CUDA GPU (skipped where there is none; CI has none).

Random weights in SmolLM2-135M's shape (no checkpoint travels to a GPU machine
here) with the embedded model's tokenizer: ``TOKENMILL_TEST_TOKENIZER`` names a
Hugging Face tokenizer folder when the GGUF file is not installed. float32 where
tokens are compared (no TF32: torch's default for matmuls), bf16 for a run
that must merely work. Engines capture decode CUDA graphs unless a test asks
for eager steps. Prints decode throughput for the record."""

from __future__ import annotations

import json
import os
import re
import time

import pytest
import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams
from tokenmill.structured.params import StructuredOutputsParams as Constraint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PROMPTS = [list(range(100, 140)), list(range(2000, 2007)), list(range(500, 700)), [42, 43, 44, 45] * 20]


def _tokenizer() -> str:
    if os.environ.get("TOKENMILL_TEST_TOKENIZER"):
        return os.environ["TOKENMILL_TEST_TOKENIZER"]
    from tokenmill.model.embedded import embedded_gguf_path
    return str(embedded_gguf_path())


def _engine(dtype: str, **kw) -> LLMEngine:
    """CUDA graphs on unless ``enforce_eager=True``; a small cache so that the
    engines of one module fit beside each other."""
    kw = {"kv_cache_memory_gib": 2.0, "max_model_len": 2048, **kw}
    return LLMEngine(EngineConfig(model="dummy:smollm2-135m", load_format="dummy", tokenizer=_tokenizer(),
                                  device="cuda", dtype=dtype, seed=0, **kw))


@pytest.fixture(scope="module")
def fp32():
    return _engine("float32")


def test_greedy_and_seeded_tokens_do_not_depend_on_the_batch(fp32):
    params = [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
              SamplingParams(max_tokens=12, temperature=1.0, seed=5, ignore_eos=True)] * 2
    alone = [fp32.generate([p], sp)[0].token_ids for p, sp in zip(PROMPTS, params)]
    assert [r.token_ids for r in fp32.generate(PROMPTS, params)] == alone
    assert fp32.stats().kv_blocks_used == 0


def test_decode_graphs_match_eager(fp32):
    eager = _engine("float32", enforce_eager=True)
    assert eager.core.runner.decode_graphs is None
    graphs = fp32.core.runner.decode_graphs
    assert len(graphs.graphs) == len(graphs.batch_sizes) * len(graphs.block_buckets) > 1
    before = graphs.replays
    params = [SamplingParams(max_tokens=n, temperature=0.0 if n % 2 else 0.9, seed=n, ignore_eos=True, logprobs=1)
              for n in (5, 40, 17, 160)]  # the batch shrinks 4 -> 1; the last crosses 128 and 256 tokens
    want = eager.generate(PROMPTS, params)
    got = fp32.generate(PROMPTS, params)
    assert graphs.replays - before > 150
    for a, b in zip(got, want):
        assert a.token_ids == b.token_ids
        assert max(abs(x.logprob - y.logprob) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3
    assert fp32.stats().kv_blocks_used == 0


def test_compiled_fused_ops_match_torch_ops(fp32):
    assert fp32.core.fused_ops == "compiled"  # auto on CUDA: TorchInductor's Triton kernels
    plain = _engine("float32", fused_ops="torch")
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=1)
    want = plain.generate(PROMPTS, params)
    for a, b in zip(fp32.generate(PROMPTS, params), want):
        assert a.token_ids == b.token_ids
        assert max(abs(x.logprob - y.logprob) for x, y in zip(a.logprobs, b.logprobs)) < 1e-3


@pytest.mark.parametrize("enforce_eager", [True, False])
def test_bf16_engine_runs_and_reports_decode_speed(enforce_eager):
    engine = _engine("bfloat16", enforce_eager=enforce_eager)
    for batch in (1, 32):
        params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True, logprobs=1)
        engine.generate([PROMPTS[0]] * batch, params)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        results = engine.generate([PROMPTS[i % 4] for i in range(batch)], params)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        assert all(len(r.token_ids) == 64 and all(lp.logprob <= 0 for lp in r.logprobs) for r in results)
        mode = "eager" if enforce_eager else "CUDA graphs"
        print(f"\n[cuda bf16 dummy:smollm2-135m, {mode}] batch {batch}: {batch * 64 / elapsed:.0f} output tok/s "
              f"({elapsed / 64 * 1e3:.2f} ms per step incl. prefill)")
    assert (engine.core.runner.decode_graphs is None) == enforce_eager


def test_structured_outputs_hold_and_leave_other_rows_alone(fp32):
    # Compact JSON (llguidance's x-guidance option): random weights would otherwise write
    # newlines, which JSON allows between tokens, until max_tokens.
    schema = {"x-guidance": {"whitespace_flexible": False}, "type": "object", "additionalProperties": False,
              "required": ["id", "ok"],
              "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}}}
    plain = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    constrained = [SamplingParams(max_tokens=40, temperature=0.0, structured=Constraint(json=schema)),
                   SamplingParams(max_tokens=16, temperature=1.0, seed=2, structured=Constraint(regex=r"\d{3}-\d{4}"))]
    alone = fp32.generate([PROMPTS[0]], plain)[0].token_ids
    results = fp32.generate([PROMPTS[0], PROMPTS[1], PROMPTS[2]], [plain, *constrained])
    assert results[0].token_ids == alone
    decode = fp32.tokenizer.decode
    obj = json.loads(decode(results[1].token_ids))
    assert set(obj) == {"id", "ok"} and 0 <= obj["id"] <= 999
    assert re.fullmatch(r"\d{3}-\d{4}", decode(results[2].token_ids))
    assert not fp32.core.structured.matchers and fp32.stats().kv_blocks_used == 0


def test_ngram_drafts_change_no_token():
    spec = _engine("float32", speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                                  "prompt_lookup_max": 3, "adaptive": False})
    plain = _engine("float32")
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    want = [r.token_ids for r in plain.generate(PROMPTS, params)]
    assert [r.token_ids for r in spec.generate(PROMPTS, params)] == want
    assert spec.stats().spec_draft_tokens > 0
    assert spec.core.runner.graph_multi_token_steps > 0  # verification steps replayed the graphs


def test_prompt_logprobs_chunked_equal_unchunked(fp32):
    chunked = _engine("float32", max_num_batched_tokens=64)
    params = SamplingParams(max_tokens=0, prompt_logprobs=2)

    def scored(engine):
        engine.add_request("p", PROMPTS[2], params)
        out = []
        while engine.has_unfinished_requests():
            out += engine.step()
        return [o for o in out if o.prompt_logprobs][0].prompt_logprobs

    whole, parts = scored(fp32), scored(chunked)
    assert len(whole) == len(parts) == len(PROMPTS[2]) and whole[0] is None
    for a, b in zip(whole[1:], parts[1:]):
        assert a.token_id == b.token_id and abs(a.logprob - b.logprob) < 1e-3
