"""Peak search logic (bisection over runs), with a verdict oracle in place of
LoadGen runs: the runs themselves are covered in test_bench_engine/http."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tokenmill.bench.peak import find_peak


def oracle(true_peak: float, calls: list[float]):
    def run_at(qps: float):
        calls.append(qps)
        valid = qps <= true_peak
        return SimpleNamespace(verdict=SimpleNamespace(valid=valid, result="VALID" if valid else "INVALID",
                                                       reasons=[]),
                               metrics=SimpleNamespace(tokens_per_s=100 * qps), log_dir=f"qps-{qps}")
    return run_at


@pytest.mark.parametrize("true_peak, start", [(3.7, 1.0), (3.7, 20.0), (0.3, 1.0), (1.0, 1.0)])
def test_bisection_brackets_the_true_peak(true_peak, start):
    calls: list[float] = []
    search = find_peak(oracle(true_peak, calls), start, max_runs=12, tolerance=0.05)
    assert search.peak_qps is not None and search.peak_qps <= true_peak
    assert search.lowest_failing_qps is not None and search.lowest_failing_qps > true_peak
    assert (search.lowest_failing_qps - search.peak_qps) <= 0.05 * search.lowest_failing_qps
    assert [q for q, _ in search.runs] == calls and len(calls) <= 12
    assert search.best is search.runs[calls.index(search.peak_qps)][1]


def test_growth_doubles_then_bisects():
    calls: list[float] = []
    find_peak(oracle(3.7, calls), 1.0, max_runs=5, tolerance=0.01)
    assert calls == [1.0, 2.0, 4.0, 3.0, 3.5]


def test_nothing_passes_reports_no_peak():
    calls: list[float] = []
    search = find_peak(oracle(0.0, calls), 1.0, max_runs=4)
    assert search.peak_qps is None and search.best is None
    assert calls == [1.0, 0.5, 0.25, 0.125]
    summary = search.summary()
    assert summary["peak_qps"] is None
    assert [r["verdict"] for r in summary["runs"]] == ["INVALID"] * 4


def test_run_budget_is_respected():
    calls: list[float] = []
    search = find_peak(oracle(1e9, calls), 1.0, max_runs=3)
    assert len(calls) == 3 and search.lowest_failing_qps is None and search.peak_qps == 4.0


def test_bad_arguments_name_the_setting():
    with pytest.raises(ValueError, match="target_qps"):
        find_peak(oracle(1, []), 0.0)
    with pytest.raises(ValueError, match="peak_max_runs"):
        find_peak(oracle(1, []), 1.0, max_runs=1)
