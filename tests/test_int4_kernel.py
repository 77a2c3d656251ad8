"""The C++ int4_linear (kernels/csrc/int4_linear.cpp) against float64 references:
the float-activation path against the dequantized weight, the int8-activation
path (AVX512-VNNI and AVX2 builds) against the same arithmetic emulated in float64, both
batch-invariant, in float32 and bf16, with bias, for widths that are not whole
panels."""

from __future__ import annotations

import pytest
import torch

from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.int4_linear import (
    dequantize_groupwise_int4,
    has_int8_activations,
    int4_pack,
    quantize_groupwise_int4,
)

kernels = load_cpu_kernels()
pytestmark = pytest.mark.skipif(kernels is None, reason="C++ kernels unavailable (no compiler)")
INT8 = has_int8_activations(kernels)
"""Whether this build has the int8-activations path (AVX512-VNNI or AVX2)."""
SHAPES = [(48, 96), (40, 64), (576, 576), (200, 1536)]  # (N, K): N % 16 != 0 for 40 and 200


def _layer(n: int, k: int, seed: int, panels_per_block: int | None = None):
    torch.manual_seed(seed)
    weight = torch.randn(n, k) * 0.05
    codes, scales, zeros = quantize_groupwise_int4(weight)
    packed = int4_pack(codes, scales, zeros, panels_per_block)
    # The grid both kernels compute with: scales and zeros rounded to bf16.
    dense = dequantize_groupwise_int4(codes, scales.bfloat16().float(), zeros.bfloat16().float()).double()
    return packed, dense, codes, scales.bfloat16().double(), zeros.bfloat16().double()


def _int8_reference(x: torch.Tensor, codes, scales, zeros) -> torch.Tensor:
    """float64 emulation of the int8-activation path: x quantized per group of 32
    (scale max|x| / 127, round half to even, as std::nearbyint), integer sums of
    code * q, then scale * x_scale * sum + (zero - 8 * scale) * sum(x)."""
    m, k = x.shape
    xg = x.double().view(m, k // 32, 32)
    amax = xg.abs().amax(-1, keepdim=True)
    xs = torch.where(amax > 0, (amax.float() / 127).double(), torch.ones_like(amax))
    q = torch.round((xg.float() / xs.float()).double()).clamp(-127, 127)  # [M, G, 32]
    c = codes.double().view(codes.shape[0], k // 32, 32)  # [N, G, 32]
    sums = torch.einsum("mgk,ngk->mng", q, c)  # exact integers
    offsets = zeros - 8.0 * scales  # [N, G]
    return (sums * scales[None] * xs[:, None, :, 0]).sum(-1) + (xg.sum(-1)[:, None, :] * offsets[None]).sum(-1)


@pytest.mark.parametrize("panels_per_block", [None, 1, 2, 3, 4])
@pytest.mark.parametrize("n,k", SHAPES)
def test_float_activations_match_the_dequantized_weight(n, k, panels_per_block):
    packed, dense, *_ = _layer(n, k, seed=n + k, panels_per_block=panels_per_block)
    bias = torch.randn(n)
    for m in (1, 2, 3, 4, 7):
        x = torch.randn(m, k)
        got = kernels.int4_linear(x, packed, n, bias, False)
        assert got.shape == (m, n) and got.dtype == torch.float32
        expected = x.double() @ dense.t() + bias.double()
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not INT8, reason="needs AVX512-VNNI or AVX2")
@pytest.mark.parametrize("panels_per_block", [None, 1, 3, 4])
@pytest.mark.parametrize("n,k", SHAPES)
def test_int8_activations_match_their_float64_emulation(n, k, panels_per_block):
    packed, dense, codes, scales, zeros = _layer(n, k, seed=2 * n + k, panels_per_block=panels_per_block)
    for m in (1, 3, 4, 6):
        x = torch.randn(m, k)
        x[0, :32] = 0.0  # an all-zero group: scale 1, every q 0
        got = kernels.int4_linear(x, packed, n, None, True).double()
        torch.testing.assert_close(got, _int8_reference(x, codes, scales, zeros), rtol=1e-5, atol=1e-4)
        # and within the activation rounding of the float product: each x moved by at
        # most half its group's step, times the weights' absolute values.
        step = x.abs().view(m, k // 32, 32).amax(-1).repeat_interleave(32, dim=1).double() / 127
        bound = (step / 2) @ dense.abs().t()
        assert ((got - x.double() @ dense.t()).abs() <= bound + 1e-4).all()


@pytest.mark.parametrize("panels_per_block", [2, 4])
@pytest.mark.parametrize("int8", [False, True])
def test_every_row_gets_the_same_bits_alone_or_batched_in_float32_and_bf16(int8, panels_per_block):
    if int8 and not INT8:
        pytest.skip("needs AVX512-VNNI or AVX2")
    packed, *_ = _layer(200, 576, seed=5, panels_per_block=panels_per_block)
    x = torch.randn(7, 576)
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        batched = kernels.int4_linear(xd, packed, 200, None, int8)
        assert batched.dtype == dtype
        for r in range(7):
            alone = kernels.int4_linear(xd[r:r + 1].contiguous(), packed, 200, None, int8)
            assert torch.equal(alone[0], batched[r])


def test_bad_shapes_name_what_is_wrong():
    packed, *_ = _layer(48, 96, seed=1)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        kernels.int4_linear(torch.randn(1, 80), packed, 48, None, False)
    with pytest.raises(RuntimeError, match="1 blocks of 48 columns for N = 100"):
        kernels.int4_linear(torch.randn(1, 96), packed, 100, None, False)
    if not INT8:
        with pytest.raises(RuntimeError, match="AVX512-VNNI or AVX2"):
            kernels.int4_linear(torch.randn(1, 96), packed, 48, None, True)


def test_blocks_split_evenly_between_threads_where_they_can():
    from tokenmill.kernels.int4_linear import panels_per_block_for

    # SmolLM2's widths: 576 = 36 panels (12 blocks of 3 split 6/6, where 9 of 4 would split 5/4), 960 = 60
    # panels, 3072 = 192 panels.
    assert [panels_per_block_for(n, threads=2) for n in (576, 960, 3072)] == [3, 3, 4]
    assert panels_per_block_for(576, threads=1) == 4
    assert panels_per_block_for(48, threads=2) == 3  # 3 panels: no even split; one block, no padding
    assert panels_per_block_for(80, threads=2) == 4  # 5 panels: no even split; 2 blocks, the second padded
    assert int4_pack(*quantize_groupwise_int4(torch.randn(48, 64)), 4).shape == (1, 2, 4 * 80)


def test_int4_layers_follow_the_activations_setting():
    from torch import nn

    from tokenmill.config import EngineConfig
    from tokenmill.kernels.int4_linear import Int4Linear

    linear = nn.Linear(64, 32)
    assert Int4Linear(linear, torch.bfloat16).int8_activations is False  # the default: weight-only int4
    if INT8:
        assert Int4Linear(linear, torch.bfloat16, activations="int8").int8_activations is True
    else:
        with pytest.raises(ValueError, match="int4_activations: int8 needs"):
            Int4Linear(linear, torch.bfloat16, activations="int8")
    with pytest.raises(ValueError, match="int4_activations"):
        EngineConfig(int4_activations="int3")


def test_auto_activations_are_int8_only_for_the_self_int4_twin_where_the_kernel_has_them():
    from tokenmill.kernels.int4_linear import resolve_int4_activations

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_int4_activations("auto", cpu, self_int4_draft=True) == ("int8" if INT8 else "float")
    assert resolve_int4_activations("auto", cpu, self_int4_draft=False) == "float"  # served model, int4 draft_model
    assert resolve_int4_activations("auto", cuda, self_int4_draft=True) == "float"
    for setting in ("float", "int8"):  # an explicit setting stands, for drafts and served layers alike
        assert resolve_int4_activations(setting, cpu, self_int4_draft=True) == setting
        assert resolve_int4_activations(setting, cpu, self_int4_draft=False) == setting


def test_an_int4_layer_deep_copies_and_computes_the_same():
    import copy

    from torch import nn

    from tokenmill.kernels.int4_linear import Int4Linear

    layer = Int4Linear(nn.Linear(64, 32), torch.bfloat16)
    twin = copy.deepcopy(layer)
    x = torch.randn(2, 64)
    assert torch.equal(layer(x), twin(x))
