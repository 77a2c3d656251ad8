"""Shared prefixes in the simulator (`tokenmill sim --shared-prefix N:TOKENS`): a prompt hits its prefix once
its replica has computed it in an earlier step (sim/serving.py), the kv router sends a prefix back where it is
cached (sim/routed.py), and the hit rate is reported as the engine's counters count it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _sim_cli import sim_args

from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.routed import simulate_routed
from tokenmill.sim.scenarios import with_sample_repeats, with_shared_prefixes
from tokenmill.sim.serving import SimConfig, SimRequest, simulate
from tokenmill.sim.shapes import StepShape

CONFIG = SimConfig(max_num_seqs=16, max_num_batched_tokens=4096, num_kv_blocks=10_000)


def step_s(shape: StepShape) -> float:
    return 0.010 + 0.0001 * shape.num_tokens


def _grouped(arrivals, groups, prompt=100, prefix=64, output=2) -> list[SimRequest]:
    return [SimRequest(a, prompt, output, prefix_group=g, prefix_tokens=prefix) for a, g in zip(arrivals, groups)]


def test_a_prompt_hits_its_prefix_once_an_earlier_step_computed_it():
    # Two prefixes computed at t=0; the same two prefixes' next prompts arrive after they finished.
    later = simulate(_grouped([0, 0, 10, 10], [0, 1, 0, 1]), step_s, CONFIG)
    assert (later.prefix_hit_tokens, later.prefix_query_tokens) == (2 * 64, 400)
    assert later.prefix_cache_hit_rate == pytest.approx(0.32)
    # Admitted into one step, no prompt finds its prefix: nothing was computed before that step.
    together = simulate(_grouped([0, 0, 0, 0], [0, 1, 0, 1]), step_s, CONFIG)
    assert together.prefix_hit_tokens == 0
    # One prompt per step (a 100-token budget, chunked): the third and fourth find theirs.
    small = simulate(_grouped([0, 0, 0, 0], [0, 1, 0, 1]), step_s,
                     SimConfig(max_num_seqs=16, max_num_batched_tokens=100, num_kv_blocks=10_000))
    assert small.prefix_hit_tokens == 2 * 64
    # A hit is whole blocks and leaves a token to compute: a 64-token prompt that is all prefix hits 48.
    whole = simulate(_grouped([0, 10], [0, 0], prompt=64, prefix=64), step_s, CONFIG)
    assert whole.prefix_hit_tokens == 48


def test_a_prefix_is_shared_block_by_block_as_its_chunks_are_computed():
    # A 600-token prefix in 700-token prompts, 256-token steps: the first prompt takes three steps
    # (256, 512, 700 computed), and the second, which arrived meanwhile, is admitted into the third
    # step's 68 spare tokens. It finds the 32 blocks (512 tokens) the first two steps filled, as the
    # engine caches each full block after the step that filled it, not only the whole prefix.
    requests = _grouped([0, 0.001], [0, 0], prompt=700, prefix=600, output=1)
    chunked = simulate(requests, step_s, SimConfig(max_num_seqs=4, max_num_batched_tokens=256, num_kv_blocks=1000))
    assert chunked.prefix_hit_tokens == 512
    assert chunked.ttft_s[1] == pytest.approx(3 * 0.0356 + 0.010 + 0.0001 * 120 - 0.001)  # its 120 left: one step


def test_a_small_cache_evicts_the_least_recently_used_prefix_from_its_end():
    # 7 blocks a request (100 prompt tokens + 1), 4 of them its prefix. Prefixes 0, 1, 2, then 0 again, each
    # after the last finished: with 16 blocks the third request's allocation eats the end of prefix 0's
    # blocks (released before prefix 1's), and the fourth finds what is left, 2 blocks.
    requests = _grouped([0, 10, 20, 30], [0, 1, 2, 0])
    small = simulate(requests, step_s, SimConfig(max_num_seqs=4, max_num_batched_tokens=4096, num_kv_blocks=16))
    large = simulate(requests, step_s, CONFIG)
    assert (small.prefix_hit_tokens, large.prefix_hit_tokens) == (2 * 16, 64)
    # A prefix held by a running request is counted once: two requests of one prefix (9 blocks each by
    # their end) run side by side in 9 + 5 blocks, where two copies outgrow the 14 and one is preempted.
    side = _grouped([0, 0.05], [0, 0], output=40)
    fits = simulate(side, step_s, SimConfig(max_num_seqs=4, max_num_batched_tokens=4096, num_kv_blocks=14))
    assert fits.preemptions == 0 and fits.prefix_hit_tokens == 64 and fits.ttft_s[1] < 0.05
    apart = [SimRequest(r.arrival_s, r.prompt_tokens, r.output_tokens, cached_tokens=64) for r in side]
    waits = simulate(apart, step_s, SimConfig(max_num_seqs=4, max_num_batched_tokens=4096, num_kv_blocks=14))
    assert waits.preemptions > 0  # an up-front hit's blocks are the request's own


def test_the_blocks_add_up_through_preemptions_and_evictions():
    from tokenmill.sim.serving import ReplicaSim

    rng = np.random.default_rng(5)
    requests = [SimRequest(float(t), int(p), int(o), prefix_group=int(g), prefix_tokens=int(min(k, p)))
                for t, p, o, g, k in zip(np.sort(rng.uniform(0, 3, 80)), rng.integers(40, 400, 80),
                                         rng.integers(1, 60, 80), rng.integers(0, 6, 80), rng.integers(16, 300, 80))]
    sim = ReplicaSim(requests, SimConfig(max_num_seqs=8, max_num_batched_tokens=256, num_kv_blocks=60))
    result = sim.run(step_s)
    assert result.preemptions > 0 and 0 < result.prefix_hit_tokens < result.prefix_query_tokens
    # Every request done: every block is free again, the queue's segments hold them all, no prefix is held.
    assert sim.free == 60 and sum(seg[1] for seg in sim.prefixes.queue) == 60
    assert not sim.prefixes.refs.any() and not sim.held.any() and not sim.shared.any()
    cached = [g for g in range(6) if sim.prefixes.blocks[g]]
    assert all(sim.prefixes.on_queue(g) == sim.prefixes.blocks[g] for g in cached)


def test_hits_shorten_the_steps_that_follow():
    hit = simulate(_grouped([0, 10], [0, 0], prompt=1000, prefix=960, output=1), step_s, CONFIG)
    miss = simulate(_grouped([0, 10], [0, 1], prompt=1000, prefix=960, output=1), step_s, CONFIG)
    assert hit.ttft_s[0] == pytest.approx(miss.ttft_s[0])
    assert hit.ttft_s[1] == pytest.approx(0.010 + 0.0001 * 40) and miss.ttft_s[1] == pytest.approx(0.110)


def test_the_kv_router_sends_a_prefix_back_where_it_is_cached():
    # Each prompt arrives after the one before finished; prefixes come in pairs: 0, 0, 1, 1, 0, 0, ...
    requests = _grouped([float(i) for i in range(12)], [(i // 2) % 2 for i in range(12)])
    kv = simulate_routed(requests, 2, step_s, CONFIG, policy="kv")
    rr = simulate_routed(requests, 2, step_s, CONFIG, policy="round-robin")
    assert kv.prefix_hit_tokens == 10 * 64  # all but each prefix's first prompt
    assert rr.prefix_hit_tokens == 8 * 64  # each prefix's first prompt on each replica misses
    # Without shared prefixes the kv rule is the load rule it was: the same schedule as least load.
    plain = [SimRequest(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests]
    np.testing.assert_array_equal(simulate_routed(plain, 2, step_s, CONFIG, policy="kv").finish_s,
                                  simulate_routed(plain, 2, step_s, CONFIG, policy="least-loaded").finish_s)


def test_a_replayed_server_run_on_two_replicas_goes_through_the_router():
    from tokenmill.sim.cost import Parallel
    from tokenmill.sim.hardware import get_hardware
    from tokenmill.sim.models import get_model
    from tokenmill.sim.predict import Deployment, Workload, predict

    requests = tuple(_grouped([float(i) for i in range(12)], [(i // 2) % 2 for i in range(12)]))
    w = Workload("server", 100, 2, num_requests=len(requests), requests=requests)
    rate = {}
    for router in ("kv", "round-robin"):
        d = Deployment(2, Parallel(), "fp8", max_num_seqs=4, router=router)
        rate[router] = predict(get_model("smollm2-135m"), get_hardware("h100"), d, w)["prefix_cache_hit_rate"]
    assert rate == pytest.approx({"kv": 10 * 64 / 1200, "round-robin": 8 * 64 / 1200})


def test_prefixes_are_laid_out_in_turn_and_a_repeated_sample_keeps_its_own():
    drawn = [SimRequest(float(i), 50 if i == 4 else 300, 8) for i in range(6)]
    shared = with_shared_prefixes(drawn, 3, 256)
    assert [(r.prefix_group, r.prefix_tokens) for r in shared] == [(0, 256), (1, 256), (2, 256), (0, 256),
                                                                 (1, 50), (2, 256)]
    repeated = with_sample_repeats(shared, 2, seed=1)
    first = {}
    for r in repeated:  # a repeat carries its first draw's prompt, so its prefix too
        key = (r.prompt_tokens, r.prefix_group)
        first.setdefault(r.cached_tokens == 0, set()).add(key)
    assert all(key in first[True] for key in first.get(False, ()))
    with pytest.raises(ValueError, match="--shared-prefix: N:TOKENS, both >= 1"):
        with_shared_prefixes(drawn, 0, 256)


SMALL = ("--model", "smollm2-135m", "--hardware", "h100", "--isl", "300", "--osl", "16", "--num-requests", "64",
         "--max-num-seqs", "8", "--max-num-batched-tokens", "512")


def test_cli_reports_the_hits_and_prices_them(capsys):
    assert cmd_sim(sim_args(*SMALL, "--json")) == 0
    alone = json.loads(capsys.readouterr().out)
    assert cmd_sim(sim_args(*SMALL, "--shared-prefix", "4:256", "--json")) == 0
    shared = json.loads(capsys.readouterr().out)
    assert alone["prefix_cache_hit_rate"] == 0.0 and shared["config"]["shared_prefix"] == [4, 256]
    # 64 prompts over 4 prefixes, 16 blocks of each shared: at most 60 hit 256 of 300 tokens.
    assert 0.5 < shared["prefix_cache_hit_rate"] <= 60 * 256 / (64 * 300)
    assert shared["tokens_per_s"] > alone["tokens_per_s"]
    assert cmd_sim(sim_args(*SMALL, "--shared-prefix", "4:256")) == 0
    assert "prefix-cache hits" in capsys.readouterr().out
    # The uplift counts it as prefix caching, with a column of hits.
    assert cmd_sim(sim_args(*SMALL, "--shared-prefix", "4:256", "--uplift")) == 0
    out = capsys.readouterr().out
    assert "| + prefix caching |" in out and "prefix hits |" in out and "| baseline | " in out
    # The prefill pool of a disaggregated deployment hits too.
    assert cmd_sim(sim_args(*SMALL, "--num-gpus", "2", "--disagg", "1:1", "--shared-prefix", "4:256", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["prefix_cache_hit_rate"] > 0.5


def test_singlestream_finds_its_cached_tokens(capsys):
    argv = (*SMALL, "--scenario", "singlestream", "--json")
    figures = {}
    for extra in ((), ("--cached-tokens", "256"), ("--shared-prefix", "2:256")):
        assert cmd_sim(sim_args(*argv, *extra)) == 0
        figures[extra] = json.loads(capsys.readouterr().out)
    assert figures[()]["prefix_cache_hit_rate"] == 0.0
    assert figures[("--cached-tokens", "256")]["prefix_cache_hit_rate"] == pytest.approx(256 / 300)
    assert figures[("--shared-prefix", "2:256")]["prefix_cache_hit_rate"] == pytest.approx(62 * 256 / (64 * 300))
    assert figures[("--cached-tokens", "256")]["ttft_ms"]["p50"] < figures[()]["ttft_ms"]["p50"]


@pytest.mark.parametrize("text", ["8", "0:256", "8:x", "8:0"])
def test_shared_prefix_flag_is_checked(text):
    with pytest.raises(ValueError, match="--shared-prefix: N:TOKENS"):
        cmd_sim(sim_args(*SMALL, "--shared-prefix", text))


def test_a_shared_prefix_run_is_replayed_with_its_prefixes(tmp_path):
    from tokenmill.bench.metrics import compute_metrics
    from tokenmill.bench.results import BenchResult, QueryRecord, Verdict
    from tokenmill.bench.settings import BenchSettings
    from tokenmill.sim.replay import load_trace

    settings = BenchSettings(scenario="offline", ttft_ms=1000, tpot_ms=100)
    records = [QueryRecord(sample_index=s, issued_s=0.0, first_token_s=1.0, finished_s=2.0, output_tokens=8,
                           prompt_tokens=300) for s in (5, 0, 3, 8, 5)]
    params = {"workload": "shared-prefix", "num_prefixes": 4, "prefix_len": 256}
    result = BenchResult(target={"label": "tokenmill", "kind": "engine", "model": "m"}, scenario="offline",
                         mode="performance", settings=settings.describe(len(records)),
                         workload={"name": "shared-prefix", "params": params}, verdict=Verdict("VALID"),
                         metrics=compute_metrics(records, settings), queries=records, log_dir=str(tmp_path),
                         created="2026-12-01T00:00:00Z")
    path = result.save(tmp_path)
    trace = load_trace(path)  # samples 5, 0, 3, 8 start with system prompts 1, 0, 3, 0: the workload's layout
    assert [(r.prefix_group, r.prefix_tokens) for r in trace.requests] == [(1, 256), (0, 256), (3, 256), (0, 256),
                                                                        (1, 256)]
    # A repeated sample is left to the prefix model: cached where its replica holds its prefix, not everywhere.
    assert trace.repeats == 1 and all(r.cached_tokens == 0 for r in trace.requests)
    assert all(r.prefix_group == -1 for r in load_trace(path, prefix_caching=False).requests)

