"""``tokenmill sim --draws N``: one workload simulated on N draws of its randomness, and how far
each figure moves between them.

A Server run's p99 TTFT over a few hundred queries is about its third-highest TTFT, so it moves
with the arrival draw: on a 2-core Xeon, five measured runs of one 240-query Server workload under
different LoadGen seeds had p99s of 374-539 ms, and twenty simulated draws at each run's rate put
the 5th-95th percentiles of theirs within 345-567 ms (docs/SIMULATOR.md, "The three figures on a
fifth CPU kind"). One draw's figure against one measured run's says little at that size; the
spread over draws says how much.

Draw ``i`` is the workload at seed ``seed + i`` (``Workload.seed``: arrival times, lengths drawn
from a dataset's distribution, the samples queries draw). The first draw is the one a plain run
at ``--seed`` prints; the others only feed the spread. A peak-QPS search runs once per draw,
so the peak QPS has a spread of its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace

from tokenmill.sim.jobs import run_all

DRAW_FIGURES = (("tokens_per_s_per_gpu",), ("tokens_per_s",), ("qps",), ("ttft_ms", "p50"), ("ttft_ms", "p99"),
                ("tpot_ms", "p50"), ("tpot_ms", "p99"), ("cost_per_million_tokens",))
"""The figures whose spread over draws is reported: paths into predict()'s figures."""
_LABELS = {"tokens_per_s_per_gpu": "tokens/s per GPU", "tokens_per_s": "tokens/s", "qps": "QPS",
           "ttft_ms.p50": "TTFT p50 (ms)", "ttft_ms.p99": "TTFT p99 (ms)", "tpot_ms.p50": "TPOT p50 (ms)",
           "tpot_ms.p99": "TPOT p99 (ms)", "cost_per_million_tokens": "$ per 1M tokens"}


def check_draws(draws: int, seed: int) -> None:
    if draws < 1:
        raise ValueError(f"--draws: must be >= 1, got {draws}")
    if seed < 0:
        raise ValueError(f"--seed: must be >= 0, got {seed}")


def run_draws(arch, hw, deployment, workload, draws: int, jobs: int = 1,
              on_done: Callable[[], None] | None = None) -> dict:
    """The figures of the draw at ``workload.seed``, with ``"draws"``: the spread of each figure
    over ``draws`` draws (seeds ``workload.seed`` on; ``jobs`` processes, sim/jobs.py). ``on_done``
    is called as each draw finishes."""
    from tokenmill.sim.predict import predict

    seeds = [workload.seed + i for i in range(draws)]
    calls = [(arch, hw, deployment, replace(workload, seed=s)) for s in seeds]
    runs = run_all(predict, calls, jobs, on_done=None if on_done is None else lambda i, _: on_done())
    return {**runs[0], "draws": spread(runs, seeds)}


def spread(runs: list[dict], seeds: list[int]) -> dict:
    """{"n", "seeds", and per figure (dotted path): median, p5, p95, min, max} over ``runs``;
    a figure a run leaves out (None: no TPOT, no QPS) is left out of its spread."""
    out: dict = {"n": len(runs), "seeds": seeds}
    for path in DRAW_FIGURES:
        values = [v for v in (_get(run, path) for run in runs) if v is not None]
        if not values:
            continue
        # Percentiles by linear interpolation between the draws' values (inclusive: within min-max).
        q = statistics.quantiles(values, n=20, method="inclusive") if len(values) > 1 else [values[0]] * 19
        out[".".join(path)] = {"median": statistics.median(values), "p5": q[0], "p95": q[-1],
                               "min": min(values), "max": max(values)}
    return out


def _get(figures: dict, path: tuple[str, ...]):
    for key in path:
        if figures is None:
            return None
        figures = figures.get(key)
    return figures


def draws_table(d: dict) -> str:
    """The spread as text, one figure a line; figures equal in every draw are named on one line."""
    seeds = d["seeds"]
    lines = [f"  over {d['n']} draws (seeds {seeds[0]}-{seeds[-1]}):",
             f"    {'':17} {'median':>10}  {'5th-95th percentile':>21}  {'range':>21}"]
    fixed = []
    for key, label in _LABELS.items():
        if key not in d:
            continue
        s = d[key]
        if s["min"] == s["max"]:
            fixed.append(label)
            continue
        digits = 3 if key == "cost_per_million_tokens" else None
        lines.append(f"    {label:17} {_num(s['median'], digits):>10}  "
                     f"{_num(s['p5'], digits) + ' - ' + _num(s['p95'], digits):>21}  "
                     f"{_num(s['min'], digits) + ' - ' + _num(s['max'], digits):>21}")
    if len(lines) == 2:  # nothing moved: the workload draws nothing (fixed lengths, no arrival times)
        return f"  over {d['n']} draws (seeds {seeds[0]}-{seeds[-1]}): every figure the same in each draw"
    if fixed:
        lines.append(f"    the same in every draw: {', '.join(fixed)}")
    return "\n".join(lines)


def _num(v: float, digits: int | None = None) -> str:
    if digits is None:
        digits = 0 if abs(v) >= 100 else 2
    return f"{v:,.{digits}f}"
