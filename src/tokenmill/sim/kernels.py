"""Kernel generations: how long an older TensorRT-LLM's step took, against the cost model's.

The cost model's efficiency factors were fitted and checked on published runs of early-2026
TensorRT-LLM (MLPerf Inference v6.0, TensorRT-LLM's current performance tables). NVIDIA's
MLPerf v5.1 DeepSeek-R1 configs (August 2025) name the same layout as v6.0's (TP8 EP8 attention
DP per 8-GPU instance, FP4 weights, FP8 KV cache, no MTP, no disaggregation); v6.0 changed the
MoE backend (WIDEEP or CUTLASS -> CUTEDSL), the batch (512 -> 640 per GPU), the step budget and
the kernels underneath. The same rack served 1.54x (Offline) and 1.91x (Server) more per GPU.

A step of older kernels is priced as the cost model's step times ``step_scale(kernels)``. The
scale is read in the published Server logs (sim/served_latency.py): by Little's law each run held
(tokens/s x mean TPOT) sequences in flight, and the cost model's step with that many sequences,
against the run's mean TPOT, is 0.57-0.63 for the eight v5.1 DeepSeek-R1 runs with logs (three
GPU kinds, five submitters) and 0.69-1.05 for the eleven v6.0 ones (median 0.89). The ratio of
the two medians, 1.52, is v5.1's step against v6.0's as the same cost model sees them
(``fitted_v51_scale`` recomputes it). It is a DeepSeek-R1 (MoE) figure on Blackwell: the dense
models' v5.1 rows show no gap of that size (Llama-3.1-405B's GB300 Offline row reads 1.02 at
v6.0 kernels). The v5.1 runs held 840-1,480 sequences per instance, the v6.0 ones 890-4,670; the
one v6.0 run at a v5.1-sized batch (Google's GB200 rack, 890) reads 0.69, so part of the gap may
be the cost model's step floor (low at small batches) rather than the kernels: a line through the
v6.0 ratios against their batches puts v5.1's step at 1.27x v6.0's (docs/SIMULATOR-LOG.md, "Kernel
generations"). The constant is the direct estimate, which assumes no such line.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

KERNEL_GENERATIONS: dict[str, float] = {"v6.0": 1.0, "v5.1": 1.52}
"""Step time against the cost model's, per TensorRT-LLM generation named by its MLPerf round."""
CURRENT = "v6.0"


def step_scale(kernels: str) -> float:
    """The step-time multiplier of a kernel generation; ValueError naming the flag if unknown."""
    try:
        return KERNEL_GENERATIONS[kernels]
    except KeyError:
        raise ValueError(f"--kernels: {kernels!r} is not a kernel generation; choose one of "
                         f"{', '.join(KERNEL_GENERATIONS)}") from None


def fitted_v51_scale(steps: int = 200) -> float:
    """The v5.1 scale from the published records: median over v6.0 runs of (cost model's step at
    the run's batch / its mean TPOT), over the same median for the v5.1 runs."""
    from tokenmill.sim.served_latency import DEEPSEEK_RUNS, DEEPSEEK_RUNS_V51, step_at_published_batch

    def median_ratio(runs) -> float:
        return statistics.median(step_at_published_batch(replace(r, kernels=CURRENT), steps) / r.tpot_mean_ms
                                 for r in runs)

    return median_ratio(DEEPSEEK_RUNS) / median_ratio(DEEPSEEK_RUNS_V51)
