"""Server queries drawn from a sample set, as LoadGen draws them (`tokenmill sim --num-samples`)."""

from __future__ import annotations

import json

import pytest
from _sim_cli import sim_args

from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.scenarios import server_requests, with_sample_repeats


def test_a_repeated_sample_comes_back_cached_with_its_first_lengths():
    # Prompt lengths all but surely distinct, so a repeat's lengths name the earlier query they came from.
    drawn = server_requests(1.0, lambda rng: int(rng.integers(1, 10**9)), [10, 20], num_requests=240, seed=3)
    repeated = with_sample_repeats(drawn, 256, seed=3)
    assert [r.arrival_s for r in repeated] == [r.arrival_s for r in drawn]
    cached = [r for r in repeated if r.cached_tokens]
    # 240 uniform picks of 256 samples: about 240 - 256 (1 - (255/256)^240) = 84 repeats.
    assert 60 <= len(cached) <= 110
    assert all(r.cached_tokens == r.prompt_tokens for r in cached)
    earlier = set()
    for r, d in zip(repeated, drawn):
        if r.cached_tokens:  # a repeat: an earlier new sample's lengths, not its own draw
            assert (r.prompt_tokens, r.output_tokens) in earlier and r.prompt_tokens != d.prompt_tokens
        else:
            assert r == d  # a new sample keeps its own draw
            earlier.add((r.prompt_tokens, r.output_tokens))
    assert with_sample_repeats(drawn, 256, seed=3) == repeated  # seeded
    assert not any(r.cached_tokens for r in with_sample_repeats(drawn[:1], 1))
    assert all(r.cached_tokens for r in with_sample_repeats(drawn, 1)[1:])  # one sample: every later query repeats it
    with pytest.raises(ValueError, match="--num-samples: must be >= 1"):
        with_sample_repeats(drawn, 0)


def test_repeats_shorten_first_tokens_and_show_in_the_config():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    d = Deployment(1, Parallel(), "fp8", max_num_seqs=64)
    w = Workload("server", 4096, 64, num_requests=200, target_qps=20.0)
    plain, repeated = predict(arch, hw, d, w), predict(arch, hw, d, Workload(**{**w.__dict__, "num_samples": 50}))
    assert repeated["config"]["num_samples"] == 50 and plain["config"]["num_samples"] is None
    # 200 picks of 50 samples: most prompts hit the cache, so first tokens come much sooner.
    assert repeated["ttft_ms"]["p50"] < 0.5 * plain["ttft_ms"]["p50"]


def test_cli_flag(capsys):
    argv = ("--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "server", "--target-qps", "5",
            "--isl", "512", "--osl", "32", "--num-requests", "60")
    assert cmd_sim(sim_args(*argv, "--num-samples", "16", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["config"]["num_samples"] == 16
    assert cmd_sim(sim_args(*argv, "--num-samples", "16")) == 0
    assert "; queries drawn from 16 samples)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--num-samples: a positive count, with --scenario server or interactive"):
        cmd_sim(sim_args(*argv, "--num-samples", "0"))
    with pytest.raises(ValueError, match="--num-samples: a positive count, with --scenario server or interactive"):
        cmd_sim(sim_args("--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "offline", "--num-samples", "8"))
