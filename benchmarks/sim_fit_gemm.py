"""Fit the simulator's low-precision GEMM efficiency on TensorRT-LLM's dense-model tables.

`tokenmill sim validate` over-predicts prefill-heavy rows in FP8 and FP4 (docs/SIMULATOR.md):
the GEMM fraction of the tensor-core peak (``Efficiency.gemm``, 0.7, checked for bf16 on an
H100) is too high for the 2x and 4x peaks of FP8 and FP4. This script fits one fraction per
precision on one source, TensorRT-LLM's perf-overview tables of dense Llama models (fixed
ISL/OSL Offline runs: sim/published.py ``_trt`` and ``_trt_total`` rows), so that the median
of log(simulated / published) over that precision's rows is zero (the simulated throughput
grows with the fraction, so a bisection finds it). The MLPerf rows and the MoE models stay
out of the fit: they are what the fitted values are then checked on. The flat fractions it fits
are hardware.py ``LOW_PRECISION_GEMM``; with ``--tile-rule`` it fits, under the tile rule
(sim/gemm_tiles.py, ``tokenmill sim --tile-rule``), the fractions of the GEMMs the rule prices
(hardware.py ``TILED_GEMM``): these rows' GEMMs are all such.

    python -m benchmarks.sim_fit_gemm            # prints the fits and every fitted row's ratio
    python -m benchmarks.sim_fit_gemm --bracket 0.45,0.75 --jobs 2   # a narrower search over two processes
    python -m benchmarks.sim_fit_gemm --tile-rule --precisions fp4 --bracket 0.28,0.40 --jobs 2  # TILED_GEMM's
"""

from __future__ import annotations

import argparse
import math
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from functools import partial

from tqdm import tqdm

from tokenmill.sim.hardware import get_hardware, with_tile_rule
from tokenmill.sim.published import RESULTS
from tokenmill.sim.validate import check_row

DENSE = ("llama3.1-8b", "llama3.3-70b", "llama3.1-405b")


def fit_rows(precision: str):
    return [r for r in RESULTS if r.precision == precision and r.model in DENSE and r.dataset is None
            and "perf-overview" in r.source]


def _hardware_at(name: str, precision: str, value: float, tile_rule: bool):
    """The profile with ``precision``'s flat fraction at ``value``, or, under the tile rule, its tiled one."""
    hw = get_hardware(name)
    if tile_rule:
        hw = with_tile_rule(hw)
        table = {**hw.efficiency.tiled_gemm_by_precision, precision: value}
        return replace(hw, efficiency=replace(hw.efficiency, tiled_gemm_by_precision=table))
    table = {**hw.efficiency.gemm_by_precision, precision: value}
    return replace(hw, efficiency=replace(hw.efficiency, gemm_by_precision=table))


def _ratio(job) -> float:
    row, precision, value, num_requests, tile_rule = job
    hardware_for = partial(_hardware_at, precision=precision, value=value, tile_rule=tile_rule)
    return check_row(row, num_requests, hardware_for=hardware_for).simulated / row.tokens_per_s_per_gpu


def ratios(rows, precision: str, value: float, num_requests: int, jobs: int = 1,
           tile_rule: bool = False) -> list[float]:
    work = [(row, precision, value, num_requests, tile_rule) for row in rows]
    with ProcessPoolExecutor(jobs) if jobs > 1 else nullcontext() as pool:
        done = (pool.map if pool else map)(_ratio, work)
        return list(tqdm(done, total=len(work), desc=f"{precision} gemm {value:.3f}", leave=False))


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else math.sqrt(s[n // 2 - 1] * s[n // 2])  # geometric: the ratios are log-scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", default="fp8,fp4")
    parser.add_argument("--num-requests", type=int, default=500)
    parser.add_argument("--tolerance", type=float, default=0.01, help="stop when the bracket is this narrow")
    parser.add_argument("--bracket", default="0.1,1.0",
                        help="LO,HI: the search's start (the median ratio must be below 1 at LO and above at HI)")
    parser.add_argument("--jobs", type=int, default=1, help="rows simulated in parallel processes")
    parser.add_argument("--tile-rule", action="store_true",
                        help="fit the fraction of the GEMMs the tile rule prices (hardware.py TILED_GEMM), the rule on")
    args = parser.parse_args()
    for precision in args.precisions.split(","):
        rows = fit_rows(precision)
        lo, hi = (float(v) for v in args.bracket.split(","))  # the median ratio grows with the fraction
        while hi - lo > args.tolerance:
            mid = (lo + hi) / 2
            if median(ratios(rows, precision, mid, args.num_requests, args.jobs, args.tile_rule)) > 1.0:
                hi = mid
            else:
                lo = mid
        value = round((lo + hi) / 2, 2)
        print(f"{precision}: gemm fraction {value} over {len(rows)} rows")
        for row, ratio in zip(rows, ratios(rows, precision, value, args.num_requests, args.jobs, args.tile_rule)):
            print(f"  {row.model} {row.hardware} x{row.num_gpus} {row.parallel} {row.isl}/{row.osl}: "
                  f"published {row.tokens_per_s_per_gpu:,.0f}, sim / published {ratio:.2f}")


if __name__ == "__main__":
    main()
