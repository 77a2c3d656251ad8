"""sim/routed.py: replicas behind the router's policies, and predict's Server runs through them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tokenmill.sim import predict as predict_module
from tokenmill.sim.routed import simulate_routed
from tokenmill.sim.scenarios import server_requests
from tokenmill.sim.serving import SimConfig, SimRequest, simulate
from tokenmill.sim.shapes import StepShape


def linear(shape: StepShape) -> float:
    return 0.010 + 0.0001 * shape.num_tokens  # 10 ms a step + 0.1 ms a row


CONFIG = SimConfig(max_num_seqs=16, max_num_batched_tokens=1024, num_kv_blocks=10_000)


def _heavy_tailed(n: int, qps: float) -> list[SimRequest]:
    """Poisson arrivals; one prompt in ten is 30x the others (a long-prompt tail)."""
    isl = [100] * 9 + [3000]
    return server_requests(qps, isl, 32, num_requests=n, seed=3)


def test_one_replica_is_the_plain_simulation():
    requests = _heavy_tailed(200, 5.0)
    alone, routed = simulate(requests, linear, CONFIG), simulate_routed(requests, 1, linear, CONFIG)
    np.testing.assert_array_equal(alone.first_token_s, routed.first_token_s)
    np.testing.assert_array_equal(alone.finish_s, routed.finish_s)
    assert (alone.steps, alone.scheduled_tokens, alone.busy_s) == (routed.steps, routed.scheduled_tokens,
                                                                   routed.busy_s)


def test_short_prompts_go_around_a_long_one():
    # A 3,000-token prompt lands on replica 0 (3 chunk steps of ~112 ms); two short ones arriving
    # just after see replica 0 loaded and go to replica 1, where each is one ~20 ms step.
    requests = [SimRequest(0.0, 3000, 4), SimRequest(0.001, 100, 4), SimRequest(0.002, 100, 4)]
    result = simulate_routed(requests, 2, linear, CONFIG)
    ttft = result.first_token_s - result.arrival_s
    assert ttft[0] > 0.3
    assert ttft[1] < 0.05 and ttft[2] < 0.05
    # Random or round-robin dealing puts one of them behind the long prompt: simulated alone, that
    # replica serves it after all three chunks.
    behind = simulate(requests[:2], linear, CONFIG)
    assert behind.first_token_s[1] - behind.arrival_s[1] > 0.3


def test_every_request_finishes_once_with_its_tokens():
    requests = _heavy_tailed(300, 20.0)
    result = simulate_routed(requests, 3, linear, CONFIG)
    assert np.all(np.isfinite(result.finish_s)) and np.all(result.first_token_s <= result.finish_s)
    assert np.array_equal(result.output_tokens, np.array([r.output_tokens for r in requests]))
    assert result.scheduled_tokens >= sum(r.prompt_tokens + r.output_tokens - 1 for r in requests)


def test_routing_beats_a_random_split_at_the_same_load():
    """The same arrivals, over 4 replicas: the least-load router's TTFT p99 against
    each replica taking its own quarter of the stream (what one replica's share was)."""
    requests = _heavy_tailed(2000, 28.0)
    routed = simulate_routed(requests, 4, linear, CONFIG)
    rng = np.random.default_rng(0)
    which = rng.integers(0, 4, size=len(requests))
    split = [simulate([r for r, k in zip(requests, which) if k == q], linear, CONFIG) for q in range(4)]
    split_ttft = np.concatenate([s.first_token_s - s.arrival_s for s in split])
    routed_p99 = np.percentile(routed.first_token_s - routed.arrival_s, 99)
    assert routed_p99 < 0.5 * np.percentile(split_ttft, 99)


def test_replicas_must_be_positive():
    with pytest.raises(ValueError, match="replicas"):
        simulate_routed([SimRequest(0.0, 10, 2)], 0, linear, CONFIG)
    with pytest.raises(ValueError, match="--router: unknown policy 'fastest'"):
        simulate_routed([SimRequest(0.0, 10, 2)], 2, linear, CONFIG, policy="fastest")


def test_least_loaded_counts_requests_where_kv_counts_blocks():
    # A 3,000-token prompt on replica 0, then two short ones on replica 1 (both policies: replica 0
    # is loaded either way). The fourth request differs: kv sees replica 0's 188 blocks against
    # replica 1's 14 and sends it to 1; least-loaded sees 1 request in flight against 2 and sends it to 0.
    requests = [SimRequest(0.0, 3000, 64), SimRequest(0.001, 100, 64), SimRequest(0.002, 100, 64),
                SimRequest(0.003, 100, 64)]
    kv = simulate_routed(requests, 2, linear, CONFIG, policy="kv")
    counted = simulate_routed(requests, 2, linear, CONFIG, policy="least-loaded")
    ttft_kv, ttft_counted = (r.first_token_s - r.arrival_s for r in (kv, counted))
    assert ttft_kv[3] < 0.05  # beside the short ones on replica 1
    assert ttft_counted[3] > 0.3  # behind the long prompt's chunks on replica 0
    # Round-robin deals 0, 1, 0, 1: the third request waits behind the long prompt.
    dealt = simulate_routed(requests, 2, linear, CONFIG, policy="round-robin")
    assert (dealt.first_token_s - dealt.arrival_s)[2] > 0.3
    # Random is seeded: the same arrivals go the same way twice.
    once, again = (simulate_routed(_heavy_tailed(200, 20.0), 3, linear, CONFIG, policy="random") for _ in range(2))
    np.testing.assert_array_equal(once.finish_s, again.finish_s)


def test_the_cli_router_choices_are_the_simulated_policies():
    from tokenmill.sim.cli_args import ROUTER_NAMES
    from tokenmill.sim.routed import ROUTER_POLICIES

    assert ROUTER_NAMES == ROUTER_POLICIES


def test_predict_routes_server_arrivals_over_a_group(monkeypatch):
    from tokenmill.sim.cost import Parallel
    from tokenmill.sim.hardware import get_hardware
    from tokenmill.sim.models import get_model
    from tokenmill.sim.predict import Deployment, Workload, predict

    arch, hw = get_model("llama3.1-8b"), get_hardware("h200")
    d = Deployment(8, Parallel(tp=1), "fp8", max_num_seqs=64)
    w = Workload("server", isl=1024, osl=128, num_requests=200, target_qps=80.0)
    routed = predict(arch, hw, d, w)
    assert routed["config"]["routed_group"] == predict_module.ROUTED_GROUP == 4
    assert routed["config"]["router"] == "kv"
    counted = predict(arch, hw, replace(d, router="least-loaded"), w)
    assert counted["config"]["router"] == "least-loaded" and counted["requests_simulated"] == 1600
    assert routed["requests_simulated"] == 1600  # 200 per replica: 800 simulated over 4, scaled to 8
    offline = predict(arch, hw, d, Workload("offline", isl=1024, osl=128, num_requests=200))
    assert offline["config"]["routed_group"] is None
    monkeypatch.setattr(predict_module, "ROUTED_GROUP", 1)
    alone = predict(arch, hw, d, w)
    assert alone["config"]["routed_group"] is None and alone["requests_simulated"] == 1600
    # At a fifth of this deployment's Server capacity with equal prompts, routing by load buys
    # little TTFT (a replica busy with a prompt looks as loaded as one decoding): same order.
    assert 0.5 < routed["ttft_ms"]["p99"] / alone["ttft_ms"]["p99"] < 2
