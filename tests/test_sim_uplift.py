"""`tokenmill sim --uplift`: each technique of a deployment against the same GPUs without it (sim/uplift.py)."""

from __future__ import annotations

import pytest
from _sim_cli import sim_args

from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.cost import Parallel
from tokenmill.sim.disagg import PoolSplit
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload
from tokenmill.sim.uplift import Baseline, Variant, table, techniques, uplift


def test_techniques_follow_the_flags():
    d = Deployment(16, Parallel(tp=1, ep=8, attention_dp=True), "fp4", mtp_depth=3, mtp_tokens_per_step=2.5,
                   disagg=PoolSplit(1, 1))
    w = Workload("offline", 1024, 1024, cached_tokens=256)
    assert techniques(d, w) == ["expert parallel + attention DP", "MTP", "disaggregation", "prefix caching"]
    fused = Deployment(2, Parallel(tp=2), "fp8", fused_allreduce=True)
    assert techniques(fused, Workload("offline", 8, 8)) == ["GEMM + all-reduce fusion"]
    assert techniques(Deployment(1, Parallel(), "fp8"), Workload("offline", 8, 8)) == []


def test_each_technique_alone_and_together():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    # Batch 8 is memory-bound: MTP's accepted tokens come almost free; a cached prefix
    # skips most of each prompt. Both must raise tokens/s per GPU over the baseline.
    full = Deployment(1, Parallel(), "fp8", max_num_seqs=8, mtp_depth=2, mtp_tokens_per_step=2.0)
    variants = uplift(arch, hw, full, Workload("offline", 1024, 64, num_requests=32, cached_tokens=768))
    names = [v.name for v in variants]
    assert names == ["baseline", "+ MTP", "+ prefix caching", "full stack"]
    tok = {v.name: v.figures["tokens_per_s_per_gpu"] for v in variants}
    assert tok["+ MTP"] > 1.2 * tok["baseline"]
    assert tok["+ prefix caching"] > 1.2 * tok["baseline"]
    assert tok["full stack"] > max(tok["+ MTP"], tok["+ prefix caching"])
    assert variants[0].figures["config"]["mtp_depth"] == 0 and variants[-1].figures["config"]["mtp_depth"] == 2


def test_no_technique_is_an_error():
    with pytest.raises(ValueError, match="--uplift: the deployment uses none"):
        uplift(get_model("llama3.1-8b"), get_hardware("h100"), Deployment(1, Parallel(), "fp8"),
               Workload("offline", 64, 8, num_requests=8))


def test_table_reports_a_variant_that_does_not_run():
    base = {"tokens_per_s_per_gpu": 100.0, "ttft_ms": {"p99": 10.0}, "tpot_ms": {"p99": 2.0}, "qps": None}
    text = table([Variant("baseline", base), Variant("+ MTP", {**base, "tokens_per_s_per_gpu": 150.0}),
                  Variant("+ disaggregation", None, "--num-gpus: 5 GPUs")])
    assert "| + MTP | 150 | 1.50x |" in text
    assert "| + disaggregation | does not run: --num-gpus: 5 GPUs |" in text


def test_cli_uplift(capsys):
    argv = ("--model", "llama3.1-8b", "--hardware", "h100", "--isl", "256", "--osl", "32", "--num-requests", "40",
            "--max-num-seqs", "16", "--disagg", "1:1", "--uplift")
    assert cmd_sim(sim_args(*argv)) == 0
    out = capsys.readouterr().out
    assert "| baseline |" in out and "| + disaggregation |" in out
    with pytest.raises(ValueError, match="--uplift and --search"):
        cmd_sim(sim_args(*argv, "--search"))


def test_fused_allreduce_alone_speeds_up_a_tensor_parallel_prefill():
    arch, hw = get_model("llama3.3-70b"), get_hardware("h100")
    full = Deployment(4, Parallel(tp=4), "fp8", max_num_seqs=16, fused_allreduce=True)
    variants = uplift(arch, hw, full, Workload("offline", 4096, 16, num_requests=32))
    assert [v.name for v in variants] == ["baseline", "+ GEMM + all-reduce fusion"]
    assert variants[0].figures["config"]["fused_allreduce"] is False
    base, fused = (v.figures["tokens_per_s_per_gpu"] for v in variants)
    assert fused > 1.05 * base  # 4-way all-reduces of 4,096-token chunks, now hidden in the GEMMs


def test_older_kernels_as_the_baseline_price_the_software_uplift():
    arch, hw = get_model("deepseek-r1"), get_hardware("gb300")
    full = Deployment(8, Parallel(tp=8, ep=8, attention_dp=True), "fp4", max_num_seqs=512)
    w = Workload("offline", 1024, 256, num_requests=256)
    assert techniques(full, w, Baseline(kernels="v5.1")) == ["kernels", "expert parallel + attention DP"]
    variants = uplift(arch, hw, full, w, baseline=Baseline(kernels="v5.1"))
    assert [v.name for v in variants] == ["baseline (v5.1 kernels)", "+ v6.0 kernels",
                                          "+ expert parallel + attention DP", "full stack"]
    tok = {v.name: v.figures["tokens_per_s_per_gpu"] for v in variants}
    assert variants[0].figures["config"]["kernels"] == "v5.1" and variants[-1].figures["config"]["kernels"] == "v6.0"
    # Offline issues everything at once: every step 1.52x as long, the same steps, 1/1.52 the tokens/s.
    assert tok["+ v6.0 kernels"] == pytest.approx(1.52 * tok["baseline (v5.1 kernels)"], rel=1e-3)
    assert tok["full stack"] > tok["+ v6.0 kernels"]


def test_cli_kernel_flags(capsys):
    argv = ("--model", "deepseek-r1", "--hardware", "gb300", "--num-gpus", "8", "--tp", "8", "--ep", "8",
            "--attention-dp", "--isl", "512", "--osl", "64", "--num-requests", "64", "--max-num-seqs", "64")
    assert cmd_sim(sim_args(*argv, "--kernels", "v5.1", "--json")) == 0
    assert '"kernels": "v5.1"' in capsys.readouterr().out
    assert cmd_sim(sim_args(*argv, "--uplift", "--baseline-kernels", "v5.1")) == 0
    assert "| + v6.0 kernels |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--baseline-kernels: only with --uplift"):
        cmd_sim(sim_args(*argv, "--baseline-kernels", "v5.1"))
    with pytest.raises(ValueError, match="--baseline-kernels v6.0: not older than --kernels v5.1"):
        cmd_sim(sim_args(*argv, "--kernels", "v5.1", "--uplift", "--baseline-kernels", "v6.0"))
    with pytest.raises(ValueError, match="--kernels v5.1: a TensorRT-LLM kernel generation"):
        cmd_sim(sim_args("--hardware", "this-machine", "--kernels", "v5.1"))


def test_table_says_when_a_variant_meets_no_rate():
    failing = {"tokens_per_s_per_gpu": 0.0, "ttft_ms": {"p99": 81.9}, "tpot_ms": {"p99": 24.2}, "qps": 0.0}
    passing = {"tokens_per_s_per_gpu": 97.0, "ttft_ms": {"p99": 104.6}, "tpot_ms": {"p99": 14.6}, "qps": 49.6}
    text = table([Variant("baseline", failing), Variant("full stack", passing)])
    assert "| baseline | no QPS meets the p99 limits (at the lowest tried: TTFT p99 81.9 ms, TPOT p99 24.2 ms)" in text
    assert "| full stack | 97 | - | 104.6 | 14.6 | 49.60 |" in text  # no ratio against a baseline of no rate
    text = table([Variant("baseline", passing), Variant("+ x", failing)])
    assert "| + x | no QPS meets" in text and "| baseline | 97 | 1.00x |" in text
