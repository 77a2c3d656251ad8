"""``tokenmill bench --uplift``: which engines it runs (bench/uplift.py), and
one end-to-end run through LoadGen with the table, uplift.json and the plot."""

from __future__ import annotations

import json

import pytest

from tokenmill.bench import uplift
from tokenmill.cli import main
from tokenmill.config import EngineConfig


def test_runs_switch_one_technique_on_at_a_time():
    full = EngineConfig()
    runs = uplift.uplift_configs(full, "cpu")
    assert [label for label, _ in runs] == ["baseline", "+prefix-caching", "+chunked-prefill", "+kernels",
                                            "+native-step", "full"]
    base = runs[0][1]
    assert not base.enable_prefix_caching and base.enforce_eager and base.speculative_config is None
    assert not base.enable_chunked_prefill and dict(runs)["+chunked-prefill"].enable_chunked_prefill
    assert (base.attention_backend, base.fused_ops, base.linear_backend) == ("torch", "torch", "torch")
    for label, config in runs[1:-1]:  # each differs from the baseline in its technique only
        changed = {k for k in uplift.BASELINE if getattr(config, k) != getattr(base, k)}
        assert changed and changed <= set(uplift.BASELINE), label
    assert runs[-1] == ("full", full)
    spec = EngineConfig(speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    assert [label for label, _ in uplift.uplift_configs(spec, "cuda")] == \
        ["baseline", "+prefix-caching", "+chunked-prefill", "+kernels", "+cuda-graphs", "+speculative", "full"]
    # A technique the flags switch off is not a run of its own.
    assert "+prefix-caching" not in dict(uplift.uplift_configs(EngineConfig(enable_prefix_caching=False), "cpu"))
    assert "+native-step" not in dict(uplift.uplift_configs(EngineConfig(enforce_eager=True), "cpu"))
    assert "+chunked-prefill" not in dict(uplift.uplift_configs(EngineConfig(enable_chunked_prefill=False), "cpu"))
    with pytest.raises(ValueError, match="uplift"):
        uplift.uplift_configs(EngineConfig(deterministic=True), "cpu")


def test_end_to_end_table_summary_and_plot(tmp_path, monkeypatch, capsys):
    # --min-duration 0.01: a fast CPU (AMX Xeon, native step) served these 4 x 3 tokens in under
    # the 0.1 s this once asked for, and LoadGen judged the run INVALID for its brevity.
    real = uplift.uplift_configs
    monkeypatch.setattr(uplift, "uplift_configs", lambda config, device: [real(config, device)[0],
                                                                          real(config, device)[-1]])
    assert main(["bench", "--uplift", "--scenario", "offline", "--num-samples", "4", "--input-len", "16",
                 "--output-len", "3", "--min-duration", "0.01", "--min-query-count", "4", "--num-kv-blocks", "64",
                 "--max-model-len", "256", "--no-progress", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "full vs baseline" in out and "LoadGen verdict" in out
    summary = json.loads((tmp_path / "uplift-offline" / "uplift.json").read_text())
    assert list(summary) == ["baseline", "full"] and summary["baseline"]["vs_baseline"] == 1.0
    assert all(v["tokens_per_s"] > 0 and v["verdict"] == "VALID" for v in summary.values())
    assert (tmp_path / "uplift-offline" / "uplift.png").is_file()
    assert main(["bench", "--uplift", "--url", "http://127.0.0.1:1", "--output-dir", str(tmp_path)]) == 2
    assert "drop --url" in capsys.readouterr().err
