"""MLPerf scenarios over the serving simulation (serving.py): request streams
and one run per scenario (the search for the highest Server QPS that meets the
latency limits, Interactive being Server with the tighter limits: sim/peak_qps.py).

Randomness uses common random numbers: the i-th request's lengths and its
unit-rate arrival time depend on the seed alone, and a Server stream at QPS q
is that unit-rate stream scaled by 1/q. Two QPS values thus see the same
requests in the same order, which keeps the QPS search's comparisons
free of sampling noise.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from tokenmill.bench.presets import limits_for
from tokenmill.sim.serving import SimConfig, SimRequest, StepTime, simulate
from tokenmill.sim.sim_result import SimResult

Lengths = int | Sequence[int] | Callable[[np.random.Generator], int]
"""Token counts: a constant, a list sampled uniformly (a dataset's lengths), or a draw from the generator."""

_ARRIVAL_BATCH = 1024  # gaps drawn per batch: fixed, so the stream does not depend on qps

MLPERF_MIN_DURATION_S = 600.0
"""How long an MLPerf LLM run lasts at least (mlperf.conf ``*.Server.min_duration = 600000`` ms;
the same for Offline). A Server run issues Poisson arrivals for this long, so an offered rate above
what the system sustains builds a queue that the p99 TTFT sees."""
MLPERF_SERVER_MIN_QUERIES = 100
"""LoadGen's default ``min_query_count`` (loadgen/test_settings.h; mlperf.conf sets none for the
LLM Server runs): a run issues at least this many queries, however long that takes."""
OFFLINE_SLACK = 1.1
"""An Offline run issues ``1.1 x target_qps x min_duration`` samples at once
(loadgen/test_settings_internal.cc ``kSlack``): it lasts about 10% past min_duration."""


def limits_s(preset: str, scenario: str) -> tuple[float, float]:
    """(ttft_p99_s, tpot_p99_s) of a bench preset for 'server' or 'interactive'."""
    lim = limits_for(preset, scenario)
    return lim.ttft_ms / 1e3, lim.tpot_ms / 1e3


def _draw(lengths: Lengths, rng: np.random.Generator, n: int) -> list[int]:
    if isinstance(lengths, int):
        return [lengths] * n
    if callable(lengths):
        return [int(lengths(rng)) for _ in range(n)]
    pool = np.asarray(lengths, dtype=np.int64)
    return pool[rng.integers(0, len(pool), size=n)].tolist()


def _requests(arrivals: Sequence[float], isl: Lengths, osl: Lengths, seed: int, cached_tokens: int) -> list[SimRequest]:
    rng = np.random.default_rng([seed, 1])  # lengths: a stream of their own, apart from arrivals
    n = len(arrivals)
    prompts, outputs = _draw(isl, rng, n), _draw(osl, rng, n)
    return [SimRequest(float(a), p, o, min(cached_tokens, p)) for a, p, o in zip(arrivals, prompts, outputs)]


def with_sample_repeats(requests: Sequence[SimRequest], num_samples: int, seed: int = 0) -> list[SimRequest]:
    """``requests`` with each query a uniform pick of ``num_samples`` samples, as LoadGen draws Server
    queries from its performance sample set: a sample picked before comes back with the first pick's
    lengths; a new sample keeps its draw. Each sample's prompt is a prefix of its own (``prefix_group``
    = the sample): a repeat hits what the replica serving it still caches of it, evicted as the
    engine's block pool evicts (sim/prefix_cache.py), held only where it was computed. Where the
    requests carry shared prefixes already (``with_shared_prefixes``: a request has one group), a
    repeat keeps the first pick's prefix and comes with its whole prompt cached instead (the simulator
    keeps a prompt's last block uncached)."""
    if num_samples < 1:
        raise ValueError(f"--num-samples: must be >= 1, got {num_samples}")
    picks = np.random.default_rng([seed, 2]).integers(num_samples, size=len(requests))  # a stream of its own
    first: dict[int, tuple[SimRequest, bool]] = {}  # a sample's first pick, and whether its prompt is its own prefix
    out = []
    for request, pick in zip(requests, picks.tolist()):
        if pick in first:
            earlier, own = first[pick]
            request = dataclasses.replace(request, prompt_tokens=earlier.prompt_tokens,
                                          output_tokens=earlier.output_tokens,
                                          cached_tokens=0 if own else earlier.prompt_tokens,
                                          prefix_group=earlier.prefix_group, prefix_tokens=earlier.prefix_tokens)
        else:
            own = request.prefix_group < 0  # no shared prefix: the sample's prompt is its own
            if own:
                request = dataclasses.replace(request, prefix_group=pick, prefix_tokens=request.prompt_tokens)
            first[pick] = request, own
        out.append(request)
    return out


def with_shared_prefixes(requests: Sequence[SimRequest], groups: int, tokens: int) -> list[SimRequest]:
    """``requests`` with their prompts starting with one of ``groups`` shared prefixes of ``tokens``
    tokens each (at most the prompt), in turn, as `tokenmill bench --workload shared-prefix` lays its
    samples out (a hit once the replica has computed the prefix: serving.py ``SimRequest.prefix_group``)."""
    if groups < 1 or tokens < 1:
        raise ValueError(f"--shared-prefix: N:TOKENS, both >= 1, got {groups}:{tokens}")
    return [dataclasses.replace(r, prefix_group=i % groups, prefix_tokens=min(tokens, r.prompt_tokens))
            for i, r in enumerate(requests)]


def offline_requests(num_requests: int, isl: Lengths, osl: Lengths, seed: int = 0,
                     cached_tokens: int = 0) -> list[SimRequest]:
    """Offline: every query issued at t=0."""
    return _requests([0.0] * num_requests, isl, osl, seed, cached_tokens)


def server_requests(qps: float, isl: Lengths, osl: Lengths, num_requests: int | None = None,
                    duration_s: float | None = None, seed: int = 0, cached_tokens: int = 0,
                    min_count: int = 0) -> list[SimRequest]:
    """Server: Poisson arrivals at ``qps``, either ``num_requests`` of them or
    all arriving within ``duration_s`` (exactly one of the two); with
    ``duration_s``, at least ``min_count`` of them (LoadGen's min_query_count)."""
    if qps <= 0 or not math.isfinite(qps):
        raise ValueError(f"qps: must be positive, got {qps}")
    if (num_requests is None) == (duration_s is None):
        raise ValueError("server_requests: give exactly one of num_requests and duration_s")
    rng = np.random.default_rng([seed, 0])
    unit = np.zeros(0)  # arrival times of the unit-rate stream
    horizon = math.inf if duration_s is None else duration_s * qps
    while (len(unit) < num_requests) if num_requests is not None else (not len(unit) or unit[-1] <= horizon):
        gaps = rng.standard_exponential(_ARRIVAL_BATCH)
        unit = np.concatenate([unit, (unit[-1] if len(unit) else 0.0) + np.cumsum(gaps)])
    unit = unit[:num_requests] if num_requests is not None else unit[unit <= horizon]
    if len(unit) < min_count:  # the same stream, continued past the duration
        return server_requests(qps, isl, osl, num_requests=min_count, seed=seed, cached_tokens=cached_tokens)
    return _requests((unit / qps).tolist(), isl, osl, seed, cached_tokens)


def offline(num_requests: int, isl: Lengths, osl: Lengths, step_time: StepTime, config: SimConfig,
            seed: int = 0) -> SimResult:
    """Offline scenario: throughput with every query queued at t=0."""
    return simulate(offline_requests(num_requests, isl, osl, seed), step_time, config)


def server(qps: float, isl: Lengths, osl: Lengths, step_time: StepTime, config: SimConfig,
           num_requests: int | None = None, duration_s: float | None = None, seed: int = 0) -> SimResult:
    """Server (or Interactive) scenario at one QPS; judge it with ``result.meets(*limits)``."""
    return simulate(server_requests(qps, isl, osl, num_requests, duration_s, seed), step_time, config)


def single_stream(num_requests: int, isl: Lengths, osl: Lengths, step_time: StepTime, config: SimConfig,
                  seed: int = 0) -> SimResult:
    """SingleStream: each query issued when the one before it finishes. Run as
    Offline with one sequence at a time (the scheduler then admits the next
    query in the step after the last one finished, as the closed loop issues
    it), with each query's arrival set to its predecessor's finish.
    MLPerf judges its p90 latency: ``result.e2e_s``."""
    return single_stream_of(offline_requests(num_requests, isl, osl, seed), step_time, config)


def single_stream_of(requests: list[SimRequest], step_time: StepTime, config: SimConfig) -> SimResult:
    """``single_stream`` of these requests (their arrivals are ignored), in their order."""
    requests = [dataclasses.replace(r, arrival_s=0.0) for r in requests]
    result = simulate(requests, step_time, dataclasses.replace(config, max_num_seqs=1))
    issued = np.concatenate([[0.0], np.sort(result.finish_s)[:-1]])
    order = np.argsort(result.finish_s, kind="stable")  # finishing order = issue order (FIFO, one at a time)
    arrival = np.empty_like(issued)
    arrival[order] = issued
    return dataclasses.replace(result, arrival_s=arrival)
