"""Mixed linears: the panel kernel for few rows, oneDNN for many (kernels/mixed_linear.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tokenmill.engine.core as core_module
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.resolve import cpu_has_fast_bf16, resolve_linear_backend
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.mixed_linear import PANEL_MAX_ROWS, MixedLinear, mix_linears
from tokenmill.kernels.packed_linear import PackedLinear, onednn_available
from tokenmill.model.loaders import load_model
from tokenmill.sampling_params import SamplingParams

CPU = torch.device("cpu")
BF16_NEAR_TIE = 0.125  # two bf16 steps of a logit between 8 and 16
KERNELS = load_cpu_kernels()
pytestmark = pytest.mark.skipif(KERNELS is None or not onednn_available(),
                                reason="needs the C++ kernels and oneDNN bf16 packing (AVX-512 or AVX-NE-CONVERT)")


@pytest.mark.parametrize("rows", [1, 7, PANEL_MAX_ROWS, PANEL_MAX_ROWS + 1, 300])
def test_mixed_linear_routes_by_rows_and_matches_f_linear(rows):
    torch.manual_seed(rows)
    linear = nn.Linear(96, 80, bias=True).to(torch.bfloat16)
    x = torch.randn(rows, 96, dtype=torch.bfloat16)
    layer = MixedLinear(linear, KERNELS)
    got = layer(x)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, 80)
    expected = nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
    torch.testing.assert_close(got.float(), expected, rtol=2e-2, atol=2e-2)
    # Bit for bit the kernel its row count picks.
    if rows <= PANEL_MAX_ROWS:
        picked = KERNELS.invariant_linear(x, layer.panels, 80, linear.bias)
    else:
        picked = PackedLinear(linear, keep_weight=False)(x)
    assert torch.equal(got, picked)
    # Leading dimensions are kept.
    torch.testing.assert_close(layer(x.view(1, rows, 96)), got.view(1, rows, 80), rtol=0, atol=0)


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


def test_resolution_of_mixed():
    auto = resolve_linear_backend(EngineConfig(), CPU, torch.bfloat16)
    assert auto == ("mixed" if cpu_has_fast_bf16() else "onednn")
    assert resolve_linear_backend(EngineConfig(linear_backend="mixed"), CPU, torch.bfloat16) == "mixed"
    assert resolve_linear_backend(EngineConfig(), CPU, torch.float32) == "torch"
    for dtype in (torch.float32, torch.float16):
        with pytest.raises(ValueError, match="linear_backend: mixed runs on CPU in bfloat16"):
            resolve_linear_backend(EngineConfig(linear_backend="mixed"), CPU, dtype)
    with pytest.raises(ValueError, match="linear_backend: mixed .*quantization 'int4'"):
        resolve_linear_backend(EngineConfig(linear_backend="mixed", quantization="int4"), CPU, torch.bfloat16)
    with pytest.raises(ValueError, match="linear_backend: mixed .*--deterministic"):
        resolve_linear_backend(EngineConfig(linear_backend="mixed", deterministic=True), CPU, torch.bfloat16)


@pytest.mark.skipif(not cpu_has_fast_bf16(), reason="auto picks mixed only on CPUs with AMX or AVX512-BF16")
def test_auto_falls_back_to_onednn_when_the_second_copy_does_not_fit(monkeypatch):
    config = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="bfloat16", num_kv_blocks=16)
    monkeypatch.setattr(core_module, "dense_copy_fits", lambda model: False)
    assert LLMEngine(config).core.linear_backend == "onednn"
    # Asked for by name, it is kept whatever the memory.
    named = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="bfloat16", num_kv_blocks=16,
                         linear_backend="mixed")
    assert LLMEngine(named).core.linear_backend == "mixed"


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
