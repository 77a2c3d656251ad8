"""The published Server runs' steps with and without the tile rule (sim/gemm_tiles.py).

Each Server run with a log (sim/served_latency.py ``RUNS``) held a known number of sequences in
flight at a known mean TPOT: the cost model's step at that batch against that TPOT checks the step
itself, without a queueing simulation (``step_at_published_batch``). This prints, per run, the
published mean TPOT and the simulated step over it: without the rule (the profiles as they are,
every GEMM at the flat fractions, ``LOW_PRECISION_GEMM`` and ``GB300_FP4_GEMM``) and with it
(``with_tile_rule``: ``TILED_GEMM`` and ``GB300_TILED_FP4``), then per precision of the dense
(Llama-family) runs the mean |log(sim / published)|. The DeepSeek-R1 runs, whose GEMMs the rule does not price,
read the same both ways. About 20 seconds with two processes.

    python -m benchmarks.sim_tile_steps [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
from concurrent.futures import ProcessPoolExecutor

from tokenmill.sim.hardware import get_hardware, with_tile_rule
from tokenmill.sim.served_latency import RUNS, ServedRun, step_at_published_batch


def _steps(run: ServedRun) -> tuple[float, float]:
    """(without the rule, with it): the simulated step over the published mean TPOT."""
    hw = get_hardware(run.hardware)
    tiled = step_at_published_batch(run, hardware=with_tile_rule(hw))
    return step_at_published_batch(run, hardware=hw) / run.tpot_mean_ms, tiled / run.tpot_mean_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_steps, RUNS))
    print("| model | system | round | precision | in flight | TPOT mean ms | step / TPOT, flat | with the tile rule |")
    print("|---|---|---|---|---|---|---|---|")
    errors: dict[str, list[tuple[float, float]]] = {}
    for run, (flat, tiled) in zip(RUNS, results):
        print(f"| {run.model} | {run.org} {run.system} ({run.hardware}) | {run.round} | {run.precision} | "
              f"{run.in_flight:,.0f} | {run.tpot_mean_ms:.1f} | {flat:.2f} | {tiled:.2f} |")
        if run.model != "deepseek-r1":
            errors.setdefault(run.precision, []).append((abs(math.log(flat)), abs(math.log(tiled))))
    for precision, pairs in sorted(errors.items()):
        flat, tiled = (sum(p[i] for p in pairs) / len(pairs) for i in (0, 1))
        print(f"dense {precision} runs ({len(pairs)}): mean |log(step / TPOT)| {flat:.3f} flat, {tiled:.3f} tiled")


if __name__ == "__main__":
    main()
