"""Runs sized by time, as MLPerf's LoadGen sizes them (Workload.duration_s): Server
arrivals over a window with no cap on the QPS, counted as LoadGen's "Completed tokens
per second"; Offline runs of 1.1 x rate x duration requests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict, step_budget

ARCH, HW = get_model("llama3.1-8b"), get_hardware("h100")
ONE_GPU = Deployment(1, Parallel(tp=1), "fp8", max_num_seqs=64)
TTFT_MS, TPOT_MS = 2000.0, 100.0  # the llama3.1-8b preset's Server limits


def test_timed_offline_lasts_the_duration():
    w = Workload("offline", 128, 64, num_requests=100, duration_s=20.0)
    f = predict(ARCH, HW, ONE_GPU, w)
    lasted = f["requests_simulated"] * 64 / f["tokens_per_s"]
    assert f["requests_simulated"] > 100 and 20.0 <= lasted < 40.0
    assert predict(ARCH, HW, ONE_GPU, replace(w, duration_s=None))["requests_simulated"] == 100


def test_timed_server_peak_meets_the_limits_and_a_higher_rate_does_not():
    w = Workload("server", 128, 64, num_requests=100, duration_s=30.0)
    peak = predict(ARCH, HW, ONE_GPU, w)
    assert peak["ttft_ms"]["p99"] <= TTFT_MS and peak["tpot_ms"]["p99"] <= TPOT_MS
    assert peak["requests_simulated"] == pytest.approx(peak["qps"] * 30.0, rel=0.1)
    # No cap: a rate 30% above the peak builds a queue within the window that the p99 TTFT sees.
    over = predict(ARCH, HW, ONE_GPU, replace(w, target_qps=1.3 * peak["qps"]))
    assert over["ttft_ms"]["p99"] > TTFT_MS or over["tpot_ms"]["p99"] > TPOT_MS


def test_timed_server_is_not_held_to_a_finite_sets_drain():
    # Heavy-tailed outputs (DeepSeek-R1's shape, scaled to a 300-token mean, capped at 5,000):
    # a fixed set of 100 requests is capped at its Offline rate, which the longest output's
    # drain sets, so its "peak" meets the limits with room to spare; a timed run finds the rate.
    w = Workload("server", 804, 300, num_requests=100, dataset="deepseek-r1", osl_max=5000)
    counted = predict(ARCH, HW, ONE_GPU, w)
    timed = predict(ARCH, HW, ONE_GPU, replace(w, duration_s=40.0))
    assert counted["ttft_ms"]["p99"] < 0.5 * TTFT_MS
    assert timed["qps"] > 1.5 * counted["qps"]
    assert timed["ttft_ms"]["p99"] <= TTFT_MS and timed["tpot_ms"]["p99"] <= TPOT_MS


def test_min_queries_lengthens_a_timed_run_and_counts_the_whole_deployment():
    two = Deployment(2, Parallel(tp=1), "fp8", max_num_seqs=64)  # two replicas: each gets half
    w = Workload("offline", 128, 64, num_requests=100, duration_s=1.0, min_queries=5000)
    f = predict(ARCH, HW, two, w)
    assert f["requests_simulated"] == 5000
    server = Workload("server", 128, 64, num_requests=100, duration_s=1.0, target_qps=200.0, min_queries=3000)
    g = predict(ARCH, HW, two, server)
    assert g["requests_simulated"] == 3000  # 200 QPS for 1 s is 200 queries: the count wins
    # Without a duration the count is --num-requests, and min_queries plays no part.
    assert predict(ARCH, HW, ONE_GPU, replace(w, duration_s=None))["requests_simulated"] == 100


def test_a_rate_a_short_server_run_passes_fails_over_a_long_one():
    # Heavy-tailed outputs: the running batch fills over the longest requests' lifetime, so a
    # rate slightly above what the replica sustains passes a 20 s window (the queue is still
    # short) and fails over 4,000 queries (published DeepSeek-R1 runs: 100,000+).
    w = Workload("server", 804, 300, num_requests=100, dataset="deepseek-r1", osl_max=5000, duration_s=20.0,
                 target_qps=30.0)
    short = predict(ARCH, HW, ONE_GPU, w)
    long = predict(ARCH, HW, ONE_GPU, replace(w, min_queries=4000))
    assert long["requests_simulated"] == 4000 and short["requests_simulated"] < 1000
    assert short["ttft_ms"]["p99"] <= TTFT_MS < long["ttft_ms"]["p99"]


def test_the_step_budget_is_each_engines_and_holds_the_batch():
    adp = Deployment(8, Parallel(tp=1, ep=8, attention_dp=True), "fp4", max_num_seqs=8192, max_num_batched_tokens=6144)
    assert step_budget(adp) == 8 * 6144  # each of the 8 dp ranks schedules its own step
    assert step_budget(replace(adp, max_num_seqs=65536)) == 65536  # every running decode fits
    assert step_budget(Deployment(8, Parallel(tp=8), "fp4", max_num_seqs=256, max_num_batched_tokens=6144)) == 6144
