"""One scenario's run on one share of a deployment's load, as predict() asks for it: Offline sized
as LoadGen sizes it, SingleStream one query at a time, Server at a given QPS or at the peak QPS
that meets the limits (a search over rates, each a simulated run of the whole arrival window);
and the CLI's progress bar over that search's runs."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tokenmill.sim.peak_qps import find_peak_qps
from tokenmill.sim.scenarios import (
    MLPERF_SERVER_MIN_QUERIES,
    OFFLINE_SLACK,
    limits_s,
    offline_requests,
    server_requests,
    single_stream_of,
    with_sample_repeats,
    with_shared_prefixes,
)
from tokenmill.sim.serving import SimConfig, SimRequest, StepTime
from tokenmill.sim.sim_result import SimResult

if TYPE_CHECKING:
    from tokenmill.sim.predict import Workload

HINTED_STEP = 1.25
"""The peak search's bracketing factor from ``Workload.qps_hint`` (2 from the Offline rate):
a neighbour's peak is usually within 25% (each bracketing step is a 600 s run to simulate)."""
OFFLINE_SIZING_RUNS = 4
"""Most re-sizings of a timed Offline run (``Workload.duration_s``); two usually settle it."""

PeakRunReport = Callable[[float, bool], None]
"""Told after each run of a peak-QPS search: its QPS (whole deployment) and whether it met the limits."""


def run_scenario(w: Workload, run, seconds: StepTime, config: SimConfig, num_requests: int, share: float,
                 on_peak_run: PeakRunReport | None = None, submit: Callable[[float], Future] | None = None,
                 jobs: int = 1) -> tuple[SimResult, float | None]:
    """The run of ``w``'s scenario on one share of the load (``run``: one replica, a
    routed group, or the disaggregated pools) and its QPS per share (None unless Server).
    ``on_peak_run`` is told each run of a peak-QPS search, its QPS over the whole deployment;
    ``submit(qps)`` starts that search's run at a share's ``qps`` in another process, up to
    ``jobs`` at once (sim/peak_qps.py; the same runs as ``run`` of ``server_arrivals``)."""
    isl, osl = w.lengths()

    def offline_run(n: int) -> SimResult:
        return run(_shared(w, offline_requests(n, isl, osl, w.seed, w.cached_tokens)))

    if w.scenario == "offline":
        least = math.ceil((w.min_queries or 0) / share) if w.duration_s is not None else 0
        n = max(num_requests, least)
        result = offline_run(n)
        # LoadGen issues 1.1 x the expected rate x min_duration samples; a run's rate grows with its
        # size (its ramp and drain weigh less), so size again from each run until the size holds.
        for _ in range(OFFLINE_SIZING_RUNS if w.duration_s is not None else 0):
            sized = math.ceil(result.requests_per_s * OFFLINE_SLACK * w.duration_s)
            if sized <= n:
                break
            n = sized
            result = offline_run(n)
        return result, None
    if w.scenario == "singlestream":
        requests = offline_requests(min(w.num_requests, 64), isl, osl, w.seed, w.cached_tokens)
        return single_stream_of(_shared(w, requests), seconds, config), None

    def arrivals(q: float) -> list[SimRequest]:
        return server_arrivals(w, q, num_requests, share)

    if w.target_qps is not None:
        qps = w.target_qps / share
        return run(arrivals(qps)), qps
    limits = limits_s(w.preset, w.scenario)
    limits = (w.ttft_ms / 1e3 if w.ttft_ms else limits[0], w.tpot_ms / 1e3 if w.tpot_ms else limits[1])
    # The search starts at the Offline request rate of num_requests requests (or the hint) and halves
    # or doubles from there: the peak is usually within a few steps of it, and low-QPS runs (many
    # small steps) are the slowest to simulate. A finite request set (no duration) is also capped
    # there (find_peak_qps: a burst is not a rate); a timed run needs no cap.
    timed = w.duration_s is not None
    hinted = timed and bool(w.qps_hint)
    start = w.qps_hint / share if hinted else offline_run(num_requests).requests_per_s
    report = None if on_peak_run is None else lambda q, ok: on_peak_run(q * share, ok)
    qps, result = find_peak_qps(arrivals, seconds, config, limits, run=run, max_qps=math.inf if timed else start,
                                start_qps=start, step=HINTED_STEP if hinted else 2.0, on_run=report,
                                submit=submit, jobs=jobs)
    return result, qps


def server_arrivals(w: Workload, qps: float, num_requests: int, share: float) -> list[SimRequest]:
    """One share's Server (or Interactive) arrivals at ``qps`` (per share): ``num_requests`` of them,
    or, for a timed run, ``w.duration_s`` of them and at least the share of LoadGen's minimum count."""
    isl, osl = w.lengths()
    if w.duration_s is None:
        drawn = server_requests(qps, isl, osl, num_requests=num_requests, seed=w.seed,
                                cached_tokens=w.cached_tokens)
    else:
        least = math.ceil((w.min_queries or 0) / share)
        drawn = server_requests(qps, isl, osl, duration_s=w.duration_s, seed=w.seed, cached_tokens=w.cached_tokens,
                                min_count=max(math.ceil(MLPERF_SERVER_MIN_QUERIES / share), least))
    drawn = _shared(w, drawn)
    return with_sample_repeats(drawn, w.num_samples, w.seed) if w.num_samples else drawn


def _shared(w: Workload, requests: list[SimRequest]) -> list[SimRequest]:
    """``requests`` with ``w``'s shared prefixes, where it has them."""
    return with_shared_prefixes(requests, *w.shared_prefix) if w.shared_prefix else requests


@contextmanager
def peak_search_bar(enabled: bool) -> Iterator[PeakRunReport | None]:
    """A progress bar over a peak-QPS search's runs (for the CLI; None when not ``enabled``). Each
    run simulates the whole arrival window, so a search takes seconds to minutes; how many runs it
    takes is not known ahead (about nine), so the bar counts them and shows the last rate tried."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(desc="Searching the peak QPS", bar_format="{desc}: {n_fmt} runs, {elapsed}{postfix}", leave=False) as bar:
        def on_run(qps: float, ok: bool) -> None:
            bar.set_postfix_str(f"{qps:,.2f} QPS {'meets' if ok else 'misses'} the limits", refresh=False)
            bar.update(1)

        yield on_run
