"""The C++ int8_linear (kernels/csrc/int8_linear.cpp) against a float64
reference of the same int8 weights and scales: float32 and bf16 inputs, with
and without bias, widths that are not whole tiles, batch- and thread-invariant;
bad shapes refused with a clear error; Int8Linear runs it where it has vector
code and stays close to torch's kernel."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.int8_linear import Int8Linear, quantize_per_channel

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None or not hasattr(kernels, "int8_linear"),
                                reason="C++ kernels unavailable (no compiler)")
SHAPES = [(50, 64), (576, 576), (203, 1536)]  # (N, K): 50 and 203 are not whole tiles of 4 outputs


def _layer(n: int, k: int, seed: int):
    torch.manual_seed(seed)
    q, scales = quantize_per_channel(torch.randn(n, k) * 0.05)
    return q, scales.bfloat16()


def _reference(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = (x.double() @ q.double().t()) * scales.double()
    return y if bias is None else y + bias.double()


@pytest.mark.parametrize("n,k", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_the_float64_product(n, k, dtype):
    q, scales = _layer(n, k, seed=n + k)
    bias = torch.randn(n)
    for m in (1, 2, 5, 6, 7, 13):
        x = torch.randn(m, k).to(dtype)
        for b in (None, bias):
            got = kernels.int8_linear(x, q, scales, b)
            assert got.shape == (m, n) and got.dtype == dtype
            tol = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-2, atol=2e-2)
            torch.testing.assert_close(got.double(), _reference(x, q, scales, b), **tol)


def test_rows_do_not_depend_on_the_batch_or_the_threads():
    q, scales = _layer(203, 576, seed=3)
    x = torch.randn(13, 576)
    batched = kernels.int8_linear(x, q, scales, None)
    for r in range(13):
        assert torch.equal(kernels.int8_linear(x[r:r + 1].contiguous(), q, scales, None)[0], batched[r])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread = kernels.int8_linear(x, q, scales, None)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one_thread, batched)


def test_bad_shapes_are_refused_with_the_reason():
    q, scales = _layer(50, 64, seed=1)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        kernels.int8_linear(torch.randn(2, 40), torch.zeros(50, 40, dtype=torch.int8), scales, None)
    with pytest.raises(RuntimeError, match="K must match"):
        kernels.int8_linear(torch.randn(2, 48), q, scales, None)
    with pytest.raises(RuntimeError, match="int8"):
        kernels.int8_linear(torch.randn(2, 64), q.float(), scales, None)
    with pytest.raises(RuntimeError, match="scales"):
        kernels.int8_linear(torch.randn(2, 64), q, scales[:10], None)


@pytest.mark.skipif(kernels is None or not hasattr(kernels, "int8_linear_isa")
                    or kernels.int8_linear_isa() == "portable", reason="int8_linear has no vector code here")
def test_int8_linear_module_runs_the_cpp_kernel_close_to_torchs():
    torch.manual_seed(0)
    linear = nn.Linear(576, 960, bias=True)
    layer = Int8Linear(linear, torch.bfloat16)
    assert layer.uses_cpp_kernel
    x = torch.randn(3, 576)
    got = layer(x)
    torch_y = torch._weight_int8pack_mm(x.bfloat16(), layer.qweight, layer.scales).float() + linear.bias
    torch.testing.assert_close(got, torch_y, rtol=2e-2, atol=2e-2)
    # exact_columns is the forward's value before the bf16 rounding of the output.
    cols = torch.tensor([0, 17, 959])
    y1 = layer(x[:1])[0, cols]
    torch.testing.assert_close(layer.exact_columns(x[0], cols).bfloat16().float(), y1, rtol=1e-2, atol=1e-2)
    # A width the kernel cannot take (K % 16 != 0) keeps torch's kernel.
    assert not Int8Linear(nn.Linear(40, 32), torch.bfloat16).uses_cpp_kernel
