"""Fit the GB300's FP4 GEMM fraction on NVIDIA's own GB300 and GB200 rack runs of one round.

The FP4 fraction (hardware.py ``LOW_PRECISION_GEMM``) was fitted on B200 and GB200 rows of
TensorRT-LLM's tables; TensorRT-LLM publishes no GB300 row, so the GB300's 15 PFLOP/s peak took
the same fraction untested. NVIDIA's MLPerf v6.0 Offline runs of the same dense models on both
racks (same submitter, round and software) are the test: published, the GB300 rack runs 1.27x
(Llama-2-70B) and 1.26x (Llama-3.1-405B) the GB200 rack per GPU; simulated, 1.42x and 1.41x. This
script bisects the GB300's own FP4 fraction so that the two racks' simulated / published ratios
agree (the geometric mean over the pairs of GB300's ratio over GB200's is 1): each pair's
shared errors (software, harness, the fraction fitted elsewhere) cancel in it. Every other GB300
row (DeepSeek-R1, the v5.1 rows, Server and Interactive) stays out of the fit.

    python -m benchmarks.sim_fit_gb300        # ~5 minutes here: the fit, then each pair's ratios
    python -m benchmarks.sim_fit_gb300 --held-out   # NVIDIA's B300 Offline rows at both fractions, ~5 minutes
    python -m benchmarks.sim_fit_gb300 --tile-rule  # the same fit under the tile rule: GB300_TILED_FP4

The B300 is the same chip (compute capability 10.3) at 1,100 W on an 8-GPU board, and its profile takes
the GB300's fraction: ``--held-out`` runs NVIDIA's v6.0 B300 Offline rows, which took no part in the fit,
at the fitted fraction and at the shared one.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from tqdm import tqdm

from tokenmill.sim.hardware import LOW_PRECISION_GEMM, TILED_GEMM, get_hardware, with_tile_rule
from tokenmill.sim.published import RESULTS, PublishedResult
from tokenmill.sim.validate import check_row

MODELS = ("llama2-70b", "llama3.1-405b")


def pairs() -> list[tuple[PublishedResult, PublishedResult]]:
    """(GB300 row, GB200 row) of each dense model's MLPerf v6.0 Offline runs on NVIDIA's racks."""
    def row(model: str, hardware: str) -> PublishedResult:
        found = [r for r in RESULTS if r.model == model and r.hardware == hardware and r.scenario == "offline"
                 and r.num_gpus == 72 and "MLPerf Inference v6.0" in r.source and "closed/NVIDIA" in r.source]
        assert len(found) == 1, (model, hardware, found)
        return found[0]
    return [(row(m, "gb300"), row(m, "gb200")) for m in MODELS]


def ratio(row: PublishedResult, fp4: float | None, num_requests: int, tile_rule: bool = False) -> float:
    """Simulated / published, the GB300's (or B300's) FP4 fraction at ``fp4`` (None: the profile's; the GB200
    rows' is ``LOW_PRECISION_GEMM``'s). With ``tile_rule`` every profile is under the tile rule
    (sim/gemm_tiles.py) and the fraction is that of the GEMMs it prices (hardware.py ``TILED_GEMM``; the
    rows are dense, so all of their GEMMs)."""
    def hardware_for(name: str):
        hw = with_tile_rule(get_hardware(name)) if tile_rule else get_hardware(name)
        if name not in ("gb300", "b300") or fp4 is None:
            return hw
        table = "tiled_gemm_by_precision" if tile_rule else "gemm_by_precision"
        eff = replace(hw.efficiency, **{table: {**getattr(hw.efficiency, table), "fp4": fp4}})
        return replace(hw, efficiency=eff)
    return check_row(row, num_requests, hardware_for=hardware_for).simulated / row.tokens_per_s_per_gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-requests", type=int, default=1000)
    parser.add_argument("--tolerance", type=float, default=0.01, help="stop when the bracket is this narrow")
    parser.add_argument("--held-out", action="store_true",
                        help="instead of fitting, run NVIDIA's B300 Offline rows at the profile's and the shared "
                             "FP4 fraction")
    parser.add_argument("--tile-rule", action="store_true",
                        help="fit the GB300's fraction of the GEMMs the tile rule prices (hardware.py "
                             "GB300_TILED_FP4), every profile under the rule")
    args = parser.parse_args()
    rule = args.tile_rule
    if args.held_out:
        held_out(args.num_requests, rule)
        return
    rows = pairs()
    gb200 = [ratio(b, None, args.num_requests, rule) for _, b in tqdm(rows, desc="GB200 rows", leave=False)]

    def relative(fp4: float) -> list[float]:
        gb300 = [ratio(a, fp4, args.num_requests, rule)
                 for a, _ in tqdm(rows, desc=f"GB300 fp4 {fp4:.3f}", leave=False)]
        return [a / b for a, b in zip(gb300, gb200)]

    lo, hi = 0.05, 0.40  # the GB300 rows' throughput grows with the fraction
    while hi - lo > args.tolerance:
        mid = (lo + hi) / 2
        if math.prod(relative(mid)) ** (1 / len(rows)) > 1.0:
            hi = mid
        else:
            lo = mid
    value = round((lo + hi) / 2, 2)
    print(f"gb300 fp4 gemm fraction {value} ({value * 15:.1f} of 15 PFLOP/s) over {len(rows)} pairs")
    fitted, shared = relative(value), (TILED_GEMM if rule else LOW_PRECISION_GEMM)["fp4"]
    before = [ratio(a, shared, args.num_requests, rule) for a, _ in rows]
    for (a, b), rel, old, base in zip(rows, fitted, before, gb200):
        print(f"  {a.model}: published GB300 {a.tokens_per_s_per_gpu:,.0f}, GB200 {b.tokens_per_s_per_gpu:,.0f} "
              f"per GPU; sim / published: GB200 {base:.2f}, GB300 {old:.2f} at {shared}, {rel * base:.2f} fitted")


def held_out(num_requests: int, tile_rule: bool = False) -> None:
    """Each of NVIDIA's v6.0 B300 Offline rows, simulated / published, at the B300 profile's FP4 fraction
    (the GB300's) and at ``LOW_PRECISION_GEMM``'s (under the tile rule: the tiled ones)."""
    eff = get_hardware("b300").efficiency
    fitted, shared = ((eff.tiled_gemm_for("fp4"), TILED_GEMM["fp4"]) if tile_rule
                      else (eff.gemm_for("fp4"), LOW_PRECISION_GEMM["fp4"]))
    rows = [r for r in RESULTS if r.hardware == "b300" and r.scenario == "offline" and "closed/NVIDIA" in r.source]
    for r in tqdm(rows, desc="B300 rows", leave=False):
        at = {f: ratio(r, f, num_requests, tile_rule) for f in (fitted, shared)}
        print(f"  {r.model}: published {r.tokens_per_s_per_gpu:,.0f} per GPU; sim / published "
              f"{at[fitted]:.2f} at {fitted}, {at[shared]:.2f} at {shared}", flush=True)


if __name__ == "__main__":
    main()
