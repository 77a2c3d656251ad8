"""LoadGen runs against HTTP endpoints: the scripted fake (exact timings and
faults) and a real ``tokenmill serve``; plus the ``tokenmill bench`` command
line end to end (errors, comparison, sweeps)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from fake_openai_server import FakeOpenAIServer

from tokenmill.bench.openai_backend import OpenAIBackend
from tokenmill.bench.runner import Target, run_benchmark
from tokenmill.bench.server_metrics import parse_counters, rates_between
from tokenmill.bench.settings import BenchSettings
from tokenmill.bench.workload import Sample, Workload

TTFT_S, TPOT_S, TOKENS = 0.15, 0.02, 5


@pytest.fixture(scope="module")
def tokenizer():
    from tokenmill.model.embedded import embedded_gguf_path
    from tokenmill.model.tokenizer import load_tokenizer

    return load_tokenizer(embedded_gguf_path())


def make_workload(tokenizer, n: int, max_tokens: int) -> Workload:
    samples = []
    for i in range(n):
        text = f"Question {i}: what is {i} plus {i}?"
        samples.append(Sample(i, text, tuple(tokenizer.encode(text)), max_tokens))
    return Workload("http-test", samples, f"{n} short questions")


def http_target(url: str, tokenizer, api: str = "chat") -> Target:
    return Target(url, "openai", lambda: OpenAIBackend(url, api=api, tokenizer=tokenizer), url=url, api=api)


def test_fake_endpoint_timings_and_counts_are_exact(tokenizer, tmp_path):
    with FakeOpenAIServer(ttft_s=TTFT_S, tpot_s=TPOT_S, reported_completion_tokens=TOKENS + 1) as fake:
        settings = BenchSettings(scenario="server", target_qps=10, min_duration_s=1.0, min_query_count=12)
        result = run_benchmark(http_target(fake.url, tokenizer), make_workload(tokenizer, 6, TOKENS), settings,
                               tmp_path, progress=False, plots=False)
    m = result.metrics
    assert m.num_errors == 0 and m.num_queries >= 12
    assert all(q.output_tokens == TOKENS for q in result.queries)
    assert m.output_tokens == TOKENS * m.num_queries
    # The fake reports one token too many: every query is a visible mismatch.
    assert m.usage_mismatches == m.num_queries
    assert m.usage_output_tokens == (TOKENS + 1) * m.num_queries
    # Client-side figures: the scripted delays plus loopback/HTTP overhead. TPOT is taken over the
    # server's count (QueryRecord.generated_tokens): the TOKENS - 1 gaps of TPOT_S over its TOKENS.
    assert TTFT_S * 1e3 <= m.ttft_ms.p50 <= TTFT_S * 1e3 + 40
    assert m.tpot_ms.p50 == pytest.approx(TPOT_S * 1e3 * (TOKENS - 1) / TOKENS, abs=3)
    # LoadGen's own figures (its clock, its FirstTokenComplete/QuerySamplesComplete events, the
    # token count the driver reports) agree.
    lg_ttft_ms = float(m.loadgen["50.00 percentile first token latency (ns)"]) / 1e6
    lg_tpot_ms = float(m.loadgen["50.00 percentile time to output token (ns)"]) / 1e6
    assert lg_ttft_ms == pytest.approx(m.ttft_ms.p50, abs=5)
    assert lg_tpot_ms == pytest.approx(m.tpot_ms.p50, abs=2)
    assert (tmp_path / "mlperf_log_summary.txt").exists()


def test_tightening_the_limits_flips_valid_to_invalid(tokenizer, tmp_path):
    workload = make_workload(tokenizer, 8, 3)
    # Enough queries for LoadGen's early stopping to pass at p99 (460 with none late).
    common = dict(scenario="server", target_qps=150.0, min_duration_s=1.0, min_query_count=600)
    with FakeOpenAIServer(ttft_s=0.03, tpot_s=0.005) as fake:
        target = http_target(fake.url, tokenizer)
        loose = run_benchmark(target, workload, BenchSettings(ttft_ms=1000, tpot_ms=200, **common),
                              tmp_path / "loose", progress=False, plots=False)
        tight = run_benchmark(target, workload, BenchSettings(ttft_ms=10, tpot_ms=200, **common),
                              tmp_path / "tight", progress=False, plots=False)
    assert loose.verdict.result == "VALID", loose.verdict.reasons
    assert tight.verdict.result == "INVALID"
    assert tight.verdict.checks["Performance constraints satisfied"] is False
    assert any("TTFT" in r for r in tight.verdict.reasons)
    assert tight.metrics.goodput_rps == 0.0 and loose.metrics.good_fraction > 0.95


def test_failed_queries_make_the_run_invalid_with_the_reason(tokenizer, tmp_path):
    with FakeOpenAIServer(ttft_s=0.01, fault="malformed_json", fault_after=2) as fake:
        settings = BenchSettings(scenario="offline", min_duration_s=0.1)
        result = run_benchmark(http_target(fake.url, tokenizer), make_workload(tokenizer, 4, 4), settings,
                               tmp_path, progress=False, plots=False)
    assert result.metrics.num_errors == 4
    assert result.verdict.result == "INVALID"
    assert "4 of 4 queries failed" in result.verdict.reasons[0]
    assert "malformed JSON" in result.verdict.reasons[0]


REAL_SERVER_RUNS = {
    "offline-chat": ("offline", "chat", {}),
    "offline-completions": ("offline", "completions", {}),
    "server": ("server", "chat", {"target_qps": 4.0}),
    "interactive": ("interactive", "chat", {"target_qps": 4.0}),
    "singlestream": ("singlestream", "completions", {}),
}


@pytest.mark.parametrize("run", list(REAL_SERVER_RUNS))
def test_real_tokenmill_server_each_scenario(run, server, tokenizer, tmp_path):
    scenario, api, extra = REAL_SERVER_RUNS[run]
    workload = make_workload(tokenizer, 4, 6)
    settings = BenchSettings(scenario=scenario, min_duration_s=0.2, min_query_count=4, **extra)
    result = run_benchmark(http_target(server.url, tokenizer, api), workload, settings, tmp_path,
                           progress=False, plots=False)
    m = result.metrics
    assert m.num_errors == 0, result.verdict.reasons
    assert m.num_queries >= 4 and result.target["model"] == "SmolLM2-135M-Instruct"
    assert (tmp_path / "mlperf_log_summary.txt").exists()
    # ignore_eos: the server made exactly 6 tokens for each (its usage says so).
    assert all(q.usage_output_tokens == 6 for q in result.queries)
    # The client's count re-encodes the streamed text, which can differ (an EOS
    # generated past ignore_eos has no text); each difference is reported.
    assert m.usage_mismatches == sum(q.output_tokens != 6 for q in result.queries)
    assert m.usage_output_tokens == 6 * m.num_queries
    assert all(0 < q.output_tokens <= 8 for q in result.queries)
    assert all(q.ttft_s is not None and q.ttft_s <= q.latency_s for q in result.queries)
    # The server's counters: every chat prompt starts with the template's system block, cached
    # once the first query's prefill is done (Offline's queries, all issued at once, can share
    # one prefill step and so miss); a raw completion prompt here is shorter than one KV block,
    # so nothing hits.
    assert m.prefix_cache_hit_rate is not None
    # The server's step counters: every query's 6 tokens took a step each (batched or not), and
    # the engine stepped only while queries were in flight.
    assert m.engine_steps >= 6 and 0 < m.engine_busy_s <= m.duration_s
    assert 1 <= m.engine_prefill_steps <= min(m.num_queries, m.engine_steps - 5)  # 5+ decode-only steps after
    assert 0 < m.engine_prefill_busy_s < m.engine_busy_s
    assert 0 < m.engine_busy_cpu_s <= m.engine_busy_s * 1.01 + 1e-3  # the stepping thread's CPU within the steps
    assert m.client_cpu_s > 0 and m.host_cpus == os.cpu_count()  # this process: LoadGen and the HTTP client
    if api == "chat":
        assert (0 <= m.prefix_cache_hit_rate if scenario == "offline" else 0 < m.prefix_cache_hit_rate) \
            and m.prefix_cache_hit_rate <= 1
    else:
        assert m.prefix_cache_hit_rate == 0.0
    if scenario != "singlestream":
        key = "Tokens per second" if scenario == "offline" else "Completed tokens per second"
        # LoadGen counts the tokens each query reported to it: the server's (QueryRecord.generated_tokens).
        assert float(m.loadgen[key]) == pytest.approx(m.usage_output_tokens / m.duration_s, rel=0.1)


def test_server_counters_of_tokenmill_and_vllm_and_the_rates_between():
    tokenmill = ("# HELP tokenmill:prefix_cache_hits_total x\n# TYPE tokenmill:prefix_cache_hits_total counter\n"
                 "tokenmill:prefix_cache_hits_total 30.0\ntokenmill:prefix_cache_queries_total 120.0\n")
    vllm = ('vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0\n'
            'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 50.0\n'
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 40.0\n'
            'vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9\n')
    assert parse_counters(tokenmill) == {"prefix_hits": 30.0, "prefix_queries": 120.0}
    assert parse_counters(vllm) == {"prefix_hits": 40.0, "prefix_queries": 150.0}
    before, after = {"prefix_hits": 30.0, "prefix_queries": 120.0}, {"prefix_hits": 90.0, "prefix_queries": 220.0}
    assert rates_between(before, after)["prefix_cache_hit_rate"] == pytest.approx(0.6)
    assert rates_between(before, before)["prefix_cache_hit_rate"] is None  # nothing looked up in between
    assert rates_between(None, after)["prefix_cache_hit_rate"] is None
    assert rates_between({"prefix_hits": 3.0}, {"prefix_hits": 5.0})["prefix_cache_hit_rate"] is None
    spec = ("tokenmill:spec_decode_num_draft_tokens_total 40.0\ntokenmill:spec_decode_num_accepted_tokens_total 30.0\n"
            "tokenmill:spec_decode_num_verifications_total 10.0\n")
    vllm_spec = ('vllm:spec_decode_num_drafts_total{engine="0"} 10.0\n'
                 'vllm:spec_decode_num_draft_tokens_total{engine="0"} 40.0\n'
                 'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 30.0\n')
    zero = {"spec_drafts": 0.0, "spec_accepted": 0.0, "spec_verifications": 0.0}
    for text in (spec, vllm_spec):
        rates = rates_between(zero, parse_counters(text))
        assert rates["spec_acceptance_rate"] == pytest.approx(0.75)
        assert rates["spec_tokens_per_verification"] == pytest.approx(4.0)
    assert rates_between(zero, zero)["spec_acceptance_rate"] is None
    steps = ('tokenmill:engine_steps_total{kind="prefill"} 4.0\ntokenmill:engine_steps_total{kind="decode"} 16.0\n'
             'tokenmill:engine_step_seconds_total{kind="prefill"} 0.5\n'
             'tokenmill:engine_step_seconds_total{kind="decode"} 0.25\n'
             'tokenmill:engine_step_cpu_seconds_total{kind="prefill"} 0.25\n'
             'tokenmill:engine_step_cpu_seconds_total{kind="decode"} 0.125\n')
    assert parse_counters(steps) == {"engine_steps": 20.0, "engine_step_seconds": 0.75,  # the kinds summed
                                     "engine_prefill_steps": 4.0, "engine_prefill_step_seconds": 0.5,
                                     "engine_step_cpu_seconds": 0.375}
    rates = rates_between({"engine_steps": 5.0, "engine_step_seconds": 0.25, "engine_prefill_steps": 1.0,
                           "engine_prefill_step_seconds": 0.125, "engine_step_cpu_seconds": 0.125},
                          parse_counters(steps))
    assert (rates["engine_steps"], rates["engine_busy_s"]) == (15, pytest.approx(0.5))
    assert rates["engine_busy_cpu_s"] == pytest.approx(0.25)
    assert (rates["engine_prefill_steps"], rates["engine_prefill_busy_s"]) == (3, pytest.approx(0.375))
    assert rates_between(parse_counters(steps), parse_counters(steps))["engine_steps"] is None  # no step between
    assert rates["engine_workers"] is None  # one engine: no per-worker counters


def test_a_clusters_steps_are_read_per_worker():
    def cluster(prefill_s, prefill_cpu, decode_s, decode_cpu):
        return parse_counters(
            f'tokenmill:worker_engine_step_seconds_total{{worker="prefill-0",role="prefill"}} {prefill_s}\n'
            f'tokenmill:worker_engine_step_cpu_seconds_total{{worker="prefill-0",role="prefill"}} {prefill_cpu}\n'
            f'tokenmill:worker_engine_step_seconds_total{{worker="decode-0",role="decode"}} {decode_s}\n'
            f'tokenmill:worker_engine_step_cpu_seconds_total{{worker="decode-0",role="decode"}} {decode_cpu}\n')
    before, after = cluster(10.0, 8.0, 50.0, 49.0), cluster(30.0, 24.0, 90.0, 85.0)
    assert rates_between(before, after)["engine_workers"] == {
        "prefill-0": {"role": "prefill", "busy_s": 20.0, "busy_cpu_s": 16.0},
        "decode-0": {"role": "decode", "busy_s": 40.0, "busy_cpu_s": 36.0}}
    restarted = cluster(30.0, 24.0, 4.0, 3.0)  # the decode worker restarted: its counters began again
    assert rates_between(before, restarted)["engine_workers"]["decode-0"] == {"role": "decode", "busy_s": 4.0,
                                                                              "busy_cpu_s": 3.0}


def _bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenmill.cli", "bench", "--no-progress", *args],
                          capture_output=True, text=True, timeout=timeout)


SMALL = ("--num-samples", "6", "--input-len", "16", "--output-len", "4", "--length-dist", "fixed")


def test_cli_refused_connection_is_one_clear_line(tmp_path):
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _bench("--url", f"http://127.0.0.1:{port}", "--output-dir", str(tmp_path), *SMALL)
    assert proc.returncode == 1
    assert "cannot connect" in proc.stderr and "connection refused" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_cli_bad_flags_name_the_flag(tmp_path):
    proc = _bench("--scenario", "server", "--url", "http://127.0.0.1:1", *SMALL)
    assert proc.returncode == 2 and "target_qps" in proc.stderr and "Traceback" not in proc.stderr
    proc = _bench("--scenario", "offline", "--find-peak", "--url", "http://127.0.0.1:1", *SMALL)
    assert proc.returncode == 2 and "find_peak" in proc.stderr
    proc = _bench("--extra-body", "[1]", "--url", "http://127.0.0.1:1", *SMALL)
    assert proc.returncode == 2 and "--extra-body" in proc.stderr and "JSON object" in proc.stderr


def test_cli_compares_two_targets_and_saved_results(tmp_path):
    with FakeOpenAIServer(ttft_s=0.01, tpot_s=0.01) as fast, FakeOpenAIServer(ttft_s=0.01, tpot_s=0.04) as slow:
        proc = _bench("--url", fast.url, "--url", slow.url, "--scenario", "offline", "--min-duration", "0.1",
                      "--output-dir", str(tmp_path), *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "Comparison" in proc.stdout and "LoadGen verdict" in proc.stdout
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(runs) == 2 and all((p / "results.json").exists() and (p / "latency.png").exists() for p in runs)
    assert (tmp_path / "comparison.png").stat().st_size > 0
    rates = {p.name: json.loads((p / "results.json").read_text())["metrics"]["tokens_per_s"] for p in runs}
    assert len(set(rates.values())) == 2
    saved = _bench("--compare", *map(str, runs), "--output-dir", str(tmp_path / "cmp"))
    assert saved.returncode == 0, saved.stderr
    assert "x" in saved.stdout and "output tokens/s" in saved.stdout


def test_cli_qps_sweep_writes_curve(tmp_path):
    with FakeOpenAIServer(ttft_s=0.01, tpot_s=0.005) as fake:
        proc = _bench("--url", fake.url, "--scenario", "interactive", "--sweep-qps", "20,40",
                      "--min-duration", "0.3", "--min-query-count", "8", "--output-dir", str(tmp_path), *SMALL)
    assert proc.returncode == 0, proc.stderr
    folder = next(tmp_path.iterdir())
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["qps-20", "qps-40"]
    assert (folder / "sweep.png").stat().st_size > 0
    assert len(json.loads((folder / "sweep.json").read_text())["points"]) == 2
    assert "target QPS" in proc.stdout
