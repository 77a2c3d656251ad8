"""The simulated Server TTFT p99 over many Poisson arrival draws, against one measured run.

A Server run's p99 TTFT over a few hundred queries is the third-highest or so of them: it moves
with the arrival draw. `tokenmill sim --scenario server` prices one draw (``--seed``, 0 by default)
and ``--draws N`` the spread over N of them (sim/draws.py); this script prices ``--seeds`` draws on
the same deployment, prints each draw's p99, their median, 5th / 95th percentiles and range, and,
with ``--measured``, where a measured `tokenmill bench --scenario server` run's p99 falls among them
(its arrival rate as measured, LoadGen's realised QPS). With ``--samples N`` each query draws one of
N samples at random, as LoadGen draws a Server query from the performance sample set, and a sample
drawn before finds its prompt in the prefix cache (``tokenmill sim --num-samples``; scenarios.py
``with_sample_repeats``):

    python -m benchmarks.sim_server_draws --hardware this-machine --model smollm2-135m --precision bf16 \\
        --max-num-seqs 128 --max-num-batched-tokens 1024 --isl 128 --osl 128 --num-requests 240 \\
        --measured results/sim-own-xeon-s33/server/server-tokenmill-engine/results.json --samples 256
"""

from __future__ import annotations

import argparse
import statistics

from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.replay import load_trace


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hardware", default="this-machine")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--max-num-batched-tokens", type=int, default=1024)
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=128)
    ap.add_argument("--num-requests", type=int, default=240)
    ap.add_argument("--qps", type=float, default=None, help="arrival rate (default: the measured run's, else 1)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--measured", default=None, metavar="RESULTS", help="a `tokenmill bench` server results.json")
    ap.add_argument("--samples", type=int, default=None, metavar="N",
                    help="queries draw one of N samples (the bench's --num-samples); repeats hit the prefix cache")
    args = ap.parse_args(argv)
    arch, hw = get_model(args.model), get_hardware(args.hardware)
    d = Deployment(1, Parallel(), args.precision or hw.default_precision, args.max_num_seqs,
                   args.max_num_batched_tokens)
    measured_p99, qps = None, args.qps or 1.0
    if args.measured:
        trace = load_trace(args.measured)
        arrivals = [r.arrival_s for r in trace.requests]
        qps = args.qps or (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
        measured_p99 = trace.result.metrics.ttft_ms.p99
    runs = []
    for seed in range(args.seeds):  # each draw as `tokenmill sim --seed SEED` draws it
        w = Workload("server", args.isl, args.osl, num_requests=args.num_requests, target_qps=qps,
                     num_samples=args.samples, seed=seed)
        runs.append(predict(arch, hw, d, w))
        print(f"seed {seed:3d}: TTFT p99 {runs[-1]['ttft_ms']['p99']:8.1f} ms", flush=True)
    p99 = [run["ttft_ms"]["p99"] for run in runs]
    # statistics' default (exclusive) percentiles, as the figures quoted from this script were computed;
    # `tokenmill sim --draws` takes the inclusive ones, which stay within the draws' range at any count.
    q = statistics.quantiles(p99, n=20)
    repeats = f", queries drawn from {args.samples} samples" if args.samples else ""
    print(f"\n{args.seeds} draws at {qps:.3f} QPS{repeats}: TTFT p99 median {statistics.median(p99):.1f} ms, "
          f"5th-95th percentile {q[0]:.1f}-{q[-1]:.1f} ms, range {min(p99):.1f}-{max(p99):.1f} ms")
    if measured_p99 is not None:
        below = sum(v < measured_p99 for v in p99)
        print(f"measured TTFT p99 {measured_p99:.1f} ms: {below} of {args.seeds} draws below it; "
              f"the draws' median / measured {statistics.median(p99) / measured_p99:.2f}")


if __name__ == "__main__":
    main()
