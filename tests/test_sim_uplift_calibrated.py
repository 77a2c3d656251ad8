"""`tokenmill sim --uplift` on calibrated profiles: the baseline engine's kernels as a profile of their own
(`tokenmill sim calibrate --profile NAME` with the engine's kernel flags, `--baseline-kernels NAME`) and
chunked prefill against whole prompts (`--baseline-whole-prompts`), as `tokenmill bench --uplift` compares them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from _sim_cli import sim_args
from _sim_profiles import BASE, FULL

from tokenmill.cli import main
from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.cost import Parallel
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.uplift import Baseline, techniques, uplift

WORKLOAD = ("--model", "smollm2-135m", "--scenario", "offline", "--isl", "384", "--osl", "16", "--num-requests",
            "24", "--max-num-seqs", "8", "--max-num-batched-tokens", "256")


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """FULL and BASE written where calibrate writes profiles."""
    import tokenmill.sim.calibrate as calibrate

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    for hw in (FULL, BASE):
        (tmp_path / f"{hw.name}.json").write_text(json.dumps(hw.to_dict()))
    return tmp_path


def test_calibrate_names_a_profile_of_the_engine_with_other_kernels(tmp_path, monkeypatch, capsys):
    import tokenmill.sim.calibrate as calibrate

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    monkeypatch.setattr(calibrate, "DECODE_BATCHES", (1, 3))
    engine = ["--attention-backend", "torch", "--fused-ops", "torch", "--linear-backend", "torch", "--enforce-eager"]
    argv = ["sim", "calibrate", "--model", "dummy:tiny", "--device", "cpu", "--dtype", "float32"]
    assert main([*argv, "--profile", "torch-eager", *engine]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torch-eager (") and f"wrote {tmp_path / 'torch-eager.json'}" in out
    profile = json.loads((tmp_path / "torch-eager.json").read_text())
    assert profile["name"] == "torch-eager" and not (tmp_path / "this-machine.json").exists()
    assert "attention torch, fused ops torch, linears torch, python decoder loop" in profile["sources"][0]
    assert main(["sim", "--hardware", "torch-eager", "--model", "dummy:tiny", "--isl", "64", "--osl", "8",
                 "--num-requests", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["hardware"] == "torch-eager"
    # A built-in name or a path is no profile name; the engine's flags keep their own checks.
    assert main([*argv, "--profile", "h100"]) == 2
    assert "--profile: 'h100' is a built-in --hardware profile" in capsys.readouterr().err
    assert main([*argv, "--profile", "../elsewhere"]) == 2
    assert "--profile: letters, digits" in capsys.readouterr().err


def test_the_baseline_engine_prices_every_variant_but_the_kernels_and_the_full_stack(profiles, capsys):
    assert cmd_sim(sim_args("--hardware", FULL.name, *WORKLOAD, "--cached-tokens", "256", "--uplift",
                            "--baseline-kernels", BASE.name, "--baseline-whole-prompts", "--json")) == 0
    rows = {r["variant"]: r["figures"] for r in json.loads(capsys.readouterr().out)}
    assert list(rows) == ["baseline (torch-engine kernels)", "+ fast-engine kernels", "+ chunked prefill",
                          "+ prefix caching", "full stack"]
    on = {name: (f["config"]["hardware"], f["config"]["chunked_prefill"]) for name, f in rows.items()}
    assert on == {"baseline (torch-engine kernels)": (BASE.name, False), "+ fast-engine kernels": (FULL.name, False),
                  "+ chunked prefill": (BASE.name, True), "+ prefix caching": (BASE.name, False),
                  "full stack": (FULL.name, True)}
    tok = {name: f["tokens_per_s_per_gpu"] for name, f in rows.items()}
    base = tok["baseline (torch-engine kernels)"]
    assert tok["+ fast-engine kernels"] > 1.5 * base and tok["+ prefix caching"] > 1.2 * base
    assert tok["full stack"] > max(tok.values()) * 0.999


def test_the_kernels_variant_is_the_baseline_deployment_on_the_full_profile():
    arch = get_model("smollm2-135m")
    full = Deployment(1, Parallel(), "bf16", max_num_seqs=8, max_num_batched_tokens=256)
    w = Workload("offline", 384, 16, num_requests=24, cached_tokens=256)
    baseline = Baseline(kernels=BASE.name, whole_prompts=True, hardware=BASE)
    assert techniques(full, w, baseline) == ["kernels", "chunked prefill", "prefix caching"]
    variants = {v.name: v.figures for v in uplift(arch, FULL, full, w, baseline=baseline)}
    # Whole prompts with the step budget raised to the context length, as the engine raises it to max_model_len.
    whole = replace(full, chunked_prefill=False, max_num_batched_tokens=arch.max_position_embeddings)
    uncached = replace(w, cached_tokens=0)
    assert variants["+ fast-engine kernels"] == predict(arch, FULL, whole, uncached)
    assert variants["baseline (torch-engine kernels)"] == predict(arch, BASE, whole, uncached)
    assert variants["+ chunked prefill"] == predict(arch, BASE, full, uncached)
    # Chunking only where asked: without --baseline-whole-prompts it is no technique.
    assert techniques(full, w, Baseline()) == ["prefix caching"]


@pytest.mark.parametrize("argv, message", [
    (("--hardware", FULL.name, "--uplift", "--baseline-kernels", "v5.1"),
     "--baseline-kernels v5.1: on fast-engine \\(calibrated\\), the name of another profile"),
    (("--hardware", FULL.name, "--uplift", "--baseline-kernels", FULL.name), "--baseline-kernels fast-engine: on"),
    (("--hardware", FULL.name, "--uplift", "--baseline-kernels", "missing"),
     "--baseline-kernels: no missing profile at .*tokenmill sim calibrate --profile missing"),
    (("--hardware", "h100", "--uplift", "--baseline-kernels", BASE.name),
     "--baseline-kernels torch-engine: one of v6.0, v5.1 on h100"),
    (("--hardware", FULL.name, "--baseline-whole-prompts"), "--baseline-whole-prompts: only with --uplift"),
    (("--hardware", FULL.name, "--uplift", "--baseline-whole-prompts", "--no-enable-chunked-prefill"),
     "--baseline-whole-prompts and --no-enable-chunked-prefill: pick one"),
])
def test_baseline_flags_are_checked(profiles, argv, message):
    with pytest.raises(ValueError, match=message):
        cmd_sim(sim_args(*argv, *WORKLOAD))
