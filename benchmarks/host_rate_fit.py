"""The host response rate each published DeepSeek-R1 Server run implies (sim/host_path.py):

    python -m benchmarks.host_rate_fit --out results/sim-validate/host-rates.md

For each run that streamed every token (``stream_interval`` 1: every v5.1 run, and v6.0's GB200
ones) it simulates one instance at the run's own rate (``served_latency.check_run``) first without
the host path, then with a host of R = k x the run's completed tokens/s per instance, and bisects k
until the simulated TTFT p99 is the published one. A run whose TTFT the engine alone already
reaches implies no limit ("-"). Prints each run as it finishes and rewrites the Markdown table
after every run.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from tokenmill.sim.served_latency import DEEPSEEK_RUNS, DEEPSEEK_RUNS_V51, ServedRun, check_run

K_LOW, K_HIGH = 1.0, 1.4
"""The bracket of R / (tokens/s per instance): at 1.0 the backlog grows without bound over a
run; at 1.4 it adds about one step to a TTFT."""


@dataclass(frozen=True)
class Implied:
    run: ServedRun
    engine_ttft_p99_ms: float
    k: float | None
    """R over the run's tokens/s per instance; None: the engine alone reaches the published TTFT."""
    ttft_p99_ms: float | None
    """The simulated TTFT p99 at that R."""

    @property
    def tokens_per_s(self) -> float:
        return self.run.tokens_per_s / self.run.instances

    @property
    def rate(self) -> float | None:
        return None if self.k is None else self.k * self.tokens_per_s


def implied(run: ServedRun, steps: int = 5) -> Implied:
    engine = check_run(run).ttft_p99_ms
    if engine >= run.ttft_p99_ms:
        return Implied(run, engine, None, None)
    per_instance = run.tokens_per_s / run.instances
    lo, hi, at = K_LOW, K_HIGH, None
    for _ in range(steps):  # TTFT p99 falls as R grows (the same arrivals every time)
        k = (lo + hi) / 2
        ttft = check_run(replace(run, host_stream_rate=k * per_instance)).ttft_p99_ms
        if ttft > run.ttft_p99_ms:
            lo = k
        else:
            hi, at = k, ttft
    if at is None:
        at = check_run(replace(run, host_stream_rate=hi * per_instance)).ttft_p99_ms
    return Implied(run, engine, hi, at)


def table(rows: list[Implied]) -> str:
    lines = ["| run | round | host CPU kind | tokens/s per instance | TTFT p99 ms: published / engine alone / "
             "with the host | implied host rate, responses/s | x tokens/s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        run = r.run
        host = "Grace" if run.hardware.startswith("gb") else "x86"
        if r.k is None:
            tail, rate = "-", "- (not binding)"
        else:
            tail, rate = f"{r.ttft_p99_ms:,.0f}", f"{r.rate:,.0f}"
        lines.append(f"| {run.org} {run.system} ({run.hardware}) | {run.round} | {host} | {r.tokens_per_s:,.0f} | "
                     f"{run.ttft_p99_ms:,.0f} / {r.engine_ttft_p99_ms:,.0f} / {tail} | {rate} | "
                     f"{'-' if r.k is None else f'{r.k:.3f}'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="bisection steps (each one 600 s run to simulate)")
    ap.add_argument("--out", required=True, help="the Markdown table, rewritten after every run")
    args = ap.parse_args(argv)
    runs = [r for r in DEEPSEEK_RUNS_V51 + DEEPSEEK_RUNS if r.stream_interval == 1]
    start, done = time.time(), []
    with ProcessPoolExecutor(args.jobs) as pool:
        for r in pool.map(implied, runs, [args.steps] * len(runs)):
            done.append(r)
            print(f"{time.time() - start:7.0f} s  {r.run.org} {r.run.system} {r.run.round}: "
                  f"R {r.rate if r.rate is None else round(r.rate)}", flush=True)
            Path(args.out).write_text(table(done) + "\n")


if __name__ == "__main__":
    main()
