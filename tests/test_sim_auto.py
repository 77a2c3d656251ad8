"""What `tokenmill sim` chooses where the flags leave it open (sim/auto.py): the layout when one
device does not hold the weights, and the full stack of --uplift when no technique is named."""

from __future__ import annotations

import json
import re

import pytest
from _sim_cli import sim_args

from tokenmill.cli import main
from tokenmill.sim.auto import full_stack, layout_given, with_fusion
from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload
from tokenmill.sim.published import MTP3_TOKENS_PER_STEP
from tokenmill.sim.search import search
from tokenmill.sim.uplift import Baseline

SMALL = ["--isl", "128", "--osl", "64", "--num-requests", "60"]


def _sim(capsys, *argv: str) -> dict:
    assert main(["sim", *argv, "--json", *SMALL]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_model_one_device_cannot_hold_gets_the_best_layout_on_the_fewest_gpus(capsys):
    # Llama-3.1-405B in FP8 (~405 GB) fits no H100 (80 GB) nor 2 or 4 of them: 8 is the fewest.
    f = _sim(capsys, "--model", "llama3.1-405b", "--hardware", "h100")
    c = f["config"]
    assert f["layout_chosen"] is True and c["num_gpus"] == 8
    scores = [s["tokens_per_s_per_gpu"] for s in f["searched"]]
    assert len(scores) >= 2 and scores == sorted(scores, reverse=True) and f["tokens_per_s_per_gpu"] == scores[0]
    best = f["searched"][0]
    assert (c["tp"], c["pp"]) == (best["tp"], best["pp"]) and c["tp"] * c["pp"] == 8
    assert all(s["max_num_seqs"] == 256 for s in f["searched"])  # the flags' batch limit, not the search's
    # Every layout tried holds the weights on 8 GPUs: TP8, and TP4 in two stages.
    assert {(s["tp"], s["pp"]) for s in f["searched"]} == {(8, 1), (4, 2)}

    on16 = _sim(capsys, "--model", "llama3.1-405b", "--hardware", "h100", "--num-gpus", "16")
    assert on16["config"]["num_gpus"] == 16 and on16["layout_chosen"]


def test_a_pinned_layout_or_a_model_that_fits_is_not_chosen(capsys):
    pinned = _sim(capsys, "--model", "llama3.1-405b", "--hardware", "h100", "--tp", "8")
    assert "layout_chosen" not in pinned and "searched" not in pinned and pinned["config"]["tp"] == 8
    fits = _sim(capsys, "--model", "llama3.1-8b", "--hardware", "h100", "--num-gpus", "4")
    assert "layout_chosen" not in fits and (fits["config"]["tp"], fits["config"]["replicas"]) == (1, 4)
    assert not layout_given(sim_args()) and layout_given(sim_args("--pp", "1"))
    assert layout_given(sim_args("--attention-dp")) and layout_given(sim_args("--ep", "2"))


def test_the_table_says_the_layout_was_chosen(capsys):
    assert main(["sim", "--model", "llama3.1-405b", "--hardware", "h100", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "8 x h100" in out and "layout chosen" in out and "--search also tries --max-num-seqs" in out


def test_mixture_of_experts_tries_expert_parallel_and_attention_dp(capsys):
    # DeepSeek-R1 in FP4 (~380 GB) needs two GB300s; on 8 the experts may spread over 2, 4 or 8.
    f = _sim(capsys, "--model", "deepseek-r1", "--hardware", "gb300", "--num-gpus", "8")
    c, best = f["config"], f["searched"][0]
    assert f["layout_chosen"] and (c["tp"], c["ep"], c["attention_dp"]) == (best["tp"], best["ep"],
                                                                             best["attention_dp"])
    tried = {(s["tp"], s["ep"], s["attention_dp"]): s["max_num_seqs"] for s in f["searched"]}
    assert tried[(8, 8, False)] == 256 and tried[(8, 1, False)] == 256
    assert tried[(1, 8, True)] == 8 * 256  # per device under attention DP, as --search counts it


def test_search_tries_only_the_batch_limits_given():
    arch, hw = get_model("deepseek-r1"), get_hardware("gb300")
    base = Deployment(8, Parallel(), "fp4", max_num_seqs=64)
    found = search(arch, hw, base, Workload("offline", 128, 16, num_requests=16), seq_choices=(64,))
    assert found and all(c.max_num_seqs == 64 * (c.parallel.devices if c.parallel.attention_dp else 1)
                         for c in found)


def test_the_full_stack_where_no_technique_is_named():
    w = Workload("offline", 128, 16)
    d, b, assumed = full_stack(get_model("deepseek-r1"), get_hardware("gb300"),
                               Deployment(8, Parallel(tp=1, ep=8, attention_dp=True), "fp4"), w, Baseline())
    # EP + attention DP is already a technique of this deployment: the flags named one, nothing is assumed.
    assert (d.mtp_depth, b, assumed) == (0, Baseline(), [])
    d, b, assumed = full_stack(get_model("deepseek-r1"), get_hardware("gb300"),
                               Deployment(8, Parallel(tp=8), "fp4"), w, Baseline())
    assert (d.mtp_depth, d.mtp_tokens_per_step, b.kernels, b.eager) == (3, MTP3_TOKENS_PER_STEP, "v5.1", True)
    assert len(assumed) == 3
    # A dense model without an MTP module on Hopper: CUDA graphs only; the kernel scale is DeepSeek-R1's on Blackwell.
    d, b, assumed = full_stack(get_model("llama3.1-8b"), get_hardware("h100"),
                               Deployment(1, Parallel(), "fp8"), w, Baseline())
    assert (d.mtp_depth, b.kernels, b.eager, len(assumed)) == (0, None, True, 1)
    fused = with_fusion(Deployment(8, Parallel(tp=8), "fp8"), assumed)
    assert fused.fused_allreduce and assumed[-1] == "GEMM + all-reduce fusion"
    assert not with_fusion(Deployment(1, Parallel(), "fp8"), []).fused_allreduce


def test_cli_uplift_without_flags_compares_the_full_stack(capsys):
    assert main(["sim", "--model", "deepseek-r1", "--hardware", "gb300", "--uplift", *SMALL]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert header.startswith("full stack: 2 x gb300") and "(layout chosen)" in header and "assumed" in header
    for row in ("| baseline (v5.1 kernels) |", "| + v6.0 kernels |", "| + CUDA graphs |", "| + MTP |",
                "| full stack |"):
        assert row in out
    # The layout chosen decides the rest: expert parallel + attention DP, or a tensor-parallel fusion.
    tp, ep = (int(x) for x in re.search(r"tp (\d+), ep (\d+)", header).groups())
    assert ("| + expert parallel + attention DP |" in out) == (ep > 1 or "attention dp" in header)
    assert ("| + GEMM + all-reduce fusion |" in out) == (tp > 1)
    # Dense and tensor parallel: the fusion joins the stack.
    assert main(["sim", "--model", "llama3.1-405b", "--hardware", "h100", "--uplift", *SMALL]) == 0
    assert "| + GEMM + all-reduce fusion |" in capsys.readouterr().out


def test_uplift_with_a_technique_named_keeps_the_flags(capsys):
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--mtp", "2", "--uplift", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "assumed" not in out and "| + MTP |" in out and "CUDA graphs" not in out


@pytest.mark.parametrize("argv", [["--model", "llama3.1-405b", "--hardware", "h100", "--precision", "bf16"]])
def test_no_layout_on_any_gpu_count_names_the_flags(capsys, argv):
    assert main(["sim", *argv, *SMALL]) == 2
    assert "--tp/--ep/--pp: no layout --search tries" in capsys.readouterr().err


def test_pareto_with_no_layout_sweeps_the_layouts_of_the_fewest_gpus(capsys, tmp_path):
    out = tmp_path / "front.png"
    assert main(["sim", "--model", "deepseek-r1", "--hardware", "gb300", "--pareto", str(out), *SMALL]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["num_gpus"] == 2 and out.exists()
    assert {(p["tp"], p["ep"], p["attention_dp"]) for p in doc["points"]} == {(2, 1, False), (2, 2, False),
                                                                               (1, 2, True)}


@pytest.mark.parametrize("scenario", ["offline", "server"])
def test_the_progress_bar_ends_at_its_total(scenario):
    from tokenmill.sim.search import progress_steps

    arch, hw = get_model("deepseek-r1"), get_hardware("gb300")
    w = Workload(scenario, 128, 16, num_requests=16)
    steps: list[int] = []
    base = Deployment(8, Parallel(), "fp4", max_num_seqs=64)
    search(arch, hw, base, w, progress=steps.append, seq_choices=(64,))
    # Offline: one step a layout; a peak search: its Offline bound, then its peak search or its skip.
    assert sum(steps) == progress_steps(arch, hw, 8, w, num_seq_choices=1) == (2 if scenario == "server" else 1) * 10
