"""`tokenmill sim validate`: published rows simulated as the deployments they name (sim/validate.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tokenmill.sim.cost import Parallel
from tokenmill.sim.published import RESULTS, PublishedResult
from tokenmill.sim.validate import (
    TOLERANCE,
    Checked,
    check_row,
    parse_parallel,
    parse_pools,
    parse_pp,
    row_workload,
    table,
)


@pytest.mark.parametrize("text, parallel", [
    ("TP8", Parallel(tp=8)),
    ("TP2 x4", Parallel(tp=2)),
    ("TP1 x8", Parallel(tp=1)),
    ("DEP4", Parallel(tp=1, ep=4, attention_dp=True)),
    ("TP8 EP8 attention-DP", Parallel(tp=1, ep=8, attention_dp=True)),
    ("TP8 EP8 attention-DP per 8-GPU instance", Parallel(tp=1, ep=8, attention_dp=True)),
    ("TP2 PP2", Parallel(tp=2)),
])
def test_parse_parallel(text, parallel):
    assert parse_parallel(text) == parallel


@pytest.mark.parametrize("text, stages", [("TP2 PP2", 2), ("TP4", 1), ("TP1 x8", 1), (None, 1)])
def test_parse_pp(text, stages):
    assert parse_pp(text) == stages


def test_parse_parallel_refuses_a_row_without_a_layout():
    with pytest.raises(ValueError, match="no layout"):
        parse_parallel(None)


def _row(**kw) -> PublishedResult:
    base = dict(model="llama3.1-8b", hardware="h100", num_gpus=1, precision="fp8", scenario="throughput",
                isl=2048, osl=128, dataset=None, tokens_per_s_per_gpu=3450.0, parallel="TP1", source="test")
    return PublishedResult(**{**base, **kw})


def test_check_row_simulates_the_best_batch():
    checked = check_row(_row(), num_requests=64, seq_choices=(16, 64))
    assert checked.simulated > 0 and checked.max_num_seqs in (16, 64)
    assert checked.error == pytest.approx(checked.simulated / 3450.0 - 1)
    # More GPUs of the same replica layout: per-GPU throughput is the same (even load split).
    wider = check_row(_row(num_gpus=4), num_requests=64, seq_choices=(16, 64))
    assert wider.simulated == pytest.approx(checked.simulated, rel=1e-6)


def test_a_stated_concurrency_is_simulated_as_stated():
    # Two replicas of TP1 at a stated concurrency of 48: 24 each, whatever the search's choices.
    stated = check_row(_row(num_gpus=2, num_requests=96, max_num_seqs=48, max_num_batched_tokens=512),
                       num_requests=64, seq_choices=(16, 64))
    assert stated.max_num_seqs == 24 and stated.simulated > 0
    searched = check_row(_row(num_gpus=2, num_requests=96), num_requests=64, seq_choices=(16, 64))
    assert searched.max_num_seqs in (16, 48) and searched.simulated != stated.simulated
    guide = [r for r in RESULTS if r.max_num_seqs]
    assert {r.max_num_seqs for r in guide} == {3072, 7168, 1024}
    assert all(r.num_requests and r.max_num_batched_tokens for r in guide)


@pytest.mark.parametrize("kw, reason", [
    (dict(model="mixtral-8x7b"), "not in the simulator"),
    (dict(isl=None, osl=None, dataset="gpt-oss-120b", scenario="offline"), "input lengths not published"),
    (dict(isl=None, osl=None), "no input and output lengths"),
    (dict(parallel="TP2 PP2", num_gpus=6), "does not divide"),
    (dict(parallel="TP4", num_gpus=6), "does not divide"),
])
def test_check_row_skips_with_a_reason(kw, reason):
    checked = check_row(_row(**kw), num_requests=16, seq_choices=(16,))
    assert checked.simulated is None and reason in checked.skipped


def _mlperf_row(**kw) -> PublishedResult:
    return _row(**{**dict(isl=None, osl=None, dataset="llama3.1-8b", scenario="offline", tokens_per_s_per_gpu=8000.0),
                   **kw})


def test_mlperf_rows_draw_the_dataset_lengths():
    w = row_workload(_mlperf_row(scenario="server"), num_requests=100)
    assert (w.scenario, w.dataset, w.preset) == ("server", "llama3.1-8b", "llama3.1-8b")
    assert w.isl == pytest.approx(871, abs=2)  # the dataset's mean prompt (CNN-DailyMail, 13,368 samples)
    assert w.osl == 129  # the published v6.0 Offline log's tokens per sample
    isl, osl = w.lengths()
    rng = np.random.default_rng(0)
    prompts = [isl(rng) for _ in range(2000)]
    assert 79 <= min(prompts) and max(prompts) <= 2540 and len(set(prompts)) > 100
    assert np.mean(prompts) == pytest.approx(871, rel=0.03) and osl(rng) == 129


def test_mlperf_server_row_runs_the_peak_search_on_a_searched_layout():
    # Runs of 20 s (MLPerf's are 600 s: the same code, longer).
    offline = check_row(_mlperf_row(parallel=None), num_requests=48, seq_choices=(16, 32), duration_s=20.0)
    server = check_row(_mlperf_row(parallel=None, scenario="server"), num_requests=48, seq_choices=(16, 32),
                       duration_s=20.0)
    assert offline.parallel == Parallel(tp=1) and "(searched)" in table([offline])
    assert server.parallel == Parallel(tp=1) and server.max_num_seqs in (16, 32)
    # The same deployment: close figures (Server meets latency limits, but LoadGen does not count
    # its drain, which Offline's count includes: either can be the higher in a short run).
    assert 0.5 < server.simulated / offline.simulated < 1.5


def test_table_counts_rows_within_tolerance():
    row = _row()
    checked = [Checked(row, 3450.0 * (1 + TOLERANCE / 2), 64), Checked(row, 3450.0 * 2, 64),
               Checked(_row(model="mixtral-8x7b"), None, None, "model mixtral-8x7b not in the simulator")]
    text = table(checked)
    assert "1 of 2 rows within 25%" in text and "1 skipped" in text
    assert "2.00 **x**" in text and "1.12 |" in text


def test_published_rows_are_well_formed():
    assert len(RESULTS) >= 10
    kinds = {r.hardware for r in RESULTS}
    assert {"h100", "h200", "b200"} <= kinds
    for r in RESULTS:
        assert r.tokens_per_s_per_gpu > 0 and r.num_gpus >= 1 and r.source
        assert (r.isl is None) == (r.osl is None)


def test_mlperf_rows_run_as_many_queries_as_their_logs_say():
    from tokenmill.sim.mlperf_datasets import DATASETS

    samples = {d.benchmark: d.samples for d in DATASETS}
    mlperf = [r for r in RESULTS if r.dataset]
    assert len(mlperf) >= 50
    for r in mlperf:
        assert r.num_requests and f"{r.num_requests:,}" in r.note
        if r.scenario == "offline":  # mlperf.conf's minimum: the whole dataset once
            assert r.num_requests >= samples[r.dataset]
        if r.dataset in ("deepseek-r1", "llama3.1-8b", "llama3.1-405b", "llama2-70b"):
            assert row_workload(r, num_requests=100).min_queries == r.num_requests
    nvidia_v60 = next(r for r in mlperf if r.model == "deepseek-r1" and r.num_gpus == 72 and r.scenario == "offline"
                      and "v6.0" in r.source and "closed/NVIDIA/" in r.source and r.hardware == "gb300")
    assert nvidia_v60.num_requests == 200 * 4388


def test_bench_presets_carry_the_published_mlperf_limits():
    # The bench presets (and so the simulator's default limits per model) against the limits
    # read from MLPerf's mlperf.conf in sim/published.py: one table must not drift from the other.
    from tokenmill.bench.presets import PRESETS
    from tokenmill.sim.mlperf_datasets import MLPERF_LATENCY_LIMITS

    for model, limits in MLPERF_LATENCY_LIMITS.items():
        preset = PRESETS[model]
        assert (preset.server.ttft_ms, preset.server.tpot_ms) == limits["server"], model
        assert (preset.interactive.ttft_ms, preset.interactive.tpot_ms) == limits["interactive"], model


def test_validate_in_processes_keeps_the_rows_order():
    from tokenmill.sim.validate import validate

    # The last row is the first's deployment with another published figure (v5.1 vs v6.0): simulated once.
    rows = (_row(), _row(model="mixtral-8x7b"), _row(isl=128, osl=128), _row(tokens_per_s_per_gpu=1725.0))
    serial = validate(16, rows)
    seen = {}
    parallel = validate(16, rows, jobs=2, on_row=seen.__setitem__)
    assert [c.row for c in parallel] == list(rows)
    assert [c.simulated for c in parallel] == [c.simulated for c in serial]
    assert sorted(seen) == [0, 1, 2, 3] and [seen[i] for i in range(4)] == parallel  # each row as it finished
    assert serial[3].simulated == serial[0].simulated
    assert serial[3].error + 1 == pytest.approx(2 * (serial[0].error + 1))
    with pytest.raises(ValueError, match="--jobs"):
        validate(16, rows, jobs=0)


def test_disaggregated_rows_run_their_published_pools():
    gb300 = next(r for r in RESULTS if r.model == "llama3.1-405b" and r.hardware == "gb300" and r.scenario == "server"
                 and "v6.0" in r.source)
    d = parse_pools(gb300.parallel)  # the published dynamo_cluster config
    assert d.num_gpus == gb300.num_gpus == 72
    assert (d.parallel, d.max_num_seqs, d.max_num_batched_tokens) == (Parallel(tp=2), 64, 4096)
    assert (d.disagg.prefill_replicas, d.disagg.decode_replicas) == (26, 5)
    assert (d.decode_parallel, d.decode_max_num_seqs) == (Parallel(tp=4), 256)
    assert parse_pools("TP8 EP8 attention-DP") is None
    # A small one runs as named, no search: 2 prefill replicas of TP1 and one decode replica of TP2.
    row = _mlperf_row(scenario="server", num_gpus=4,
                      parallel="2 x TP1 prefill (batch 16, 2048 tokens) + 1 x TP2 decode (batch 32)")
    checked = check_row(row, num_requests=48, duration_s=20.0)
    assert checked.simulated > 0 and checked.max_num_seqs == 32 and checked.parallel == Parallel(tp=1)
    wrong = check_row(_mlperf_row(scenario="server", num_gpus=8, parallel=row.parallel), num_requests=48)
    assert wrong.simulated is None and "takes 4 GPUs, not 8" in wrong.skipped


def test_the_deepseek_interactive_row_runs_its_disaggregated_mtp_config():
    row = next(r for r in RESULTS if r.model == "deepseek-r1" and r.scenario == "interactive")
    d = parse_pools(row.parallel)  # 4 x DEP2 prefill + 4 x DEP16 decode, limits per attention-DP rank
    assert d.num_gpus == row.num_gpus == 72
    assert (d.parallel, d.max_num_seqs, d.max_num_batched_tokens) == (Parallel(tp=1, ep=2, attention_dp=True),
                                                                       2 * 128, 12288)
    assert (d.decode_parallel, d.decode_max_num_seqs) == (Parallel(tp=1, ep=16, attention_dp=True), 16 * 128)
    assert row.mtp == (3, 2.82) and not row.chunked_prefill
    # Its MTP reaches the simulated deployment: a small disaggregated row with and without it.
    small = _mlperf_row(scenario="offline", num_gpus=4,
                        parallel="2 x TP1 prefill (batch 16, 2048 tokens) + 1 x TP2 decode (batch 32)")
    plain = check_row(small, num_requests=48, duration_s=20.0)
    drafting = check_row(replace(small, mtp=(3, 4.0)), num_requests=48, duration_s=20.0)
    assert drafting.simulated > plain.simulated > 0  # every draft accepted: 4 tokens per decode step


def test_mlperf_rows_route_as_nvidias_harness_unless_their_config_says_otherwise():
    from tokenmill.sim.published import NVIDIA_HARNESS_ROUTER

    assert NVIDIA_HARNESS_ROUTER == "least-loaded"  # the fewest queries in flight
    mlperf = [r for r in RESULTS if r.dataset or "MLPerf" in r.source]
    by_kv = [r for r in mlperf if r.router == "kv"]
    assert len(by_kv) == 1 and "Nebius" in by_kv[0].source and "isl_load_balancing" in by_kv[0].note
    assert all(r.router == NVIDIA_HARNESS_ROUTER for r in mlperf if r not in by_kv)
    # The same harness leaves TensorRT-LLM's overlap scheduler on, but in the C++ executor that ran the v4.1 and
    # v5.1 Llama runs (sim/published_harness.py); trtllm-bench's Offline tables are not delayed.
    executor = [r for r in mlperf if r.model.startswith("llama") and ("v4.1" in r.source or "v5.1" in r.source)]
    assert len(executor) >= 10 and {r.model for r in executor} == {"llama2-70b", "llama3.1-8b", "llama3.1-405b"}
    assert not any(r.overlap_scheduler for r in executor)
    assert all(r.overlap_scheduler for r in mlperf if r not in executor)
    assert not any(r.overlap_scheduler for r in RESULTS if not r.dataset)


def test_rows_run_their_configs_step_budgets_where_read():
    v51 = [r for r in RESULTS if r.model == "llama3.1-405b" and "v5.1" in r.source]
    budgets = {(r.hardware, r.num_gpus, r.scenario): r.max_num_batched_tokens for r in v51}
    assert budgets == {("gb300", 72, "offline"): 1536, ("gb300", 72, "server"): 1536, ("b200", 8, "server"): 2048,
                       ("gb200", 72, "offline"): 1536, ("gb200", 72, "server"): 2048,
                       ("h200", 8, "offline"): 1536, ("h200", 8, "server"): 2560,
                       ("b200", 8, "offline"): 1536, ("h100", 16, "offline"): None}  # Cisco's config not read in
    # Dell's H200 NVL runs (v6.0): 1,536 tokens, the Interactive run 256.
    dell = [r for r in RESULTS if r.hardware == "h200-nvl"]
    assert {(r.model, r.scenario): r.max_num_batched_tokens for r in dell} == {
        ("llama3.1-8b", "offline"): 1536, ("llama3.1-8b", "server"): 1536, ("llama2-70b", "offline"): 1536,
        ("llama2-70b", "server"): 1536, ("llama2-70b", "interactive"): 256}
    # The v6.0 B300 nodes: 4,608 tokens (DeepSeek-R1, NVIDIA's and Nebius's Server runs both; Llama-2-70B),
    # Llama-3.1-405B 1,536 / 1,024; no Llama-3.1-8B config of NVIDIA's is published; GigaComputing's
    # Interactive runs 768 (Llama-2-70B) and 12,000 (Llama-3.1-8B).
    b300 = [r for r in RESULTS if r.hardware == "b300"]
    assert sorted((r.model, r.scenario, r.max_num_batched_tokens or 0) for r in b300) == [
        ("deepseek-r1", "offline", 4608), ("deepseek-r1", "server", 4608), ("deepseek-r1", "server", 4608),
        ("llama2-70b", "interactive", 768), ("llama2-70b", "offline", 4608), ("llama2-70b", "server", 4608),
        ("llama3.1-405b", "offline", 1536), ("llama3.1-405b", "server", 1024), ("llama3.1-8b", "interactive", 12000),
        ("llama3.1-8b", "offline", 0), ("llama3.1-8b", "server", 0)]
    # Google's v6.0 B200 Offline run, NVIDIA's v5.1 config: 1,536.
    google = [r for r in RESULTS if "closed/Google/" in r.source]
    assert [(r.model, r.scenario, r.max_num_batched_tokens) for r in google] == [("llama3.1-405b", "offline", 1536)]
    assert {r.max_num_batched_tokens for r in RESULTS if r.dataset and r not in v51 + dell + b300 + google} == {None}


def test_rows_fuse_the_all_reduces_where_their_configs_do():
    def key(r):
        return r.hardware, r.scenario, "v6.0" if "v6.0" in r.source else "v5.1" if "v5.1" in r.source else "?"

    fused = {key(r) for r in RESULTS if r.fused_allreduce}
    assert all(r.model == "llama3.1-405b" and r.dataset for r in RESULTS if r.fused_allreduce)
    assert ("gb300", "server", "v6.0") in fused and ("gb300", "server", "v5.1") in fused
    assert ("gb300", "offline", "v5.1") not in fused  # its config sets neither the env var nor the plugin
    assert not any(r.fused_allreduce for r in RESULTS if r.dataset is None)  # trtllm-bench's defaults


def test_rows_size_their_kv_cache_at_their_configs_free_memory_fraction():
    import re

    from tokenmill.sim.published_kv import MLPERF_KV_FREE_FRACTION, TRTLLM_BENCH_DEFAULT

    def key(r):
        org, system, bench, scenario = re.search(r"closed/([^/]+)/results/([^/]+)/([^/]+)/([^/]+)/", r.source).groups()
        return re.search(r"v\d\.\d", r.source).group(), org, system, bench, scenario

    listed = [r for r in RESULTS if r.dataset and r.model != "gpt-oss-120b"]
    assert {key(r) for r in listed} == set(MLPERF_KV_FREE_FRACTION)  # every row read, none stale
    assert all(r.kv_free_fraction == MLPERF_KV_FREE_FRACTION[key(r)] for r in listed)
    by_key = {key(r): r.kv_free_fraction for r in listed}
    rack = "GB300-NVL72_GB300-288GB_aarch64x72_TRT"
    assert by_key[("v6.0", "NVIDIA", rack, "deepseek-r1", "Offline")] == 0.95
    assert by_key[("v6.0", "NVIDIA", rack, "llama3.1-405b", "Offline")] == 0.80  # unset: the harness's default
    assert all(r.kv_free_fraction == TRTLLM_BENCH_DEFAULT == 0.9 for r in RESULTS if r.dataset is None)


def test_deepseek_v51_rows_run_at_the_v51_kernels():
    v51 = [r for r in RESULTS if "v5.1" in r.source and r.dataset]
    assert {r.kernels for r in v51 if r.model == "deepseek-r1"} == {"v5.1"}
    assert {r.kernels for r in v51 if r.model != "deepseek-r1"} == {"v6.0"}  # the dense rows show no such gap
    assert {r.kernels for r in RESULTS if "v5.1" not in r.source} == {"v6.0"}
