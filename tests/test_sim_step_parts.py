"""benchmarks/sim_step_parts.py: a row's best candidate simulated again with its steps recorded gives the
same figure as the candidate search, and the mean step's parts add up as the cost model combines them."""

import math
from dataclasses import replace

import tokenmill.sim.step_price as step_price
from benchmarks.sim_step_parts import step_parts
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.published import RESULTS
from tokenmill.sim.validate import _offline_candidates, parse_parallel, row_workload


def test_recorded_run_matches_the_search_and_its_parts_add_up():
    row = next(r for r in RESULTS if r.model == "llama3.1-8b" and r.dataset is None and r.hardware == "h100")
    row = replace(row, num_requests=48)  # a short run: the test checks the bookkeeping, not the figure
    priced = step_price.step_time
    simulated, seqs, parts = step_parts(row, seq_choices=(8, 16))
    assert step_price.step_time is priced  # the recorder is taken out again
    workload = row_workload(row, 500)
    candidates, _ = _offline_candidates(get_model(row.model), get_hardware(row.hardware), row, workload,
                                        [parse_parallel(row.parallel)], (8, 16))
    best, deployment = candidates[0]
    assert simulated == best and seqs == deployment.max_num_seqs
    assert parts["rows"] > 0 and parts["compute_ms"] > 0 and parts["memory_ms"] > 0
    # Per step total = hypot(compute, memory) + comm + overhead; over means, hypot of the means is a lower bound
    # (hypot is convex) and the sum of the means an upper one.
    forward = parts["total_ms"] - parts["comm_ms"] - parts["overhead_ms"]
    assert math.hypot(parts["compute_ms"], parts["memory_ms"]) <= forward * (1 + 1e-9)
    assert forward <= parts["compute_ms"] + parts["memory_ms"]
    assert parts["expert_weight_gb"] == 0 and parts["weight_gb"] > 0  # a dense model streams no experts


def test_the_expert_counterfactuals_move_only_what_they_name():
    row = next(r for r in RESULTS if r.model == "gpt-oss-120b" and r.dataset is None and r.hardware == "h200"
               and (r.isl, r.osl) == (1024, 1024))
    row = replace(row, num_requests=24)
    base = step_parts(row, seq_choices=(8,))
    streamed = step_parts(row, seq_choices=(8,), expert_stream=0.9)
    slow = step_parts(row, seq_choices=(8,), expert_gemm_scale=2.0)
    # Offline requests all arrive at once: the same steps run whatever they cost.
    assert base[2]["rows"] == streamed[2]["rows"] == slow[2]["rows"]
    assert streamed[2]["memory_ms"] < base[2]["memory_ms"] and streamed[2]["compute_ms"] == base[2]["compute_ms"]
    assert streamed[0] > base[0]
    assert math.isclose(slow[2]["expert_gemm_tflop"], 2 * base[2]["expert_gemm_tflop"])
    assert slow[2]["compute_ms"] > base[2]["compute_ms"] and slow[2]["memory_ms"] == base[2]["memory_ms"]
    assert slow[0] < base[0]
