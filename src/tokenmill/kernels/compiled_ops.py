"""The fused elementwise ops for GPUs: the plain-torch reference ops compiled
by TorchInductor, which fuses each op's torch ops into generated kernels
(Triton on CUDA, C++ on CPU; the kernel count per op was not counted).

Why: under CUDA graphs (engine/decode_graphs.py) launches are cheap, but every
kernel still costs GPU time, and the torch ops run a residual add + RMSNorm
as ~5 ops (casts, add, the norm, the cast back), the rotary embedding as 5
(neg, cat, two muls, add) and SiLU-and-mul as 2, each its own kernel or more.
A 135M model's graph-replayed decode step is made of such small kernels
(measured effect: docs/PERFORMANCE.md, batch-1 graph step 2.70 -> 1.77 ms).

Same signatures and math as kernels/fused_ops.py's torch ops (float32 inside,
one rounding to the model dtype at the end). One kernel serves every token
count (one token compiled apart). Compiling takes seconds (inductor's on-disk
cache makes a restart cheaper): ``compiled_fused_ops`` runs every op at the
model's shapes so that happens at start-up, not inside a request or a graph
capture, and raises if the compiler cannot run here (no Triton, no C
compiler) so the engine can fall back to the torch ops.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS, FusedOps


def _add_rms_norm(residual, delta, weight, eps):
    if delta is not None:
        residual.add_(delta)
    x = residual.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(weight.dtype)


def _silu_and_mul(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def compiled_fused_ops(device: torch.device, dtype: torch.dtype, arch=None) -> FusedOps:
    """The compiled ops, already compiled for ``dtype`` on ``device`` at the
    shapes of ``arch`` (a Llama-style ModelArch; other shapes, and all of them
    without ``arch``, compile at first use). Raises whatever the compiler
    raises where it cannot run."""
    ops = _compiled()
    if arch is not None:
        _warm_up(ops, device, dtype, arch)
    return ops


@functools.cache
def _compiled() -> FusedOps:
    """One set of compiled functions per process: every engine shares them and
    their compiled variants (a new torch.compile wrapper per engine would
    compile again, and each variant counts against dynamo's recompile limit)."""
    # Variants: dtype x (one token, any count) x (delta or None), per model
    # shape; dynamo's default limit of 8 per function is too few for engines
    # of two dtypes in one process (it then runs the op uncompiled).
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(limit, 64)
    # Automatic dynamic shapes: compiled for the first token count seen,
    # recompiled once with the token count symbolic when a second one comes;
    # the model's own dimensions stay constants of the kernels.
    compile_ = torch.compile(fullgraph=True)
    return FusedOps("compiled", compile_(_add_rms_norm), compile_(_silu_and_mul), TORCH_FUSED_OPS.rope_inputs,
                    compile_(_rope), TORCH_FUSED_OPS.argmax)


@torch.inference_mode()
def _warm_up(ops: FusedOps, device: torch.device, dtype: torch.dtype, arch) -> None:
    hidden = arch.hidden_size
    heads, head_dim = getattr(arch, "num_heads", 0) + getattr(arch, "num_kv_heads", 0), getattr(arch, "head_dim", 0)
    intermediate = getattr(arch, "intermediate_size", 0)
    weight = torch.ones(hidden, dtype=dtype, device=device)
    for rows in (1, 3):  # 1, then several: the second compile makes the token count symbolic
        residual = torch.zeros(rows, hidden, device=device)
        for delta in (None, torch.zeros(rows, hidden, dtype=dtype, device=device)):
            ops.add_rms_norm(residual, delta, weight, 1e-5)
        if intermediate:
            ops.silu_and_mul(torch.zeros(rows, 2 * intermediate, dtype=dtype, device=device))
        if heads and head_dim:
            table = torch.zeros(8, head_dim, device=device)
            cos, sin = ops.rope_inputs(table, table, torch.zeros(rows, dtype=torch.long, device=device), dtype)
            ops.rope(torch.zeros(rows, heads, head_dim, dtype=dtype, device=device), cos, sin)
