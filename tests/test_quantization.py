"""Weight-only quantization: the int4 / int8 layers against their dequantized
reference, the Q4_1 grid round trip, and the quality of the quantized embedded
model against the fp32 engine (perplexity on a text, greedy agreement)."""

import math

import pytest
import torch
from _reference import paged_logits
from torch import nn

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.int4_linear import (
    DENSE_MIN_ROWS,
    GROUP_SIZE,
    Int4Linear,
    dequantize_groupwise_int4,
    quantize_groupwise_int4,
)
from tokenmill.kernels.int8_linear import Int8Linear, quantize_per_channel
from tokenmill.kernels.quantize import quantize_model
from tokenmill.sampling_params import SamplingParams

# An original passage (not from any dataset) for a perplexity check.
TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. "
    "He carried a small brass lamp, a notebook, and a thermos of strong black tea. "
    "From the top of the tower he could see the whole bay: the fishing boats coming "
    "home, the gulls circling over the harbour, and the long line of hills turning "
    "purple in the fading light. He wrote down the weather, the direction of the wind, "
    "and the names of the ships that passed. Over forty years the notebooks filled three "
    "shelves in his kitchen. When the town council decided to replace the keeper with an "
    "automatic beacon, the children of the village asked him to teach them how to read "
    "the sky. Every Saturday morning they gathered on the rocks below the tower, and he "
    "showed them how the clouds gather before a storm, why the sea turns green after rain, "
    "and how sailors once found their way home by the stars."
)

CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about autumn leaves.",
    "Explain in two sentences why the sky is blue.",
    "List three uses of a paperclip.",
    "How do I boil an egg?",
]


def test_int4_recovers_a_q4_1_grid():
    # Weights built the way GGUF's Q4_1 dequantizes them: code * d + m per group
    # of 32, with both code 0 and code 15 present in every group.
    torch.manual_seed(0)
    out_f, in_f = 64, 128
    groups = in_f // GROUP_SIZE
    codes = torch.randint(0, 16, (out_f, groups, GROUP_SIZE), dtype=torch.int32)
    codes[..., 0], codes[..., 1] = 0, 15
    d = torch.rand(out_f, groups) * 0.02 + 1e-3
    m = torch.randn(out_f, groups) * 0.05
    weight = (codes * d[..., None] + m[..., None]).view(out_f, in_f)
    got_codes, scales, zeros = quantize_groupwise_int4(weight)
    assert torch.equal(got_codes, codes.view(out_f, in_f))
    torch.testing.assert_close(scales, d, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(dequantize_groupwise_int4(got_codes, scales, zeros), weight, rtol=0, atol=1e-5)


def test_int4_linear_matches_dequantized_reference():
    torch.manual_seed(1)
    linear = nn.Linear(96, 48, bias=True)
    layer = Int4Linear(linear, torch.bfloat16)
    x = torch.randn(5, 96)
    codes, scales, zeros = quantize_groupwise_int4(linear.weight.data)
    w = dequantize_groupwise_int4(codes, scales.bfloat16(), zeros.bfloat16())
    expected = x.bfloat16().float() @ w.t() + linear.bias.data
    got = layer(x)
    assert got.dtype == torch.float32 and got.shape == (5, 48)
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    # The quantization error itself (float32 scales) is at most half a step per weight.
    step = scales.repeat_interleave(GROUP_SIZE, dim=1)
    error = (dequantize_groupwise_int4(codes, scales, zeros) - linear.weight.data).abs()
    assert (error <= step * 0.5 + 1e-6).all()


def test_int4_with_a_dense_copy_runs_many_rows_on_it_and_few_on_the_int4_kernel(monkeypatch):
    torch.manual_seed(3)
    linear = nn.Linear(96, 48, bias=True)
    layer = Int4Linear(linear, torch.bfloat16, keep_dense=True)
    assert layer.dense is not None and Int4Linear(linear, torch.bfloat16).dense is None
    calls = []
    int4 = layer.int4_matmul
    monkeypatch.setattr(layer, "int4_matmul", lambda x: calls.append("int4") or int4(x))
    dense = layer.dense.forward
    monkeypatch.setattr(layer.dense, "forward", lambda x: calls.append("dense") or dense(x))
    for rows, path in ((1, "int4"), (DENSE_MIN_ROWS - 1, "int4"), (DENSE_MIN_ROWS, "dense"), (300, "dense")):
        x = torch.randn(rows, 96)
        got = layer(x)
        assert calls.pop() == path and not calls
        # The dense copy holds the weight as it was (bf16), the int4 path its 4-bit grid:
        # each within quantization error of the float32 reference.
        reference = x @ linear.weight.data.t() + linear.bias.data
        torch.testing.assert_close(got, reference, rtol=0.1, atol=0.15)


def test_int4_dense_copy_is_a_fast_kernel_where_the_cpp_kernels_build():
    """Where the C++ kernels build, the dense copy runs on the panel kernel or oneDNN's
    packed weight: never a plain nn.Linear, which on a CPU without a fast bf16 GEMM
    (AVX2-only) ran prefill-sized calls several times slower than float32 panels. There
    the copy is float32; the input is cast to the copy's dtype and the output back."""
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    from tokenmill.kernels.int4_linear import dense_copy_dtype
    from tokenmill.kernels.invariant_linear import InvariantLinear
    from tokenmill.kernels.packed_linear import PackedLinear

    if load_cpu_kernels() is None:
        pytest.skip("C++ kernels unavailable (no compiler)")
    torch.manual_seed(4)
    linear = nn.Linear(64, 32, bias=True)
    layer = Int4Linear(linear, torch.bfloat16, keep_dense=True)
    assert layer.dense_dtype == dense_copy_dtype() and layer.dense_dtype in (torch.bfloat16, torch.float32)
    assert isinstance(layer.dense, InvariantLinear | PackedLinear)
    x = torch.randn(DENSE_MIN_ROWS + 3, 64)
    expected = layer.dense(x.to(layer.dense_dtype)).float() + linear.bias.data
    assert torch.equal(layer(x), expected)
    assert dense_copy_dtype(torch.float32) == torch.float32  # only a bf16 compute dtype may move to float32


def test_int4_rejects_unaligned_width():
    with pytest.raises(ValueError, match="got 33 -> 16"):
        Int4Linear(nn.Linear(33, 16), torch.bfloat16)
    with pytest.raises(ValueError, match="got 32 -> 8"):
        Int4Linear(nn.Linear(32, 8), torch.bfloat16)


def test_int8_linear_matches_dequantized_reference():
    torch.manual_seed(2)
    linear = nn.Linear(64, 24, bias=False)
    layer = Int8Linear(linear, torch.bfloat16)
    x = torch.randn(3, 64)
    q, scales = quantize_per_channel(linear.weight.data)
    w = q.float() * scales.bfloat16().float()[:, None]
    torch.testing.assert_close(layer(x), x.bfloat16().float() @ w.t(), rtol=2e-2, atol=2e-2)


def test_unknown_method_names_the_field():
    with pytest.raises(ValueError, match="quantization"):
        quantize_model(nn.Module(), "int3")
    with pytest.raises(ValueError, match="quantization"):
        EngineConfig(quantization="fp4")


def _perplexity(engine: LLMEngine, token_ids: list[int]) -> float:
    logits = paged_logits(engine.core.model, token_ids, chunk=64, dtype=engine.core.dtype)
    logprobs = torch.log_softmax(logits[:-1].float(), dim=-1)
    nll = -logprobs.gather(1, torch.tensor(token_ids[1:])[:, None]).mean().item()
    return math.exp(nll)


def _agreement(reference: LLMEngine, candidate: LLMEngine, max_tokens: int = 32) -> float:
    """Fraction of greedy tokens produced before the first divergence, over the chat prompts."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    prompts = [reference.tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                                       add_generation_prompt=True) for p in CHAT_PROMPTS]
    ref = reference.generate(prompts, params)
    got = candidate.generate(prompts, params)
    agreed = total = 0
    for r, g in zip(ref, got):
        n = next((i for i, (a, b) in enumerate(zip(r.token_ids, g.token_ids)) if a != b),
                 min(len(r.token_ids), len(g.token_ids)))
        agreed += n
        total += len(r.token_ids)
    return agreed / total


@pytest.fixture(scope="module")
def quality_reference(fp32_engine):
    ids = fp32_engine.tokenizer.encode(TEXT)
    return ids, _perplexity(fp32_engine, ids)


@pytest.mark.parametrize("dtype, method", [("bfloat16", None), ("float32", "int8"), ("float32", "int4"),
                                           ("bfloat16", "int4")])
def test_reduced_precision_model_quality(dtype, method, fp32_engine, quality_reference):
    """bf16 and the quantized paths against the fp32 engine (itself token-identical to HF)."""
    ids, ppl_fp32 = quality_reference
    engine = LLMEngine(EngineConfig(dtype=dtype, device="cpu", quantization=method, kv_cache_memory_gib=0.1))
    ppl = _perplexity(engine, ids)
    agreement = _agreement(fp32_engine, engine)
    print(f"\n{dtype} {method}: perplexity {ppl:.3f} vs fp32 {ppl_fp32:.3f} ({ppl / ppl_fp32:.3f}x) "
          f"on {len(ids)} tokens; greedy agreement {agreement:.2f}")
    assert ppl / ppl_fp32 < 1.03  # measured here: all within 1.01x
    assert agreement >= 0.5  # measured here: bf16 0.91, int4 0.72, int8 0.72 (0.57 before the SDPA prefill change)
    prompt = fp32_engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True)
    (answer,) = engine.generate([prompt], SamplingParams(max_tokens=16, temperature=0.0, logprobs=2))
    (_, first), (_, second) = answer.logprobs[0].top[:2]
    if "Paris" not in answer.text and first == second:
        # An exact tie of the first token's bf16 logits (int4/int8 heads compute in bf16;
        # seen on an AVX-512 Xeon without BF16, before and after the panel kernel's
        # bf16 path): the tie break picked "L'". Judge the answer after fp32's first token.
        (lead,) = fp32_engine.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0))
        (answer,) = engine.generate([prompt + lead.text], SamplingParams(max_tokens=16, temperature=0.0))
    assert "Paris" in answer.text
