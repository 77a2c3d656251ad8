"""The fused C++ elementwise ops (kernels/csrc/fused_ops.cpp) against float64
references and against the torch implementations they replace, and the engine
pieces on them (the engine-level token check is in test_cpp_attention.py).
Skipped only where the C++ toolchain is missing."""

from __future__ import annotations

import pytest
import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.resolve import resolve_fused_ops
from tokenmill.kernels.cpu_kernels import load_cpu_kernels, missing_toolchain
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS, cpp_fused_ops
from tokenmill.model.rope import apply_rope

pytestmark = pytest.mark.skipif(missing_toolchain() is not None, reason=f"no C++ toolchain: {missing_toolchain()}")

TOL = {torch.float32: 2e-6, torch.bfloat16: 1e-2}  # bf16: one rounding of the output (2^-8 relative)


@pytest.fixture(scope="module")
def ops():
    module = load_cpu_kernels()
    assert module is not None, "the C++ kernels failed to build (see the warning in the log)"
    return cpp_fused_ops(module)


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale).to(dtype)


# H = 576 and 64 fill whole 16-lane vectors; 100 leaves a scalar tail.
@pytest.mark.parametrize("h", [576, 64, 100])
@pytest.mark.parametrize("t", [1, 5, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_delta", [True, False])
def test_add_rms_norm(ops, h, t, dtype, with_delta):
    residual = randn(t, h, seed=1, scale=3.0)
    delta = randn(t, h, dtype=dtype, seed=2) if with_delta else None
    weight = randn(h, dtype=dtype, seed=3)
    expect_x = residual.double() + (delta.double() if with_delta else 0)
    expect = expect_x * torch.rsqrt(expect_x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.double()
    x = residual.clone()
    out = ops.add_rms_norm(x, delta, weight, 1e-5)
    assert out.dtype == dtype and out.shape == (t, h)
    torch.testing.assert_close(x.double(), expect_x, atol=1e-6, rtol=1e-6)  # the residual was updated in place
    torch.testing.assert_close(out.double(), expect, atol=TOL[dtype], rtol=TOL[dtype])
    torch_x = residual.clone()
    torch.testing.assert_close(out, TORCH_FUSED_OPS.add_rms_norm(torch_x, delta, weight, 1e-5),
                               atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("i", [1536, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_and_mul(ops, i, dtype):
    gate_up = randn(7, 2 * i, dtype=dtype, seed=4, scale=4.0)
    gate_up[0, :4] = torch.tensor([100.0, -100.0, 88.5, -90.0]).to(dtype)  # saturated exp: no inf/nan
    g, u = gate_up.double().chunk(2, dim=-1)
    expect = g * torch.sigmoid(g) * u
    out = ops.silu_and_mul(gate_up)
    assert out.dtype == dtype and out.shape == (7, i)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), expect, atol=TOL[dtype] * 4, rtol=TOL[dtype])


@pytest.mark.parametrize("d", [64, 128, 80])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_embedding_in_place_on_a_strided_view(ops, d, dtype):
    t, hq, hkv = 6, 9, 3
    qkv = randn(t, (hq + 2 * hkv) * d, dtype=dtype, seed=5)
    before = qkv.clone()
    positions = torch.tensor([0, 1, 7, 100, 2047, 3])
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(2048, dtype=torch.float64), inv_freq)
    cos_t, sin_t = torch.cat([freqs, freqs], -1).cos().float(), torch.cat([freqs, freqs], -1).sin().float()
    qk = qkv[:, :(hq + hkv) * d].view(t, hq + hkv, d)  # rows strided by the whole qkv width
    expect = apply_rope(qk.double(), cos_t[positions].double()[:, None], sin_t[positions].double()[:, None])
    out = ops.rope(qk, *ops.rope_inputs(cos_t, sin_t, positions, dtype))
    assert out.data_ptr() == qk.data_ptr()  # rotated in place, inside qkv
    torch.testing.assert_close(qkv[:, :(hq + hkv) * d].view(t, hq + hkv, d).double(), expect,
                               atol=TOL[dtype] * 4, rtol=TOL[dtype])
    assert torch.equal(qkv[:, (hq + hkv) * d:], before[:, (hq + hkv) * d:])  # v untouched


def test_rejects_bad_inputs(ops):
    with pytest.raises(RuntimeError, match="residual must be a contiguous float32"):
        ops.add_rms_norm(torch.zeros(2, 64, dtype=torch.bfloat16), None, torch.ones(64), 1e-5)
    with pytest.raises(RuntimeError, match="weight must be \\[H\\]"):
        ops.add_rms_norm(torch.zeros(2, 64), None, torch.ones(32), 1e-5)
    with pytest.raises(RuntimeError, match="delta must have the weight's dtype"):
        ops.add_rms_norm(torch.zeros(2, 64), torch.zeros(2, 64, dtype=torch.bfloat16), torch.ones(64), 1e-5)
    with pytest.raises(RuntimeError, match="gate_up must be \\[T, 2I\\]"):
        ops.silu_and_mul(torch.zeros(2, 63))
    with pytest.raises(RuntimeError, match="cos/sin must be float32"):
        ops.rope(torch.zeros(2, 3, 64), torch.zeros(2, 64, dtype=torch.float64), torch.zeros(2, 64))
    with pytest.raises(RuntimeError, match="cos/sin must be \\[T, D\\]"):
        ops.rope(torch.zeros(2, 3, 64), torch.zeros(3, 64), torch.zeros(3, 64))
    with pytest.raises(RuntimeError, match="x must be float32, bfloat16 or float16"):
        ops.argmax(torch.zeros(2, 8, dtype=torch.float64))


def test_backend_resolution():
    cpu = torch.device("cpu")
    assert resolve_fused_ops("torch", cpu, torch.float32) == ("torch", TORCH_FUSED_OPS)
    name, chosen = resolve_fused_ops("auto", cpu, torch.bfloat16)
    assert name == "cpp" and chosen.name == "cpp"
    assert resolve_fused_ops("auto", cpu, torch.float16) == ("torch", TORCH_FUSED_OPS)
    with pytest.raises(ValueError, match="fused_ops: cpp runs on CPU in float32 or bfloat16"):
        resolve_fused_ops("cpp", cpu, torch.float16)
    with pytest.raises(ValueError, match="fused_ops: must be one of"):
        EngineConfig(fused_ops="triton")


@pytest.mark.parametrize("v", [49152, 100, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_argmax_matches_torch_including_ties(ops, v, dtype):
    logits = randn(9, v, dtype=dtype, seed=6)
    logits[1, v // 3] = logits[1, v - 1] = 50.0  # a tie: the lower index wins
    logits[2] = -float("inf")  # all -inf: index 0, like torch
    logits[3, -1] = 60.0  # the max in the last column (the scalar tail when v % 16 != 0)
    logits[4, :] = 1.0  # all equal
    padded = torch.cat([logits, torch.zeros(9, 5, dtype=dtype)], dim=1)[:, :v]  # strided rows, as the sampler slices
    for x in (logits, padded):
        index, ties = ops.argmax(x)
        assert index.tolist() == x.float().argmax(dim=-1).tolist()
        assert ties.tolist() == TORCH_FUSED_OPS.argmax(x)[1].tolist()
    index, ties = ops.argmax(logits)
    assert index[1] == v // 3 and ties[1] == 2 and ties[4] == v and ties[3] == 1


def test_engine_sampler_uses_the_fused_argmax():
    from tokenmill.engine.engine import LLMEngine

    engine = LLMEngine(EngineConfig(dtype="bfloat16", fused_ops="cpp", num_kv_blocks=16, max_model_len=64))
    assert engine.core.sampler.argmax is engine.core.model.ops.argmax


def test_exact_logits_are_the_unrounded_lm_head():
    """bf16 model: exact_logits equals compute_logits before its rounding (within
    float32 summation order), plain and int8-quantized heads alike."""
    from tokenmill.engine.engine import LLMEngine

    for quantization in (None, "int8"):
        engine = LLMEngine(EngineConfig(dtype="bfloat16", quantization=quantization, num_kv_blocks=16,
                                        max_model_len=64))
        hidden = randn(3, engine.core.arch.hidden_size, dtype=torch.bfloat16, seed=7)
        rounded = engine.core.model.compute_logits(hidden)  # [3, V] bf16
        columns = torch.tensor([0, 17, 504, engine.core.arch.vocab_size - 1])
        for r in range(3):
            exact = engine.core.model.exact_logits(hidden[r], columns)
            assert exact.dtype == torch.float32
            torch.testing.assert_close(exact.bfloat16(), rounded[r, columns], atol=0, rtol=2 ** -7)
            if quantization is None:
                reference = engine.core.model.lm_head.weight[columns].double() @ hidden[r].double()
                torch.testing.assert_close(exact.double(), reference, atol=1e-4, rtol=1e-5)
