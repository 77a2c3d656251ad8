"""Server queries drawn from a sample set, as LoadGen draws them (`tokenmill sim --num-samples`)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from _sim_cli import sim_args

from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.scenarios import server_requests, with_sample_repeats
from tokenmill.sim.serving import SimConfig, SimRequest, simulate


def test_a_repeated_sample_comes_back_with_its_first_lengths_and_its_prompt_as_its_prefix():
    # Prompt lengths all but surely distinct, so a repeat's lengths name the earlier query they came from.
    drawn = server_requests(1.0, lambda rng: int(rng.integers(1, 10**9)), [10, 20], num_requests=240, seed=3)
    repeated = with_sample_repeats(drawn, 256, seed=3)
    assert [r.arrival_s for r in repeated] == [r.arrival_s for r in drawn]
    # Every query's prompt is its sample's own prefix, hit as far as the cache holds it: nothing up front.
    assert all(r.cached_tokens == 0 and r.prefix_tokens == r.prompt_tokens for r in repeated)
    first_of: dict[int, tuple[int, int]] = {}
    repeats = 0
    for r, d in zip(repeated, drawn):
        lengths = (r.prompt_tokens, r.output_tokens)
        if r.prefix_group in first_of:  # a repeat: the sample's first lengths, not its own draw
            assert first_of[r.prefix_group] == lengths and r.prompt_tokens != d.prompt_tokens
            repeats += 1
        else:
            assert lengths == (d.prompt_tokens, d.output_tokens)  # a new sample keeps its own draw
            first_of[r.prefix_group] = lengths
    # 240 uniform picks of 256 samples: about 240 - 256 (1 - (255/256)^240) = 84 repeats.
    assert 60 <= repeats <= 110 and all(0 <= g < 256 for g in first_of)
    assert with_sample_repeats(drawn, 256, seed=3) == repeated  # seeded
    assert len({r.prefix_group for r in with_sample_repeats(drawn, 1)}) == 1  # one sample: every query repeats it
    with pytest.raises(ValueError, match="--num-samples: must be >= 1"):
        with_sample_repeats(drawn, 0)


def test_a_repeat_hits_what_the_cache_still_holds():
    """Three queries of one 512-token sample on a 64-block cache of 16-token blocks, one at a time: the
    second, on the idle cache, hits all but its last block (31 blocks); a 760-token prompt in between takes
    48 blocks off the free queue's head (LRU first): the 31 never used, the second query's own last block
    (released before the sample's blocks) and 16 of the sample's 32, so the third hits the 16 left."""
    sample = SimRequest(0.0, 512, 1, 0, 0, 512)
    requests = [sample, dataclasses.replace(sample, arrival_s=1.0), SimRequest(2.0, 760, 1, 0, 1, 760),
                dataclasses.replace(sample, arrival_s=3.0)]
    config = SimConfig(max_num_seqs=4, max_num_batched_tokens=1024, num_kv_blocks=64, block_size=16)
    result = simulate(requests, lambda shape: 0.01, config)
    assert result.prefix_hit_tokens == 31 * 16 + 16 * 16
    assert result.prefix_query_tokens == 3 * 512 + 760
    roomy = simulate(requests, lambda shape: 0.01, dataclasses.replace(config, num_kv_blocks=128))
    assert roomy.prefix_hit_tokens == 2 * 31 * 16  # nothing evicted: both repeats hit all but a block


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
