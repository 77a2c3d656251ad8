"""Where a published row's simulated step time goes, at the batch the row's simulation picks.

For each TensorRT-LLM table row of ``--model`` on ``--hardware`` (fixed ISL/OSL, its published layout),
this runs the row's Offline candidates as ``tokenmill sim validate`` does (``_offline_candidates``:
every batch size the KV cache holds, the row's own request count), takes the best, and simulates it
once more with every step's cost and time recorded. It prints the simulated and published tokens/s per
GPU and the mean step's parts as the cost model prices them: rows, compute (GEMMs and attention),
memory (weights, the routed experts' among them, KV cache, activations), communication and host
overhead, and the step's total (compute and memory combined by the sqrt rule, then communication and
overhead added). Rows whose error follows one part point at that part's price. One process, from
seconds to four minutes a row (a 1K/32K row runs ~200,000 steps).

Two counterfactuals for MoE rows: ``--expert-stream F`` streams the routed experts' weights at F of
HBM instead of the profile's ``Efficiency.expert_stream``; ``--expert-gemm-scale K`` prices the routed
experts' GEMMs as K times their FLOPs (a kernel at 1/K of the rate the profile gives them).

    python -m benchmarks.sim_step_parts --model gpt-oss-120b [--hardware h100,h200] [--isl-osl 1024/1024]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace

import tokenmill.sim.predict as predict_mod
import tokenmill.sim.step_price as step_price
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.published import RESULTS, PublishedResult
from tokenmill.sim.search import SEQ_CHOICES
from tokenmill.sim.validate import _offline_candidates, parse_parallel, row_workload

PARTS = ("rows", "total_ms", "compute_ms", "memory_ms", "comm_ms", "overhead_ms", "weight_gb", "expert_weight_gb",
         "kv_gb", "activation_gb", "gemm_tflop", "expert_gemm_tflop", "attention_tflop")


def step_parts(row: PublishedResult, num_requests: int = 500, seq_choices: tuple[int, ...] = SEQ_CHOICES,
               expert_stream: float | None = None,
               expert_gemm_scale: float = 1.0) -> tuple[float, int, dict[str, float]]:
    """(simulated tokens/s per GPU, max_num_seqs, mean step parts per device) at the row's best batch,
    under the counterfactuals (module docstring) where given."""
    arch, hw = get_model(row.model), get_hardware(row.hardware)
    if expert_stream is not None:
        hw = replace(hw, efficiency=replace(hw.efficiency, expert_stream=expert_stream))
    priced_cost = step_price.step_cost

    def costed(*args, **kwargs):
        cost = priced_cost(*args, **kwargs)
        extra = (expert_gemm_scale - 1.0) * cost.expert_gemm_flops  # counted in gemm_flops too (cost.step_time)
        return replace(cost, gemm_flops=cost.gemm_flops + extra, expert_gemm_flops=cost.expert_gemm_flops + extra)

    if expert_gemm_scale != 1.0:
        step_price.step_cost = costed
    try:
        return _recorded_best(arch, hw, row, num_requests, seq_choices)
    finally:
        step_price.step_cost = priced_cost


def _recorded_best(arch, hw, row: PublishedResult, num_requests: int,
                   seq_choices: tuple[int, ...]) -> tuple[float, int, dict[str, float]]:
    workload = row_workload(row, num_requests)
    candidates, why = _offline_candidates(arch, hw, row, workload, [parse_parallel(row.parallel)], seq_choices)
    if not candidates:
        raise ValueError(f"{row.model} on {row.hardware}: {why}")
    _, deployment = candidates[0]
    sums: dict[str, float] = defaultdict(float)
    steps = 0
    priced = step_price.step_time

    def recorded(cost, hardware, precision, fused_allreduce=False):
        nonlocal steps
        t = priced(cost, hardware, precision, fused_allreduce)
        steps += 1
        for key, value in (("rows", cost.rows), ("total_ms", t.total_s * 1e3), ("compute_ms", t.compute_s * 1e3),
                           ("memory_ms", t.memory_s * 1e3), ("comm_ms", t.comm_s * 1e3),
                           ("overhead_ms", t.overhead_s * 1e3), ("weight_gb", cost.weight_bytes / 1e9),
                           ("expert_weight_gb", cost.expert_weight_bytes / 1e9),
                           ("kv_gb", (cost.kv_read_bytes + cost.kv_write_bytes) / 1e9),
                           ("activation_gb", cost.activation_bytes / 1e9), ("gemm_tflop", cost.gemm_flops / 1e12),
                           ("expert_gemm_tflop", cost.expert_gemm_flops / 1e12),
                           ("attention_tflop", cost.attention_flops / 1e12)):
            sums[key] += value
        return t

    # As _offline_candidates ran it: the row's own request count per replica, else two batches' worth.
    requests = (-(-row.num_requests // deployment.replicas) if row.num_requests
                else max(workload.num_requests, 2 * deployment.max_num_seqs))
    step_price.step_time = recorded
    try:
        figures = predict_mod.predict(arch, hw, deployment, replace(workload, num_requests=requests))
    finally:
        step_price.step_time = priced
    return figures["tokens_per_s_per_gpu"], deployment.max_num_seqs, {k: sums[k] / steps for k in PARTS}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--hardware", default=None, help="comma-separated profiles (default: every row's)")
    ap.add_argument("--isl-osl", default=None, help="comma-separated ISL/OSL pairs, e.g. 1024/1024 (default: all)")
    ap.add_argument("--expert-stream", type=float, default=None, metavar="F")
    ap.add_argument("--expert-gemm-scale", type=float, default=1.0, metavar="K")
    args = ap.parse_args(argv)
    pairs = None if args.isl_osl is None else {tuple(int(x) for x in p.split("/")) for p in args.isl_osl.split(",")}
    rows = [r for r in RESULTS if r.model == args.model and r.dataset is None
            and (args.hardware is None or r.hardware in args.hardware.split(","))
            and (pairs is None or (r.isl, r.osl) in pairs)]
    if not rows:
        ap.error(f"no TensorRT-LLM row of {args.model} on {args.hardware or 'any hardware'}")
    print("| hardware | GPUs | layout | ISL/OSL | published | simulated | sim / published | seqs | rows | step ms "
          "| compute ms | memory ms | comm ms | weights GB (experts) | KV GB | activations GB | GEMM TFLOP (experts) "
          "| attention TFLOP |")
    print("|" + "---|" * 18)
    for row in rows:
        simulated, seqs, p = step_parts(row, expert_stream=args.expert_stream,
                                        expert_gemm_scale=args.expert_gemm_scale)
        print(f"| {row.hardware} | {row.num_gpus} | {row.parallel} | {row.isl}/{row.osl} | "
              f"{row.tokens_per_s_per_gpu:,.0f} | {simulated:,.0f} | {simulated / row.tokens_per_s_per_gpu:.2f} | "
              f"{seqs} | {p['rows']:,.0f} | {p['total_ms']:.1f} | {p['compute_ms']:.1f} | {p['memory_ms']:.1f} | "
              f"{p['comm_ms']:.1f} | {p['weight_gb']:.1f} ({p['expert_weight_gb']:.1f}) | {p['kv_gb']:.1f} | "
              f"{p['activation_gb']:.1f} | {p['gemm_tflop']:.2f} ({p['expert_gemm_tflop']:.2f}) | "
              f"{p['attention_tflop']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
