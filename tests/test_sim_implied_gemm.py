"""benchmarks/sim_implied_gemm.py: the GEMM fraction a published run's mean TPOT implies."""

from dataclasses import replace

import pytest

from benchmarks.sim_implied_gemm import implied_fraction, mean_parts
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.served_latency import RUNS


@pytest.fixture(scope="module")
def run_and_parts():
    run = next(r for r in RUNS if r.model == "llama3.1-8b" and r.hardware == "b200")
    return run, mean_parts(run)


def test_the_models_own_mean_step_implies_about_the_fitted_fraction(run_and_parts):
    run, parts = run_and_parts
    assert parts["compute"] >= parts["gemm"] > 0 and parts["rows"] > run.in_flight  # decodes + prompt chunks
    fitted = get_hardware(run.hardware).efficiency.gemm_for(run.precision)
    # Solved on the mean step's parts, not step by step: close to, not exactly, the fitted fraction.
    assert implied_fraction(replace(run, tpot_mean_ms=parts["total"] * 1e3), parts) == pytest.approx(fitted, rel=0.05)


def test_a_slower_published_step_implies_a_lower_fraction(run_and_parts):
    run, parts = run_and_parts
    at = [implied_fraction(replace(run, tpot_mean_ms=parts["total"] * 1e3 * k), parts) for k in (1.0, 1.2, 1.5)]
    assert at[0] > at[1] > at[2]
    short = replace(run, tpot_mean_ms=(parts["memory"] + parts["comm"] + parts["overhead"]) * 1e3 * 0.9)
    assert implied_fraction(short, parts) == float("inf")
