"""A `tokenmill bench` run on the in-process engine with every engine step kept
(AsyncEngine.step_log), then each kind of step against what the simulator's cost
model, on the calibrated this-machine profile, says it costs: which steps of a
served run the model misprices, and how much time passes between steps.

    python -m benchmarks.served_steps --steps-json steps.json -- --scenario server --target-qps 0.5 \\
        --workload synthetic --input-len 128 --output-len 128 --length-dist fixed --min-duration 120 \\
        --min-query-count 60 --no-progress --no-plots --output-dir /tmp/served

Everything after ``--`` goes to `tokenmill bench` (its engine flags too);
``--from-json steps.json`` reports on a log kept before, without a run. Steps are
grouped by (decoding requests, whether a prompt chunk rode along); the model
prices each with its own prompt tokens over ``--context``-token decode contexts.
Needs `tokenmill sim calibrate` first (the profile it writes).
"""

from __future__ import annotations

import argparse
import json
import statistics


def run_bench(bench_args: list[str]) -> list[tuple[int, int, float, float]]:
    """Runs `tokenmill bench` with the in-process engine's step log kept; returns
    its entries (decodes, prompt tokens, seconds, wall-clock start)."""
    import tokenmill.bench.command as command
    from tokenmill.cli import main

    start_engine, kept = command._start_engine, {}

    def start_with_log(args):
        client = start_engine(args)
        client.step_log = []
        kept["engine"] = client
        return client

    command._start_engine = start_with_log
    try:
        rc = main(["bench", *bench_args])
    finally:
        command._start_engine = start_engine
    if rc != 0 or "engine" not in kept:
        raise SystemExit(f"tokenmill bench ended with {rc}" if rc else "the bench ran no in-process engine")
    return list(kept["engine"].step_log)


def report(steps: list, context: int, model: str, precision: str) -> None:
    from tokenmill.sim.calibrate import load_profile
    from tokenmill.sim.cost import Parallel, step_cost, step_time
    from tokenmill.sim.models import get_model
    from tokenmill.sim.shapes import PrefillChunk, StepShape

    hardware, arch, kv_bytes = load_profile(), get_model(model), 4.0 if precision == "fp32" else 2.0

    def modelled(decodes: int, prompt_tokens: int) -> float:
        shape = StepShape(decode_contexts=(context,) * decodes,
                          prefills=(PrefillChunk(prompt_tokens, 0),) if prompt_tokens else ())
        return step_time(step_cost(arch, shape, Parallel(), precision, kv_bytes), hardware, precision).total_s

    groups: dict[tuple[int, bool], list[tuple[float, float]]] = {}
    for decodes, tokens, seconds, *_ in steps:
        groups.setdefault((decodes, tokens > 0), []).append((seconds, modelled(decodes, tokens)))
    print(f"{'decodes':>8} {'prompt':>7} {'steps':>6} {'measured':>10} {'model':>10} {'measured/model':>15}")
    for (decodes, prompt), pairs in sorted(groups.items()):
        measured, cost = (statistics.median(x[i] for x in pairs) * 1e3 for i in (0, 1))
        print(f"{decodes:>8} {'yes' if prompt else 'no':>7} {len(pairs):>6} {measured:>8.2f}ms {cost:>8.2f}ms "
              f"{statistics.median(m / c for m, c in pairs):>15.3f}")
    ordered = sorted(steps, key=lambda s: s[3])
    gaps = [b[3] - (a[3] + a[2]) for a, b in zip(ordered, ordered[1:])]
    busy = [g for g in gaps if g < 0.05]  # longer gaps: the engine had nothing to run
    if busy:
        span = ordered[-1][3] + ordered[-1][2] - ordered[0][3]
        print(f"between back-to-back steps: median {statistics.median(busy) * 1e3:.2f} ms over {len(busy)} gaps; "
              f"steps {sum(s[2] for s in steps):.1f} s of {span:.1f} s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps-json", help="also write the step log here")
    ap.add_argument("--from-json", help="report on a step log written before (no bench run)")
    ap.add_argument("--context", type=int, default=192, help="decode context the model prices (tokens)")
    ap.add_argument("--model", default="smollm2-135m", help="the simulator's model name for the served model")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then tokenmill bench's arguments")
    args = ap.parse_args(argv)
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    if args.from_json:
        with open(args.from_json) as f:
            steps = json.load(f)
    else:
        steps = run_bench(bench_args)
    if args.steps_json:
        with open(args.steps_json, "w") as f:
            json.dump(steps, f)
    report(steps, args.context, args.model, args.precision)


if __name__ == "__main__":
    main()
