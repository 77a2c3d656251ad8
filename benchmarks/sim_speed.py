"""How long `tokenmill sim` takes, and whether a change to its speed left its answers alone.

    python -m benchmarks.sim_speed --out DIR                  # times each case, keeps its --json output
    python -m benchmarks.sim_speed --out DIR2 --same-as DIR   # and checks DIR2's outputs equal DIR's

Each case is one `tokenmill sim ... --json` run in a fresh process (so the import is timed too), one
after another; the cases cover the simulation's paths: attention DP with EP, a routed group of
replicas, disaggregated pools, pipeline stages, MTP drafts, sliding-window layers, Interactive, a
KV-bound Offline run and the issue's first command (with the layout chosen). A speed change must
leave every output byte-identical: ``--same-as`` exits 1 naming the cases that differ.
``--cases`` picks some by name (the slowest, ``l8_x8_server``, takes about two minutes here).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

CASES = {
    "ds_adp_server": "--model deepseek-r1 --hardware gb300 --num-gpus 8 --ep 8 --attention-dp --scenario server "
                     "--num-requests 1500",
    "l8_x1_server": "--model llama3.1-8b --hardware h100 --num-gpus 1 --scenario server",
    "l8_x8_server": "--model llama3.1-8b --hardware h100 --num-gpus 8 --scenario server",
    "l405_disagg": "--model llama3.1-405b --hardware gb300 --num-gpus 72 --tp 2 --max-num-seqs 64 "
                   "--max-num-batched-tokens 4096 --disagg 26:5 --decode-tp 4 --decode-max-num-seqs 256 "
                   "--fused-allreduce --scenario server --num-requests 1500",
    "gptoss_server": "--model gpt-oss-120b --hardware b200 --num-gpus 8 --tp 2 --scenario server --num-requests 1500",
    "ds_mtp_offline": "--model deepseek-r1 --hardware b200 --num-gpus 8 --tp 8 --ep 8 --mtp 3 --scenario offline",
    "l405_pp_offline": "--model llama3.1-405b --hardware b200 --num-gpus 8 --tp 2 --pp 2 --scenario offline",
    "l8_pp_server": "--model llama3.1-8b --hardware h100 --num-gpus 2 --pp 2 --isl 1000 --osl 1000 --scenario server "
                    "--num-requests 800",
    "l70_interactive": "--model llama3.3-70b --hardware h200 --num-gpus 8 --tp 4 --scenario interactive "
                       "--num-requests 1000",
    "ds_kv_bound_offline": "--model deepseek-r1 --hardware h200 --num-gpus 8 --tp 8 --max-num-seqs 512 --isl 4000 "
                           "--osl 2000 --scenario offline --num-requests 600",
    "issue_ds_x72_server": "--model deepseek-r1 --hardware gb300 --num-gpus 72 --scenario server",
}


def run_case(name: str, args: str, out: Path) -> float:
    """Seconds for one case; its stdout goes to ``out/name.json``."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tokenmill.cli", "sim", *args.split(), "--json"],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{name}: tokenmill sim failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    (out / f"{name}.json").write_text(done.stdout)
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for each case's JSON output")
    ap.add_argument("--same-as", type=Path, help="a folder of an earlier run: every output must equal its own")
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), help="run only these (default: all)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    differ = []
    print("| case | seconds | output |\n|---|---|---|")
    for name in a.cases or CASES:
        seconds = run_case(name, CASES[name], a.out)
        verdict = "-"
        if a.same_as is not None:
            earlier = a.same_as / f"{name}.json"
            same = earlier.is_file() and earlier.read_text() == (a.out / f"{name}.json").read_text()
            verdict = "same" if same else "DIFFERS"
            if not same:
                differ.append(name)
        print(f"| {name} | {seconds:.1f} | {verdict} |", flush=True)
    if differ:
        print(f"outputs differ from {a.same_as}: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
