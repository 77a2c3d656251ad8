"""Fit the simulator's low-precision GEMM efficiency on TensorRT-LLM's dense-model tables.

`tokenmill sim validate` over-predicts prefill-heavy rows in FP8 and FP4 (docs/SIMULATOR.md):
the GEMM fraction of the tensor-core peak (``Efficiency.gemm``, 0.7, checked for bf16 on an
H100) is too high for the 2x and 4x peaks of FP8 and FP4. This script fits one fraction per
precision on one source, TensorRT-LLM's perf-overview tables of dense Llama models (fixed
ISL/OSL Offline runs: sim/published.py ``_trt`` and ``_trt_total`` rows), so that the median
of log(simulated / published) over that precision's rows is zero (the simulated throughput
grows with the fraction, so a bisection finds it). The MLPerf rows and the MoE models stay
out of the fit: they are what the fitted values are then checked on.

    python -m benchmarks.sim_fit_gemm            # prints the fits and every fitted row's ratio
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from tqdm import tqdm

from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.published import RESULTS
from tokenmill.sim.validate import check_row

DENSE = ("llama3.1-8b", "llama3.3-70b", "llama3.1-405b")


def fit_rows(precision: str):
    return [r for r in RESULTS if r.precision == precision and r.model in DENSE and r.dataset is None
            and "perf-overview" in r.source]


def ratios(rows, precision: str, value: float, num_requests: int) -> list[float]:
    def hardware_for(name: str):
        hw = get_hardware(name)
        eff = replace(hw.efficiency, gemm_by_precision={**hw.efficiency.gemm_by_precision, precision: value})
        return replace(hw, efficiency=eff)

    out = []
    for row in tqdm(rows, desc=f"{precision} gemm {value:.3f}", leave=False):
        checked = check_row(row, num_requests, hardware_for=hardware_for)
        out.append(checked.simulated / row.tokens_per_s_per_gpu)
    return out


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else math.sqrt(s[n // 2 - 1] * s[n // 2])  # geometric: the ratios are log-scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", default="fp8,fp4")
    parser.add_argument("--num-requests", type=int, default=500)
    parser.add_argument("--tolerance", type=float, default=0.01, help="stop when the bracket is this narrow")
    args = parser.parse_args()
    for precision in args.precisions.split(","):
        rows = fit_rows(precision)
        lo, hi = 0.1, 1.0  # the median ratio grows with the fraction: below 1 at lo, above at hi
        while hi - lo > args.tolerance:
            mid = (lo + hi) / 2
            if median(ratios(rows, precision, mid, args.num_requests)) > 1.0:
                hi = mid
            else:
                lo = mid
        value = round((lo + hi) / 2, 2)
        print(f"{precision}: gemm fraction {value} over {len(rows)} rows")
        for row, ratio in zip(rows, ratios(rows, precision, value, args.num_requests)):
            print(f"  {row.model} {row.hardware} x{row.num_gpus} {row.parallel} {row.isl}/{row.osl}: "
                  f"published {row.tokens_per_s_per_gpu:,.0f}, sim / published {ratio:.2f}")


if __name__ == "__main__":
    main()
