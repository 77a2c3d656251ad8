"""How much of a published Hopper Server step lies outside its GEMMs, with the GEMMs at their measured rates.

The FP8 GEMMs of the dense Llama layers, timed one shape at a time on a lent H200
(benchmarks/gpu_gemm_shapes.py, results/gpu/sim_h200_s38/run1/r/gemms.json), run 1.2-1.4x faster than
the fitted FP8 fraction prices them from 1,024 rows up, while that fraction puts the published Hopper
steps about right: so the published steps hold time the cost model has no term for. This probe puts
a number on it for each published dense Hopper Server run: its steps at the published batch
(``step_at_published_batch``, sim/served_latency.py), each step's GEMMs (``StepCost.tiled_gemms``)
timed from the measured table (linear in rows between the measured row counts; a measured GEMM's
time holds its weights' and activations' traffic), then attention as the cost model has it (its
compute and the KV cache's reads and writes, by the sqrt rule) after them, communication and host
overhead; the published mean TPOT against that step. What is left is the norms, activations,
quantization and residual kernels between the GEMMs, and the gaps between kernels. The H200 NVL's
GEMMs are the SXM's times over its tensor peaks' ratio (0.844, hardware.py ``h200-nvl``), and the
H100's the H200's (the same tensor cores; its run's GEMMs are compute-bound): assumptions, not
measurements.

    python -m benchmarks.sim_outside_gemm [--gemms FILE]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math

import tokenmill.sim.served_latency as served_latency
from benchmarks.sim_implied_gemm import mean_over_published_steps
from tokenmill.sim.cost import StepCost, StepTime
from tokenmill.sim.hardware import Hardware, get_hardware

GEMMS = "results/gpu/sim_h200_s38/run1/r/gemms.json"
HOPPER = ("h100", "h200", "h200-nvl")


class GemmTable:
    """Measured seconds per (n, k) GEMM at a few row counts; linear in rows between them, and past
    the last one, linear through it from the origin (a GEMM's time grows with its rows there)."""

    def __init__(self, records: list[dict]):
        points: dict[tuple[int, int], dict[int, float]] = {}
        for r in records:
            points.setdefault((r["n"], r["k"]), {})[r["rows"]] = r["seconds"]
        self.points = {key: sorted(rows.items()) for key, rows in points.items()}

    def seconds(self, rows: int, n: int, k: int) -> float:
        if (n, k) not in self.points:
            raise KeyError(f"no measured GEMM of {n} x {k}")
        pts = self.points[(n, k)]
        xs = [x for x, _ in pts]
        if rows <= xs[0]:
            return pts[0][1]
        if rows >= xs[-1]:
            return pts[-1][1] * rows / xs[-1]
        i = bisect.bisect_left(xs, rows)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        return y0 + (y1 - y0) * (rows - x0) / (x1 - x0)


def mean_parts(run, table: GemmTable, slowdown: float = 1.0) -> dict[str, float]:
    """Means over the run's steps at the published batch: ``model`` (the cost model's step),
    ``gemm_model`` and ``gemm_measured`` (the step's GEMMs' compute as priced, and the GEMMs as timed
    times ``slowdown``), ``measured`` (the GEMMs as timed, then attention, communication and
    overhead as priced)."""
    def parts(cost: StepCost, hw: Hardware, precision: str, t: StepTime) -> dict[str, float]:
        gemm_model = cost.gemm_flops / (hw.flops[precision] * hw.efficiency.gemm_for(precision))
        gemm_measured = slowdown * sum(calls * table.seconds(m, n, k) for m, n, k, calls in cost.tiled_gemms)
        attention = t.compute_s - gemm_model  # the tile rule off: the rest of compute is attention's
        kv = (cost.kv_read_bytes + cost.kv_write_bytes) / (hw.memory_bw * hw.efficiency.memory)
        return {"model": t.total_s, "gemm_model": gemm_model, "gemm_measured": gemm_measured,
                "measured": gemm_measured + math.hypot(attention, kv) + t.comm_s + t.overhead_s}

    return mean_over_published_steps(run, parts)


def hopper_runs() -> list:
    return [r for r in served_latency.RUNS if r.model != "deepseek-r1" and r.hardware in HOPPER]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gemms", default=GEMMS, help="a gpu_gemm_shapes --measure JSON (default: %(default)s)")
    args = ap.parse_args(argv)
    with open(args.gemms) as f:
        table = GemmTable(json.load(f)["records"])
    sxm = get_hardware("h200").flops["fp8"]
    print("| model | system (round) | in flight | TPOT mean ms | model step ms | GEMM compute priced / GEMMs "
          "timed ms | GEMMs timed + attention + comm + overhead ms | the published step outside it |")
    print("|---" * 8 + "|")
    for run in hopper_runs():
        slowdown = sxm / get_hardware(run.hardware).flops["fp8"]
        p = mean_parts(run, table, slowdown)
        outside = 1 - p["measured"] / (run.tpot_mean_ms / 1e3)
        print(f"| {run.model} | {run.org} {run.system} ({run.round}) | {run.in_flight:,.0f} | {run.tpot_mean_ms:.1f} | "
              f"{p['model'] * 1e3:.1f} | {p['gemm_model'] * 1e3:.1f} / {p['gemm_measured'] * 1e3:.1f} | "
              f"{p['measured'] * 1e3:.1f} | {outside:.0%} |")


if __name__ == "__main__":
    main()
