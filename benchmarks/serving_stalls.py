"""Where a latency-bound run's tail comes from: run `tokenmill bench` on the
in-process engine with its step log on, then line up three clocks on the
queries' time axis and print the worst moments.

    python -m benchmarks.serving_stalls --json stalls.json -- \\
        --scenario interactive --workload jsonl --dataset grounded.jsonl --target-qps 15 ...

(everything after ``--`` is `tokenmill bench`'s arguments; ``--url`` is refused:
the step log is the in-process engine's). Per second of the run it reports
the queries' *excess*: how much longer each query that was decoding during that
second took than its sample's median decode time (a stall that stops the
engine shows up as every running query's excess at once); beside each of the
worst seconds, the longest engine step, the longest gap between steps while a
query was in flight, and the garbage collections of the process
(``BenchResult.gc_stalls``) in it. ``--no-gc-freeze`` runs the engine without
``freeze_startup_heap`` (engine/gc_heap.py), the before of that change.

JSON: the bench result (results.json's content: queries, GC stalls), every step (start s, seconds, one-token runs,
tokens of longer runs), the GC stalls and the worst seconds.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys


def query_excess(queries: list[dict]) -> list[tuple[float, float, float]]:
    """(first token s, finish s, excess ms) per successful query: its decode time
    minus the median decode time of the queries of the same sample."""
    by_sample = collections.defaultdict(list)
    done = [q for q in queries if not q.get("error") and q.get("first_token_s") is not None]
    for q in done:
        by_sample[q["sample_index"]].append(q["finished_s"] - q["first_token_s"])
    median = {s: statistics.median(v) for s, v in by_sample.items()}
    return [(q["first_token_s"], q["finished_s"],
             (q["finished_s"] - q["first_token_s"] - median[q["sample_index"]]) * 1e3) for q in done]


def worst_seconds(excess: list[tuple[float, float, float]], top: int) -> list[dict]:
    """The seconds of the run whose decoding queries took longest past their
    medians, on average: {second, queries, mean_excess_ms}, worst first."""
    if not excess:
        return []
    rows = []
    for t in range(int(max(f for _, f, _ in excess)) + 1):
        during = [e for a, b, e in excess if a < t + 1 and b > t]
        if during:
            rows.append({"second": t, "queries": len(during), "mean_excess_ms": statistics.mean(during)})
    return sorted(rows, key=lambda r: -r["mean_excess_ms"])[:top]


def steps_on_run_clock(step_log: list[tuple], t0_unix: float) -> list[list[float]]:
    """[start s, seconds, one-token runs, tokens of longer runs] per step, start on the queries' clock."""
    return [[round(wall - t0_unix, 5), round(sec, 6), ones, others] for ones, others, sec, wall, *_ in step_log]


def in_flight(queries: list[dict]) -> list[tuple[float, float]]:
    """The merged spans during which at least one query was issued and not finished."""
    spans = sorted((q["issued_s"], q["finished_s"]) for q in queries if q.get("finished_s") is not None)
    merged: list[list[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def busy_gaps(steps: list[list[float]], busy: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start s, seconds) of each pause between consecutive steps that lies inside a
    span with a query in flight: time the engine thread spent between steps
    (taking the inbox, waiting for the GIL, a collection) while a client waited."""
    out, j = [], 0
    for a, b in zip(steps, steps[1:]):
        end = a[0] + a[1]
        while j < len(busy) and busy[j][1] < end:
            j += 1
        if j < len(busy) and busy[j][0] <= end and b[0] <= busy[j][1]:
            out.append((end, b[0] - end))
    return out


def within(second: int, steps: list[list[float]], gaps: list[tuple[float, float]], gc_stalls: list[list]) -> dict:
    """The steps, the longest step, the longest busy gap between steps and the GC
    stalls that start in [second, second + 1)."""
    inside = [s for s in steps if second <= s[0] < second + 1]
    return {"steps": len(inside),
            "longest_step_ms": max((s[1] for s in inside), default=0.0) * 1e3,
            "median_step_ms": statistics.median([s[1] for s in inside]) * 1e3 if inside else 0.0,
            "longest_gap_ms": max((g for t, g in gaps if second <= t < second + 1), default=0.0) * 1e3,
            "gc": [g for g in gc_stalls if second <= g[1] < second + 1]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the timeline and the worst seconds here")
    ap.add_argument("--top", type=int, default=10, help="worst seconds to print")
    ap.add_argument("--no-gc-freeze", action="store_true",
                    help="leave the loaded engine in the collector's walk (the A/B of engine/gc_heap.py)")
    args, bench_args = ap.parse_args(argv[:split]), argv[split + 1:]
    if "--url" in bench_args:
        ap.error("--url: the step log is the in-process engine's; run without --url")

    import tokenmill.bench.command as command
    from tokenmill.cli import main as tokenmill_main

    engines, results = [], []
    start_engine, run_benchmark = command._start_engine, command.run_benchmark

    def logged_engine(bench_args_ns):
        engine = start_engine(bench_args_ns)
        engine.step_log = []
        engines.append(engine)
        return engine

    def kept_result(*a, **kw):
        results.append(run_benchmark(*a, **kw))
        return results[-1]

    command._start_engine, command.run_benchmark = logged_engine, kept_result
    if args.no_gc_freeze:
        command.freeze_startup_heap = lambda: 0
    rc = tokenmill_main(["bench", *bench_args])
    if not results or not engines:
        print("serving_stalls: no in-process run finished", file=sys.stderr)
        return rc or 1
    result = results[-1]  # a sweep's last point: its steps are the log's last ones
    steps = [s for s in steps_on_run_clock(engines[0].step_log, result.t0_unix) if s[0] >= 0]
    gc_stalls = result.gc_stalls or []
    queries = [q.__dict__ for q in result.queries]
    gaps = busy_gaps(steps, in_flight(queries))
    worst = [dict(w, **within(w["second"], steps, gaps, gc_stalls))
             for w in worst_seconds(query_excess(queries), args.top)]
    print(f"\n{len(steps)} steps, median {statistics.median(s[1] for s in steps) * 1e3:.2f} ms; "
          f"GC stalls >= 1 ms: {len(gc_stalls)}")
    print("second  queries  mean excess ms  steps  median step ms  longest step ms  longest gap ms  GC (gen, ms)")
    for w in worst:
        gcs = ", ".join(f"gen{g} {ms:.1f}" for g, _, ms in w["gc"]) or "-"
        print(f"{w['second']:6d}  {w['queries']:7d}  {w['mean_excess_ms']:14.1f}  {w['steps']:5d}  "
              f"{w['median_step_ms']:14.2f}  {w['longest_step_ms']:15.1f}  {w['longest_gap_ms']:14.1f}  {gcs}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"result": result.to_dict(), "worst_seconds": worst, "steps": steps}, f)
    return rc


if __name__ == "__main__":
    sys.exit(main())
