"""``tokenmill sim --seed / --draws``: another seed is another draw of the same workload, and
``--draws N`` reports each figure's spread over N of them (sim/draws.py)."""

from __future__ import annotations

import json
import statistics

import pytest

from tokenmill.cli import main
from tokenmill.sim.cost import Parallel
from tokenmill.sim.draws import spread
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict

SERVER = ["--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "server", "--isl", "512", "--osl", "64",
          "--num-requests", "120", "--max-num-seqs", "32", "--target-qps", "12"]


def _server(seed: int = 0, **extra) -> Workload:
    return Workload("server", 512, 64, num_requests=120, target_qps=12.0, seed=seed, **extra)


def test_a_seed_is_another_draw_of_the_same_workload():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    d = Deployment(1, Parallel(), "fp8", max_num_seqs=32)
    first, again, other = (predict(arch, hw, d, _server(s)) for s in (0, 0, 1))
    assert first == again  # seeded: the same draw twice
    assert other["ttft_ms"] != first["ttft_ms"]  # other arrival times
    assert (first["config"]["seed"], other["config"]["seed"]) == (0, 1)
    assert first == predict(arch, hw, d, Workload("server", 512, 64, num_requests=120, target_qps=12.0))  # default 0
    # The samples queries draw follow the seed too (the same arrivals, other repeats).
    hits = {predict(arch, hw, d, _server(s, num_samples=40))["prefix_cache_hit_rate"] for s in (0, 1, 2)}
    assert len(hits) > 1
    # Offline at fixed lengths draws nothing: every seed is the same run.
    offline = [predict(arch, hw, d, Workload("offline", 512, 64, num_requests=60, seed=s)) for s in (0, 5)]
    assert offline[0]["tokens_per_s"] == offline[1]["tokens_per_s"]


def test_draws_report_each_figures_spread_and_keep_the_first_draw(capsys):
    assert main(["sim", *SERVER, "--seed", "3", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["sim", *SERVER, "--seed", "3", "--draws", "5", "--jobs", "2", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    draws = f.pop("draws")
    assert f == plain  # the headline figures are the draw at --seed
    assert draws["n"] == 5 and draws["seeds"] == [3, 4, 5, 6, 7]
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    d = Deployment(1, Parallel(), "fp8", max_num_seqs=32)
    p99s = [predict(arch, hw, d, _server(s))["ttft_ms"]["p99"] for s in range(3, 8)]
    ttft = draws["ttft_ms.p99"]
    assert ttft["median"] == statistics.median(p99s)
    assert (ttft["min"], ttft["max"]) == (min(p99s), max(p99s)) and ttft["min"] < ttft["max"]
    for key in ("tokens_per_s_per_gpu", "ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p99", "cost_per_million_tokens"):
        s = draws[key]
        assert s["min"] <= s["p5"] <= s["median"] <= s["p95"] <= s["max"]
    assert draws["qps"]["min"] == draws["qps"]["max"] == 12  # offered, not drawn
    assert main(["sim", *SERVER, "--draws", "3"]) == 0
    out = capsys.readouterr().out
    assert "over 3 draws (seeds 0-2):" in out and "TTFT p99 (ms)" in out and "the same in every draw: QPS" in out


def test_each_draw_searches_its_own_peak(capsys):
    server = [a for a in SERVER if a not in ("--target-qps", "12")]
    assert main(["sim", *server, "--draws", "2", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["qps"] > 0 and f["draws"]["qps"]["min"] <= f["qps"] <= f["draws"]["qps"]["max"]


def test_spread_leaves_out_what_a_draw_has_not():
    runs = [{"tokens_per_s": float(v), "tpot_ms": None, "ttft_ms": {"p50": 1.0, "p99": float(v)}} for v in range(1, 21)]
    s = spread(runs, list(range(20)))
    assert "tpot_ms.p50" not in s and "qps" not in s
    assert s["tokens_per_s"] == {"median": 10.5, "p5": pytest.approx(1.95), "p95": pytest.approx(19.05),
                                 "min": 1.0, "max": 20.0}
    assert spread(runs[:1], [0])["ttft_ms.p99"] == {"median": 1.0, "p5": 1.0, "p95": 1.0, "min": 1.0, "max": 1.0}


@pytest.mark.parametrize("args, message", [
    (["--draws", "0"], "--draws: must be >= 1, got 0"),
    (["--seed", "-1"], "--seed: must be >= 0, got -1"),
    (["--draws", "2", "--search"], "--draws and --search: pick one"),
    (["--draws", "2", "--uplift"], "--draws and --uplift: pick one"),
    (["--draws", "2", "--pareto", "front.png"], "--draws and --pareto: pick one"),
    (["--draws", "2", "--replay", "results.json"], "--replay and --draws: pick one"),
    (["--seed", "1", "--replay", "results.json"], "--replay and --seed: pick one"),
    (["validate", "--draws", "2"], "--draws and --seed: for a prediction, not validate"),
])
def test_draws_and_seeds_refused_where_nothing_is_drawn(capsys, args, message):
    assert main(["sim", *SERVER, *args]) == 2
    assert message in capsys.readouterr().err
