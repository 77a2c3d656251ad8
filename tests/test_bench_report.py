"""Reports, comparisons and plots of benchmark results, from BenchResults built
here out of query records with known times (no engine, no LoadGen)."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys

import pytest

from tokenmill.bench.compare import format_comparison, load_results
from tokenmill.bench.metrics import compute_metrics
from tokenmill.bench.plots import plot_comparison, plot_engine_steps, plot_latency_distributions, plot_sweep
from tokenmill.bench.report import format_result, format_sweep
from tokenmill.bench.results import BenchResult, QueryRecord, Verdict, load_result
from tokenmill.bench.settings import BenchSettings
from tokenmill.engine.step_log import LoggedStep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORKLOAD = {
    "name": "synthetic",
    "description": "random prompts, seed 0",
    "params": {"seed": 0, "input_len": 64},
    "stats": {"num_samples": 10, "input_tokens_mean": 64.0, "input_tokens_max": 64,
              "output_tokens_mean": 91.0, "output_tokens_max": 91},
}


def _records() -> list[QueryRecord]:
    """10 good queries: query i issued at 0.8*i s, TTFT (i+1)*100 ms, then 90 more
    tokens 20 ms apart (TPOT 20 ms); the last finishes at exactly 10 s. So:
    910 tokens in 10 s = 91.0 tokens/s, 1.00 req/s, TTFT p50/p90/p99 = 550/910/991 ms,
    end-to-end = TTFT + 1800 ms. One more query fails, and one's server-side token
    count disagrees with the client's."""
    records = []
    for i in range(10):
        issued = 0.8 * i
        first = issued + 0.1 * (i + 1)
        records.append(QueryRecord(sample_index=i, issued_s=issued, first_token_s=first,
                                   finished_s=first + 90 * 0.02, output_tokens=91,
                                   usage_output_tokens=90 if i == 3 else 91, prompt_tokens=64))
    records.append(QueryRecord(sample_index=10, issued_s=1.0, finished_s=1.1, error="HTTP 500: boom"))
    return records


def _result(label: str = "tokenmill", scenario: str = "server", target_qps: float | None = 2.0,
            price: float | None = 2.0, verdict: Verdict | None = None,
            records: list[QueryRecord] | None = None, workload: dict | None = None) -> BenchResult:
    # ttft 550 ms: queries 0-4 (100-500 ms) meet it, 5-9 do not -> goodput 5 / 10 s.
    settings = BenchSettings(scenario=scenario, target_qps=target_qps, ttft_ms=550, tpot_ms=50,
                             devices=2, price_per_hour=price)
    records = _records() if records is None else records
    figures = {"Completed tokens per second": "90.12", "99.00 percentile first token latency (ns)": "991000000"}
    return BenchResult(
        target={"label": label, "kind": "engine", "model": "SmolLM2-135M-Instruct"},
        scenario=scenario, mode="performance", settings=settings.describe(10),
        workload=dict(WORKLOAD) if workload is None else workload,
        verdict=verdict or Verdict("VALID", {"Performance constraints satisfied": True}),
        metrics=compute_metrics(records, settings, figures), queries=records,
        log_dir="/tmp/run", created="2025-01-01T00:00:00Z")


def _line(text: str, name: str) -> str:
    """The report line whose first words are `name`."""
    for line in text.splitlines():
        if line.strip().startswith(name):
            return line
    raise AssertionError(f"no line starting {name!r} in:\n{text}")


def _cells(line: str) -> list[str]:
    return [c for c in line.split("  ") if c.strip()]


# ---- format_result ------------------------------------------------------------------------


def test_report_shows_the_known_figures():
    text = format_result(_result())
    assert "91.0" in _line(text, "output tokens/s")
    # 9 queries' usage says 91 tokens, one says 90: the server's total sits beside the client's.
    assert _line(text, "output tokens  ").split(None, 2)[2] == "910 (server's usage: 909, 90.9 tok/s)"
    assert "45.5 (2 device(s))" in _line(text, "tokens/s per device")
    assert _line(text, "requests/s").split()[-1] == "1.00"
    # TTFT (i+1)*100 ms for i in 0..9: p50 550, p90 910, p99 991, mean 550, max 1000.
    assert [c.strip() for c in _cells(_line(text, "TTFT  "))] == ["TTFT", "550.0", "910.0", "991.0",
                                                                  "550.0", "1,000.0"]
    # TPOT over the server's count: query 3's 90 gaps of 20 ms over its 89 -> 20.22 ms, the rest 20.0.
    assert [c.strip() for c in _cells(_line(text, "TPOT  "))][1:] == ["20.0", "20.0", "20.2", "20.0", "20.2"]
    e2e = [c.strip() for c in _cells(_line(text, "end-to-end"))]
    assert e2e[1] == "2,350.0" and e2e[3] == "2,791.0"
    assert "0.50 req/s" in _line(text, "goodput") and "TTFT <= 550 ms and TPOT <= 50 ms" in text
    assert "45.5% of queries" in _line(text, "good fraction")  # 5 good of 11 issued
    # $2/h x 2 devices / (91 tok/s * 3600 s/h / 1e6) = $12.21 per million tokens.
    assert "$12.21 (at $2.00/h x 2 device(s))" in _line(text, "cost / M tokens")
    assert "1 (most common, x1: HTTP 500: boom)" in _line(text, "errors")
    assert _line(text, "usage mismatches").split()[2] == "1"
    assert "11 (10 ok, 1 failed)" in _line(text, "queries")


def test_report_shows_a_clusters_steps_by_worker():
    r = _result()
    m = r.metrics
    m.engine_steps, m.engine_busy_s, m.engine_busy_cpu_s = 100, 20.0, 18.0
    m.engine_workers = {"prefill-0": {"role": "prefill", "busy_s": 8.0, "busy_cpu_s": 6.0},
                        "decode-0": {"role": "decode", "busy_s": 12.0, "busy_cpu_s": 12.0}}
    line = _line(format_result(r), "engine steps")
    assert line.endswith("on a core 90% of that time; the target's counters, workers summed); by worker: "
                         "decode-0 (decode) 12.0 s, on a core 100%, prefill-0 (prefill) 8.0 s, on a core 75%")
    m.engine_workers = None
    assert _line(format_result(r), "engine steps").endswith("workers summed)")


def test_report_shows_settings_workload_and_loadgen_figures():
    text = format_result(_result())
    assert "tokenmill bench: server, performance" in text
    assert "SmolLM2-135M-Instruct" in _line(text, "model")
    assert _line(text, "target QPS").split()[-1] == "2.00"
    ttft_limit = _line(text, "TTFT limit")
    assert "550 ms" in ttft_limit and "preset smollm2-cpu" in ttft_limit and "judged by LoadGen" in ttft_limit
    assert "input_len=64, seed=0" in _line(text, "params")
    assert "mean 64.0, max 64" in _line(text, "input tokens")
    assert "90.12" in _line(text, "Completed tokens per second")
    assert "991000000" in _line(text, "99.00 percentile first token latency")
    assert "\x1b[" not in text  # no colour codes


def test_report_lists_every_invalid_reason():
    verdict = Verdict("INVALID",
                      {"Min duration satisfied": False, "Min queries satisfied": False,
                       "Performance constraints satisfied": True},
                      ["Min duration satisfied: NO",
                       "Recommendations: Increase expected QPS so the loadgen pre-generates a larger query."])
    text = format_result(_result(verdict=verdict))
    verdict_part = text[text.index("LoadGen verdict: INVALID"):]
    assert "- Min duration satisfied: NO" in verdict_part
    assert "- Min queries satisfied: NO" in verdict_part  # from checks, not in reasons
    assert "Increase expected QPS" in verdict_part
    assert "Performance constraints" not in verdict_part  # passed checks are not reasons
    assert verdict_part.count("Min duration satisfied") == 1


def test_report_without_price_or_settings():
    text = format_result(_result(price=None))
    assert _line(text, "cost / M tokens").endswith("n/a (no --price-per-hour)")
    bare = dataclasses.replace(_result(price=None), settings={}, workload={})
    text = format_result(bare)
    assert _line(text, "target QPS").split()[-1] == "-"
    assert _line(text, "TTFT limit").split()[-1] == "-"
    assert "LoadGen verdict: VALID" in text


def test_fractional_limits_are_printed_as_given():
    """A 2.8-ms TPOT limit once read "3 ms" in the good rule, the settings and the sweep's title."""
    result = _result()
    result = dataclasses.replace(result, settings={**result.settings, "tpot_ms": 2.8})
    assert "TTFT <= 550 ms and TPOT <= 2.8 ms" in format_result(result)
    assert _line(format_result(result), "TPOT limit").split()[2:4] == ["2.8", "ms"]
    assert "limits TTFT 550 ms, TPOT 2.8 ms (p99)" in format_sweep([result])


def test_report_reads_workload_stats_flattened_or_nested():
    flat = {k: v for k, v in WORKLOAD.items() if k != "stats"} | WORKLOAD["stats"]  # as runner.py saves it
    for workload in (WORKLOAD, flat):
        text = format_result(_result(workload=workload))
        assert _line(text, "samples").split()[-1] == "10"
        assert "mean 91.0, max 91" in _line(text, "output tokens asked")


def test_sweep_has_one_row_per_point():
    results = [_result(target_qps=q) for q in (1.0, 2.0, 4.0)]
    results[2] = dataclasses.replace(results[2], verdict=Verdict("INVALID", {}, ["TTFT p99 too high"]))
    text = format_sweep(results)
    header = _line(text, "target QPS")
    assert "tokens/s" in header and "TTFT p99 ms" in header and "verdict" in header
    rows = [_cells(_line(text, q)) for q in ("1.00", "2.00", "4.00")]
    assert [r[-1].strip() for r in rows] == ["VALID", "VALID", "INVALID"]
    assert [c.strip() for c in rows[0][1:6]] == ["91.0", "1.00", "991.0", "20.2", "0.50"]  # TPOT p99: query 3
    assert "limits TTFT 550 ms, TPOT 50 ms (p99)" in text
    with pytest.raises(ValueError, match="no results"):
        format_sweep([])


# ---- compare ------------------------------------------------------------------------------


def _with(result: BenchResult, **metrics) -> BenchResult:
    return dataclasses.replace(result, metrics=dataclasses.replace(result.metrics, **metrics))


def test_comparison_ratios_against_the_first_target():
    base = _with(_result("slow"), tokens_per_s=100.0, requests_per_s=2.0)
    fast = _with(_result("fast"), tokens_per_s=300.0, requests_per_s=3.0,
                 cost_per_million_tokens=base.metrics.cost_per_million_tokens / 4)
    text = format_comparison([base, fast])
    header = _line(text, "slow")
    assert "fast vs slow" in header
    assert [c.strip() for c in _cells(_line(text, "output tokens/s"))] == ["output tokens/s", "100.0", "300.0",
                                                                         "3.00x"]
    assert _line(text, "requests/s").split()[-1] == "1.50x"
    assert _line(text, "TTFT p99 (ms)").split()[-1] == "1.00x"
    assert _line(text, "cost / M tokens").split()[-1] == "0.25x"
    assert _line(text, "LoadGen verdict").split()[-2:] == ["VALID", "VALID"]
    assert "WARNING" not in text


def test_comparison_of_three_with_repeated_label_and_missing_figure():
    a, b, c = _result("x"), _with(_result("x"), tokens_per_s=0.0), _with(_result("y"), ttft_ms=None)
    a = _with(a, tokens_per_s=50.0)
    text = format_comparison([a, b, c])
    assert "x#2 vs x" in text and "y vs x" in text
    cells = [s.strip() for s in _cells(_line(text, "output tokens/s"))]
    assert cells[-2:] == ["0.00x", f"{c.metrics.tokens_per_s / 50:.2f}x"]
    ttft = [s.strip() for s in _cells(_line(text, "TTFT p99 (ms)"))]
    assert ttft[3] == "-" and ttft[-1] == "n/a"  # y has no TTFT: no ratio either


def test_comparison_warns_when_workload_or_scenario_differ():
    other_params = dict(WORKLOAD, params={"seed": 1, "input_len": 64})
    text = format_comparison([_result("a"), _result("b", workload=other_params)])
    warning = _line(text, "WARNING")
    assert "workload params" in warning and "seed: 0" in warning and "seed: 1" in warning
    text = format_comparison([_result("a"), _result("b", scenario="offline", target_qps=None,
                                                   workload=dict(WORKLOAD, name="sharegpt"))])
    warnings = [line for line in text.splitlines() if line.startswith("WARNING")]
    assert any("scenario (a=server, b=offline)" in w for w in warnings)
    assert any("workload (a=synthetic, b=sharegpt)" in w for w in warnings)


def test_comparison_needs_two_results():
    with pytest.raises(ValueError, match="2 or more"):
        format_comparison([_result()])


# ---- saved results ------------------------------------------------------------------------


def test_result_round_trips_through_save_and_load(tmp_path):
    result = _result(verdict=Verdict("INVALID", {"Min queries satisfied": False}, ["Min queries satisfied: NO"]))
    path = result.save(tmp_path)
    assert path.name == "results.json"
    assert load_result(path) == result
    assert load_result(tmp_path) == result  # a run folder works too
    assert load_results([tmp_path, path]) == [result, result]
    assert format_result(load_result(path)) == format_result(result)


@pytest.mark.parametrize("content", [b"not json {", b"\xff\xfe\x00garbage", b"[1, 2]", b"{}",
                                     json.dumps({"schema": 99}).encode()])
def test_load_result_rejects_a_bogus_file_by_name(tmp_path, content):
    bogus = tmp_path / "bogus.json"
    bogus.write_bytes(content)
    with pytest.raises(ValueError, match="bogus.json"):
        load_result(bogus)
    good = _result().save(tmp_path)
    with pytest.raises(ValueError, match="bogus.json"):
        load_results([good, bogus])


def test_load_result_names_a_missing_file(tmp_path):
    with pytest.raises(ValueError, match="nowhere"):
        load_result(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="no results"):
        load_results([])


# ---- plots --------------------------------------------------------------------------------


def _assert_png(path):
    assert path is not None and path.exists()
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000


def test_plots_write_png_files(tmp_path):
    result = _result()
    _assert_png(plot_latency_distributions(result, tmp_path / "latency.png"))
    sweep = [_with(_result(target_qps=q), tokens_per_s=91.0 * q) for q in (1.0, 2.0, 4.0)]
    sweep[2] = dataclasses.replace(sweep[2], verdict=Verdict("INVALID"))
    _assert_png(plot_sweep(sweep, tmp_path / "nested" / "sweep.png"))
    _assert_png(plot_comparison([result, _with(_result("other"), tpot_ms=None)], tmp_path / "compare.png"))
    steps = [LoggedStep(d, 64 if d % 5 == 0 else 0, 0.01 + 0.002 * d, 0.05 * i, 150 * d,
                        ((64, 0),) if d % 5 == 0 else ()) for i, d in enumerate([1, 2, 4, 5, 8, 10, 8, 3])]
    _assert_png(plot_engine_steps(steps, tmp_path / "engine_steps.png"))


def test_plots_skip_when_there_is_nothing_to_plot(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="tokenmill.bench.plots")
    failed = [QueryRecord(sample_index=0, issued_s=0.0, finished_s=0.5, error="refused")]
    empty = _result(records=failed)
    assert plot_latency_distributions(empty, tmp_path / "a.png") is None
    assert "no successful queries" in caplog.text
    # Offline through a backend that reports no first tokens: done, but no TTFT/TPOT.
    no_ttft = _result(scenario="offline", records=[QueryRecord(0, 0.0, None, 1.0, output_tokens=5)])
    assert plot_latency_distributions(no_ttft, tmp_path / "b.png") is None
    assert plot_sweep([], tmp_path / "c.png") is None
    assert plot_sweep([empty], tmp_path / "d.png") is None
    assert plot_sweep([no_ttft], tmp_path / "e.png") is None
    assert plot_comparison([], tmp_path / "f.png") is None
    assert plot_comparison([empty, empty], tmp_path / "g.png") is None
    assert plot_engine_steps([], tmp_path / "h.png") is None
    assert list(tmp_path.iterdir()) == []
    assert caplog.text.count("plot skipped") == 8


def test_plots_module_imports_without_matplotlib():
    code = "import sys, tokenmill.bench.plots, tokenmill.bench.compare; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_report_shows_speculative_decoding_when_drafts_were_verified():
    result = _result()
    assert "n/a (no drafts verified)" in _line(format_result(result), "speculative decoding")
    result.metrics.spec_acceptance_rate, result.metrics.spec_tokens_per_verification = 0.75, 4.0
    assert "75.0% of drafts accepted, 4.00 tokens per verification step" in \
        _line(format_result(result), "speculative decoding")


def test_report_lists_the_runs_gc_pauses_oldest_generation_first():
    r = _result()
    assert "none" in _line(format_result(r), "GC pauses")
    r.metrics.gc_pauses = {"gen0": {"collections": 120, "total_ms": 30.0, "max_ms": 0.4},
                           "gen2": {"collections": 2, "total_ms": 301.0, "max_ms": 151.25}}
    line = _line(format_result(r), "GC pauses")
    assert line.index("gen2: 2, longest 151.2 ms") < line.index("gen0: 120, longest 0.4 ms")
