"""`tokenmill sim --replay`: a measured bench run's queries simulated as they arrived (sim/replay.py)."""

from __future__ import annotations

import json

import pytest

from tokenmill.bench.metrics import compute_metrics
from tokenmill.bench.results import BenchResult, QueryRecord, Verdict
from tokenmill.bench.settings import BenchSettings
from tokenmill.cli import main
from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.replay import load_trace
from tokenmill.sim.serving import SimRequest

PROMPTS = [40, 72, 40, 130, 72]  # samples 0, 1, 0, 2, 1: queries 2 and 4 repeat a sample
SAMPLES = [0, 1, 0, 2, 1]


def _run(tmp_path, records: list[QueryRecord], **counters):
    """``counters``: Metrics fields read from the server's counters (engine_steps, engine_busy_s)."""
    settings = BenchSettings(scenario="server", target_qps=2.0, ttft_ms=1000, tpot_ms=100)
    metrics = compute_metrics(records, settings)
    for name, value in counters.items():
        setattr(metrics, name, value)
    result = BenchResult(target={"label": "tokenmill", "kind": "openai", "model": "m"}, scenario="server",
                         mode="performance", settings=settings.describe(len(records)),
                         workload={"name": "synthetic"}, verdict=Verdict("VALID"),
                         metrics=metrics, queries=records, log_dir=str(tmp_path),
                         created="2026-11-27T00:00:00Z")
    return result.save(tmp_path)


def _records() -> list[QueryRecord]:
    """Five good queries issued at 10 + 0.5 i s (the server counted one token fewer on
    query 1 than the client did), and one failed query."""
    out = [QueryRecord(sample_index=s, issued_s=10 + 0.5 * i, first_token_s=10.2 + 0.5 * i,
                       finished_s=11 + 0.5 * i, output_tokens=17, usage_output_tokens=16 if i == 1 else 17,
                       prompt_tokens=p) for i, (s, p) in enumerate(zip(SAMPLES, PROMPTS))]
    out.append(QueryRecord(sample_index=3, issued_s=10.1, finished_s=10.3, error="HTTP 500: boom"))
    return out


def test_the_trace_holds_the_queries_as_they_arrived(tmp_path):
    path = _run(tmp_path, _records())
    trace = load_trace(path)
    assert [r.arrival_s for r in trace.requests] == pytest.approx([0, 0.5, 1.0, 1.5, 2.0])
    assert [r.prompt_tokens for r in trace.requests] == PROMPTS
    assert [r.output_tokens for r in trace.requests] == [17, 16, 17, 17, 17]  # the server's own count
    assert [r.cached_tokens for r in trace.requests] == [0, 0, 40, 0, 72]  # repeated samples: prompt cached
    assert (trace.skipped, trace.repeats) == (1, 2)
    assert trace.cached_prompt_share == pytest.approx(112 / sum(PROMPTS))
    no_cache = load_trace(tmp_path, prefix_caching=False)  # the run folder works too
    assert all(r.cached_tokens == 0 for r in no_cache.requests)


def test_a_run_without_a_successful_query_is_refused(tmp_path):
    path = _run(tmp_path, [QueryRecord(sample_index=0, issued_s=0.0, finished_s=0.1, error="boom")])
    with pytest.raises(ValueError, match="--replay"):
        load_trace(path)


def test_replay_simulates_exactly_the_trace_requests(tmp_path):
    """predict with the trace's requests equals predict with the same requests given directly,
    and the prefix hits of repeated samples make their first token come sooner."""
    trace = load_trace(_run(tmp_path, _records()))
    arch, hw = get_model("smollm2-135m"), get_hardware("h100")
    deployment = Deployment(1, Parallel(), "bf16", max_num_seqs=8, max_num_batched_tokens=256)
    workload = Workload("server", 1, 1, requests=trace.requests)
    replayed = predict(arch, hw, deployment, workload)
    same = predict(arch, hw, deployment, Workload("server", 1, 1, requests=tuple(
        SimRequest(r.arrival_s, r.prompt_tokens, r.output_tokens, r.cached_tokens) for r in trace.requests)))
    assert replayed == same
    assert replayed["tokens_per_s"] > 0 and replayed["qps"] is None
    cold = predict(arch, hw, deployment, Workload("server", 1, 1, requests=load_trace(
        tmp_path, prefix_caching=False).requests))
    assert replayed["ttft_ms"]["p50"] <= cold["ttft_ms"]["p50"]


def test_the_command_prints_measured_against_simulated(tmp_path, capsys):
    path = _run(tmp_path, _records())
    assert main(["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16",
                 "--replay", str(path), "--max-num-seqs", "8", "--max-num-batched-tokens", "256"]) == 0
    out = capsys.readouterr().out
    assert "5 queries, 1 failed left out; 2 repeated samples" in out
    assert "| TTFT p99 |" in out and "| output tokens/s |" in out
    assert main(["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16", "--json",
                 "--replay", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["queries"] == 5 and doc["measured"]["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert doc["measured"]["tokens_per_s"] == pytest.approx(84 / 3.0)  # the server's 84 tokens over 10.0-13.0 s
    assert doc["simulated"]["config"]["num_requests"] == 5
    assert main(["sim", "--replay", str(path), "--search"]) == 2
    assert "--replay and --search" in capsys.readouterr().err


def test_the_servers_step_counters_are_set_against_the_simulated_steps(tmp_path, capsys):
    """Where the run read the server's step counters, the replay prints its steps, busy seconds and
    mean step beside the simulated ones; where it did not, no such rows."""
    args = ["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16",
            "--max-num-seqs", "8", "--max-num-batched-tokens", "256"]
    assert main([*args, "--replay", str(_run(tmp_path, _records()))]) == 0
    assert "engine steps" not in capsys.readouterr().out
    path = _run(tmp_path, _records(), engine_steps=90, engine_busy_s=0.6)
    assert main([*args, "--json", "--replay", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    simulated = doc["simulated"]
    # Five queries 0.5 s apart, each done in milliseconds on an H100: alone in their steps, one
    # step per output token (a prefill that samples the first, then decodes), 84 in all, 5 with a prompt.
    assert simulated["engine_steps"] == 84 and 0 < simulated["engine_busy_s"] < 0.5
    assert simulated["engine_prefill_steps"] == 5
    assert 0 < simulated["engine_prefill_busy_s"] < simulated["engine_busy_s"]
    assert (doc["measured"]["engine_steps"], doc["measured"]["engine_busy_s"]) == (90, 0.6)
    assert main([*args, "--replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| engine steps | 90 | 84 | 0.93 |" in out and "| engine busy | 0.6 s |" in out
    assert "| mean step | 6.7 ms |" in out and "with a prompt" not in out  # no split read: totals only
    assert "on a core" not in out  # no CPU counter read: no such row
    path = _run(tmp_path, _records(), engine_steps=90, engine_busy_s=0.6, engine_prefill_steps=5,
                engine_prefill_busy_s=0.2)
    assert main([*args, "--replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| engine steps with a prompt | 5 | 5 | 1.00 |" in out and "| mean step with a prompt | 40.0 ms |" in out
    assert "| engine steps decode-only | 85 | 79 | 0.93 |" in out and "| mean step decode-only | 4.7 ms |" in out
    # The steps' time on a core, where the run read it: the simulated busy seconds set against it.
    path = _run(tmp_path, _records(), engine_steps=90, engine_busy_s=0.6, engine_busy_cpu_s=0.48)
    assert main([*args, "--json", "--replay", str(path)]) == 0
    busy = json.loads(capsys.readouterr().out)["simulated"]["engine_busy_s"]
    assert main([*args, "--replay", str(path)]) == 0
    row = f"| engine busy on a core (80% of it) | 0.5 s | {busy:,.1f} s | {busy / 0.48:.2f} |"
    assert row in capsys.readouterr().out
