"""Attention-DP prompt balancing (sim/adp_balance.py): the rule step by step, its effect on a
simulated prompt's first token, and the flags that switch it on."""

from __future__ import annotations

import json

import pytest

from tokenmill.cli import main
from tokenmill.sim.adp_balance import AdpBalance, AdpGate
from tokenmill.sim.serving import SimConfig, SimRequest, simulate

RANKS, WAIT, TIMEOUT = 4, 2, 5


def gate() -> AdpGate:
    return AdpGate(AdpBalance(RANKS, WAIT, TIMEOUT))


def test_a_lone_prompt_waits_for_the_timeout_while_every_rank_decodes():
    g = gate()
    opened = [g.admits(waiting=1, running=RANKS, room=True) for _ in range(2 * TIMEOUT)]
    assert opened == [False] * (TIMEOUT - 1) + [True] + [False] * (TIMEOUT - 1) + [True]


def test_the_timeout_counts_steps_without_prompts_too():
    g = gate()
    for _ in range(3):  # three steps with nothing waiting
        assert not g.admits(waiting=0, running=RANKS, room=True)
    assert [g.admits(1, RANKS, True) for _ in range(TIMEOUT - 3)] == [False] * (TIMEOUT - 4) + [True]


def test_a_prompt_per_rank_goes_after_the_batching_wait():
    g = gate()
    assert [g.admits(RANKS, RANKS, True) for _ in range(WAIT + 1)] == [False] * WAIT + [True]
    assert [g.admits(RANKS, RANKS, True) for _ in range(WAIT + 1)] == [False] * WAIT + [True]  # counter reset


def test_prompts_go_at_once_where_some_rank_has_no_decode_to_stall():
    g = gate()
    assert g.admits(waiting=1, running=RANKS - 1, room=True)
    assert g.admits(waiting=RANKS, running=0, room=True)


def test_a_full_batch_waits_for_the_timeout_even_with_a_prompt_per_rank():
    g = gate()
    assert [g.admits(RANKS, RANKS, room=False) for _ in range(TIMEOUT)] == [False] * (TIMEOUT - 1) + [True]


@pytest.mark.parametrize("ranks, wait, timeout", [(0, 1, 1), (2, -1, 1), (2, 1, -1)])
def test_bad_settings_are_refused(ranks, wait, timeout):
    with pytest.raises(ValueError):
        AdpBalance(ranks, wait, timeout)


def test_a_late_prompt_starts_at_the_next_timeout_in_the_simulation():
    step = 0.01
    decodes = [SimRequest(0.0, 10, 200) for _ in range(RANKS)]  # every rank decodes throughout
    late = SimRequest(0.0355, 10, 5)  # joins at the start of step 4 (t = 0.04)
    cfg = dict(max_num_seqs=64, max_num_batched_tokens=4096, num_kv_blocks=10_000)
    plain = simulate([*decodes, late], lambda s: step, SimConfig(**cfg))
    held = simulate([*decodes, late], lambda s: step, SimConfig(**cfg, adp_balance=AdpBalance(RANKS, WAIT, TIMEOUT)))
    assert plain.ttft_s[-1] == pytest.approx(0.0145)  # admitted in step 4, first token at its end (0.05)
    # The four prompts went in step 0 (nothing ran); the counter then counts steps 1-4 and opens at
    # step 5 (its fifth): the late prompt is admitted there and samples at 0.06.
    assert held.ttft_s[:RANKS] == pytest.approx([step] * RANKS)
    assert held.ttft_s[-1] == pytest.approx(0.06 - 0.0355)
    assert held.output_tokens.tolist() == plain.output_tokens.tolist()


SMALL = ["--model", "llama3.1-8b", "--hardware", "h100", "--num-gpus", "4", "--tp", "4", "--attention-dp",
         "--isl", "128", "--osl", "64", "--scenario", "server", "--target-qps", "60", "--num-requests", "200", "--json"]


def test_balancing_delays_first_tokens_and_the_config_says_so(capsys):
    assert main(["sim", *SMALL]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["sim", *SMALL, "--adp-balance", "3:9", "--no-enable-chunked-prefill"]) == 0
    held = json.loads(capsys.readouterr().out)
    assert plain["config"]["adp_balance"] is None and plain["config"]["chunked_prefill"] is True
    assert held["config"]["adp_balance"] == [3, 9] and held["config"]["chunked_prefill"] is False
    assert held["ttft_ms"]["p50"] > 2 * plain["ttft_ms"]["p50"]


@pytest.mark.parametrize("args, message", [
    (["--adp-balance", "3:9"], "needs --attention-dp"),
    (["--attention-dp", "--tp", "2", "--adp-balance", "3"], "WAIT:TIMEOUT"),
    (["--attention-dp", "--tp", "2", "--adp-balance", "a:9"], "WAIT:TIMEOUT"),
])
def test_bad_balance_flags_name_the_flag(capsys, args, message):
    assert main(["sim", "--isl", "128", "--osl", "64", "--num-requests", "20", *args]) == 2
    err = capsys.readouterr().err
    assert "--adp-balance" in err and message in err


def test_the_deepseek_r1_server_rows_run_their_configs_scheduling():
    from tokenmill.sim.published import RESULTS

    rows = [r for r in RESULTS if r.model == "deepseek-r1" and r.scenario == "server"]
    assert len(rows) == 10 and all(r.adp_balance in ((3, 9), (2, 6)) and not r.chunked_prefill for r in rows)
    assert all(r.adp_balance is None for r in RESULTS if r not in rows)
    # Whole prompts elsewhere only in the disaggregated Interactive row, whose prefill workers leave
    # TensorRT-LLM's default (unchunked) in place.
    whole = [r for r in RESULTS if r not in rows and not r.chunked_prefill]
    assert [(r.model, r.scenario) for r in whole] == [("deepseek-r1", "interactive")]
