"""Disaggregated prefill/decode pools in the simulator (sim/disagg.py, --disagg)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _sim_cli import sim_args

from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.cost import Parallel
from tokenmill.sim.disagg import Pool, PoolSplit, simulate_disagg
from tokenmill.sim.disagg_flags import parse_disagg
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.scenarios import server_requests
from tokenmill.sim.serving import SimConfig, SimRequest, simulate

CONFIG = SimConfig(max_num_seqs=64, max_num_batched_tokens=512, num_kv_blocks=4096, block_size=16)


def prefill_heavy(shape) -> float:
    """1 s for a step with any prefill chunk, 0.1 s for a decode-only step."""
    return 1.0 if shape.prefills else 0.1


def test_one_request_timeline():
    # Prefill pool: the 32-token prompt in one step (1 s) -> first token at 1.0.
    # Transfer 0.5 s -> the decode pool gets it at 1.5 with 33 tokens of context, 32 of them
    # (two whole blocks) cached: each of its 4 remaining tokens is one 0.1 s decode step.
    result = simulate_disagg([SimRequest(0.0, 32, 5)], PoolSplit(1, 1), Pool(prefill_heavy, CONFIG),
                             Pool(prefill_heavy, CONFIG), lambda tokens: 0.5)
    assert result.first_token_s[0] == pytest.approx(1.0)
    assert result.finish_s[0] == pytest.approx(1.9)
    assert result.tpot_s[0] == pytest.approx(0.9 / 4)
    assert result.output_tokens[0] == 5


def test_every_request_finishes_with_its_tokens():
    requests = server_requests(2.0, isl=lambda rng: int(rng.integers(20, 300)),
                               osl=lambda rng: int(rng.integers(1, 40)), num_requests=200)
    result = simulate_disagg(requests, PoolSplit(2, 3), Pool(prefill_heavy, CONFIG), Pool(prefill_heavy, CONFIG),
                             lambda tokens: 1e-3 * tokens)
    assert np.array_equal(result.output_tokens, [r.output_tokens for r in requests])
    assert np.all(result.first_token_s > result.arrival_s)
    assert np.all(result.finish_s >= result.first_token_s)
    one = result.output_tokens == 1
    assert one.any() and np.array_equal(result.finish_s[one], result.first_token_s[one])


def test_decode_pool_never_waits_for_prefill_chunks():
    # Long prompts arriving among decodes: aggregated, every decode shares 1 s prefill steps;
    # disaggregated, the decode pool runs only 0.1 s steps (plus its short recompute of the
    # last partial block), so TPOT p99 is far lower at the same load.
    requests = server_requests(0.5, isl=1000, osl=50, num_requests=150)
    aggregated = simulate(requests, prefill_heavy, CONFIG)
    disagg = simulate_disagg(requests, PoolSplit(1, 1), Pool(prefill_heavy, CONFIG), Pool(prefill_heavy, CONFIG),
                             lambda tokens: 0.0)
    assert disagg.tpot_ms.p99 < 0.5 * aggregated.tpot_ms.p99


def test_predict_disagg_reports_the_split_and_whole_deployment():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    d = Deployment(4, Parallel(), "fp8", max_num_seqs=64, disagg=PoolSplit(1, 3))
    f = predict(arch, hw, d, Workload("server", 1024, 128, num_requests=60, target_qps=4.0))
    assert f["config"]["disagg"]["prefill_replicas"] == 1 and f["config"]["disagg"]["decode_replicas"] == 3
    decode = f["config"]["disagg"]["decode"]  # the decode replicas: the deployment's layout unless named
    assert (decode["tp"], decode["max_num_seqs"]) == (1, 64)
    assert decode["kv_blocks_per_replica"] == f["config"]["kv_blocks_per_replica"]
    assert f["qps"] == pytest.approx(4.0)  # the deployment's offered rate, not a replica's share
    assert f["tokens_per_s"] == pytest.approx(f["tokens_per_s_per_gpu"] * 4)


def test_kv_transfer_time_slows_handoff():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    w = Workload("server", 4096, 64, num_requests=60, target_qps=2.0)
    # 4 GPUs fit one NVLink domain; 16 do not, so the KV goes over the slower network.
    near = predict(arch, hw, Deployment(4, Parallel(), "fp8", disagg=PoolSplit(1, 3)), w)
    far = predict(arch, hw, Deployment(16, Parallel(), "fp8", disagg=PoolSplit(4, 12)), w)
    assert far["tpot_ms"]["p50"] > near["tpot_ms"]["p50"]


def test_cli_disagg_flags(capsys):
    assert cmd_sim(sim_args("--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "offline", "--isl", "256",
                         "--osl", "32", "--num-requests", "50", "--disagg", "1:2")) == 0
    assert "disaggregated: 1 prefill + 2 decode" in capsys.readouterr().out
    # --no-disagg (the switch) after --disagg: aggregated replicas again.
    assert cmd_sim(sim_args("--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "offline", "--isl", "256",
                         "--osl", "32", "--num-requests", "50", "--disagg", "1:2", "--no-disagg", "--json")) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["disagg"] is None and config["replicas"] == 1
    with pytest.raises(ValueError, match="--disagg: expected P:D"):
        parse_disagg("3")
    with pytest.raises(ValueError, match="--disagg: .*>= 1 prefill"):
        parse_disagg("0:4")
    with pytest.raises(ValueError, match="--num-gpus: 5 GPUs, but --disagg 1:3"):
        cmd_sim(sim_args("--model", "llama3.1-8b", "--disagg", "1:3", "--num-gpus", "5"))


def test_pool_splits_cover_shares_and_aggregated():
    from tokenmill.sim.search import pool_splits

    assert pool_splits(1) == [None]
    assert pool_splits(2) == [None, PoolSplit(1, 1)]
    assert pool_splits(9) == [None, PoolSplit(1, 8), PoolSplit(2, 7), PoolSplit(3, 6), PoolSplit(4, 5),
                              PoolSplit(6, 3)]


def test_search_with_splits_tries_disaggregated_candidates():
    from tokenmill.sim.search import num_candidates, search

    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    base = Deployment(2, Parallel(), "fp8")
    w = Workload("offline", 512, 16, num_requests=20)
    found = search(arch, hw, base, w, splits=True)
    # tp 1 x (aggregated, 1:1) + tp 2 + tp 1 pp 2 (a pipeline is never split), 6 batch limits each
    assert len(found) == num_candidates(arch, hw, 2, splits=True) == 24
    assert {c.disagg for c in found} == {None, PoolSplit(1, 1)}
    assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)
    with pytest.raises(ValueError, match="--disagg auto: only with --search"):
        cmd_sim(sim_args("--model", "llama3.1-8b", "--disagg", "auto"))


def test_search_splits_apply_the_rule(capsys, monkeypatch):
    """--search --disagg auto --disagg-min-prefill-tokens N: every split the search tries applies our
    cluster's rule. At N above every prompt, the 1:1 split computes each prompt on its decode replica
    beside the decodes, its prefill replica idle: the first tokens come later and the run is slower than
    with every prompt sent."""
    import tokenmill.sim.search as search_module
    from tokenmill.sim.search import search

    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    base = Deployment(2, Parallel(), "fp8")
    w = Workload("offline", 128, 16, num_requests=20)

    def split_run(**kwargs):
        found = search(arch, hw, base, w, splits=True, seq_choices=(32,), **kwargs)
        return next(c for c in found if c.disagg is not None)

    kept = split_run(split_rule={"min_prefill_tokens": 256, "max_prefill_queue": 2})
    sent = split_run()
    assert kept.disagg == PoolSplit(1, 1, min_prefill_tokens=256, max_prefill_queue=2)
    assert sent.disagg == PoolSplit(1, 1)
    assert kept.figures["ttft_ms"]["p99"] > 1.5 * sent.figures["ttft_ms"]["p99"]
    assert kept.figures["tokens_per_s"] < sent.figures["tokens_per_s"]
    argv = ("--model", "llama3.1-8b", "--hardware", "h100", "--num-gpus", "2", "--isl", "128", "--osl", "16",
            "--num-requests", "20", "--search", "--disagg", "auto")
    tried = []
    real_predict = search_module.predict
    monkeypatch.setattr(search_module, "predict", lambda arch, hw, d, *a, **k: (
        tried.append(d.disagg), real_predict(arch, hw, d, *a, **k))[1])
    assert cmd_sim(sim_args(*argv, "--disagg-min-prefill-tokens", "256", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["tokens_per_s_per_gpu"] > 0
    assert PoolSplit(1, 1, min_prefill_tokens=256) in tried and PoolSplit(1, 1) not in tried
    for extra, message in [(("--decode-tp", "2"), "--decode-tp: only with --disagg P:D and no --search"),
                           (("--disagg-max-prefill-queue", "2"), "only with --disagg-min-prefill-tokens")]:
        with pytest.raises(ValueError, match=message):
            cmd_sim(sim_args(*argv, *extra))
    with pytest.raises(ValueError, match="--disagg-min-prefill-tokens: only with --disagg P:D"):
        cmd_sim(sim_args("--model", "llama3.1-8b", "--search", "--disagg-min-prefill-tokens", "0"))


def test_server_search_pruned_by_the_offline_bound_finds_the_same_best(monkeypatch):
    """Candidates whose Offline figure (x BOUND_MARGIN) is below the best Server
    figure are skipped; the best is the one an unpruned search finds, and every
    Server figure found is within its own Offline bound."""
    import tokenmill.sim.search as search_module
    from tokenmill.sim.search import num_candidates, search

    seqs = (32, 256)  # 14 candidates: a short test
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    base = Deployment(8, Parallel(), "fp8")  # TP 1, 2, 4, 8 and TP 1, 2, 4 x PP 2: the wide ones far behind
    w = Workload("server", 512, 64, num_requests=24)
    pruned: list = []
    found = search(arch, hw, base, w, pruned=pruned, seq_choices=seqs)
    assert pruned and len(found) + len(pruned) == num_candidates(arch, hw, 8, num_seq_choices=2) == 14
    assert max(c.score for c in pruned) * search_module.BOUND_MARGIN < found[0].score
    offline = {(c.parallel, c.pipeline_parallel, c.max_num_seqs): c.score
               for c in search(arch, hw, base, Workload("offline", 512, 64, num_requests=24), seq_choices=seqs)}
    assert all(c.score <= offline[(c.parallel, c.pipeline_parallel, c.max_num_seqs)] for c in found)
    monkeypatch.setattr(search_module, "BOUND_MARGIN", float("inf"))  # nothing pruned
    everything = search(arch, hw, base, w, seq_choices=seqs)
    assert len(everything) == 14
    assert found[0].figures == everything[0].figures


def test_prefill_pool_routes_around_a_long_prompt():
    # A 4,000-token prompt (eight 512-token chunks, 1 s each) then three short ones: round-robin
    # would deal the second short one behind the long one's chunks; the least-load router sends
    # every short one to the other replica.
    requests = [SimRequest(0.0, 4000, 2)] + [SimRequest(0.01 * k, 100, 2) for k in (1, 2, 3)]
    result = simulate_disagg(requests, PoolSplit(2, 1), Pool(prefill_heavy, CONFIG), Pool(prefill_heavy, CONFIG),
                             lambda tokens: 0.0)
    assert result.first_token_s[0] > 7.0
    assert np.all(result.first_token_s[1:] < 3.0)


def test_decode_replicas_of_their_own_layout():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    w = Workload("server", 1024, 128, num_requests=40, target_qps=2.0)
    same = predict(arch, hw, Deployment(3, Parallel(), "fp8", max_num_seqs=64, disagg=PoolSplit(2, 1)), w)
    wide = PoolSplit(2, 1, decode_parallel=Parallel(tp=2), decode_max_num_seqs=32)
    f = predict(arch, hw, Deployment(4, Parallel(), "fp8", max_num_seqs=64, disagg=wide), w)
    decode = f["config"]["disagg"]["decode"]
    assert (decode["tp"], decode["max_num_seqs"]) == (2, 32)
    assert decode["kv_blocks_per_replica"] > f["config"]["kv_blocks_per_replica"]  # half the weights per device
    # Memory-bound decode on two devices streams half the weights per step: a shorter TPOT.
    assert f["tpot_ms"]["p50"] < 0.8 * same["tpot_ms"]["p50"]
    with pytest.raises(ValueError, match="--num-gpus: 3 GPUs.*take 4"):
        predict(arch, hw, Deployment(3, Parallel(), "fp8", disagg=wide), w)


def test_cli_decode_pool_flags(capsys):
    assert cmd_sim(sim_args("--model", "llama3.1-8b", "--scenario", "server", "--isl", "512", "--osl", "32",
                         "--num-requests", "30", "--target-qps", "2", "--disagg", "2:1", "--decode-tp", "2",
                         "--decode-max-num-seqs", "16", "--json")) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["config"]["num_gpus"] == 4  # 2 prefill replicas of one GPU + 1 decode replica of two
    assert f["config"]["disagg"]["decode"]["tp"] == 2 and f["config"]["disagg"]["decode"]["max_num_seqs"] == 16
    for argv, message in [(("--decode-tp", "2"), "--decode-tp: only with --disagg P:D"),
                          (("--disagg", "1:1", "--decode-max-num-seqs", "8", "--search"), "no --search"),
                          (("--disagg", "1:1", "--decode-ep", "3", "--decode-tp", "2"), "--decode-tp/--decode-ep")]:
        with pytest.raises(ValueError, match=message):
            cmd_sim(sim_args("--model", "llama3.1-8b", *argv))


def test_the_rule_keeps_short_and_decode_cached_prompts_on_the_decode_pool():
    """--disagg-min-prefill-tokens, as our cluster decides (cluster/disagg.py): a prompt shorter than N
    uncached tokens, or one its decode replica caches whole, is computed on the decode pool. A repeat
    counts as cached there from its first occurrence's hand-off on: before it, it is sent too. Steps with
    a prompt chunk take 1 s, decode-only ones 0.1 s, a hand-off 0.5 s."""
    sample = dict(prefix_group=0, prefix_tokens=64)  # one 64-token prompt, repeated (sim/scenarios.py)
    requests = [SimRequest(0.0, 64, 5, **sample),  # sent: first token 1.0, its KV lands at 1.5
                SimRequest(1.2, 64, 5, **sample),  # before that: sent too, hits 48 tokens on the prefill replica
                SimRequest(3.0, 64, 5, **sample),  # after it: cached whole on the decode replica
                SimRequest(3.0, 20, 5)]            # 20 uncached tokens
    pools = Pool(prefill_heavy, CONFIG), Pool(prefill_heavy, CONFIG)

    def run(n):
        return simulate_disagg(requests, PoolSplit(1, 1, min_prefill_tokens=n), *pools, lambda tokens: 0.5)
    sent, at_0, at_32 = run(None), run(0), run(32)
    # Every prompt sent: 2 and 3 share a prefill step (3-4 s), land at 4.5, and 3's 5-token tail (its
    # partial block) is a 1 s chunk on the decode replica before their 3 last decodes.
    assert sent.first_token_s.tolist() == pytest.approx([1.0, 2.2, 4.0, 4.0])
    assert sent.finish_s.tolist() == pytest.approx([1.9, 3.1, 5.8, 5.8])
    assert (sent.steps, sent.prefill_steps) == (15, 4)
    # N = 0: 2 is computed on the decode replica, over the 48 tokens it caches, in the step that 1's last
    # decode is in (3-4 s: a local prompt stalls the decodes beside it); 3 is sent as before.
    assert at_0.first_token_s.tolist() == pytest.approx([1.0, 2.2, 4.0, 4.0])
    assert at_0.finish_s.tolist() == pytest.approx([1.9, 4.0, 4.4, 5.8])
    assert (at_0.steps, at_0.prefill_steps) == (19, 5)
    # N = 32: 3 stays too, in that same step; the prefill pool computes 0 and 1 only.
    assert at_32.finish_s.tolist() == pytest.approx([1.9, 4.0, 4.4, 4.4])
    assert (at_32.steps, at_32.prefill_steps) == (14, 3)
    # One lookup per prompt, on the pool that computes it (an import is none): 48 hit on the prefill
    # replica (1) and 48 on whichever computes 2.
    for r in (sent, at_0, at_32):
        assert (r.prefix_hit_tokens, r.prefix_query_tokens) == (96, 64 * 3 + 20)
    with pytest.raises(ValueError, match="--disagg-min-prefill-tokens: must be >= 0"):
        PoolSplit(1, 1, min_prefill_tokens=-1)


def test_cli_takes_the_rule(capsys):
    argv = ("--model", "llama3.1-8b", "--scenario", "server", "--isl", "128", "--osl", "16", "--num-requests",
            "40", "--target-qps", "4", "--disagg", "1:1", "--json")
    assert cmd_sim(sim_args(*argv, "--disagg-min-prefill-tokens", "256")) == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["config"]["disagg"]["min_prefill_tokens"] == 256
    assert cmd_sim(sim_args(*argv)) == 0
    sent = json.loads(capsys.readouterr().out)
    assert sent["config"]["disagg"]["min_prefill_tokens"] is None
    # Sent, each prompt is a step of its own on the prefill replica (129 tokens land on the decode one: its
    # first decode); under 256 they are all kept, and ride in the decode replica's steps.
    assert sent["engine_prefill_steps"] == sent["requests_simulated"] == 80
    assert kept["engine_steps"] < sent["engine_steps"]
    with pytest.raises(ValueError, match="--disagg-min-prefill-tokens: only with --disagg P:D"):
        cmd_sim(sim_args("--model", "llama3.1-8b", "--disagg-min-prefill-tokens", "0"))


def test_the_rule_keeps_prompts_local_while_the_prefill_queue_is_full():
    """--disagg-max-prefill-queue: six 300-token prompts at once, one prefill replica holding at most two
    in flight (sent, before their first token): the first two are sent, the other four computed on the
    decode replica, as `tokenmill serve` decides them (local_queue). Once those two are past their first
    token (1 s and 2 s in), a later prompt is sent again."""
    requests = [SimRequest(0.0, 300, 3) for _ in range(6)] + [SimRequest(2.5, 300, 3)]
    pools = Pool(prefill_heavy, CONFIG), Pool(prefill_heavy, CONFIG)
    full = simulate_disagg(requests, PoolSplit(1, 1, min_prefill_tokens=0, max_prefill_queue=2), *pools,
                           lambda tokens: 0.5)
    roomy = simulate_disagg(requests, PoolSplit(1, 1, min_prefill_tokens=0, max_prefill_queue=8), *pools,
                            lambda tokens: 0.5)
    # Budget 512: the prefill replica computes prompt 0 and most of 1 in its first step, 1 in its second.
    assert full.first_token_s[:2].tolist() == pytest.approx([1.0, 2.0])
    assert full.first_token_s[6] == pytest.approx(3.5)  # alone on the prefill replica: sent again
    # The four kept share the decode replica's steps with the imports: every prompt still finishes.
    assert np.all(full.finish_s >= full.first_token_s) and np.array_equal(full.output_tokens, [3] * 7)
    # Eight in flight allowed: all seven sent, the prefill replica's queue grows (the sixth's first token
    # comes after its five predecessors').
    assert roomy.first_token_s[5] > full.first_token_s[5]
    with pytest.raises(ValueError, match="--disagg-max-prefill-queue: must be >= 1"):
        PoolSplit(1, 1, min_prefill_tokens=0, max_prefill_queue=0)
    with pytest.raises(ValueError, match="--disagg-max-prefill-queue: only with --disagg-min-prefill-tokens"):
        cmd_sim(sim_args("--model", "llama3.1-8b", "--disagg", "1:1", "--disagg-max-prefill-queue", "2"))
