"""``--linear-backend panels``: every linear on the panel kernel
(kernels/invariant_linear.py), and the rules that pick it and bfloat16 on
AVX-512 CPUs without native bf16 (engine/resolve.py)."""

from __future__ import annotations

import pytest
import torch

from tokenmill.config import EngineConfig
from tokenmill.engine import resolve
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.invariant_linear import InvariantLinear, panel_linears
from tokenmill.kernels.packed_linear import onednn_available
from tokenmill.model.loaders import load_model
from tokenmill.sampling_params import SamplingParams

CPU = torch.device("cpu")
KERNELS = load_cpu_kernels()
pytestmark = pytest.mark.skipif(KERNELS is None, reason="needs the C++ kernels")

# /proc/cpuinfo flags of the CPU kinds the rules tell apart.
AVX2_ONLY = "flags : fpu sse avx avx2 fma"
AVX512_NO_BF16 = "flags : fpu sse avx avx2 fma avx512f avx512bw avx512vl avx512_vnni"
AVX512_BF16 = AVX512_NO_BF16 + " avx512_bf16"
AMX = AVX512_BF16 + " amx_bf16 amx_tile"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_panel_linears_swap_every_linear_and_keep_the_logits(dtype):
    model = load_model("dummy:tiny", "dummy", CPU, dtype).model
    ids = torch.tensor([3, 17, 29, 41, 5])
    with torch.no_grad():
        before = model.compute_logits(model.embed_tokens(ids))
        assert panel_linears(model, KERNELS) == 4 * len(model.layers)
        after = model.compute_logits(model.embed_tokens(ids))
    assert all(isinstance(getattr(o, a), InvariantLinear) for o, a in model.decoder_linears())
    assert isinstance(model.lm_head, InvariantLinear)
    assert model.lm_head.weight is not None  # kept: tied embeddings and exact logits read it
    tolerance = 3e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(after.float(), before.float(), rtol=tolerance, atol=tolerance)
    assert panel_linears(model, KERNELS) == 0  # nothing plain is left


def test_panels_by_name_and_its_errors():
    for dtype in (torch.float32, torch.bfloat16):
        assert resolve.resolve_linear_backend(EngineConfig(linear_backend="panels"), CPU, dtype) == "panels"
    with pytest.raises(ValueError, match="linear_backend: panels runs on CPU in float32 or bfloat16, not cpu float16"):
        resolve.resolve_linear_backend(EngineConfig(linear_backend="panels"), CPU, torch.float16)
    with pytest.raises(ValueError, match="linear_backend: panels runs on CPU .* not cuda bfloat16"):
        resolve.resolve_linear_backend(EngineConfig(linear_backend="panels"), torch.device("cuda"), torch.bfloat16)
    with pytest.raises(ValueError, match="linear_backend: panels .*quantization 'int4'"):
        resolve.resolve_linear_backend(EngineConfig(linear_backend="panels", quantization="int4"), CPU, torch.float32)
    with pytest.raises(ValueError, match="linear_backend: panels .*--deterministic"):
        resolve.resolve_linear_backend(EngineConfig(linear_backend="panels", deterministic=True), CPU, torch.float32)


@pytest.mark.parametrize("flags, bf16_backend, float32_backend, auto_dtype", [
    (AVX2_ONLY, "onednn", "panels", torch.float32),
    (AVX512_NO_BF16, "panels", "mixed", torch.bfloat16),
    (AVX512_BF16, "mixed", "mixed", torch.bfloat16),
    (AMX, "mixed", "mixed", torch.bfloat16),
])
def test_auto_rules_by_cpu(monkeypatch, flags, bf16_backend, float32_backend, auto_dtype):
    """What auto picks on each kind of CPU (the C++ kernels built, oneDNN
    present): bf16 on every AVX-512 CPU, its linears on panels where the CPU
    has no bf16 arithmetic of its own; float32 linears on panels on AVX2 CPUs
    without AVX-512 (faster than oneDNN there at every row count)."""
    if not (onednn_available(torch.float32) and onednn_available(torch.bfloat16)):
        pytest.skip("needs oneDNN packing in float32 and bfloat16 on this CPU")
    monkeypatch.setattr(resolve, "_cpu_flags", lambda: flags)
    assert resolve.resolve_dtype("auto", CPU) == auto_dtype
    assert resolve.resolve_dtype("float32", CPU) == torch.float32
    assert resolve.resolve_linear_backend(EngineConfig(), CPU, torch.bfloat16) == bf16_backend
    assert resolve.resolve_linear_backend(EngineConfig(), CPU, torch.float32) == float32_backend
    assert resolve.resolve_linear_backend(EngineConfig(), CPU, torch.float16) == "torch"


def test_without_the_kernels_auto_keeps_float32_and_torch(monkeypatch):
    import tokenmill.kernels.cpu_kernels as cpu_kernels

    monkeypatch.setattr(resolve, "_cpu_flags", lambda: AVX512_NO_BF16)
    monkeypatch.setattr(cpu_kernels, "load_cpu_kernels", lambda: None)
    assert resolve.resolve_dtype("auto", CPU) == torch.float32
    assert resolve.resolve_linear_backend(EngineConfig(), CPU, torch.float32) == "torch"


def test_panels_engine_decodes_like_torch_in_float32():
    """Float32 panels change only the summation order: the tiny model's greedy
    tokens are those of F.linear, prefill chunks and decode rows alike."""
    config = dict(model="dummy:tiny", load_format="dummy", dtype="float32", num_kv_blocks=32, max_model_len=128,
                  max_num_batched_tokens=16)
    panels = LLMEngine(EngineConfig(**config, linear_backend="panels"))
    assert panels.core.linear_backend == "panels"
    assert isinstance(panels.core.model.lm_head, InvariantLinear)
    plain = LLMEngine(EngineConfig(**config, linear_backend="torch"))
    prompts = [[3 + i, 17, 29, 41 + i] * (1 + 3 * i) for i in range(4)]  # 4 to 40 tokens: chunked at 16
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    assert [r.token_ids for r in panels.generate(prompts, params)] == \
        [r.token_ids for r in plain.generate(prompts, params)]
