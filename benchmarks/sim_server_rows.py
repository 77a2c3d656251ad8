"""The MLPerf Server and Interactive rows of the dense (Llama-family) models,
simulated with the router (sim/routed.py) or without it, as
docs/SIMULATOR-LOG.md's "Server arrivals through the router" table:

    python -m benchmarks.sim_server_rows --out results/sim-validate/mlperf-server-routed.md
    python -m benchmarks.sim_server_rows --routed-group 1 --out results/sim-validate/mlperf-server-norouting.md

``--routed-group 1`` simulates one replica fed its share of the arrivals (the
random split used before the router was modelled). Timed runs (600 s), 500
requests per replica and batch size for the Offline bounds, two processes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import tokenmill.sim.predict as predict
from tokenmill.sim.published import RESULTS
from tokenmill.sim.validate import table, validate


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--routed-group", type=int, default=predict.ROUTED_GROUP,
                    help="replicas simulated together behind the router (1: none)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--num-requests", type=int, default=500)
    ap.add_argument("--out", required=True, help="the Markdown table, rewritten after every row")
    args = ap.parse_args(argv)
    predict.ROUTED_GROUP = args.routed_group  # read at each predict(); forked workers inherit it
    rows = tuple(r for r in RESULTS if r.dataset and r.model.startswith("llama")
                 and r.scenario in ("server", "interactive"))
    finished = {}

    def on_row(i, checked) -> None:
        finished[i] = checked
        Path(args.out).write_text(table([finished[k] for k in sorted(finished)]) + "\n")

    print(table(validate(args.num_requests, rows, jobs=args.jobs, on_row=on_row)))


if __name__ == "__main__":
    main()
