"""Some MLPerf rows of `tokenmill sim validate`, chosen by model, round and scenario, at
their published counts, as docs/SIMULATOR-LOG.md's "What the published runs switch on" table:

    python -m benchmarks.sim_mlperf_rows --out results/sim-validate/mlperf-refit.md

(default: DeepSeek-R1's v6.0 Offline and Server rows and every Llama-3.1-405B row; the GB300
rows first; ``--rows llama3.1-8b:v5.1:server:h200`` picks by model, round, scenario and
hardware, and a fifth field by GPU count; an empty field matches any: ``llama2-70b::offline:h100,h200``,
``deepseek-r1:v6.0:server:gb300:8``). Prints each row as
it finishes (seconds since the start, simulated, error) and rewrites the Markdown table of the
rows finished so far after every row.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tokenmill.sim.hardware import Hardware, get_hardware, with_tile_rule
from tokenmill.sim.published import RESULTS, PublishedResult
from tokenmill.sim.validate import table, validate


def get_hardware_with_tile_rule(name: str) -> Hardware:
    """``get_hardware(name)`` under the tile rule: a module-level ``hardware_for`` for
    ``sim.validate.validate`` over processes (``--tile-rule``)."""
    return with_tile_rule(get_hardware(name))


def _round(row: PublishedResult) -> str:
    return next((r for r in ("v4.1", "v5.1", "v6.0") if r in row.source), "?")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", action="append", metavar="MODEL[:ROUND[:SCENARIO,...[:HARDWARE,...[:GPUS,...]]]]",
                    help="rows to run (repeatable); default deepseek-r1:v6.0:offline,server and llama3.1-405b")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--num-requests", type=int, default=500)
    ap.add_argument("--out", required=True, help="the Markdown table, rewritten after every row")
    ap.add_argument("--tile-rule", action="store_true",
                    help="the GPU profiles under the tile rule (`tokenmill sim --tile-rule`, sim/gemm_tiles.py)")
    args = ap.parse_args(argv)
    picks = [s.split(":") for s in args.rows or ["deepseek-r1:v6.0:offline,server", "llama3.1-405b"]]

    def wanted(r: PublishedResult) -> bool:
        return r.dataset is not None and any(
            r.model == p[0] and (len(p) < 2 or p[1] in ("", _round(r)))
            and (len(p) < 3 or not p[2] or r.scenario in p[2].split(","))
            and (len(p) < 4 or not p[3] or r.hardware in p[3].split(","))
            and (len(p) < 5 or not p[4] or str(r.num_gpus) in p[4].split(",")) for p in picks)

    rows = tuple(sorted((r for r in RESULTS if wanted(r)), key=lambda r: r.hardware != "gb300"))
    if not rows:
        ap.error(f"--rows: no MLPerf row matches {args.rows}")
    print(f"{len(rows)} rows", flush=True)
    done, start = {}, time.time()

    def on_row(i, checked) -> None:
        done[i] = checked
        Path(args.out).write_text(table([done[k] for k in sorted(done)]) + "\n")
        r = rows[i]
        figure = f"{checked.simulated:,.0f} ({checked.simulated / r.tokens_per_s_per_gpu:.2f})" \
            if checked.simulated else checked.skipped
        print(f"{time.time() - start:6.0f} s  {r.model} {r.hardware} x{r.num_gpus} {r.scenario} {_round(r)}: "
              f"{figure}", flush=True)

    validate(num_requests=args.num_requests, rows=rows, jobs=args.jobs, on_row=on_row,
             hardware_for=get_hardware_with_tile_rule if args.tile_rule else get_hardware)


if __name__ == "__main__":
    main()
