"""The tile rule (sim/gemm_tiles.py): padded tiles, waves and split-K counted by hand, the
device's GEMM shapes under tensor and attention-data parallelism, and what it adds to a step on
the datasheet GPUs under ``--tile-rule`` (off by default, and refused where a profile has no tile).
Pure arithmetic: no model is loaded."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tokenmill.cli import main
from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.gemm_tiles import MIN_SPLIT_K, device_gemms, tile_efficiency, tile_factor
from tokenmill.sim.hardware import TILED_GEMM, Efficiency, Hardware, get_hardware, with_tile_rule
from tokenmill.sim.models import get_model, model_shape
from tokenmill.sim.shapes import PrefillChunk, StepShape

TILE = (128, 256)


def test_tiles_that_fill_the_sms_lose_nothing():
    assert tile_efficiency(256, 512, 4096, sms=4, tile=TILE) == 1.0  # 2 x 2 tiles, one wave of 4


def test_rows_past_a_tile_are_padded():
    # 129 rows take two row tiles (256 rows computed); 2 x 2 = 4 tiles fill 4 SMs once.
    assert tile_efficiency(129, 512, 4096, sms=4, tile=TILE) == pytest.approx(129 / 256)


def test_rows_below_one_tile_are_not_padded():
    assert tile_efficiency(1, 512, 4096, sms=2, tile=TILE) == 1.0


def test_one_tile_past_a_wave_runs_a_second_wave():
    # 5 tiles on 4 SMs: two waves, 5 of 8 SM-slots used.
    assert tile_efficiency(128, 5 * 256, 4096, sms=4, tile=TILE) == pytest.approx(5 / 8)


def test_few_tiles_split_k_over_the_idle_sms_down_to_the_shallowest_slice():
    # 2 tiles on 8 SMs: split 4 ways over a deep k fills them; a k of one slice cannot split.
    assert tile_efficiency(128, 512, 16 * MIN_SPLIT_K, sms=8, tile=TILE) == 1.0
    assert tile_efficiency(128, 512, MIN_SPLIT_K, sms=8, tile=TILE) == pytest.approx(2 / 8)
    assert tile_efficiency(128, 512, 2 * MIN_SPLIT_K, sms=8, tile=TILE) == pytest.approx(4 / 8)


def test_tile_factor_weights_each_gemm_by_its_work():
    full, half = (256, 512, 4096, 1), (128, 5 * 256, 4096, 1)  # efficiency 1 and 5/8
    w_full, w_half = 256 * 512 * 4096, 128 * 5 * 256 * 4096
    assert tile_factor((full, half), 4, TILE) == pytest.approx((w_full + w_half) / (w_full + w_half * 8 / 5))
    assert tile_factor((), 4, TILE) == 1.0


def test_device_gemms_split_by_tensor_parallelism_and_rows_by_attention_dp():
    layer = ((96, 64, True), (64, 32, False))  # a column-parallel and a row-parallel GEMM
    assert device_gemms(layer, 3, (1000, 64), rows=40, logit_rows=8, dp=1, tp=2) == (
        (40, 48, 64, 3), (40, 64, 16, 3), (8, 500, 64, 1))
    assert device_gemms(layer, 3, (1000, 64), rows=40, logit_rows=0, dp=4, tp=1) == (
        (10, 96, 64, 3), (10, 64, 32, 3))
    assert device_gemms((), 3, (1000, 64), rows=40, logit_rows=8, dp=1, tp=1) == ()


def test_llama_shapes_list_their_gemms_and_moe_mla_models_none():
    s = model_shape(get_model("llama3.1-8b"))
    assert s.layer_gemms == ((6144, 4096, True), (4096, 4096, False), (28672, 4096, True), (4096, 14336, False))
    layer_work = sum(n * k for n, k, _ in s.layer_gemms)
    assert s.num_layers * layer_work == s.dense_params  # every dense parameter is in one listed GEMM
    for moe_or_mla in ("deepseek-r1", "gpt-oss-120b"):
        assert model_shape(get_model(moe_or_mla)).layer_gemms == ()


def _prefill_step(model: str, rows: int, parallel: Parallel = Parallel()):
    return step_cost(get_model(model), StepShape(prefills=(PrefillChunk(rows, 0),)), parallel, "fp4", 1)


def test_the_rule_slows_a_small_models_step_and_spares_large_gemms():
    b200 = with_tile_rule(get_hardware("b200"))
    eff = b200.efficiency  # without the rule, at the rule's own fraction: only the tile losses differ
    no_tiles = replace(b200, sms=None, efficiency=replace(eff, gemm_by_precision=eff.tiled_gemm_by_precision))

    def loss(model: str, rows: int) -> float:
        c = _prefill_step(model, rows)
        return step_time(c, b200, "fp4").compute_s / step_time(c, no_tiles, "fp4").compute_s - 1

    # Llama-3.1-8B at 2,560 rows: its 4,096-wide projections make 20 x 16 = 320 tiles, three waves on
    # 148 SMs (0.72 used); Llama-2-70B at 8,192 rows fills its waves within a few percent.
    assert loss("llama3.1-8b", 2560) > 0.1
    assert 0 < loss("llama2-70b", 8192) < 0.05


def test_tiled_gemms_move_from_the_flat_fraction_to_the_tiled_one_over_their_useful_share():
    c = _prefill_step("llama3.1-8b", 2560)
    untiled = get_hardware("b300")  # the profile as it is: the rule off
    b300 = with_tile_rule(untiled)
    eff, peak = b300.efficiency, b300.flops["fp4"]
    assert step_time(c, untiled, "fp4").compute_s == step_time(c, replace(b300, sms=None), "fp4").compute_s
    flops = 2.0 * sum(m * n * k * calls for m, n, k, calls in c.tiled_gemms)
    useful = tile_factor(c.tiled_gemms, 160, (128, 256))
    expected = flops / peak * (1 / (eff.tiled_gemm_for("fp4") * useful) - 1 / eff.gemm_for("fp4"))
    assert step_time(c, b300, "fp4").compute_s - step_time(c, untiled, "fp4").compute_s == pytest.approx(expected)


def test_no_rule_for_moe_models_or_calibrated_profiles():
    moe = _prefill_step("deepseek-r1", 2560, Parallel(tp=8, ep=8, attention_dp=True))
    assert moe.tiled_gemms == ()
    assert not Efficiency().tile_rule and not get_hardware("h100").efficiency.tile_rule  # off by default
    with pytest.raises(ValueError, match="--tile-rule"):  # a calibrated profile: no fractions fitted under the rule
        with_tile_rule(replace(get_hardware("h200"), efficiency=Efficiency()))
    with pytest.raises(ValueError, match="--tile-rule"):  # a CPU: no SMs
        with_tile_rule(replace(get_hardware("h200"), sms=None, gemm_tile=None))


def test_gemm_tile_reads_back_from_json_and_is_checked():
    hw = get_hardware("h200")
    back = Hardware.from_dict(json.loads(json.dumps(hw.to_dict())))
    assert (back.gemm_tile, back.sms) == ((64, 256), 132)
    assert back.efficiency.tiled_gemm_by_precision == TILED_GEMM and not back.efficiency.tile_rule
    with pytest.raises(ValueError, match="gemm_tile"):
        replace(hw, gemm_tile=(0, 256))
    with pytest.raises(ValueError, match="sms"):
        replace(hw, sms=0)


def test_cli_tile_rule_prices_a_small_models_prompt_steps_slower_and_says_so(capsys):
    def run(*extra):  # steps of one 2,560-token prompt: 320 tiles of the 4,096-wide GEMMs on 148 SMs
        assert main(["sim", "--model", "llama3.1-8b", "--hardware", "b200", "--scenario", "offline", "--isl", "2560",
                     "--osl", "4", "--num-requests", "20", "--max-num-batched-tokens", "2560", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    flat, tiled = run(), run("--tile-rule")
    assert (flat["config"]["tile_rule"], tiled["config"]["tile_rule"]) == (False, True)
    assert tiled["tokens_per_s"] < flat["tokens_per_s"]
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "b200", "--num-requests", "20", "--tile-rule"]) == 0
    assert "fp4, tile rule)" in capsys.readouterr().out.splitlines()[0]
