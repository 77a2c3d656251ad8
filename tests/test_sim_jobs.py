"""`tokenmill sim --jobs N`: simulations spread over processes give the answers one process gives
(sim/jobs.py; the run-ahead of the search in sim/search.py and of the peak-QPS search in sim/peak_qps.py)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tokenmill.sim.search as search_module
from tokenmill.cli import main
from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.jobs import check_jobs, run_all
from tokenmill.sim.models import get_model
from tokenmill.sim.peak_qps import find_peak_qps
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.scenarios import server_requests
from tokenmill.sim.search import search
from tokenmill.sim.serving import SimConfig, simulate


def test_run_all_keeps_the_order_and_reports_each_call_once():
    seen: dict[int, int] = {}
    calls = [(2, k) for k in range(9)]
    for jobs in (1, 3):
        seen.clear()
        assert run_all(pow, calls, jobs, on_done=seen.__setitem__) == [2 ** k for k in range(9)]
        assert seen == {k: 2 ** k for k in range(9)}


def test_a_failing_call_in_a_worker_is_raised():
    with pytest.raises(ValueError, match="invalid literal"):
        run_all(int, [("1",), ("x",)], jobs=2)


def test_jobs_must_be_positive(capsys):
    with pytest.raises(ValueError, match="--jobs: must be >= 1, got 0"):
        check_jobs(0)
    assert main(["sim", "--model", "llama3.1-8b", "--num-gpus", "2", "--search", "--jobs", "0"]) == 2
    assert "--jobs: must be >= 1" in capsys.readouterr().err


SERVER_SCORES = {128: 300.0, 64: 600.0, 32: 280.0}


def _bounds_then_peaks(arch, hw, d, w, jobs=1):
    """A stand-in for predict with a known order: Offline bounds 10 x max_num_seqs (the largest first),
    peak searches ``SERVER_SCORES`` or 9 x max_num_seqs."""
    n = d.max_num_seqs
    score = 10.0 * n if w.scenario == "offline" else SERVER_SCORES.get(n, 9.0 * n)
    return {"tokens_per_s_per_gpu": score, "qps": 1.0}


@pytest.mark.parametrize("seqs, found_scores, skipped, run_ahead", [
    # No bound within 1.25x of 1280: 128 is searched alone. After its 300 the rule still runs 64 and 32
    # (bounds x 1.25 >= 300); after 64's 600 it skips 32 (1.25 x 320 = 400), which ran ahead and is discarded.
    ((32, 64, 128), [(64, 600.0), (128, 300.0)], [32], [64, 32]),
    # 110's bound (1100) is within 1.25x of 120's (1200): it runs ahead beside 120 from the start; none is skipped.
    ((100, 110, 120), [(120, 1080.0), (110, 990.0), (100, 900.0)], [], [120, 110, 100]),
])
def test_a_search_decides_in_order_while_candidates_run_ahead(monkeypatch, seqs, found_scores, skipped, run_ahead):
    # Forked workers see the stand-in: the pool is made after the patch.
    monkeypatch.setattr(search_module, "predict", _bounds_then_peaks)
    submitted: list[int] = []
    real_run_ahead = search_module._run_ahead

    def spy(pool, jobs, ahead, i, bounds, skipped, submit):
        return real_run_ahead(pool, jobs, ahead, i, bounds, skipped,
                              lambda b: submitted.append(b.max_num_seqs) or submit(b))

    monkeypatch.setattr(search_module, "_run_ahead", spy)
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    w = Workload("server", 128, 16, num_requests=16)
    answers = {}
    for jobs in (1, 2):
        pruned: list = []
        found = search(arch, hw, Deployment(1, Parallel(), "fp8"), w, pruned=pruned, seq_choices=seqs, jobs=jobs)
        answers[jobs] = ([(c.max_num_seqs, c.score) for c in found], [c.max_num_seqs for c in pruned])
    assert answers[1] == answers[2] == (found_scores, skipped)
    assert submitted == run_ahead


def test_a_real_peak_search_in_two_processes_gives_the_same_candidates_and_skips():
    arch, hw = get_model("deepseek-r1"), get_hardware("gb300")
    base = Deployment(8, Parallel(), "fp4", max_num_seqs=64)
    w = Workload("server", 1024, 128, num_requests=100)
    answers = []
    for jobs in (1, 2):
        pruned: list = []
        found = search(arch, hw, base, w, pruned=pruned, seq_choices=(32, 64), jobs=jobs)
        answers.append(([(c.parallel, c.max_num_seqs, c.figures) for c in found],
                        [(c.parallel, c.max_num_seqs) for c in pruned]))
    assert answers[0][1], "the Offline bound skipped nothing: the case no longer checks the skips"
    assert answers[0] == answers[1]


@pytest.mark.parametrize("flags", [
    ("--num-gpus", "2", "--scenario", "server"),
    ("--num-gpus", "2", "--pareto", "PNG"),
    ("--max-num-seqs", "16", "--disagg", "1:1", "--uplift"),
    ("--num-gpus", "2", "--search"),
])
def test_the_cli_prints_the_same_answer_for_any_jobs(flags, tmp_path, capsys):
    outs = []
    for jobs in ("1", "2"):
        png = tmp_path / f"front-{jobs}.png"
        argv = ["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--isl", "256", "--osl", "32",
                "--num-requests", "16", *(str(png) if f == "PNG" else f for f in flags), "--json", "--jobs", jobs]
        assert main(argv) == 0
        doc = json.loads(capsys.readouterr().out)
        if isinstance(doc, dict):
            doc.pop("png", None), doc.pop("json", None)  # the paths differ by name only
        outs.append(doc)
    assert outs[0] == outs[1]


def _step(shape) -> float:
    return 0.010 + 0.0001 * shape.num_tokens


def _arrivals(qps: float):
    return server_requests(qps, 64, 24, num_requests=300, seed=3)


@pytest.mark.parametrize("jobs", [2, 3, 7])
def test_the_peak_search_run_ahead_gives_the_runs_and_reports_of_one_process(jobs):
    config, limits = SimConfig(16, 4096, 10_000), (0.3, 0.05)

    def search_with(submit=None, jobs=1):
        told: list = []
        qps, result = find_peak_qps(_arrivals, _step, config, limits, start_qps=5.0, on_run=lambda q, ok:
                                    told.append((q, ok)), submit=submit, jobs=jobs)
        return qps, result, told

    qps, result, told = search_with()
    submitted: list[float] = []
    with ThreadPoolExecutor(jobs) as pool:
        def submit(q: float):
            submitted.append(q)
            return pool.submit(lambda: simulate(_arrivals(q), _step, config))

        qps_ahead, result_ahead, told_ahead = search_with(submit, jobs)
    assert 0 < qps == qps_ahead and told_ahead == told and len(told) > 4
    assert np.array_equal(result.finish_s, result_ahead.finish_s)
    # Every run the rule used was submitted once, and runs on branches not taken were started too.
    assert len(set(submitted)) == len(submitted) and {q for q, _ in told} < set(submitted)


def test_predict_with_jobs_gives_the_figures_and_the_reports_of_one_process():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    d, w = Deployment(2, Parallel(), "fp8", max_num_seqs=32), Workload("server", 512, 64, num_requests=120, ttft_ms=20)
    runs = {}
    for jobs in (1, 2):
        told: list = []
        runs[jobs] = predict(arch, hw, d, w, on_peak_run=lambda q, ok: told.append((q, ok)), jobs=jobs), told
    assert runs[1] == runs[2] and len(runs[1][1]) > 3 and runs[1][0]["qps"] > 0
