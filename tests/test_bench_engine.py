"""LoadGen scenarios against the in-process engine: tiny real runs.

Each run checks LoadGen's bookkeeping against ours: every query LoadGen issued
completed, tokens are exactly what was asked for (ignore_eos), LoadGen's own
token rate agrees with the client's, and its logs are kept in the run folder.
"""

from __future__ import annotations

import json

import pytest

from tokenmill.bench.engine_backend import EngineBackend
from tokenmill.bench.loadgen_log import ACCURACY_FILE, DETAIL_FILE, SUMMARY_FILE
from tokenmill.bench.results import load_result
from tokenmill.bench.runner import Target, run_benchmark
from tokenmill.bench.settings import BenchSettings
from tokenmill.bench.workload import Sample, Workload
from tokenmill.engine.step_log import STEPS_FILE, load_steps

NUM_SAMPLES = 8
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def engine():
    from tokenmill.config import EngineConfig
    from tokenmill.engine.async_engine import AsyncEngine
    from tokenmill.engine.engine import LLMEngine

    eng = AsyncEngine(LLMEngine(EngineConfig(num_kv_blocks=128, max_model_len=256)))
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def workload(engine):
    tok = engine.tokenizer
    samples = []
    for i in range(NUM_SAMPLES):
        text = f"Fact number {i}: the capital of France is"
        samples.append(Sample(i, text, tuple(tok.encode(text)), MAX_TOKENS, reference="Paris"))
    return Workload("test", samples, "eight short facts")


@pytest.fixture(scope="module")
def target(engine):
    return Target("tokenmill-engine", "engine", lambda: EngineBackend(engine))


SCENARIOS = {
    "offline": dict(),
    "server": dict(target_qps=20.0),
    "interactive": dict(target_qps=20.0),
    "singlestream": dict(),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_runs_and_is_accounted(scenario, target, workload, tmp_path):
    settings = BenchSettings(scenario=scenario, min_duration_s=0.5, min_query_count=NUM_SAMPLES,
                             **SCENARIOS[scenario])
    result = run_benchmark(target, workload, settings, tmp_path, progress=False, plots=False)

    for name in (SUMMARY_FILE, DETAIL_FILE, "results.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    m = result.metrics
    assert m.num_errors == 0
    assert m.num_queries >= NUM_SAMPLES
    assert all(q.output_tokens == MAX_TOKENS for q in result.queries)
    assert m.output_tokens == MAX_TOKENS * m.num_queries
    assert all(q.ttft_s is not None and 0 < q.ttft_s <= q.latency_s for q in result.queries)
    # LoadGen counted the same tokens over (nearly) the same span as the client.
    key = "Tokens per second" if scenario == "offline" else "Completed tokens per second"
    if scenario != "singlestream":  # SingleStream reports per-query latencies, not a token rate
        assert float(m.loadgen[key]) == pytest.approx(m.tokens_per_s, rel=0.1)
    assert result.verdict.result in ("VALID", "INVALID")
    if scenario in ("server", "interactive"):
        # 8 queries are far below what early stopping needs: LoadGen must say so.
        assert not result.verdict.valid
        assert result.verdict.checks["Early stopping satisfied"] is False
        assert any("Early stopping" in r for r in result.verdict.reasons)
        expected = (1000, 50) if scenario == "interactive" else (2000, 200)
        assert (result.settings["ttft_ms"], result.settings["tpot_ms"]) == expected
    assert load_result(tmp_path).metrics.output_tokens == m.output_tokens


def test_run_records_the_processs_gc_pauses(target, workload, tmp_path):
    """Collections during the run are counted per generation, the long ones listed; a
    generation-0 threshold of 1 makes the run collect (a short run may not otherwise)."""
    import gc

    thresholds = gc.get_threshold()
    gc.set_threshold(1, *thresholds[1:])
    try:
        result = run_benchmark(target, workload, BenchSettings(scenario="offline", min_query_count=NUM_SAMPLES),
                               tmp_path, progress=False, plots=False)
    finally:
        gc.set_threshold(*thresholds)
    pauses = result.metrics.gc_pauses
    assert pauses["gen0"]["collections"] > 0
    assert 0 <= pauses["gen0"]["max_ms"] <= pauses["gen0"]["total_ms"]
    assert all(ms >= 1.0 and t >= -1.0 for _, t, ms in result.gc_stalls)
    saved = load_result(tmp_path)
    assert saved.metrics.gc_pauses == pauses and saved.gc_stalls == result.gc_stalls


def test_accuracy_mode_logs_every_sample_once(target, workload, tmp_path):
    settings = BenchSettings(scenario="offline", mode="accuracy")
    result = run_benchmark(target, workload, settings, tmp_path, progress=False, plots=False)

    assert result.verdict.result == "ACCURACY"
    assert result.accuracy["samples_logged"] == NUM_SAMPLES
    assert result.accuracy["samples_scored"] == NUM_SAMPLES
    assert 0.0 <= result.accuracy["rouge_l_f1"] <= 1.0
    logged = json.loads((tmp_path / ACCURACY_FILE).read_text())
    assert sorted(e["qsl_idx"] for e in logged) == list(range(NUM_SAMPLES))
    rows = [json.loads(line) for line in (tmp_path / "accuracy_outputs.jsonl").read_text().splitlines()]
    # The logged text is what the engine produced for that sample.
    by_index = {q.sample_index: q for q in result.queries}
    assert len(rows) == NUM_SAMPLES and all(by_index[r["sample_index"]] for r in rows)
    assert all(r["output"] for r in rows)


def test_concurrency_cap_serialises_queries(target, workload, tmp_path):
    settings = BenchSettings(scenario="offline", max_concurrency=1, min_duration_s=0.1)
    result = run_benchmark(target, workload, settings, tmp_path, progress=False, plots=False)

    spans = sorted((q.first_token_s, q.finished_s) for q in result.queries)
    # With one query in flight, no query's first token comes before the previous one finished.
    assert all(later[0] >= earlier[1] - 1e-3 for earlier, later in zip(spans, spans[1:]))


def test_the_run_keeps_the_engines_steps(engine, target, workload, tmp_path):
    """One query at a time: each step runs one sequence, so the kept log says exactly what ran: per
    query, its prompt (a chunk, or one position where all but its last token was cached), then one
    decode per further token over a KV length one longer each time."""
    settings = BenchSettings(scenario="offline", max_concurrency=1, min_query_count=NUM_SAMPLES)
    result = run_benchmark(target, workload, settings, tmp_path, progress=False, plots=True)
    assert result.engine_steps_file == STEPS_FILE and load_result(tmp_path).engine_steps_file == STEPS_FILE
    assert (tmp_path / "engine_steps.png").read_bytes().startswith(b"\x89PNG")
    steps = load_steps(tmp_path / STEPS_FILE)
    assert engine.step_log is None  # the run's own log, stopped with it
    (prompt,) = {len(s.prompt_token_ids) for s in workload.samples}  # the facts' prompts are equally long
    n = result.metrics.num_queries
    assert len(steps) == result.metrics.engine_steps == n * MAX_TOKENS
    assert all(s.decodes + len(s.chunks) == 1 for s in steps)
    decodes = [s for s in steps if s.decodes and s.decode_context_sum >= prompt]
    assert len(decodes) == n * (MAX_TOKENS - 1)
    assert sum(s.decode_context_sum for s in decodes) == n * sum(range(prompt, prompt + MAX_TOKENS - 1))
    prompts = [s for s in steps if s not in decodes]
    assert all(sum(c) == prompt for s in prompts for c in s.chunks)
    assert all(s.decode_context_sum == prompt - 1 for s in prompts if s.decodes)
    starts = [s.start for s in steps]
    assert starts == sorted(starts) and -1.0 < starts[0] and starts[-1] < result.metrics.duration_s + 1.0
    assert 0 < sum(s.seconds for s in steps) <= result.metrics.duration_s + 1.0


def test_a_log_kept_by_the_caller_is_read_not_replaced(engine, target, workload, tmp_path):
    kept = engine.step_log = []
    try:
        run_benchmark(target, workload, BenchSettings(scenario="offline", min_query_count=NUM_SAMPLES), tmp_path,
                      progress=False, plots=False)
        assert engine.step_log is kept and len(kept) == len(load_steps(tmp_path / STEPS_FILE)) > 0
    finally:
        engine.step_log = None
