"""Simulator cost model (sim/cost.py), hardware profiles (sim/hardware.py) and model
shapes (sim/models.py): hand-computed counts on a tiny arch, roofline regimes on real
shapes, and one published anchor. Pure arithmetic: no model is loaded."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from tokenmill.model.arch import ModelArch
from tokenmill.model.moe import MoEConfig
from tokenmill.sim.cost import Parallel, kv_bytes_per_token, step_cost, step_time, weight_bytes
from tokenmill.sim.expert_routing import ep_imbalance, expected_distinct_experts, remote_ranks_per_token
from tokenmill.sim.hardware import HARDWARE, Hardware, get_hardware
from tokenmill.sim.models import SIM_MODELS, get_model, model_shape
from tokenmill.sim.shapes import PrefillChunk, StepShape

# hidden 8, 2 layers, 2 query heads of 4 (q_size 8), 1 KV head (kv_size 4), MLP 16, vocab 100.
TINY = ModelArch(family="llama", vocab_size=100, hidden_size=8, intermediate_size=16, num_layers=2,
                 num_heads=2, num_kv_heads=1, head_dim=4, rms_norm_eps=1e-5, rope_theta=1e4,
                 max_position_embeddings=512, tie_word_embeddings=False)
# Per layer: attention 8*(8+2*4) + 8*8 = 192, MLP 3*8*16 = 384 -> 576; two layers 1152; lm_head 800.
TINY_LAYERS, TINY_HEAD = 1152, 800
# KV per token and layer: 2 x 1 head x 4 = 8 values; attention per attended pair and layer 4 x 8 = 32 FLOPs.
TINY_KV, TINY_PAIR = 8, 32


def test_tiny_decode_batch1_hand_counted():
    c = step_cost(TINY, StepShape(decode_contexts=(5,)), Parallel(), "bf16", kv_dtype_bytes=2)
    assert c.gemm_flops == 2 * (TINY_LAYERS + TINY_HEAD)
    assert c.attention_flops == 2 * TINY_PAIR * 6  # 5 cached keys + its own
    assert c.weight_bytes == (TINY_LAYERS + TINY_HEAD) * 2
    assert c.kv_read_bytes == 2 * TINY_KV * 5 * 2
    assert c.kv_write_bytes == 2 * TINY_KV * 1 * 2
    assert c.activation_bytes > 0
    assert c.comm_bytes == 0 and c.num_collectives == 0


def test_tiny_prefill_chunk_hand_counted():
    # 4 new tokens on 2 cached: causal pairs 4*2 + (1+2+3+4) = 18; logits for the chunk's last row only.
    c = step_cost(TINY, StepShape(prefills=(PrefillChunk(num_tokens=4, context=2),)), Parallel(), "bf16", 2)
    assert c.gemm_flops == 2 * (4 * TINY_LAYERS + 1 * TINY_HEAD)
    assert c.attention_flops == 2 * TINY_PAIR * 18
    assert c.weight_bytes == (TINY_LAYERS + TINY_HEAD) * 2
    assert c.kv_read_bytes == 2 * TINY_KV * 2 * 2
    assert c.kv_write_bytes == 2 * TINY_KV * 4 * 2


def test_speculative_decode_rows_attend_causally():
    # 3 rows per sequence on context 10 attend 11, 12, 13 keys; KV is read once per sequence.
    c = step_cost(TINY, StepShape(decode_contexts=(10,), tokens_per_decode=3), Parallel(), "bf16", 2)
    assert c.attention_flops == 2 * TINY_PAIR * (11 + 12 + 13)
    assert c.kv_read_bytes == 2 * TINY_KV * 10 * 2
    assert c.gemm_flops == 2 * 3 * (TINY_LAYERS + TINY_HEAD)


@pytest.mark.parametrize("name", sorted(SIM_MODELS))
def test_shapes_match_the_archs_own_counts(name):
    arch = SIM_MODELS[name]
    assert model_shape(arch).total_params() == arch.num_params()
    # One decode row at context c: our GEMM + attention FLOPs equal the arch's per-token figure
    # over c + 1 keys (DeepSeek: absorbed MLA in both; its arch also counts the two RMSNorm
    # weights per layer as matmul parameters, 0.002% more).
    c = step_cost(arch, StepShape(decode_contexts=(1000,)), Parallel(), "bf16", 2)
    norms_counted = 2 * 2 * arch.hidden_size * arch.num_layers if arch.family == "deepseek_v3" else 0
    assert c.gemm_flops + c.attention_flops == arch.flops_per_token(1001) - norms_counted


def test_published_parameter_counts():
    # Model cards: 8.03 B, 70.6 B, 405.9 B (Llama), 671 B (DeepSeek-R1); Llama-2-70B 68.98 B
    # (the HF checkpoint's parameter count).
    expected = {"llama3.1-8b": 8.03e9, "llama3.3-70b": 70.6e9, "llama3.1-405b": 405.9e9, "deepseek-r1": 671e9,
                "llama2-70b": 68.98e9}
    for name, n in expected.items():
        assert SIM_MODELS[name].num_params() == pytest.approx(n, rel=0.01), name


@pytest.mark.parametrize("name,nvidia_smi_mib", [("h100", 81_559), ("h200", 143_771), ("b200", 183_359),
                                                  ("gb200", 189_471), ("gb300", 284_208)])
def test_gpu_profiles_hold_the_memory_the_device_reports(name, nvidia_smi_mib):
    # The rated "80 GB" etc. are GiB: the profile is within 1% of nvidia-smi's total, where the same
    # figure read as 10^9 bytes is 6-7% short of it (docs/SIMULATOR-LOG.md, "... the GPUs' memory in GiB").
    reported = nvidia_smi_mib * 2**20
    assert get_hardware(name).memory_bytes == pytest.approx(reported, rel=0.01)


def test_decode_batch1_is_memory_bound_and_long_prefill_compute_bound_on_h100():
    arch, h100 = get_model("llama3.1-8b"), get_hardware("h100")
    decode = step_time(step_cost(arch, StepShape(decode_contexts=(1000,)), Parallel(), "bf16", 2), h100, "bf16")
    prefill = step_time(step_cost(arch, StepShape(prefills=(PrefillChunk(4096, 0),)), Parallel(), "bf16", 2),
                        h100, "bf16")
    assert decode.bound == "memory" and decode.memory_s > 50 * decode.compute_s
    assert prefill.bound == "compute" and prefill.compute_s > 3 * prefill.memory_s


def test_llama8b_batch1_decode_on_h100_matches_published_range():
    # Anchor: 16.06 GB of bf16 weights / 3.35 TB/s = 4.8 ms is the bandwidth roofline; LLM-Viewer
    # (Yuan et al. 2024) finds real decode 1.5-1.9x slower than the roofline, i.e. ~7-9 ms per token
    # (~110-140 tok/s single-stream). We accept 6-12 ms.
    arch = get_model("llama3.1-8b")
    assert weight_bytes(arch, "bf16") == pytest.approx(16.06e9, rel=0.001)
    cost = step_cost(arch, StepShape(decode_contexts=(512,)), Parallel(), "bf16", 2)
    # A step streams every weight but the embedding table (only the batch's rows are gathered).
    assert cost.weight_bytes == (8_030_261_248 - 128256 * 4096 - 65 * 4096) * 2
    t = step_time(cost, get_hardware("h100"), "bf16")
    assert 6e-3 <= t.total_s <= 12e-3


def test_distinct_experts_grow_from_top_k_to_all():
    assert expected_distinct_experts(1, 256, 8) == pytest.approx(8)
    assert expected_distinct_experts(0, 256, 8) == 0
    assert expected_distinct_experts(100_000, 256, 8) == pytest.approx(256)
    counts = [expected_distinct_experts(r, 256, 8) for r in (1, 2, 8, 32, 128)]
    assert counts == sorted(counts) and counts[1] < 16  # two rows overlap a little


def test_moe_weight_bytes_follow_rows_and_ep():
    moe = ModelArch(**{**TINY.__dict__, "family": "mixtral",
                       "moe": MoEConfig(num_experts=8, top_k=2, intermediate_size=16)})
    one = step_cost(moe, StepShape(decode_contexts=(5,)), Parallel(), "bf16", 2)
    many = step_cost(moe, StepShape(decode_contexts=(5,) * 512), Parallel(), "bf16", 2)
    expert_bytes = 384 * 2 * 2  # one expert (3*8*16) in bf16, two layers
    assert many.weight_bytes - one.weight_bytes == pytest.approx(expert_bytes * (8 - 2), rel=1e-6)
    ep = step_cost(moe, StepShape(decode_contexts=(5,) * 512), Parallel(ep=2, tp=2, attention_dp=True), "bf16", 2)
    assert ep.alltoall_bytes > 0 and ep.allreduce_bytes == 0
    assert many.weight_bytes - ep.weight_bytes == pytest.approx(expert_bytes * 8 / 2, rel=1e-6)


def test_all_to_all_sends_a_token_once_per_remote_rank_in_the_gemm_precision():
    # 8 experts over 2 ranks, top 2: the other rank owns neither with P = C(4,2)/C(8,2) = 6/28.
    assert remote_ranks_per_token(2, 8, 2) == pytest.approx(1 - 6 / 28)
    assert remote_ranks_per_token(8, 256, 1) == pytest.approx(7 / 8)  # top-1: the plain remote share
    assert remote_ranks_per_token(1, 256, 8) == 0.0
    assert 4.5 < remote_ranks_per_token(8, 256, 8) < 4.7  # DeepSeek-R1 over EP8: not 8 x 7/8 = 7
    r1, layout = get_model("deepseek-r1"), Parallel(tp=1, ep=8, attention_dp=True)
    shape, s = StepShape(decode_contexts=(1000,) * 512), model_shape(r1)
    per_token = {p: step_cost(r1, shape, layout, p, 1).alltoall_bytes / (512 / 8) for p in ("bf16", "fp8", "fp4")}
    scale = s.num_moe_layers * remote_ranks_per_token(8, 256, 8) * s.hidden * ep_imbalance(8, 256)
    # Dispatch in the GEMMs' precision (NVFP4 with its scales: 0.5625 bytes), combine in bf16.
    assert per_token["fp4"] == pytest.approx(scale * (0.5625 + 2), rel=1e-9)
    assert per_token["fp8"] == pytest.approx(scale * 3, rel=1e-9)
    assert per_token["bf16"] == pytest.approx(scale * 4, rel=1e-9)


def test_tp2_halves_weights_and_adds_allreduce():
    arch, shape = get_model("llama3.1-8b"), StepShape(decode_contexts=(100,) * 4)
    tp1 = step_cost(arch, shape, Parallel(tp=1), "bf16", 2)
    tp2 = step_cost(arch, shape, Parallel(tp=2), "bf16", 2)
    assert tp2.weight_bytes == pytest.approx(tp1.weight_bytes / 2)
    assert tp2.gemm_flops == pytest.approx(tp1.gemm_flops / 2)
    assert tp2.kv_read_bytes == pytest.approx(tp1.kv_read_bytes / 2)  # 8 KV heads split over 2
    # Two all-reduces per layer of 4 rows x 4096 x 2 bytes, ring factor 2(n-1)/n = 1.
    assert tp2.allreduce_bytes == pytest.approx(2 * 32 * 4 * 4096 * 2)
    assert tp1.comm_bytes == 0 and tp2.num_collectives == 64
    t1, t2 = (step_time(c, get_hardware("h100"), "bf16") for c in (tp1, tp2))
    assert t2.comm_s > 0 and t2.memory_s < t1.memory_s
    assert weight_bytes(arch, "bf16", Parallel(tp=2)) < weight_bytes(arch, "bf16") / 2 * 1.001


def test_mla_kv_bytes_per_token_deepseek_r1():
    r1 = get_model("deepseek-r1")
    assert kv_bytes_per_token(r1, 1) == (512 + 64) * 61 * 1
    # The latent is one per token: tensor parallelism replicates it, it does not split it.
    assert kv_bytes_per_token(r1, 1, Parallel(tp=8)) == (512 + 64) * 61
    llama = get_model("llama3.1-8b")
    assert kv_bytes_per_token(llama, 2) == 2 * 8 * 128 * 32 * 2
    assert kv_bytes_per_token(llama, 2, Parallel(tp=16)) == 2 * 8 * 128 * 32 * 2 / 8  # at most 8 heads split


def test_precision_bytes_and_weight_footprint():
    r1 = get_model("deepseek-r1")
    fp8, fp4 = weight_bytes(r1, "fp8"), weight_bytes(r1, "fp4")
    # 1 byte per parameter; embeddings, LM head, the 58 MoE layers' routers and the RMSNorm weights
    # stay bf16 (a second byte each).
    assert fp8 == r1.num_params() + 2 * 129280 * 7168 + 58 * 256 * 7168 + (2 * 61 + 1) * 7168
    assert fp4 < 0.6 * fp8
    per_device = weight_bytes(r1, "fp8", Parallel(tp=8, ep=8, attention_dp=True))
    assert per_device < get_hardware("h200").memory_bytes < fp8
    with pytest.raises(ValueError, match="--precision"):
        weight_bytes(r1, "int3")
    with pytest.raises(ValueError, match="--precision"):
        step_time(step_cost(r1, StepShape(decode_contexts=(1,)), Parallel(), "fp4", 1), get_hardware("h100"), "fp4")


def test_parallel_validation():
    with pytest.raises(ValueError, match="divide"):
        Parallel(tp=4, ep=6)
    with pytest.raises(ValueError, match=">= 1"):
        Parallel(tp=0)
    p = Parallel(tp=8, ep=8, attention_dp=True)
    assert (p.devices, p.attn_tp, p.dp, p.etp) == (8, 1, 8, 1)


def test_compute_and_memory_overlap_imperfectly_near_the_ridge():
    from dataclasses import replace

    from tokenmill.sim.cost import StepCost

    hw = replace(get_hardware("h100"), flops={"bf16": 1e15}, memory_bw=1e12, default_precision="bf16",
                 efficiency=replace(get_hardware("h100").efficiency, gemm=1.0, memory=1.0, step_overhead_s=0.0,
                                    seq_overhead_s=0.0))

    def forward(flops, bytes_):
        cost = StepCost(gemm_flops=flops, attention_flops=0.0, weight_bytes=bytes_, kv_read_bytes=0.0,
                        kv_write_bytes=0.0, activation_bytes=0.0, allreduce_bytes=0.0, alltoall_bytes=0.0,
                        num_collectives=0, devices=1)
        return step_time(cost, hw, "bf16").total_s

    assert forward(1e12, 1e9) == pytest.approx(2**0.5 * 1e-3)  # 1 ms of each: 1.41 ms, not 1 ms
    assert forward(1e12, 3e8) == pytest.approx(1.044e-3, rel=1e-3)  # far from the ridge: about the larger
    assert step_time(StepCost(1e12, 0.0, 1e9, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 1), replace(hw, overlap=False),
                     "bf16").total_s == pytest.approx(2e-3)  # a CPU profile adds them


def test_replica_beyond_nvlink_domain_uses_scale_out():
    arch, shape = get_model("llama3.1-405b"), StepShape(decode_contexts=(100,) * 256)
    h100 = get_hardware("h100")
    in_box = step_time(step_cost(arch, shape, Parallel(tp=8), "fp8", 1), h100, "fp8")
    two_boxes = step_time(step_cost(arch, shape, Parallel(tp=16), "fp8", 1), h100, "fp8")
    assert two_boxes.comm_s > 3 * in_box.comm_s


def test_hardware_round_trips_through_json():
    for hw in HARDWARE.values():
        d = json.loads(json.dumps(hw.to_dict()))
        assert Hardware.from_dict(d) == hw
        assert hw.sources and hw.price_per_hour > 0
        assert hw.default_precision in hw.flops
    with pytest.raises(ValueError, match="unknown keys"):
        Hardware.from_dict({**HARDWARE["h100"].to_dict(), "tflops": 1})


def test_profiles_are_dense_and_ordered():
    h100, h200, b200, gb300 = (get_hardware(n) for n in ("h100", "h200", "b200", "gb300"))
    assert h100.flops["bf16"] == pytest.approx(989.4e12)
    assert h100.flops["fp8"] == pytest.approx(2 * h100.flops["bf16"], rel=1e-3)
    assert "fp4" not in h100.flops and h200.flops == h100.flops
    assert h200.memory_bw > h100.memory_bw and b200.memory_bw > h200.memory_bw
    assert gb300.flops["fp4"] > b200.flops["fp4"] and gb300.scale_up_size == 72
    # The B300 is the GB300's chip at 1,100 W on an 8-GPU HGX board: between the two in FP4, the B200's FP8 and
    # bf16, and the GB300's fitted FP4 fraction (its kernels; hardware.py GB300_FP4_GEMM).
    b300 = get_hardware("b300")
    assert b200.flops["fp4"] < b300.flops["fp4"] < gb300.flops["fp4"] and b300.flops["fp8"] == b200.flops["fp8"]
    assert b300.efficiency.gemm_for("fp4") == gb300.efficiency.gemm_for("fp4") < b200.efficiency.gemm_for("fp4")
    assert b300.scale_up_size == 8 and b300.memory_bytes == 268 * 2**30 and b300.memory_bw == gb300.memory_bw


def test_h200_nvl_is_an_h200_at_the_pcie_cards_peaks():
    # The NVL card: the H200's memory, 1,671 / 1,979 of its tensor-core rates (NVIDIA's H200 page), NVLink
    # bridges of up to four cards. A compute-bound prefill slows by that ratio, a batch-1 decode (weights
    # streamed from the same HBM3e) hardly at all.
    from tokenmill.sim.calibrate import _gpu_base

    h200, nvl = get_hardware("h200"), get_hardware("h200-nvl")
    assert (nvl.memory_bytes, nvl.memory_bw) == (h200.memory_bytes, h200.memory_bw)
    assert nvl.flops["fp8"] == pytest.approx(1670.5e12, rel=1e-3) and nvl.flops["bf16"] == pytest.approx(835.5e12,
                                                                                                       rel=1e-3)
    assert nvl.scale_up_size == 4 and nvl.price_per_hour < h200.price_per_hour
    arch = get_model("llama3.1-8b")

    def seconds(hw, shape):
        return step_time(step_cost(arch, shape, Parallel(), "fp8", 1), hw, "fp8").forward_s

    prefill = StepShape(prefills=(PrefillChunk(num_tokens=8192, context=0),))
    assert seconds(nvl, prefill) / seconds(h200, prefill) == pytest.approx(1979 / 1671, rel=0.03)
    decode = StepShape(decode_contexts=(1000,))
    assert seconds(nvl, decode) / seconds(h200, decode) < 1.02
    # `sim calibrate --device cuda` starts from the profile the CUDA device's name names.
    assert _gpu_base("NVIDIA H200 NVL") is nvl and _gpu_base("NVIDIA H200") is h200
    assert _gpu_base("NVIDIA H100 80GB HBM3") is get_hardware("h100") and _gpu_base("Tesla T4") is None


def test_unknown_hardware_and_model_name_the_flag():
    with pytest.raises(ValueError, match="--hardware.*h100"):
        get_hardware("tpu-v9")
    with pytest.raises(ValueError, match="--model"):
        get_model("llama-9000")


def test_get_model_reads_presets_and_config_files(tmp_path):
    assert get_model("dummy:tiny").hidden_size == 128
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 100, "hidden_size": 8,
           "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    arch = get_model(str(tmp_path / "config.json"))
    assert model_shape(arch).total_params() == model_shape(TINY).total_params()
    assert get_model(str(tmp_path)).num_layers == 2


def test_attention_dp_kv_capacity_is_per_group():
    # Attention DP: each of the replica's devices caches its own sequences, so the replica
    # holds dp times one device's KV; tensor parallel shards one cache over the devices instead.
    from tokenmill.sim.cost import Parallel, weight_bytes
    from tokenmill.sim.predict import PRECISION_BYTES_KV, Deployment, check_deployment

    arch, hw = get_model("deepseek-r1"), get_hardware("b200")
    layout = Parallel(tp=1, ep=8, attention_dp=True)
    blocks = check_deployment(arch, hw, Deployment(8, layout, "fp4"))
    room = hw.memory_bytes * 0.9 - weight_bytes(arch, "fp4", layout)
    one_device = room / (kv_bytes_per_token(arch, PRECISION_BYTES_KV["fp4"], layout) * 16)
    assert blocks == int(8 * one_device)


def test_gemm_fraction_per_precision_replaces_the_default_for_that_precision_only():
    from dataclasses import replace

    from tokenmill.sim.hardware import Efficiency

    arch, h100 = get_model("llama3.1-8b"), get_hardware("h100")
    prefill = StepShape(prefills=(PrefillChunk(4096, 0),))
    plain = replace(h100, efficiency=replace(h100.efficiency, gemm_by_precision={}))  # 0.7 for every precision
    slow_fp8 = replace(h100, efficiency=replace(h100.efficiency, gemm_by_precision={"fp8": 0.35}))

    def compute(hw, precision):
        return step_time(step_cost(arch, prefill, Parallel(), precision, 1), hw, precision).compute_s

    # Half the fraction: the GEMM part of a compute-bound prefill takes twice as long in fp8, bf16 unchanged.
    assert compute(slow_fp8, "fp8") > 1.8 * compute(plain, "fp8")
    assert compute(slow_fp8, "bf16") == compute(plain, "bf16") == compute(h100, "bf16")
    # The profiles' default: the fitted low-precision fractions (hardware.py LOW_PRECISION_GEMM).
    assert h100.efficiency.gemm_for("fp8") == 0.52 and h100.efficiency.gemm_for("bf16") == 0.7
    # Blackwell Ultra (GB300, and the B300 with it) has an FP4 fraction of its own (hardware.py GB300_FP4_GEMM,
    # fitted on the GB300 racks' runs), below the one the B200 and GB200 share; its FP8 and bf16 fractions are theirs.
    gb300, gb200 = get_hardware("gb300").efficiency, get_hardware("gb200").efficiency
    assert gb300.gemm_for("fp4") == 0.26 < gb200.gemm_for("fp4") == get_hardware("b200").efficiency.gemm_for("fp4")
    assert gb300.gemm_for("fp8") == gb200.gemm_for("fp8") and gb300.gemm_for("bf16") == gb200.gemm_for("bf16")
    with pytest.raises(ValueError, match="gemm_by_precision"):
        Efficiency(gemm_by_precision={"int3": 0.5})
    with pytest.raises(ValueError, match=r"gemm_by_precision\[fp4\]"):
        Efficiency(gemm_by_precision={"fp4": 1.5})


def test_expert_parallel_step_runs_at_the_busiest_ranks_pace():
    # The published anchor: DeepSeek-R1's 256 experts over 32 ranks, busiest rank 2.56x the mean.
    assert ep_imbalance(32, 256) == pytest.approx(2.56, abs=0.01)
    assert ep_imbalance(1, 256) == 1.0 and ep_imbalance(8, 0) == 1.0
    values = [ep_imbalance(e, 256) for e in (2, 4, 8, 16, 32, 64)]
    assert values == sorted(values) and values[0] > 1.0
    # Expert GEMMs and all-to-all grow by the factor; the attention and the weights read do not.
    r1, shape = get_model("deepseek-r1"), StepShape(decode_contexts=(1000,) * 512)
    layout = Parallel(tp=1, ep=8, attention_dp=True)
    busiest = step_cost(r1, shape, layout, "fp8", 1)
    balanced = busiest.gemm_flops - 2 * 512 * 58 * 8 * model_shape(r1).expert_params * (ep_imbalance(8, 256) - 1) / 8
    mean = step_cost(r1, shape, Parallel(tp=1, ep=1, attention_dp=False), "fp8", 1)
    assert balanced == pytest.approx(mean.gemm_flops / 8, rel=1e-9)
    assert busiest.weight_bytes < mean.weight_bytes and busiest.alltoall_bytes > 0


def test_attention_over_an_fp8_kv_cache_computes_in_fp8():
    from dataclasses import replace

    from tokenmill.sim.hardware import FP8_ATTENTION, Efficiency

    arch, h100 = get_model("llama3.1-8b"), get_hardware("h100")
    long_chunk = StepShape(prefills=(PrefillChunk(2048, 16000),))  # attention-heavy: 18k keys per row
    fp8_kv, bf16_kv = (step_cost(arch, long_chunk, Parallel(), "fp8", kv) for kv in (1, 2))
    assert (fp8_kv.attention_precision, bf16_kv.attention_precision) == ("fp8", "bf16")
    assert fp8_kv.attention_flops == bf16_kv.attention_flops
    no_gemm = replace(fp8_kv, gemm_flops=0.0)
    attention_s = step_time(no_gemm, h100, "fp8").compute_s
    assert attention_s == pytest.approx(no_gemm.attention_flops / (h100.flops["fp8"] * FP8_ATTENTION))
    bf16_s = step_time(replace(no_gemm, attention_precision="bf16"), h100, "fp8").compute_s
    assert bf16_s == pytest.approx(no_gemm.attention_flops / (h100.flops["bf16"] * h100.efficiency.attention))
    assert attention_s < 0.65 * bf16_s  # 2x the peak at 0.8 of the share
    # A device without FP8 (a CPU profile) computes it at bf16.
    cpu = replace(h100, flops={"bf16": 1e12, "fp32": 5e11}, default_precision="bf16")
    assert step_time(no_gemm, cpu, "bf16").compute_s == pytest.approx(no_gemm.attention_flops / (1e12 * 0.5))
    with pytest.raises(ValueError, match=r"attention_by_precision\[fp8\]"):
        Efficiency(attention_by_precision={"fp8": 0.0})


def test_fused_allreduce_overlaps_the_tensor_parallel_all_reduces():
    arch, h100 = get_model("llama3.1-405b"), get_hardware("h100")
    chunk = StepShape(prefills=(PrefillChunk(8192, 0),))
    cost = step_cost(arch, chunk, Parallel(tp=8), "fp8", 1)
    apart, fused = step_time(cost, h100, "fp8"), step_time(cost, h100, "fp8", fused_allreduce=True)
    link = h100.interconnect_bw * h100.efficiency.comm
    allreduce, floor = cost.allreduce_bytes / link, cost.num_collectives * h100.efficiency.collective_latency_s
    assert apart.comm_s == pytest.approx(allreduce + floor)
    # Fused, the all-reduces overlap the forward by the compute/memory rule: only what sqrt adds shows.
    assert fused.comm_s == pytest.approx(math.hypot(fused.forward_s, allreduce) - fused.forward_s + floor)
    assert fused.forward_s == pytest.approx(apart.forward_s) and fused.total_s < apart.total_s - 0.5 * allreduce
    # Nothing to fuse without tensor parallelism (the all-to-alls of expert parallelism stay apart).
    one = step_cost(arch, chunk, Parallel(tp=1), "fp8", 1)
    assert step_time(one, h100, "fp8", fused_allreduce=True) == step_time(one, h100, "fp8")


def test_routed_experts_stream_at_their_own_fraction_of_hbm():
    from dataclasses import replace

    from tokenmill.sim.hardware import EXPERT_WEIGHT_STREAM, Efficiency

    gb300 = get_hardware("gb300")
    assert gb300.efficiency.expert_stream == EXPERT_WEIGHT_STREAM
    r1, shape = get_model("deepseek-r1"), StepShape(decode_contexts=(3000,) * 2048)
    cost = step_cost(r1, shape, Parallel(tp=8, ep=8, attention_dp=True), "fp4", 1)
    # Every expert of the rank is touched at 2,048 rows: its 32 of 256, all 58 MoE layers.
    experts = 58 * 256 / 8 * model_shape(r1).expert_params * 0.5625
    assert cost.expert_weight_bytes == pytest.approx(experts, rel=0.01)
    assert 0 < cost.expert_weight_bytes < cost.weight_bytes
    memory = step_time(cost, gb300, "fp4").memory_s
    rest = cost.memory_bytes - cost.expert_weight_bytes
    assert memory == pytest.approx((cost.expert_weight_bytes / EXPERT_WEIGHT_STREAM + rest / 0.75) / 8e12)
    # None (a calibrated profile): the experts stream as the rest does.
    plain = replace(gb300, efficiency=replace(gb300.efficiency, expert_stream=None))
    assert step_time(cost, plain, "fp4").memory_s == pytest.approx(cost.memory_bytes / 0.75 / 8e12)
    # A dense model has no routed experts: its step is the same under either profile.
    dense = step_cost(get_model("llama3.1-8b"), shape, Parallel(), "fp4", 1)
    assert dense.expert_weight_bytes == 0
    assert step_time(dense, gb300, "fp4") == step_time(dense, plain, "fp4")
    with pytest.raises(ValueError, match="expert_stream"):
        Efficiency(expert_stream=0.0)


def test_one_gemm_is_priced_close_to_deepgemms_published_h800_table():
    import statistics

    from benchmarks.sim_gemm_kernels import CONTIGUOUS, DENSE, MASKED, modelled_seconds

    ratios = [modelled_seconds(g, m, n, k) / (2.0 * g * m * n * k / (t * 1e12))
              for g, m, n, k, t in DENSE + CONTIGUOUS + MASKED]
    assert len(ratios) == 28
    assert 0.95 <= statistics.median(ratios) <= 1.15  # 1.05 on 2026-11-28
    assert 0.65 <= min(ratios) and max(ratios) <= 1.4  # 0.69-1.33: small-N latency floors, DeepGEMM's faster peak


def test_tensorrt_llm_sizes_the_kv_cache_from_the_memory_left_free():
    # kv_cache_free_gpu_mem_fraction: a share of what weights and runtime buffers leave, not of the whole device.
    from tokenmill.sim.cost import Parallel, weight_bytes
    from tokenmill.sim.predict import PRECISION_BYTES_KV, Deployment, check_deployment, runtime_buffer_bytes

    arch, hw = get_model("deepseek-r1"), get_hardware("h200")
    layout = Parallel(tp=1, ep=8, attention_dp=True)
    ours, trt = Deployment(8, layout, "fp8"), Deployment(8, layout, "fp8", kv_free_fraction=0.9)
    weights = weight_bytes(arch, "fp8", layout)
    buffers = runtime_buffer_bytes(arch, trt, layout)
    # 2 GiB fixed + one rank's 8,192-token step of 7,168-wide bf16 activations, 10 copies
    assert buffers == 2 * 2**30 + 8192 * 7168 * 2 * 10
    per_block = kv_bytes_per_token(arch, PRECISION_BYTES_KV["fp8"], layout) * 16
    assert check_deployment(arch, hw, trt) == int(8 * 0.9 * (hw.memory_bytes - weights - buffers) / per_block)
    assert check_deployment(arch, hw, ours) == int(8 * (0.9 * hw.memory_bytes - weights) / per_block)
    # A tenth of ~94 GiB of weights per device, less the buffers: the larger cache by about a fifth
    assert 1.15 < check_deployment(arch, hw, trt) / check_deployment(arch, hw, ours) < 1.25
    with pytest.raises(ValueError, match="--tp/--ep"):  # weights beyond the memory still refuse
        check_deployment(arch, get_hardware("h100"), replace(trt, num_gpus=1, parallel=Parallel()))
    # A profile's own cache (this machine's engine default) yields to an asked-for fraction, not to nothing
    set_cache = replace(hw, kv_cache_bytes=2**30)
    assert check_deployment(arch, set_cache, ours) == int(8 * 2**30 / per_block)
    assert check_deployment(arch, set_cache, trt) == check_deployment(arch, hw, trt)
