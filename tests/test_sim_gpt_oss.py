"""gpt-oss-120b in the simulator (sim/models.py ``GptOssArch``, sim/cost.py): parameter
counts against the model card, the sliding-window layers' attention and KV, the MXFP4
experts' bytes and what their GEMMs compute in, a KV cache apart from the weights, the published
rows' recipe, and runs of ``tokenmill sim``. Pure arithmetic: no model is loaded."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tokenmill.cli import main
from tokenmill.sim import validate
from tokenmill.sim.cost import (
    Parallel,
    expert_compute_precision,
    expert_gemm_rate,
    kv_bytes_per_token,
    step_cost,
    step_time,
    weight_bytes,
)
from tokenmill.sim.hardware import UPCAST_EXPERT_GEMM, get_hardware
from tokenmill.sim.models import GptOssArch, get_model, model_shape
from tokenmill.sim.predict import Deployment, kv_blocks
from tokenmill.sim.published import RESULTS
from tokenmill.sim.shapes import PrefillChunk, StepShape

OSS = get_model("gpt-oss-120b")

# hidden 8, 2 layers (layer 0 slides over 4 keys, layer 1 is full), 2 query heads of 4
# (q_size 8), 1 KV head: 8 KV values per token and layer, 4 x 8 = 32 FLOPs per attended pair.
TINY = GptOssArch(vocab_size=100, hidden_size=8, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=4,
                  num_experts=4, top_k=2, expert_intermediate=8, sliding_window=4, max_position_embeddings=512,
                  eos_token_ids=(0,))
PAIR, KV = 32, 8


def test_parameter_counts_match_the_model_card():
    # gpt-oss model card (arXiv 2508.10925) Table 1: MLP 114.71B, attention 0.96B, embed + unembed
    # 1.16B, active 5.13B (unembedding counted, embedding not), total 116.83B. Ours: 116,829,156,672.
    s = model_shape(OSS)
    assert OSS.num_params() == s.total_params() == 116_829_156_672
    assert s.total_params() == pytest.approx(116.83e9, abs=0.005e9)
    assert 36 * (128 * s.expert_params + s.router_params) == pytest.approx(114.71e9, abs=0.005e9)
    assert 36 * s.attention_params == pytest.approx(0.96e9, abs=0.005e9)
    assert s.embed_params + s.lm_head_params == pytest.approx(1.16e9, abs=0.005e9)
    # One decode row multiplies every active parameter once (2 FLOPs each).
    one_row = step_cost(OSS, StepShape(decode_contexts=(10,)), Parallel(), "bf16", 2)
    assert one_row.gemm_flops / 2 == pytest.approx(5.13e9, abs=0.005e9)


def test_experts_stay_mxfp4_whatever_the_precision():
    # Model card Table 1: a 60.8 GiB checkpoint (MXFP4 experts at 4.25 bits, the rest bf16).
    assert weight_bytes(OSS, "bf16") / 2**30 == pytest.approx(60.8, rel=0.01)
    # fp8 halves only the attention weights (embeddings, LM head, routers stay bf16; experts MXFP4).
    assert weight_bytes(OSS, "bf16") - weight_bytes(OSS, "fp8") == 36 * model_shape(OSS).attention_params
    # A step streams the experts its rows touch in MXFP4 too: one row, 4 of 128 per layer.
    one_row = step_cost(OSS, StepShape(decode_contexts=(10,)), Parallel(), "bf16", 2)
    s = model_shape(OSS)
    non_expert = (36 * s.attention_params + s.lm_head_params + 36 * s.router_params) * 2
    assert one_row.weight_bytes == pytest.approx(non_expert + 36 * 4 * s.expert_params * 4.25 / 8)


def test_sliding_layer_counts_by_hand():
    # Decode at context 10: the full layer attends 11 keys and reads 10 cached tokens, the
    # sliding layer 4 and 4; both layers write the new token.
    c = step_cost(TINY, StepShape(decode_contexts=(10,)), Parallel(), "bf16", 2)
    assert c.attention_flops == PAIR * (11 + 4)
    assert c.kv_read_bytes == KV * 2 * (10 + 4)
    assert c.kv_write_bytes == 2 * KV * 2
    # Prefill of 6 on 0 cached: full 1+..+6 = 21 pairs, sliding 1+2+3+4+4+4 = 18.
    c = step_cost(TINY, StepShape(prefills=(PrefillChunk(6, 0),)), Parallel(), "bf16", 2)
    assert c.attention_flops == PAIR * (21 + 18)
    # Three speculative rows on context 2: full 3+4+5, sliding 3+4+4; cache read 2 and 2.
    c = step_cost(TINY, StepShape(decode_contexts=(2,), tokens_per_decode=3), Parallel(), "bf16", 2)
    assert c.attention_flops == PAIR * (12 + 11)
    assert c.kv_read_bytes == KV * 2 * (2 + 2)
    # Capacity counts the full layer only: the sliding one holds at most 4 tokens per sequence.
    assert kv_bytes_per_token(TINY, 2) == KV * 2


def test_sliding_window_cuts_long_context_attention():
    full = replace(OSS, sliding_window=None)
    assert model_shape(OSS).num_sliding_layers == 18 and model_shape(full).num_sliding_layers == 0
    long = StepShape(decode_contexts=(32_000,) * 64)
    windowed, unwindowed = (step_cost(a, long, Parallel(), "fp8", 1) for a in (OSS, full))
    # Half the layers attend 128 keys instead of 32,001: attention and KV reads nearly halve.
    assert windowed.attention_flops / unwindowed.attention_flops == pytest.approx(0.5, abs=0.003)
    assert windowed.kv_read_bytes / unwindowed.kv_read_bytes == pytest.approx(0.5, abs=0.003)
    assert windowed.gemm_flops == unwindowed.gemm_flops and windowed.kv_write_bytes == unwindowed.kv_write_bytes
    # The step is shorter by (nearly) the time of the KV reads the window saves; the experts' weights,
    # streamed either way, are most of what is left.
    h100 = get_hardware("h100")
    saved = (unwindowed.kv_read_bytes - windowed.kv_read_bytes) / (h100.memory_bw * h100.efficiency.memory)
    gain = step_time(unwindowed, h100, "fp8").total_s - step_time(windowed, h100, "fp8").total_s
    assert 0.8 * saved < gain <= saved * 1.01
    # Inside the window the two are the same model.
    short = StepShape(decode_contexts=(100,) * 64)
    assert (step_cost(OSS, short, Parallel(), "fp8", 1).attention_flops
            == step_cost(full, short, Parallel(), "fp8", 1).attention_flops)
    assert kv_bytes_per_token(OSS, 1) == kv_bytes_per_token(full, 1) / 2 == 18 * 2 * 8 * 64


def test_cli_runs_gpt_oss_120b_on_one_h100(capsys):
    assert main(["sim", "--model", "gpt-oss-120b", "--hardware", "h100", "--scenario", "offline", "--isl", "1024",
                 "--osl", "1024", "--num-requests", "200", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["tokens_per_s"] > 0 and f["tpot_ms"]["p50"] > 0
    assert f["config"]["precision"] == "fp8" and f["config"]["kv_blocks_per_replica"] > 0


def test_mxfp4_experts_compute_upcast_to_bf16_on_hopper_and_in_fp8_on_blackwell():
    # TensorRT-LLM's gpt-oss support matrix: bf16 activations on Hopper (W4A16), MXFP8 on Blackwell.
    h200, b200 = get_hardware("h200"), get_hardware("b200")
    assert expert_compute_precision("mxfp4", h200, "fp8") == "bf16"
    assert expert_compute_precision("mxfp4", b200, "fp4") == "fp8"
    assert expert_compute_precision(None, b200, "fp4") == "fp4"  # experts that follow the deployment
    prompt = StepShape(prefills=(PrefillChunk(4096, 0),))
    cost = step_cost(OSS, prompt, Parallel(), "fp8", 1)
    s = model_shape(OSS)
    assert cost.expert_format == "mxfp4"
    assert cost.expert_gemm_flops == 2 * 4096 * 36 * 4 * s.expert_params
    # The step's compute: the experts' FLOPs at the upcast bf16 rate (UPCAST_EXPERT_GEMM of the bf16
    # peak), the rest at FP8's, attention at FP8's.
    eff = h200.efficiency
    assert eff.upcast_expert_gemm == UPCAST_EXPERT_GEMM < eff.gemm_for("bf16")
    assert expert_gemm_rate("mxfp4", h200, "fp8") == h200.flops["bf16"] * UPCAST_EXPERT_GEMM
    assert expert_gemm_rate("mxfp4", b200, "fp4") == b200.flops["fp8"] * b200.efficiency.gemm_for("fp8")
    plain = replace(h200, efficiency=replace(eff, upcast_expert_gemm=None))  # e.g. a calibrated profile
    assert expert_gemm_rate("mxfp4", plain, "fp8") == h200.flops["bf16"] * eff.gemm_for("bf16")

    def rate(p):
        return h200.flops[p] * eff.gemm_for(p)
    expected = ((cost.gemm_flops - cost.expert_gemm_flops) / rate("fp8")
                + cost.expert_gemm_flops / (h200.flops["bf16"] * UPCAST_EXPERT_GEMM)
                + cost.attention_flops / (h200.flops["fp8"] * eff.attention_for("fp8")))
    assert step_time(cost, h200, "fp8").compute_s == pytest.approx(expected, rel=1e-12)
    # A model whose experts follow the deployment prices every GEMM at its precision, as before.
    llama = step_cost(get_model("llama3.1-8b"), prompt, Parallel(), "fp8", 1)
    assert llama.expert_format is None and llama.expert_gemm_flops == 0


def test_kv_cache_dtype_apart_from_the_weights(capsys):
    h200 = get_hardware("h200")
    bf16, fp8_cache = (Deployment(1, Parallel(), "bf16", kv_cache_dtype=kv) for kv in ("auto", "fp8"))
    assert bf16.kv_dtype_bytes == 2 and fp8_cache.kv_dtype_bytes == 1
    assert Deployment(1, Parallel(), "fp8").kv_dtype_bytes == 1  # auto follows the precision
    # The same weights, a cache of half the bytes per token: twice the blocks.
    assert kv_blocks(OSS, h200, fp8_cache, Parallel()) == pytest.approx(2 * kv_blocks(OSS, h200, bf16, Parallel()),
                                                                        abs=1)
    assert main(["sim", "--model", "gpt-oss-120b", "--hardware", "h200", "--precision", "bf16", "--kv-cache-dtype",
                 "fp8", "--isl", "128", "--osl", "16", "--num-requests", "20", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["config"]["precision"] == "bf16" and f["config"]["kv_cache_dtype"] == "fp8"


def test_published_gpt_oss_rows_run_their_recipe(monkeypatch):
    # The page's recipe: bf16 weights outside the experts; KV cache FP8 on Blackwell, "auto" (bf16) on Hopper.
    seen = []
    monkeypatch.setattr(validate, "predict", lambda arch, hw, d, w: seen.append(d) or {"tokens_per_s_per_gpu": 1.0})
    rows = [r for r in RESULTS if r.model == "gpt-oss-120b" and r.dataset is None]
    assert {(r.hardware, r.kv_cache_dtype) for r in rows} == {("b200", "fp8"), ("gb200", "fp8"), ("h200", "bf16"),
                                                             ("h100", "bf16")}
    for row in rows:
        seen.clear()
        validate.check_row(row, 10, seq_choices=(1,))
        assert seen and {(d.precision, d.kv_cache_dtype) for d in seen} == {("bf16", row.kv_cache_dtype)}
