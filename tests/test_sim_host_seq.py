"""The host's time per sequence of a step (`tokenmill sim --host-seq-us`, predict.py
``Deployment.host_seq_s``, sim/host_rates.py ``host_seq_seconds``)."""

from __future__ import annotations

import json
import statistics

import pytest

from tokenmill.cli import main
from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.host_rates import IMPLIED_RATES, host_seq_seconds
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.published import RESULTS
from tokenmill.sim.served_latency import DENSE_RUNS, step_at_published_batch

SMALL = ["--isl", "128", "--osl", "64", "--num-requests", "60"]


def _offline(host_seq_s: float | None) -> dict:
    d = Deployment(1, Parallel(), "fp8", max_num_seqs=64, host_seq_s=host_seq_s)
    return predict(get_model("llama3.1-8b"), get_hardware("h100"), d, Workload("offline", 128, 256, num_requests=128))


def test_a_slow_host_bounds_every_step_and_a_fast_one_changes_nothing():
    free = _offline(None)
    assert _offline(1e-9)["tokens_per_s"] == free["tokens_per_s"]  # far below the GPU's step
    slow = _offline(1e-3)  # 1 ms a sequence: a 64-sequence decode step lasts 64 ms
    assert slow["tpot_ms"]["p50"] == pytest.approx(64.0, rel=0.02)
    assert 0.9 * 1000 < slow["tokens_per_s"] < 1000  # one token per sequence per ms, less the prompts' steps
    assert slow["config"]["host_seq_s"] == 1e-3


def test_the_flag_sets_it_and_bad_values_name_it(capsys):
    assert main(["sim", "--host-seq-us", "63", "--json", *SMALL]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["host_seq_s"] == pytest.approx(63e-6)
    assert main(["sim", "--host-seq-us", "63", *SMALL]) == 0
    assert "host 63 us per sequence a step" in capsys.readouterr().out
    for bad in ("0", "-5", "inf"):
        assert main(["sim", "--host-seq-us", bad, *SMALL]) == 2
        assert "--host-seq-us: must be a finite number > 0" in capsys.readouterr().err


def test_the_rows_take_the_rate_of_other_runs_on_their_host_kind():
    x86_v51 = {k: r for k, r in IMPLIED_RATES.items() if k[0] == "v5.1" and not k[2].startswith("GB")}  # B200 nodes
    # NVIDIA's B200 node: its own DeepSeek-R1 run held out, the other four x86 runs' median.
    own = ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT")
    others = [r for k, r in x86_v51.items() if k != own]
    assert len(others) == 4
    assert host_seq_seconds(*own, "b200") == pytest.approx(1 / statistics.median(others))
    # No v6.0 run on an x86 host implies a rate: v6.0's x86 rows take v5.1's.
    assert host_seq_seconds("v6.0", "Lambda_SIT", "B200-SXM-180GBx8_TRT", "b200") == pytest.approx(
        1 / statistics.median(x86_v51.values()))
    # Every Llama Server and Interactive row has one; no Offline row and no DeepSeek-R1 row.
    assert all(r.host_seq_s for r in RESULTS if r.model.startswith("llama") and r.scenario in ("server", "interactive")
               and r.dataset)
    assert not any(r.host_seq_s for r in RESULTS if r.scenario not in ("server", "interactive")
                   or not r.model.startswith("llama"))


def test_the_8b_blackwell_steps_at_their_batch_come_out_host_bound():
    """The published Llama-3.1-8B Blackwell runs' mean TPOT is ~62 us per sequence decoding; the cost
    model's step alone was 0.67-0.84 of it, with the host's time 1.0-1.15."""
    runs = [r for r in DENSE_RUNS if r.model == "llama3.1-8b" and r.hardware in ("b200", "b300")]
    assert len(runs) == 3
    for run in runs:
        assert 0.057 < run.tpot_mean_ms / run.in_flight < 0.0625  # ms per sequence in flight
        assert 1.0 < step_at_published_batch(run, steps=20) / run.tpot_mean_ms < 1.2


def test_the_405b_server_rows_never_reach_the_host_bound():
    """Their figures predate the host's time: at every batch up to 2,048 sequences of short contexts the
    cost model's step on their layouts stays above it, so their simulations do not change."""
    from tokenmill.sim.cost import step_cost, step_time
    from tokenmill.sim.search import layouts
    from tokenmill.sim.shapes import StepShape
    from tokenmill.sim.validate import parse_parallel, parse_pools

    arch = get_model("llama3.1-405b")
    rows = [r for r in RESULTS if r.model == "llama3.1-405b" and r.host_seq_s]
    assert len(rows) == 6
    for r in rows:
        hw, pools = get_hardware(r.hardware), parse_pools(r.parallel)
        parallels = ([pools.parallel, pools.decode_parallel] if pools else
                     [parse_parallel(r.parallel)] if r.parallel else layouts(arch, hw, r.num_gpus))
        for p in parallels:
            for n in (1, 16, 256, 2048):
                cost = step_cost(arch, StepShape(decode_contexts=(200,) * n), p, r.precision, 1.0)
                assert r.host_seq_s * n < step_time(cost, hw, r.precision, r.fused_allreduce).total_s
