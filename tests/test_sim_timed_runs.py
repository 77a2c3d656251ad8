"""Runs sized by time, as MLPerf's LoadGen sizes them (Workload.duration_s): Server
arrivals over a window with no cap on the QPS, counted as LoadGen's "Completed tokens
per second"; Offline runs of 1.1 x rate x duration requests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict

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
