"""MLPerf dataset length distributions for the simulator (sim/mlperf_lengths.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.sim.mlperf_datasets import DATASETS
from tokenmill.sim.mlperf_lengths import DATASET_DISTRIBUTIONS, LengthTable, get_distribution, length_draws


def test_405b_table_matches_amds_published_figures():
    # AMD's MLPerf v5.1 blog, read independently of the per-sample file the table comes from:
    # "input sequence lengths range from 476 to 19988 tokens with an average of 9428".
    d = get_distribution("llama3.1-405b")
    assert (d.inputs.percentiles[0], d.inputs.percentiles[-1]) == (476, 19988)
    assert d.inputs.mean == pytest.approx(9428, rel=0.01)
    # and its reference outputs, the MLCommons README's 684.68 tokens per sample
    assert d.outputs.mean == pytest.approx(684.68, rel=0.01)


def test_every_table_agrees_with_the_published_dataset_sizes():
    published = {d.benchmark: d for d in DATASETS}
    for name, dist in DATASET_DISTRIBUTIONS.items():
        assert dist.samples == published[name].samples, name
        if published[name].isl_max:  # DeepSeek-R1's MAX_ISL 3136 is the harness's cap; its longest sample has 3140
            assert dist.inputs.percentiles[-1] <= published[name].isl_max + 8, name


def test_outputs_scaled_to_the_requested_mean_and_capped():
    prompt, output = length_draws("deepseek-r1", 3752.0, 20000)
    rng = np.random.default_rng(1)
    outs = np.array([output(rng) for _ in range(20000)])
    assert outs.max() == 20000 and outs.min() >= 1  # the reference's 32k tail is cut at the cap
    # The scale makes up for what the cap cuts: the capped draws average the target (scaling the
    # reference mean to it alone gave 3,606), within the sampling error of 20,000 draws (~25 tokens).
    assert outs.mean() == pytest.approx(3752, rel=0.02)
    table = get_distribution("deepseek-r1").outputs
    assert table.scale_for_capped_mean(3752, 20000) > 3752 / table.mean
    assert table.scale_for_capped_mean(100, 10**9) == pytest.approx(100 / table.mean, rel=1e-3)
    assert 52 <= min(prompt(rng) for _ in range(1000))
    with pytest.raises(ValueError, match="output mean"):
        table.scale_for_capped_mean(20000, 20000)


def test_draws_depend_on_the_generator_alone():
    prompt, _ = length_draws("llama2-70b", 273.0, 1024)
    a = [prompt(np.random.default_rng(7)) for _ in range(3)]
    assert len(set(a)) == 1


@pytest.mark.parametrize("bad", [(1,) * 100, tuple(range(101, 0, -1)), (0,) + tuple(range(1, 101))])
def test_length_table_refuses_malformed_percentiles(bad):
    with pytest.raises(ValueError, match="101 non-decreasing positive"):
        LengthTable(bad)


def test_unknown_dataset_names_the_flag():
    with pytest.raises(ValueError, match="--dataset: unknown 'gpt-oss-120b'"):
        get_distribution("gpt-oss-120b")
