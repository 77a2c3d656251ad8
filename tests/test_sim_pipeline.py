"""Pipeline parallelism in the simulator (`tokenmill sim --pp`, sim/pipeline.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tokenmill.cli import main
from tokenmill.sim.cost import Parallel, shape_step_cost, shape_weight_bytes, step_time, weight_bytes
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model, model_shape
from tokenmill.sim.pipeline import cycle_seconds, stage_shape
from tokenmill.sim.predict import Deployment, Workload, check_deployment, predict
from tokenmill.sim.published import PublishedResult
from tokenmill.sim.shapes import StepShape
from tokenmill.sim.validate import check_row

SMALL = ["--isl", "128", "--osl", "64", "--num-requests", "60"]


def test_a_stage_holds_its_share_of_the_layers_and_the_lm_head():
    llama = model_shape(get_model("llama3.1-405b"))  # 126 dense layers, untied head
    assert stage_shape(llama, 1) is llama
    stage = stage_shape(llama, 4)
    assert (stage.num_layers, stage.num_dense_layers, stage.num_moe_layers) == (32, 32, 0)  # ceil(126 / 4)
    assert (stage.embed_params, stage.lm_head_params, stage.tied) == (0, llama.lm_head_params, False)
    # One device of a TP2 PP2 replica holds half of a TP2 device's weights: 63 of the 126 layers and
    # the LM head, the size of the embedding the first stage holds instead.
    whole = shape_weight_bytes(llama, "fp4", Parallel(tp=2))
    staged = shape_weight_bytes(stage_shape(llama, 2), "fp4", Parallel(tp=2))
    assert staged == pytest.approx(0.5 * whole, rel=1e-6)
    # Three stages of 42 layers: a third of the layers and the whole head.
    head = llama.lm_head_params * 2.0 / 2  # bf16, split over TP2
    assert shape_weight_bytes(stage_shape(llama, 3), "fp4", Parallel(tp=2)) == pytest.approx(
        (whole - 2 * head) / 3 + head, rel=1e-4)

    deepseek = model_shape(get_model("deepseek-r1"))  # 3 dense + 58 MoE layers
    stage = stage_shape(deepseek, 4)
    assert (stage.num_layers, stage.num_moe_layers, stage.num_dense_layers) == (16, 15, 1)


@pytest.mark.parametrize("pp, message", [(0, "must be >= 1"), (200, "pipeline stages for a model of 126 layers")])
def test_impossible_stage_counts_name_the_flag(pp, message):
    with pytest.raises(ValueError, match=f"--pp: .*{message}"):
        stage_shape(model_shape(get_model("llama3.1-405b")), pp)


def test_a_micro_batch_steps_once_per_round_of_the_stages():
    s, hw, p = model_shape(get_model("llama3.1-8b")), get_hardware("h100"), Parallel()
    shape = StepShape(decode_contexts=(500,) * 64)
    stage = step_time(shape_step_cost(stage_shape(s, 2), shape, p, "fp8", 1.0), hw, "fp8")
    cycle = cycle_seconds(s, shape, p, 2, "fp8", 1.0, hw)
    # Two stage times of device work, the host's per-step work once.
    assert cycle == pytest.approx(2 * (stage.total_s - stage.overhead_s) + stage.overhead_s)
    whole = step_time(shape_step_cost(s, shape, p, "fp8", 1.0), hw, "fp8").total_s
    assert whole < cycle < 1.1 * whole  # the same layers, the LM head's stage setting the pace


def _offline(pp: int, tp: int, num_gpus: int, model: str = "llama3.1-8b", hardware: str = "h100") -> dict:
    d = Deployment(num_gpus, Parallel(tp=tp), "fp8", max_num_seqs=64, pipeline_parallel=pp)
    return predict(get_model(model), get_hardware(hardware), d, Workload("offline", 512, 128, num_requests=128))


def test_a_pipeline_serves_about_as_many_tokens_per_gpu_as_replicas_and_caches_more():
    piped, replicas = _offline(pp=2, tp=1, num_gpus=2), _offline(pp=1, tp=1, num_gpus=2)
    assert (piped["config"]["pp"], piped["config"]["replicas"]) == (2, 1)
    assert (replicas["config"]["pp"], replicas["config"]["replicas"]) == (1, 2)
    assert 0.85 < piped["tokens_per_s_per_gpu"] / replicas["tokens_per_s_per_gpu"] < 1.0
    # Each device holds half the layers: half the weights and half of each token's KV, so the
    # two-device pipeline caches more than twice what one device of a replica does.
    assert piped["config"]["kv_blocks_per_replica"] > 2 * replicas["config"]["kv_blocks_per_replica"]
    # Two micro-batches of 64 each step the TPOT of a two-stage round.
    assert piped["tpot_ms"]["p50"] > replicas["tpot_ms"]["p50"]


def test_a_pipeline_fits_a_model_its_stage_layout_cannot_hold():
    arch, hw = get_model("llama3.1-405b"), get_hardware("h100")
    with pytest.raises(ValueError, match="--tp/--ep"):
        check_deployment(arch, hw, Deployment(4, Parallel(tp=4), "fp8"))
    assert weight_bytes(arch, "fp8", Parallel(tp=4)) > hw.memory_bytes
    assert check_deployment(arch, hw, Deployment(8, Parallel(tp=4), "fp8", pipeline_parallel=2)) > 0


@pytest.mark.parametrize("args, message", [
    (["--pp", "2", "--num-gpus", "3"], "--num-gpus: 3 is not a multiple of the replica's 2 devices"),
    (["--pp", "0"], "--pp: must be >= 1"),
    (["--pp", "2", "--mtp", "2"], "--pp: pipeline parallel with --mtp is not modelled"),
    (["--pp", "2", "--disagg", "1:1"], "--pp: pipeline parallel with --disagg is not modelled"),
    (["--pp", "2", "--search", "--num-gpus", "2"], "--pp and --search"),
])
def test_bad_pipelines_name_the_flag(capsys, args, message):
    assert main(["sim", *SMALL, *args]) == 2
    assert message in capsys.readouterr().err


def test_the_cli_runs_a_pipeline_and_reports_its_stages(capsys):
    assert main(["sim", "--pp", "2", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "on 2 x h100 (1 replica(s) of tp 1, ep 1, pp 2; fp8)" in out
    assert main(["sim", "--pipeline-parallel-size", "2", "--json", *SMALL]) == 0
    config = json.loads(capsys.readouterr().out)["config"]
    assert (config["num_gpus"], config["pp"], config["tp"]) == (2, 2, 1)


def test_a_published_pipeline_row_runs_as_its_layout():
    row = PublishedResult(model="llama3.1-8b", hardware="h100", num_gpus=4, precision="fp8", scenario="throughput",
                          isl=512, osl=128, dataset=None, tokens_per_s_per_gpu=10000.0, parallel="TP1 PP2",
                          source="test")
    piped = check_row(row, num_requests=64, seq_choices=(16, 64))
    flat = check_row(replace(row, parallel="TP1 x4"), num_requests=64, seq_choices=(16, 64))
    assert piped.simulated is not None and piped.parallel == Parallel(tp=1)
    assert 0.8 < piped.simulated / flat.simulated < 1.0


def test_the_search_tries_two_stages_for_dense_models_only():
    from tokenmill.sim.search import num_candidates, pipeline_layouts, search

    hw = get_hardware("h100")
    dense = pipeline_layouts(get_model("llama3.1-8b"), hw, 8)
    assert [(p, pp) for p, pp in dense if pp > 1] == [(Parallel(tp=t), 2) for t in (1, 2, 4)]
    assert all(pp == 1 for _, pp in pipeline_layouts(get_model("deepseek-r1"), get_hardware("h200"), 8))
    arch, base = get_model("llama3.1-8b"), Deployment(2, Parallel(), "fp8")
    found = search(arch, hw, base, Workload("offline", 256, 32, num_requests=16))
    assert len(found) == num_candidates(arch, hw, 2) == 18  # tp 1, tp 2, tp 1 x pp 2; 6 batch limits each
    piped = [c for c in found if c.pipeline_parallel == 2]
    assert len(piped) == 6 and all(c.figures["config"]["pp"] == 2 for c in piped)


def test_the_flow_shop_holds_a_micro_batch_behind_a_slower_one():
    from tokenmill.sim.pipeline import FlowShop

    times = {1: 1.0, 2: 3.0}  # seconds per stage, by the step's decode count
    shop = FlowShop(2, lambda shape: (times[shape.num_decodes], 0.0))
    small, big = StepShape(decode_contexts=(10,)), StepShape(decode_contexts=(10, 10))
    assert shop.start(0.0) == 0.0 and shop.step_time(0.0)(small) == 2.0  # two stages of 1 s, out at 2
    assert shop.start(0.0) == 1.0  # the next waits for the first stage
    assert shop.step_time(1.0)(big) == 6.0  # stage 0 from 1 to 4, stage 1 from 4 to 7
    assert shop.start(2.0) == 4.0  # the small one, out at 2, waits for the big one to leave stage 0
    assert shop.step_time(4.0)(small) == 4.0  # stage 0 from 4 to 5, stage 1 waits until 7: out at 8
    floored = FlowShop(2, lambda shape: (1.0, 0.5), min_seconds=lambda shape: 10.0)
    assert floored.step_time(0.0)(small) == 10.0  # the host's floor over the 2.5 s of stages and host


def test_routed_pipelines_need_a_flow_shop_for_whole_groups():
    from tokenmill.sim.routed import simulate_routed
    from tokenmill.sim.serving import SimConfig, SimRequest

    requests, config = [SimRequest(0.0, 8, 4)], SimConfig(max_num_seqs=4, max_num_batched_tokens=64, num_kv_blocks=64)
    with pytest.raises(ValueError, match="pipeline"):
        simulate_routed(requests, 3, lambda shape: 0.01, config, pipeline=2, flow_shop=lambda: None)
    with pytest.raises(ValueError, match="pipeline"):
        simulate_routed(requests, 2, lambda shape: 0.01, config, pipeline=2)
