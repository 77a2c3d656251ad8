"""benchmarks/sim_uplift_live.py: a `bench --uplift` folder's runs set beside the simulator's variants."""

from __future__ import annotations

import json
from dataclasses import replace

from _sim_profiles import BASE, FULL

from benchmarks.sim_uplift_live import main, workload_of
from tokenmill.bench.metrics import compute_metrics
from tokenmill.bench.results import BenchResult, QueryRecord, Verdict
from tokenmill.bench.settings import BenchSettings

LABELS = ("baseline", "+prefix-caching", "+chunked-prefill", "+kernels", "+native-step", "full")


def _folder(tmp_path):
    """A bench --uplift folder: six Offline runs of 16 shared-prefix queries, the later ones faster."""
    settings = BenchSettings(scenario="offline", ttft_ms=1000, tpot_ms=100)
    params = {"workload": "shared-prefix", "num_prefixes": 4, "prefix_len": 256}
    summary = {}
    for k, label in enumerate(LABELS):
        records = [QueryRecord(sample_index=s, issued_s=0.0, first_token_s=1.0, finished_s=2.0 + s / (k + 1),
                               output_tokens=16, prompt_tokens=290 + 2 * (s % 2)) for s in range(16)]
        result = BenchResult(target={"label": label, "kind": "engine", "model": "m"}, scenario="offline",
                             mode="performance", settings=settings.describe(16),
                             workload={"name": "shared-prefix", "params": params}, verdict=Verdict("VALID"),
                             metrics=compute_metrics(records, settings), queries=records, log_dir="",
                             created="2026-12-01T00:00:00Z")
        result.metrics.prefix_cache_hit_rate = 0.6 if "prefix" in label or label == "full" else None
        run = tmp_path / label.lstrip("+")
        run.mkdir(parents=True)
        result.save(run)
        summary[label] = {"tokens_per_s": result.metrics.tokens_per_s}
    (tmp_path / "uplift.json").write_text(json.dumps(summary))
    return tmp_path


def test_each_live_run_is_set_beside_its_simulated_variant(tmp_path, monkeypatch, capsys):
    import tokenmill.sim.calibrate as calibrate

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    for hw in (FULL, BASE, replace(BASE, name="eager-kernels")):
        (tmp_path / f"{hw.name}.json").write_text(json.dumps(hw.to_dict()))
    folder = _folder(tmp_path / "uplift-offline")
    out = tmp_path / "compared.json"
    assert main([str(folder), "--full", FULL.name, "--kernels", "eager-kernels", "--baseline", BASE.name,
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert all(f"| {label} |" in text for label in LABELS)
    compared = json.loads(out.read_text())
    assert list(compared) == list(LABELS)
    sim = {label: c["sim"] for label, c in compared.items()}
    # The baseline and its techniques run on the baseline engine's profile, the native step and the
    # full stack on the full one, +kernels on the eager kernels' (here a copy of the baseline's).
    assert [sim[label]["config"]["hardware"] for label in LABELS] == [BASE.name, BASE.name, BASE.name,
                                                                      "eager-kernels", FULL.name, FULL.name]
    assert sim["+kernels"]["tokens_per_s"] == sim["baseline"]["tokens_per_s"]
    # Whole prompts under a budget raised to the context length: all 16 start in one step and miss their
    # prefixes; chunked under 1,024 tokens, three start a step and the later ones hit.
    assert sim["+prefix-caching"]["prefix_cache_hit_rate"] == 0 and sim["full"]["prefix_cache_hit_rate"] > 0.5
    assert sim["full"]["config"]["chunked_prefill"] and not sim["baseline"]["config"]["chunked_prefill"]


def test_the_workload_is_the_runs_own(tmp_path):
    run = json.loads((_folder(tmp_path) / "full" / "results.json").read_text())
    w = workload_of(run, "offline")
    assert (w.isl, w.osl, w.num_requests, w.shared_prefix) == (291, 16, 16, (4, 256))
