"""The simulator's uplift table against a measured `tokenmill bench --uplift` run, variant by variant.

    tokenmill sim calibrate                                   # the full stack's engine: this-machine
    tokenmill sim calibrate --profile kernels-eager --enforce-eager
    tokenmill sim calibrate --profile torch-eager --attention-backend torch --fused-ops torch \\
        --linear-backend torch --enforce-eager                # the live uplift's baseline engine
    tokenmill bench --uplift --scenario offline --workload shared-prefix --min-duration 1 \\
        --min-query-count 128 --output-dir DIR
    python -m benchmarks.sim_uplift_live DIR/uplift-offline --json OUT.json

Each live run's workload (its queries' mean prompt and output tokens and count, and a shared-prefix
workload's prefixes) is simulated on the engine it ran: ``tokenmill sim --uplift --baseline-kernels
torch-eager --baseline-whole-prompts`` on this-machine gives the baseline, ``+chunked-prefill``,
``+prefix-caching``, ``+native-step`` (this-machine's profile is the C++ kernels with the native decoder
step) and ``full``; ``+kernels`` (C++ kernels, Python decoder loop) is the baseline's deployment on
kernels-eager. Engine limits as the engine's defaults (128 sequences, a 1,024-token budget), bf16.
A shared prefix is the workload's ``--prefix-len`` tokens (its chat template adds a few, under a block).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LIVE_TO_SIM = {"baseline": "baseline ({baseline} kernels)", "+prefix-caching": "+ prefix caching",
               "+chunked-prefill": "+ chunked prefill",
               "+native-step": "+ {full} kernels", "full": "full stack"}
"""bench --uplift's labels -> sim --uplift's (``{full}``, ``{baseline}``: the two profiles' names)."""


def live_runs(folder: Path) -> dict[str, dict]:
    """label -> results.json of each run of a `bench --uplift` folder (uplift.json names them)."""
    labels = json.loads((folder / "uplift.json").read_text())
    return {label: json.loads((folder / label.lstrip("+") / "results.json").read_text()) for label in labels}


def workload_of(run: dict, scenario: str):
    from tokenmill.sim.predict import Workload

    queries = [q for q in run["queries"] if q["error"] is None]
    isl = round(sum(q["prompt_tokens"] for q in queries) / len(queries))
    osl = round(sum(q["output_tokens"] for q in queries) / len(queries))
    params = run["workload"]["params"]
    shared = (params["num_prefixes"], params["prefix_len"]) if params.get("workload") == "shared-prefix" else None
    return Workload(scenario, isl, osl, num_requests=len(queries), shared_prefix=shared)


def simulate(runs: dict[str, dict], full: str, kernels: str, baseline: str) -> dict[str, dict]:
    """label -> simulated figures, for each live label the simulator prices."""
    from tokenmill.sim.cost import Parallel
    from tokenmill.sim.hardware import get_hardware
    from tokenmill.sim.models import get_model
    from tokenmill.sim.predict import Deployment, predict
    from tokenmill.sim.uplift import Baseline, baseline_of, uplift

    scenario = runs["baseline"]["scenario"]
    arch, hw = get_model("smollm2-135m"), get_hardware(full)
    d = Deployment(1, Parallel(), "bf16", max_num_seqs=128, max_num_batched_tokens=1024)
    w = workload_of(runs["full"], scenario)
    base = Baseline(baseline, whole_prompts=True, hardware=get_hardware(baseline))
    by_name = {v.name: v.figures for v in uplift(arch, hw, d, w, baseline=base)}
    out = {label: by_name[sim.format(full=full, baseline=baseline)] for label, sim in LIVE_TO_SIM.items()
           if label in runs}
    if "+kernels" in runs:  # the baseline's deployment on the eager C++ kernels' profile
        out["+kernels"] = predict(arch, get_hardware(kernels), *baseline_of(arch, d, w, base))
    return out


def table(runs: dict[str, dict], sims: dict[str, dict]) -> str:
    scenario = runs["baseline"]["scenario"]
    base_live, base_sim = runs["baseline"]["metrics"]["tokens_per_s"], sims["baseline"]["tokens_per_s"]
    lines = [f"{scenario}: live `tokenmill bench --uplift` against `tokenmill sim --uplift` on the calibrated profiles",
             "", "| variant | live tok/s | sim tok/s | sim / live | live x baseline | sim x baseline | "
             "live TPOT p50 (ms) | sim TPOT p50 (ms) | live hits | sim hits |", "|---" * 10 + "|"]
    for label, run in runs.items():
        if label not in sims:
            continue
        m, f = run["metrics"], sims[label]
        live_hits = "-" if m["prefix_cache_hit_rate"] is None else f"{m['prefix_cache_hit_rate']:.1%}"
        lines.append(f"| {label} | {m['tokens_per_s']:.1f} | {f['tokens_per_s']:.1f} | "
                     f"{f['tokens_per_s'] / m['tokens_per_s']:.2f} | {m['tokens_per_s'] / base_live:.2f}x | "
                     f"{f['tokens_per_s'] / base_sim:.2f}x | {m['tpot_ms']['p50']:.1f} | {f['tpot_ms']['p50']:.1f} | "
                     f"{live_hits} | {f['prefix_cache_hit_rate']:.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="a `tokenmill bench --uplift` scenario folder (its uplift.json)")
    ap.add_argument("--full", default="this-machine", help="the full stack's calibrated profile")
    ap.add_argument("--kernels", default="kernels-eager", help="the eager C++ kernels' calibrated profile")
    ap.add_argument("--baseline", default="torch-eager", help="the baseline engine's calibrated profile")
    ap.add_argument("--json", type=Path, help="also write {label: {live, sim}} here")
    a = ap.parse_args(argv)
    runs = live_runs(a.folder)
    sims = simulate(runs, a.full, a.kernels, a.baseline)
    print(table(runs, sims))
    if a.json:
        a.json.write_text(json.dumps({label: {"live": runs[label]["metrics"], "sim": sims[label]}
                                      for label in runs if label in sims}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
