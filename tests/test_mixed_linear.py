"""Mixed linears: the panel kernel for few rows, oneDNN for many (kernels/mixed_linear.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tokenmill.engine.linears as linears_module
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.resolve import (
    cpu_has_avx2_panels,
    cpu_has_bf16_panels,
    cpu_has_fast_bf16,
    cpu_has_float32_panels,
    resolve_linear_backend,
)
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.mixed_linear import PANEL_MAX_ROWS, MixedLinear, mix_linears
from tokenmill.kernels.packed_linear import PackedLinear, onednn_available
from tokenmill.model.loaders import load_model
from tokenmill.sampling_params import SamplingParams

CPU = torch.device("cpu")
BF16_NEAR_TIE = 0.125  # two bf16 steps of a logit between 8 and 16
KERNELS = load_cpu_kernels()


def runs_in(dtype: torch.dtype) -> bool:
    return KERNELS is not None and onednn_available(dtype)


needs_bf16 = pytest.mark.skipif(not runs_in(torch.bfloat16),
                                reason="needs the C++ kernels and oneDNN bf16 packing (AVX-512 or AVX-NE-CONVERT)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 7, PANEL_MAX_ROWS, PANEL_MAX_ROWS + 1, 300])
def test_mixed_linear_routes_by_rows_and_matches_f_linear(rows, dtype):
    if not runs_in(dtype):
        pytest.skip(f"needs the C++ kernels and oneDNN packing of {dtype}")
    torch.manual_seed(rows)
    linear = nn.Linear(96, 80, bias=True).to(dtype)
    x = torch.randn(rows, 96, dtype=dtype)
    layer = MixedLinear(linear, KERNELS)
    got = layer(x)
    assert got.dtype == dtype and got.shape == (rows, 80)
    expected = nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(got.float(), expected, rtol=tolerance, atol=tolerance)
    # Bit for bit the kernel its row count picks.
    if rows <= PANEL_MAX_ROWS:
        picked = KERNELS.invariant_linear(x, layer.panels, 80, linear.bias)
    else:
        picked = PackedLinear(linear, keep_weight=False)(x)
    assert torch.equal(got, picked)
    # Leading dimensions are kept.
    torch.testing.assert_close(layer(x.view(1, rows, 96)), got.view(1, rows, 80), rtol=0, atol=0)


@needs_bf16
def test_mix_swaps_the_decoder_and_packs_the_tied_head():
    model = load_model("dummy:tiny", "dummy", CPU, torch.bfloat16).model
    ids = torch.arange(5)
    before = model.compute_logits(model.embed_tokens(ids))
    assert mix_linears(model, KERNELS) == 4 * len(model.layers)
    assert all(isinstance(getattr(o, a), MixedLinear) for o, a in model.decoder_linears())
    assert isinstance(model.lm_head, PackedLinear)
    if model.arch.tie_word_embeddings:
        assert model.lm_head.weight is model.embed_tokens.weight
    torch.testing.assert_close(model.compute_logits(model.embed_tokens(ids)), before, rtol=2e-2, atol=2e-2)
    assert mix_linears(model, KERNELS) == 0  # nothing plain is left


@pytest.mark.skipif(not runs_in(torch.float32), reason="needs the C++ kernels and oneDNN packing of float32")
def test_mix_puts_a_float32_head_on_panels_and_keeps_it_tied():
    """In float32 the LM head is mixed too (measured 1.2-2.3x faster per call on panels at
    1-32 rows on an AVX2 EPYC); it keeps the tied embedding weight for the exact head and the sampler."""
    model = load_model("dummy:tiny", "dummy", CPU, torch.float32).model
    ids = torch.arange(5)
    before = model.compute_logits(model.embed_tokens(ids))
    assert mix_linears(model, KERNELS) == 4 * len(model.layers)
    assert isinstance(model.lm_head, MixedLinear)
    if model.arch.tie_word_embeddings:
        assert model.lm_head.weight is model.embed_tokens.weight
    after = model.compute_logits(model.embed_tokens(ids))
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    assert torch.equal(after, KERNELS.invariant_linear(model.embed_tokens(ids), model.lm_head.panels,
                                                       model.arch.vocab_size, None))
    assert model.exact_head().weight is model.lm_head.weight


@needs_bf16
def test_resolution_of_mixed():
    auto = resolve_linear_backend(EngineConfig(), CPU, torch.bfloat16)
    assert auto == ("mixed" if cpu_has_fast_bf16() else "panels" if cpu_has_bf16_panels() else "onednn")
    assert resolve_linear_backend(EngineConfig(linear_backend="mixed"), CPU, torch.bfloat16) == "mixed"
    with pytest.raises(ValueError, match="linear_backend: mixed .*quantization 'int4'"):
        resolve_linear_backend(EngineConfig(linear_backend="mixed", quantization="int4"), CPU, torch.bfloat16)
    with pytest.raises(ValueError, match="linear_backend: mixed .*--deterministic"):
        resolve_linear_backend(EngineConfig(linear_backend="mixed", deterministic=True), CPU, torch.bfloat16)


@needs_bf16
@pytest.mark.skipif(not cpu_has_fast_bf16(), reason="auto picks mixed only on CPUs with AMX or AVX512-BF16")
def test_auto_falls_back_to_onednn_when_the_second_copy_does_not_fit(monkeypatch):
    config = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="bfloat16", num_kv_blocks=16)
    monkeypatch.setattr(linears_module, "dense_copy_fits", lambda model: False)
    assert LLMEngine(config).core.linear_backend == "onednn"
    # Asked for by name, it is kept whatever the memory.
    named = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="bfloat16", num_kv_blocks=16,
                         linear_backend="mixed")
    assert LLMEngine(named).core.linear_backend == "mixed"


@needs_bf16
def test_mixed_engine_decodes_like_onednn_on_the_embedded_model():
    """Greedy bf16: the panel kernel (decode rows) and oneDNN (prefill rows)
    round differently only in summation order, so the two engines' greedy
    tokens agree until a near-tie: where they part, the top two logprobs were
    within bf16 rounding (BF16_NEAR_TIE) on both sides."""
    params = SamplingParams(max_tokens=24, temperature=0.0, logprobs=2)
    prompts = ["The capital of France is", "List three primary colors:", "def fibonacci(n):"]
    results = {}
    for backend in ("mixed", "onednn"):
        engine = LLMEngine(EngineConfig(dtype="bfloat16", linear_backend=backend, num_kv_blocks=64,
                                        max_model_len=256, num_threads=1))
        assert engine.core.linear_backend == backend
        results[backend] = engine.generate(prompts, params)
    for mixed, onednn in zip(results["mixed"], results["onednn"]):
        assert len(mixed.token_ids) == len(onednn.token_ids) == 24
        parted = next((i for i, (a, b) in enumerate(zip(mixed.token_ids, onednn.token_ids)) if a != b), None)
        if parted is None:
            continue
        assert parted >= 4, f"the engines part at token {parted}: {mixed.text!r} vs {onednn.text!r}"
        for side in (mixed, onednn):
            (_, first), (_, second) = side.logprobs[parted].top[:2]
            assert first - second <= BF16_NEAR_TIE, (parted, side.logprobs[parted])


@pytest.mark.skipif(not runs_in(torch.float32), reason="needs the C++ kernels and oneDNN float32 packing")
def test_float32_auto_takes_the_panels_on_avx2_and_decodes_like_torch():
    """Float32: auto takes the panel kernel on CPUs with AVX2 and FMA, for every
    call without AVX-512 (panels), up to 128 rows with it (mixed), torch
    elsewhere; the tiny model's greedy tokens are those of F.linear either way."""
    assert resolve_linear_backend(EngineConfig(linear_backend="mixed"), CPU, torch.float32) == "mixed"
    with pytest.raises(ValueError, match="linear_backend: mixed runs on CPU in float32 or bfloat16"):
        resolve_linear_backend(EngineConfig(linear_backend="mixed"), CPU, torch.float16)
    config = dict(model="dummy:tiny", load_format="dummy", dtype="float32", num_kv_blocks=32, max_model_len=128)
    auto = LLMEngine(EngineConfig(**config))
    assert auto.core.linear_backend == \
        ("panels" if cpu_has_float32_panels() else "mixed" if cpu_has_avx2_panels() else "torch")
    mixed = LLMEngine(EngineConfig(**config, linear_backend="mixed"))
    assert all(isinstance(getattr(o, a), MixedLinear) for o, a in mixed.core.model.decoder_linears())
    panels = LLMEngine(EngineConfig(**config, linear_backend="panels"))
    plain = LLMEngine(EngineConfig(**config, linear_backend="torch"))
    prompts = [[3 + i, 17, 29, 41 + i] for i in range(4)]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    expected = [r.token_ids for r in plain.generate(prompts, params)]
    assert [r.token_ids for r in mixed.generate(prompts, params)] == expected
    assert [r.token_ids for r in panels.generate(prompts, params)] == expected
