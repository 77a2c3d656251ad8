"""The GEMM fraction each published dense Server run implies at its own batch.

``step_at_published_batch`` (sim/served_latency.py) prices a run's steps with its own sequences in
flight; this probe also keeps the mean parts of those steps (GEMM and attention compute, memory,
communication, host overhead: cost.step_time's terms) and solves for the compute time that would
make the mean step equal the published mean TPOT under step_time's rule (forward =
sqrt(compute^2 + memory^2), then communication and overhead added), so for the GEMM fraction of
the profile's peak that the run implies, against the fitted one. Approximate: it solves the
rule on the mean step's parts, not step by step. Dense (Llama-family) runs only; a few seconds.

    python -m benchmarks.sim_implied_gemm
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tokenmill.sim.served_latency as served_latency
from tokenmill.sim.cost import StepCost, StepTime, step_time
from tokenmill.sim.hardware import Hardware, get_hardware

PARTS = ("total", "compute", "gemm", "memory", "comm", "overhead", "rows")


def mean_over_published_steps(run, parts: Callable[[StepCost, Hardware, str, StepTime], dict[str, float]]
                              ) -> dict[str, float]:
    """The mean of ``parts(cost, hardware, precision, step_time)`` over the steps
    ``step_at_published_batch`` prices for ``run`` (each step seen as the cost model prices it)."""
    sums: dict[str, float] = {}
    count = 0

    def spy(cost: StepCost, hw: Hardware, precision: str, fused_allreduce: bool = False) -> StepTime:
        nonlocal count
        t = step_time(cost, hw, precision, fused_allreduce)
        for name, value in parts(cost, hw, precision, t).items():
            sums[name] = sums.get(name, 0.0) + value
        count += 1
        return t

    served_latency.step_time = spy
    try:
        served_latency.step_at_published_batch(run, hardware=get_hardware(run.hardware))
    finally:
        served_latency.step_time = step_time
    return {name: value / count for name, value in sums.items()}


def mean_parts(run) -> dict[str, float]:
    """The mean over ``step_at_published_batch``'s steps of each of ``PARTS`` (seconds; rows)."""
    def parts(cost: StepCost, hw: Hardware, precision: str, t: StepTime) -> dict[str, float]:
        gemm = cost.gemm_flops / (hw.flops[precision] * hw.efficiency.gemm_for(precision))
        return dict(zip(PARTS, (t.total_s, t.compute_s, gemm, t.memory_s, t.comm_s, t.overhead_s, cost.rows)))

    return mean_over_published_steps(run, parts)


def implied_fraction(run, parts: dict[str, float]) -> float:
    """The GEMM fraction at which the mean step's parts add up to the published mean TPOT."""
    fitted = get_hardware(run.hardware).efficiency.gemm_for(run.precision)
    forward = run.tpot_mean_ms / 1e3 - parts["comm"] - parts["overhead"]
    if forward <= parts["memory"]:
        return math.inf  # the published step is shorter than the memory term alone
    compute = math.sqrt(forward ** 2 - parts["memory"] ** 2)
    gemm = compute - (parts["compute"] - parts["gemm"])
    return fitted * parts["gemm"] / gemm


def main() -> None:
    print("| model | system | round | precision | in flight | rows per step | TPOT mean ms | step ms | "
          "GEMM / memory ms | fitted GEMM fraction | implied |")
    print("|---" * 11 + "|")
    for run in served_latency.RUNS:
        if run.model == "deepseek-r1":
            continue
        parts = mean_parts(run)
        fitted = get_hardware(run.hardware).efficiency.gemm_for(run.precision)
        print(f"| {run.model} | {run.org} {run.system} ({run.hardware}) | {run.round} | {run.precision} | "
              f"{run.in_flight:,.0f} | {parts['rows']:,.0f} | {run.tpot_mean_ms:.1f} | {parts['total'] * 1e3:.1f} | "
              f"{parts['gemm'] * 1e3:.1f} / {parts['memory'] * 1e3:.1f} | {fitted:.2f} | "
              f"{implied_fraction(run, parts):.2f} |")


if __name__ == "__main__":
    main()
