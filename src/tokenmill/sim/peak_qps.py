"""The search for the highest Server (or Interactive) QPS whose run meets the p99 limits.

From a start QPS it multiplies or divides by ``step`` until one rate passes and another
fails, then bisects (geometrically) until they are within ``rel_tol``. Each run is a whole
simulated arrival window (seconds to a minute for a rack), and the rule asks for them one
after another, so with worker processes (``submit``, sim/jobs.py) the runs that may come
next are started before the current one ends: the rule's state is a small immutable record
with pure transitions (``_next_qps``, ``_after``), so both outcomes of a run in flight can
be followed ahead. The rule itself still consumes the runs one at a time, in its own order:
a run is a pure function of its QPS, so the answer, and what ``on_run`` is told, are those
of one process; runs on the branch not taken are discarded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

from tokenmill.sim.serving import SimConfig, SimRequest, StepTime, simulate
from tokenmill.sim.sim_result import SimResult

LOOKAHEAD_LEVELS = 6
"""How deep run-ahead follows the rule's branches (2^6 - 1 = 63 runs: more workers than that are not used)."""


@dataclass(frozen=True)
class _Rule:
    rel_tol: float
    max_runs: int
    max_qps: float
    step: float


@dataclass(frozen=True)
class _State:
    """Where the search stands: the highest passing QPS, the lowest failing one, the bracketing
    phase's next QPS, the runs so far, and whether it stopped at ``max_qps`` (a pass there)."""
    best: float | None
    fail: float | None
    bracket_qps: float
    runs: int = 0
    stopped: bool = False


def _next_qps(s: _State, rule: _Rule) -> float | None:
    """The QPS the rule runs next; None when it is done."""
    if s.stopped or s.runs >= rule.max_runs:
        return None
    if s.best is None or s.fail is None:  # bracketing
        return s.bracket_qps
    if s.fail / s.best - 1 > rule.rel_tol:
        return math.sqrt(s.best * s.fail)
    return None


def _after(s: _State, rule: _Rule, qps: float, ok: bool) -> _State:
    """The state once the run at ``qps`` (``_next_qps(s)``) passed (``ok``) or failed."""
    runs = s.runs + 1
    if s.best is not None and s.fail is not None:  # bisecting
        return replace(s, best=qps, runs=runs) if ok else replace(s, fail=qps, runs=runs)
    if ok:
        return _State(qps, s.fail, min(qps * rule.step, rule.max_qps), runs, stopped=qps >= rule.max_qps)
    return _State(s.best, qps, qps / rule.step, runs)


def find_peak_qps(make_requests: Callable[[float], list[SimRequest]], step_time: StepTime, config: SimConfig,
                  limits: tuple[float, float], start_qps: float = 1.0, rel_tol: float = 0.02,
                  max_runs: int = 40, run: Callable[[list[SimRequest]], SimResult] | None = None,
                  max_qps: float = math.inf, step: float = 2.0,
                  on_run: Callable[[float, bool], None] | None = None,
                  submit: Callable[[float], Future] | None = None, jobs: int = 1) -> tuple[float, SimResult]:
    """Highest QPS whose run meets ``limits`` = (ttft_p99_s, tpot_p99_s), by the module docstring's
    rule (a smaller ``step`` saves runs when ``start_qps`` is a close guess).

    Assumes meeting the limits is monotone in QPS: true in expectation, and
    close to true run by run when ``make_requests`` uses one seed for every
    QPS (server_requests does: common random numbers). Returns the best
    passing QPS and its run; (0.0, the run at the lowest QPS tried) when none
    passed within ``max_runs``; the highest QPS tried if none failed. ``run``
    replaces ``simulate(requests, step_time, config)`` (e.g. disaggregated
    pools, sim/disagg.py). ``max_qps`` caps the search: a finite request set
    offered faster than the system completes requests arrives as one burst,
    which can meet the limits without the rate being sustainable (pass the
    Offline requests/s of the same requests). ``on_run(qps, met)`` is told after each run.
    ``submit(qps)``: the run at ``qps`` started elsewhere (a Future of its SimResult, the same
    result this process would compute), so that up to ``jobs`` runs go at once."""
    if start_qps <= 0 or rel_tol <= 0 or step <= 1:
        raise ValueError("find_peak_qps: start_qps and rel_tol must be positive, step above 1")
    rule = _Rule(rel_tol, max_runs, max_qps, step)
    s = _State(None, None, min(start_qps, max_qps))
    best_run = fail_run = None
    ahead: dict[float, Future] = {}  # runs started, by QPS
    try:
        while (qps := _next_qps(s, rule)) is not None:
            if submit is None:
                requests = make_requests(qps)
                result = run(requests) if run else simulate(requests, step_time, config)
            else:
                _run_ahead(s, rule, ahead, submit, jobs)
                result = ahead.pop(qps).result()
            ok = result.meets(*limits)
            if on_run is not None:
                on_run(qps, ok)
            if ok:
                best_run = result
            else:
                fail_run = result
            s = _after(s, rule, qps, ok)
    finally:
        for future in ahead.values():
            future.cancel()  # a branch not taken (one already running ends unread)
    if s.best is None:
        return 0.0, fail_run
    return s.best, best_run


def _run_ahead(s: _State, rule: _Rule, ahead: dict[float, Future], submit: Callable[[float], Future],
               jobs: int) -> None:
    """Start the rule's next run if it is not running, then the runs either outcome leads to, level
    by level (``LOOKAHEAD_LEVELS`` deep), while fewer than ``jobs`` runs are unfinished. Runs on no
    branch still open are cancelled (those not yet started)."""
    level, wanted = [s], set()
    for _ in range(LOOKAHEAD_LEVELS):
        below = []
        for state in level:
            qps = _next_qps(state, rule)
            if qps is None:
                continue
            wanted.add(qps)
            if qps not in ahead and (state is s or sum(not f.done() for f in ahead.values()) < jobs):
                ahead[qps] = submit(qps)
            below += [_after(state, rule, qps, True), _after(state, rule, qps, False)]
        level = below
    for qps in [q for q in ahead if q not in wanted]:
        if ahead[qps].cancel():
            del ahead[qps]
