"""`tokenmill sim --no-cuda-graphs`: every step launched from the host (sim/cuda_graphs.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from _sim_cli import sim_args

from tokenmill.sim.cli import cmd_sim
from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.cuda_graphs import without_cuda_graphs
from tokenmill.sim.hardware import EAGER_LAYER_S, Efficiency, Hardware, get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.shapes import StepShape
from tokenmill.sim.uplift import Baseline, techniques, uplift


def _step(arch, hw, batch: int) -> float:
    cost = step_cost(arch, StepShape(decode_contexts=(512,) * batch), Parallel(), "bf16", 2.0)
    return step_time(cost, hw, "bf16").total_s


def test_launches_overlap_the_device_work():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    eager = without_cuda_graphs(hw, arch.num_layers)
    launch = arch.num_layers * EAGER_LAYER_S
    assert eager.efficiency.eager_step_overhead_s == pytest.approx(hw.efficiency.step_overhead_s + launch)
    for batch in (1, 256):
        graph = _step(arch, hw, batch)
        device = graph - hw.efficiency.step_overhead_s
        # The launches and the device's work overlap by the sqrt rule; the per-step work adds.
        assert _step(arch, eager, batch) == pytest.approx(hw.efficiency.step_overhead_s + math.hypot(device, launch))
    # Batch 1: the launches (8 ms) outweigh the device's ~6 ms; at batch 256 they mostly hide under it.
    assert _step(arch, eager, 1) / _step(arch, hw, 1) > 1.5
    assert _step(arch, eager, 256) / _step(arch, hw, 256) < 1.2
    # A per-layer price given in place of the profile's.
    cheap = without_cuda_graphs(hw, arch.num_layers, eager_layer_s=1e-5)
    assert _step(arch, hw, 1) < _step(arch, cheap, 1) < 1.02 * _step(arch, hw, 1)


def test_calibrated_and_cpu_profiles():
    arch = get_model("smollm2-135m")
    base = get_hardware("h200")
    # A GPU calibrated with graphs on priced its eager steps as measured: every step costs that now.
    measured = replace(base, efficiency=Efficiency(step_overhead_s=6e-4, eager_step_overhead_s=0.03))
    eager = without_cuda_graphs(measured, arch.num_layers)
    assert eager.efficiency.eager_step_overhead_s == 0.03 and eager.efficiency.graph_max_rows == 0
    assert _step(arch, eager, 1) > 0.03 > _step(arch, measured, 1)
    # A CPU (no eager figure, no per-layer price): refused, unless a per-layer price is given.
    cpu = Hardware(name="this-machine", memory_bytes=24e9, memory_bw=2e10, flops={"bf16": 1e12}, interconnect_bw=1e9,
                   scale_up_size=1, scale_out_bw=1e9, default_precision="bf16", price_per_hour=1.0, overlap=False)
    with pytest.raises(ValueError, match="--no-cuda-graphs: the this-machine profile replays no CUDA graphs"):
        without_cuda_graphs(cpu, arch.num_layers)
    added = without_cuda_graphs(cpu, arch.num_layers, eager_layer_s=1e-3)
    # No overlap on such a profile: the launches add to the step.
    assert _step(arch, added, 1) == pytest.approx(_step(arch, cpu, 1) + arch.num_layers * 1e-3)
    with pytest.raises(ValueError, match="--eager-layer-ms: must be >= 0"):
        without_cuda_graphs(base, arch.num_layers, eager_layer_s=-1e-3)


def test_predict_and_uplift_price_the_graphs():
    arch, hw = get_model("llama3.1-8b"), get_hardware("h100")
    d = Deployment(1, Parallel(), "fp8", max_num_seqs=4)
    w = Workload("singlestream", 256, 64, num_requests=6)
    graphs, eager = predict(arch, hw, d, w), predict(arch, hw, replace(d, cuda_graphs=False), w)
    assert eager["config"]["cuda_graphs"] is False and graphs["config"]["eager_step_ms"] is None
    assert eager["config"]["eager_step_ms"] == pytest.approx((4e-4 + 32 * EAGER_LAYER_S) * 1e3)
    assert eager["tpot_ms"]["p50"] > 1.5 * graphs["tpot_ms"]["p50"]
    # The uplift adds CUDA graphs only when asked for an eager baseline.
    assert techniques(d, w) == [] and techniques(d, w, Baseline(eager=True)) == ["CUDA graphs"]
    variants = uplift(arch, hw, d, w, baseline=Baseline(eager=True))
    assert [v.name for v in variants] == ["baseline", "+ CUDA graphs"]
    assert variants[0].figures["config"]["cuda_graphs"] is False
    assert variants[1].figures["tokens_per_s_per_gpu"] == pytest.approx(graphs["tokens_per_s_per_gpu"])


def test_cli_flags(capsys):
    argv = ("--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "singlestream", "--isl", "128", "--osl", "16",
            "--num-requests", "4")
    assert cmd_sim(sim_args(*argv, "--no-cuda-graphs", "--eager-layer-ms", "0.5", "--json")) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert config["cuda_graphs"] is False and config["eager_step_ms"] == pytest.approx(0.4 + 32 * 0.5)
    assert cmd_sim(sim_args(*argv, "--no-cuda-graphs")) == 0
    assert "no CUDA graphs (8.4 ms of host work an eager step)" in capsys.readouterr().out
    assert cmd_sim(sim_args(*argv, "--uplift", "--baseline-eager")) == 0
    assert "| + CUDA graphs |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--eager-layer-ms: only with --no-cuda-graphs or --baseline-eager"):
        cmd_sim(sim_args(*argv, "--eager-layer-ms", "0.5"))
    with pytest.raises(ValueError, match="--baseline-eager: only with --uplift"):
        cmd_sim(sim_args(*argv, "--baseline-eager"))
    with pytest.raises(ValueError, match="--baseline-eager and --no-cuda-graphs: pick one"):
        cmd_sim(sim_args(*argv, "--uplift", "--baseline-eager", "--no-cuda-graphs"))
    with pytest.raises(ValueError, match="--eager-layer-ms: must be >= 0"):
        cmd_sim(sim_args(*argv, "--no-cuda-graphs", "--eager-layer-ms", "-1"))


def test_mtp_draft_passes_launch_their_layer_eagerly():
    from tokenmill.sim.mtp_module import draft_seconds

    arch, hw = get_model("deepseek-r1"), get_hardware("gb300")
    shape, parallel = StepShape(decode_contexts=(1024,)), Parallel(tp=8, ep=8)
    graphs = draft_seconds(arch, shape, 3, parallel, "fp4", 1.0, hw)
    eager = draft_seconds(arch, shape, 3, parallel, "fp4", 1.0, without_cuda_graphs(hw, arch.num_layers))
    # Three passes of one layer each: each pass's launch (0.25 ms) overlaps its device work.
    assert graphs < eager < graphs + 3 * EAGER_LAYER_S + 1e-12
    assert eager > graphs + 3 * EAGER_LAYER_S * 0.5
    # A calibrated profile's measured eager step is spread over the layers for the passes.
    measured = replace(hw, efficiency=replace(hw.efficiency, eager_layer_s=None, eager_step_overhead_s=0.0314))
    per_layer = without_cuda_graphs(measured, arch.num_layers).efficiency.eager_layer_s
    assert per_layer == pytest.approx((0.0314 - hw.efficiency.step_overhead_s) / arch.num_layers)
