"""The compiled fused ops (kernels/compiled_ops.py) against the torch ops they
compile, on CPU (TorchInductor's C++ backend; CUDA's Triton kernels run in
tests/test_cuda.py): same values, the residual updated in place, and an engine
on them giving the torch-ops engine's tokens."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.resolve import resolve_fused_ops
from tokenmill.kernels.compiled_ops import compiled_fused_ops
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS
from tokenmill.model.llama_presets import LLAMA_PRESETS
from tokenmill.sampling_params import SamplingParams

ARCH = LLAMA_PRESETS["tiny"]

# TorchInductor's CPU backend compiles C++ (the same toolchain the C++ kernels need).
pytestmark = pytest.mark.skipif(not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")),
                                reason="no C++ compiler for TorchInductor's CPU backend")


@pytest.fixture(scope="module")
def ops():
    return compiled_fused_ops(torch.device("cpu"), torch.float32, ARCH)


@pytest.mark.parametrize("rows", [1, 5, 17])
def test_ops_match_torch(ops, rows):
    torch.manual_seed(rows)
    hidden, inter = ARCH.hidden_size, ARCH.intermediate_size
    heads, d = ARCH.num_heads + ARCH.num_kv_heads, ARCH.head_dim
    with torch.inference_mode():
        weight = torch.randn(hidden)
        residual, delta = torch.randn(rows, hidden), torch.randn(rows, hidden)
        mine, ref = residual.clone(), residual.clone()
        torch.testing.assert_close(ops.add_rms_norm(mine, delta, weight, 1e-5),
                                   TORCH_FUSED_OPS.add_rms_norm(ref, delta, weight, 1e-5))
        torch.testing.assert_close(mine, ref)  # delta added in place in both
        torch.testing.assert_close(ops.add_rms_norm(mine, None, weight, 1e-5),
                                   TORCH_FUSED_OPS.add_rms_norm(ref, None, weight, 1e-5))
        gate_up = torch.randn(rows, 2 * inter)
        torch.testing.assert_close(ops.silu_and_mul(gate_up), TORCH_FUSED_OPS.silu_and_mul(gate_up))
        table = torch.randn(64, d)
        cos, sin = ops.rope_inputs(table, table.flip(0), torch.randint(0, 64, (rows,)), torch.float32)
        x = torch.randn(rows, heads, d)
        torch.testing.assert_close(ops.rope(x, cos, sin), TORCH_FUSED_OPS.rope(x, cos, sin))


def test_an_engine_on_compiled_ops_gives_the_same_tokens():
    def engine(fused_ops):
        return LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                                      num_kv_blocks=64, max_model_len=256, fused_ops=fused_ops,
                                      attention_backend="torch"))

    compiled = engine("compiled")
    assert compiled.core.fused_ops == "compiled" and compiled.core.model.ops.name == "compiled"
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    prompts = [list(range(10, 40)), [7, 8, 9]]
    want = [r.token_ids for r in engine("torch").generate(prompts, params)]
    assert [r.token_ids for r in compiled.generate(prompts, params)] == want


def test_resolution():
    cpu = torch.device("cpu")
    assert resolve_fused_ops("compiled", cpu, torch.float32)[0] == "compiled"
    assert resolve_fused_ops("torch", cpu, torch.float32)[0] == "torch"
    with pytest.raises(ValueError, match="fused_ops"):
        EngineConfig(fused_ops="triton")
