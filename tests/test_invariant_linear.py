"""The batch-invariant linear kernel (--deterministic): right values, and each
row's values independent of how many rows share the call and where it sits."""

from __future__ import annotations

import pytest
import torch

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.invariant_linear import InvariantLinear

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None, reason="needs the C++ kernels")

# Model shapes (SmolLM2: qkv, gate_up, down) and odd ones: N not a multiple of 16 or 32,
# K odd or not a multiple of 32 (the paired bf16 layout pads both).
SHAPES = [(960, 576), (3072, 576), (576, 1536), (37, 19), (16, 1), (33, 7), (49, 45)]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("n, k", SHAPES)
def test_values_match_a_float32_matmul(dtype, tol, n, k):
    g = torch.Generator().manual_seed(n * 1000 + k)
    weight = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
    bias = torch.randn(n, generator=g)
    x = torch.randn(37, k, generator=g).to(dtype)
    got = kernels.invariant_linear(x, kernels.pack_invariant_weight(weight), n, bias)
    assert got.dtype == dtype and got.shape == (37, n)
    expected = torch.nn.functional.linear(x.float(), weight.float(), bias)
    torch.testing.assert_close(got.float(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n, k", SHAPES)
def test_a_row_is_the_same_whatever_shares_the_call(dtype, n, k):
    g = torch.Generator().manual_seed(7)
    packed = kernels.pack_invariant_weight((torch.randn(n, k, generator=g) * 0.05).to(dtype))
    x = torch.randn(70, k, generator=g).to(dtype)
    full = kernels.invariant_linear(x, packed, n, None)
    for rows in (1, 2, 5, 6, 7, 16, 17, 31, 33, 69):
        for start in (0, 1, 70 - rows):
            part = kernels.invariant_linear(x[start:start + rows], packed, n, None)
            assert torch.equal(part, full[start:start + rows]), (rows, start)
    other = x.clone()
    other[1:] = torch.randn(69, k, generator=g).to(dtype)  # same row 0, different neighbours
    assert torch.equal(kernels.invariant_linear(other, packed, n, None)[0], full[0])


def test_module_keeps_shapes_bias_and_optionally_the_weight():
    linear = torch.nn.Linear(24, 40, bias=True)
    kept = InvariantLinear(linear, kernels, keep_weight=True)
    dropped = InvariantLinear(linear, kernels, keep_weight=False)
    x = torch.randn(2, 3, 24)
    with torch.no_grad():
        torch.testing.assert_close(kept(x), linear(x), rtol=1e-5, atol=1e-5)
    assert kept.weight is linear.weight and dropped.weight is None
    with pytest.raises(RuntimeError, match="packed weight does not match"):
        kernels.invariant_linear(torch.randn(3, 25), kept.packed, 40, None)
