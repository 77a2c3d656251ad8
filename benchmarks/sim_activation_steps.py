"""Probe: the published Server runs' steps if activation traffic ran in kernels of its own.

The cost model overlaps every byte a step moves with its compute (cost.step_time: the forward is
sqrt(compute^2 + memory^2)), the activations' bytes (``StepCost.activation_bytes``: each GEMM's
input and output widths, once per row) included. Norms, SwiGLU, quantization and residual adds
are kernels of their own between the GEMMs, memory-bound, that nothing overlaps. This probe prices
each step of ``step_at_published_batch`` (the cost model's step with a published run's own
sequences in flight, sim/served_latency.py) with the activation bytes taken out of the overlapped
forward and ``--passes`` times them added after it at the profile's memory rate, and prints the
step over the published mean TPOT beside the model's own, per run and as the mean |log| per kind
of run. A probe, not a rule: the GEMM fractions were fitted with the activations overlapped, so
a rule of this kind needs a refit and the whole table after it (docs/SIMULATOR.md "Next").

    python -m benchmarks.sim_activation_steps --passes 1 3
"""

from __future__ import annotations

import argparse
import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial

import tokenmill.sim.served_latency as served_latency
from tokenmill.sim.cost import StepCost, StepTime, step_time
from tokenmill.sim.hardware import Hardware, get_hardware


def step_time_apart(cost: StepCost, hardware: Hardware, precision: str, fused_allreduce: bool = False,
                    passes: float = 1.0) -> StepTime:
    """``step_time`` with the activation bytes out of the overlapped forward and ``passes`` x them
    added after it, at ``efficiency.memory`` of the HBM rate."""
    base = step_time(replace(cost, activation_bytes=0.0), hardware, precision, fused_allreduce)
    apart = passes * cost.activation_bytes / (hardware.memory_bw * hardware.efficiency.memory)
    return replace(base, memory_s=base.memory_s + apart, total_s=base.total_s + apart)


def _ratios(run, passes: tuple[float, ...]) -> list[float]:
    """The step over the published mean TPOT: the model's own, then at each of ``passes``."""
    hw = get_hardware(run.hardware)
    out = []
    try:
        for p in (None, *passes):
            # step_at_published_batch calls the module's step_time: swap it in this worker process only.
            served_latency.step_time = step_time if p is None else partial(step_time_apart, passes=p)
            out.append(served_latency.step_at_published_batch(run, hardware=hw) / run.tpot_mean_ms)
    finally:
        served_latency.step_time = step_time
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    passes = tuple(args.passes)
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(partial(_ratios, passes=passes), served_latency.RUNS))
    heads = " | ".join(f"{p:g} pass{'es' * (p != 1)} apart" for p in passes)
    print(f"| model | system | round | precision | in flight | TPOT mean ms | step / TPOT | {heads} |")
    print("|---" * (7 + len(passes)) + "|")
    kinds: dict[str, list[list[float]]] = {}
    for run, ratios in zip(served_latency.RUNS, results):
        cells = " | ".join(f"{r:.2f}" for r in ratios)
        print(f"| {run.model} | {run.org} {run.system} ({run.hardware}) | {run.round} | {run.precision} | "
              f"{run.in_flight:,.0f} | {run.tpot_mean_ms:.1f} | {cells} |")
        kind = "deepseek-r1" if run.model == "deepseek-r1" else f"dense {run.precision}"
        kinds.setdefault(kind, []).append([abs(math.log(r)) for r in ratios])
    for kind, logs in sorted(kinds.items()):
        means = " -> ".join(f"{sum(col) / len(col):.3f}" for col in zip(*logs))
        print(f"{kind} runs ({len(logs)}): mean |log(step / TPOT)| {means}")


if __name__ == "__main__":
    main()
