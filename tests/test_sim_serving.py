"""The serving simulation (sim/serving.py, sim/scenarios.py): closed forms for
simple cases, MLPerf scenario behaviour, and step-by-step agreement with the
real Scheduler on the same requests."""

import math

import numpy as np
import pytest

from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.request import Request
from tokenmill.engine.scheduler import Scheduler
from tokenmill.sampling_params import SamplingParams
from tokenmill.sim.peak_qps import find_peak_qps
from tokenmill.sim.scenarios import offline, server, server_requests, single_stream
from tokenmill.sim.serving import SimConfig, SimRequest, simulate
from tokenmill.sim.shapes import PrefillChunk, StepShape

A, B = 0.010, 0.0001  # step time a + b x rows (seconds)


def linear(shape: StepShape) -> float:
    return A + B * shape.num_tokens


def recording(step_time, shapes):
    def timed(shape):
        shapes.append(shape)
        return step_time(shape)
    return timed


def big(max_num_seqs=16, budget=4096, blocks=10_000, **kw):
    return SimConfig(max_num_seqs, budget, blocks, **kw)


def test_one_request_constant_step():
    c, n = 0.02, 10
    r = simulate([SimRequest(5.0, 100, n)], lambda s: c, big())
    assert r.ttft_s[0] == pytest.approx(c) and r.e2e_s[0] == pytest.approx(n * c)
    assert r.tpot_s[0] == pytest.approx(c) and r.finish_s[0] == pytest.approx(5.0 + n * c)
    assert r.steps == n and r.output_tokens.tolist() == [n] and r.mean_batch_size == 1


def test_chunked_prefill_takes_budget_sized_steps():
    shapes, c, budget = [], 0.01, 64
    r = simulate([SimRequest(0.0, 3 * budget, 4)], recording(lambda s: c, shapes), big(budget=budget))
    assert r.ttft_s[0] == pytest.approx(3 * c)
    assert [s.prefills for s in shapes[:3]] == [(PrefillChunk(budget, i * budget),) for i in range(3)]
    assert [s.decode_contexts for s in shapes[3:]] == [(192,), (193,), (194,)]


def test_without_chunking_a_prompt_waits_for_a_step_with_room():
    shapes = []
    reqs = [SimRequest(0.0, 40, 3), SimRequest(0.0, 40, 3)]
    simulate(reqs, recording(linear, shapes), big(budget=64, chunked_prefill=False))
    assert [len(s.prefills) for s in shapes[:2]] == [1, 1]  # the second prompt does not fit beside the first
    chunked = []
    simulate(reqs, recording(linear, chunked), big(budget=64))
    assert chunked[0].prefills == (PrefillChunk(40, 0), PrefillChunk(24, 0))


def test_the_overlap_scheduler_admits_one_step_later_while_busy():
    # A runs from t = 0 (its replica was idle: admitted at once either way); B arrives during A's
    # first step. Without the overlap scheduler B joins step 2; with it, step 2's batch was formed
    # when step 1 started, before B arrived, so B joins step 3: one ~10 ms step later.
    requests = [SimRequest(0.0, 10, 50), SimRequest(0.005, 10, 50)]
    shapes_plain, shapes_overlap = [], []
    plain = simulate(requests, recording(linear, shapes_plain), big())
    overlap = simulate(requests, recording(linear, shapes_overlap), big(overlap_scheduler=True))
    assert plain.ttft_s[0] == overlap.ttft_s[0] == pytest.approx(A + 10 * B)
    assert [len(s.prefills) for s in shapes_plain[:3]] == [1, 1, 0]
    assert [len(s.prefills) for s in shapes_overlap[:3]] == [1, 0, 1]
    assert overlap.ttft_s[1] - plain.ttft_s[1] == pytest.approx(A + B)  # step 2: A's one decode row
    # An idle replica admits at once: B alone, arriving after A finished, waits for no step.
    late = [SimRequest(0.0, 10, 2), SimRequest(1.0, 10, 2)]
    assert simulate(late, linear, big(overlap_scheduler=True)).ttft_s[1] == pytest.approx(A + 10 * B)


def test_offline_throughput_matches_closed_form():
    # Every request holds a slot for N steps (1 prefill + N-1 decodes), B at a time;
    # rows per request: P + N - 1. Time = a x R x N / B + b x R x (P + N - 1).
    bsz, p, n, count = 32, 64, 32, 640
    r = offline(count, p, n, linear, big(max_num_seqs=bsz, budget=bsz * p))
    expected = n / (A * n / bsz + B * (p + n - 1))
    assert r.output_tokens_per_s == pytest.approx(expected, rel=0.01)
    assert r.mean_batch_size == pytest.approx(bsz, rel=0.01) and r.preemptions == 0


# ---- Server ------------------------------------------------------------------------

P, N, SEQS = 100, 20, 16
CAPACITY_QPS = SEQS / (A * N + B * SEQS * (P + N - 1))  # closed form above, in requests/s


def test_server_low_qps_ttft_is_one_prefill_step():
    prefill = A + B * P
    idle = server(0.0005 * CAPACITY_QPS, P, N, linear, big(SEQS), num_requests=400, seed=3)
    assert idle.ttft_ms.p50 / 1e3 == pytest.approx(prefill) and idle.ttft_ms.p99 / 1e3 < 1.2 * prefill
    # Busier: a query may wait for the step in flight, and shares its own with decodes.
    light = server(0.05 * CAPACITY_QPS, P, N, linear, big(SEQS), num_requests=400, seed=3)
    assert light.ttft_ms.p50 / 1e3 == pytest.approx(prefill) and light.ttft_ms.p99 / 1e3 < 2 * prefill


def test_server_above_capacity_queues_grow_with_duration():
    short = server(1.5 * CAPACITY_QPS, P, N, linear, big(SEQS), duration_s=20, seed=1)
    long = server(1.5 * CAPACITY_QPS, P, N, linear, big(SEQS), duration_s=40, seed=1)
    assert long.ttft_ms.p99 > 1.6 * short.ttft_ms.p99 > 1.6 * 1e3  # seconds of queueing, doubling
    assert short.output_tokens_per_s == pytest.approx(CAPACITY_QPS * N, rel=0.05)  # saturated


def test_completed_tokens_per_s_stops_at_the_last_arrivals_finish():
    # A long request issued first still runs when the last one to arrive finishes: LoadGen's
    # Server figure counts its tokens but not its drain; the Offline-style figure counts both.
    r = simulate([SimRequest(0.0, 10, 1000), SimRequest(0.5, 10, 10)], lambda s: 0.01, big())
    last = r.finish_s[1]
    assert r.finish_s[0] > 5 * last
    assert r.completed_tokens_per_s == pytest.approx(1010 / last)
    assert r.output_tokens_per_s == pytest.approx(1010 / r.finish_s[0])


def test_timed_server_stream_spans_the_duration_with_at_least_min_count():
    reqs = server_requests(10.0, P, N, duration_s=30, seed=2)
    assert max(r.arrival_s for r in reqs) <= 30 and 240 < len(reqs) < 360
    short = server_requests(1.0, P, N, duration_s=5, seed=2)
    padded = server_requests(1.0, P, N, duration_s=5, seed=2, min_count=100)
    assert len(short) < 100 and len(padded) == 100
    assert padded[:len(short)] == short  # the same stream, continued past the duration


def test_find_peak_qps_meets_limits_below_capacity():
    limits = (0.3, 0.05)  # ttft p99 (~10 prefill steps), tpot p99 (loose: the queue binds first)

    def make(qps):
        return server_requests(qps, P, N, num_requests=600, seed=7)

    told = []
    qps, result = find_peak_qps(make, linear, big(SEQS), limits, start_qps=5.0, rel_tol=0.02,
                                on_run=lambda q, ok: told.append((q, ok)))
    assert 0.5 * CAPACITY_QPS < qps < CAPACITY_QPS and result.meets(*limits)
    assert not simulate(make(1.2 * qps), linear, big(SEQS)).meets(*limits)
    # Every run is reported once, with its verdict: the peak is the highest passing rate told.
    assert told[0][0] == 5.0 and max(q for q, ok in told if ok) == qps
    assert min(q for q, ok in told if not ok) > qps and len(set(told)) == len(told) > 3


def test_find_peak_qps_reports_zero_when_limits_are_unreachable():
    qps, result = find_peak_qps(lambda q: server_requests(q, P, N, num_requests=50), linear, big(SEQS),
                                (0.001, 1.0), max_runs=6)  # TTFT below one prefill step
    assert qps == 0.0 and not result.meets(0.001, 1.0)


def test_single_stream_issues_each_query_when_the_last_finishes():
    c = 0.01
    r = single_stream(5, P, N, lambda s: c, big(SEQS))
    assert np.allclose(r.e2e_s, N * c) and np.allclose(r.ttft_s, c)
    assert np.allclose(np.sort(r.arrival_s), np.arange(5) * N * c) and r.mean_batch_size == 1


# ---- KV blocks and speculative decoding --------------------------------------------


def test_kv_shortage_preempts_and_everyone_still_finishes():
    reqs = [SimRequest(0.0, 30, 40) for _ in range(12)]  # 70 tokens = 5 blocks of 16 each at the end
    r = simulate(reqs, linear, big(max_num_seqs=12, blocks=24))
    assert r.preemptions > 0
    assert r.output_tokens.tolist() == [40] * 12 and np.all(np.isfinite(r.finish_s))
    ample = simulate(reqs, linear, big(max_num_seqs=12, blocks=60))
    assert ample.preemptions == 0 and ample.duration_s < r.duration_s


def test_request_that_cannot_fit_alone_is_refused():
    with pytest.raises(ValueError, match="num_kv_blocks"):
        simulate([SimRequest(0.0, 100, 100)], linear, big(blocks=5))


def test_two_tokens_per_step_halves_decode_steps():
    plain = simulate([SimRequest(0.0, 50, 101)], linear, big())
    spec = simulate([SimRequest(0.0, 50, 101)], linear, big(draft_tokens=1, tokens_per_step=2.0))
    assert (plain.steps, spec.steps) == (1 + 100, 1 + 50)
    assert spec.output_tokens.tolist() == [101]


def test_fractional_acceptance_averages_tokens_per_step():
    shapes = []
    r = simulate([SimRequest(0.0, 10, 2401)], recording(linear, shapes), big(draft_tokens=3, tokens_per_step=2.4))
    assert shapes[1].tokens_per_decode == 4 and shapes[1].decode_contexts == (10,)
    assert r.steps - 1 == pytest.approx(2400 / 2.4, abs=2)
    with pytest.raises(ValueError, match="tokens_per_step"):
        SimConfig(8, 64, 64, draft_tokens=1, tokens_per_step=2.5)


# ---- the simulation follows the real scheduler -------------------------------------


def real_shapes(sim_requests, cfg, step_time):
    """Drive engine.scheduler.Scheduler through the same requests and clock;
    every ready request proposes its drafts, and every draft is accepted
    (tokens_per_step = 1 + draft_tokens). Returns (shapes, preemptions)."""
    pool = BlockPool(cfg.num_kv_blocks, cfg.block_size)
    sched = Scheduler(KVCacheManager(pool, enable_prefix_caching=False), cfg.max_num_seqs,
                      cfg.max_num_batched_tokens)
    pending = sorted(range(len(sim_requests)), key=lambda i: sim_requests[i].arrival_s)
    t, shapes, d = sim_requests[pending[0]].arrival_s, [], cfg.draft_tokens
    while pending or sched.has_work():
        while pending and sim_requests[pending[0]].arrival_s <= t:
            i = pending.pop(0)
            sr = sim_requests[i]
            sched.add(Request(str(i), list(range(1000 * i, 1000 * i + sr.prompt_tokens)),
                              SamplingParams(max_tokens=sr.output_tokens), eos_token_ids=frozenset()))
        if not sched.has_work():
            t = sim_requests[pending[0]].arrival_s
            continue
        for r in sched.running:  # spec/drafting.py's rule for who drafts and how many
            if r.num_computed_tokens == r.num_tokens - 1:
                r.draft_token_ids = [7] * max(min(d, r.params.max_tokens - r.num_output_tokens - 1), 0)
        out = sched.schedule()
        if not out.scheduled:
            continue
        decode, prefills = [], []
        for s in out.scheduled:
            if s.request.num_tokens - s.start == 1 and s.num_new_tokens == 1 + d:
                decode.append(s.start)
            else:
                prefills.append(PrefillChunk(s.num_new_tokens, s.start))
        shape = StepShape(tuple(decode), tuple(prefills), 1 + d)
        shapes.append(shape)
        t += step_time(shape)
        sched.update(out, {s.request.request_id: [7] * s.num_sample_rows for s in out.scheduled if s.samples})
        pool.check_invariants()
    return shapes, sched.num_preemptions


def varied(n, seed, arrivals):
    rng = np.random.default_rng(seed)
    return [SimRequest(float(a), int(rng.integers(1, 90)), int(rng.integers(1, 30))) for a in arrivals[:n]]


CROSS_CASES = {
    "offline-chunked": (lambda: varied(30, 0, [0.0] * 30), SimConfig(6, 48, 400, block_size=4)),
    "server-arrivals": (lambda: varied(40, 1, [r.arrival_s for r in server_requests(40, 1, 1, num_requests=40)]),
                        SimConfig(5, 40, 400, block_size=4)),
    "kv-preemption": (lambda: varied(30, 2, [0.0] * 30), SimConfig(8, 64, 40, block_size=4)),
    "drafts-chunked-no-room": (lambda: varied(30, 3, [0.0] * 30),
                               SimConfig(6, 24, 60, block_size=4, draft_tokens=2, tokens_per_step=3.0)),
}


@pytest.mark.parametrize("case", sorted(CROSS_CASES))
def test_step_shapes_match_the_real_scheduler(case):
    make, cfg = CROSS_CASES[case]
    requests = make()
    expected, real_preemptions = real_shapes(requests, cfg, linear)
    shapes = []
    result = simulate(requests, recording(linear, shapes), cfg)
    assert len(shapes) == len(expected)
    for i, (got, want) in enumerate(zip(shapes, expected)):
        assert (got.decode_contexts, got.prefills, got.tokens_per_decode) == \
            (want.decode_contexts, want.prefills, want.tokens_per_decode), f"step {i}"
    assert result.preemptions == real_preemptions
    if case == "kv-preemption":
        assert real_preemptions > 0
    assert result.output_tokens.tolist() == [r.output_tokens for r in requests]
    assert math.isclose(result.busy_s, sum(linear(s) for s in expected))
