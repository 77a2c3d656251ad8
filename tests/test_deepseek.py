"""DeepSeek-V3/R1 (MLA latent cache, grouped sigmoid MoE) against HF transformers.

A tiny random DeepseekV3ForCausalLM (a dense first layer, 16 experts in 4
groups, q_lora, YaRN with mscale) is built with transformers, saved as a
safetensors directory and loaded by tokenmill's HF loader: logits through the
paged latent cache (prefill chunks and single-token decodes) and greedy tokens
through the whole engine must match transformers'; chunked prefill, prefix
cache hits and preemption must not change the tokens; the absorbed attention
must equal the expanded form; the router must choose HF's experts, ties
included; FP8 block-quantized and stacked-expert checkpoints must load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _reference import paged_logits
from _tiny_hf import hf_greedy, save_checkpoint

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS
from tokenmill.model.deepseek_arch import arch_from_hf_config, hf_config
from tokenmill.model.deepseek_weights import dequantize_fp8
from tokenmill.model.loaders import load_model
from tokenmill.model.loaders.dummy import dummy_arch
from tokenmill.model.moe import MoEConfig, Router
from tokenmill.sampling_params import SamplingParams

transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

CPU = torch.device("cpu")


def tiny_config(**overrides):
    cfg = dict(vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
               n_routed_experts=16, routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=64,
               qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=4, topk_group=2,
               num_experts_per_tok=4, first_k_dense_replace=1, max_position_embeddings=1024,
               rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
                                "mscale_all_dim": 1.0, "original_max_position_embeddings": 256,
                                "beta_fast": 32, "beta_slow": 1})
    return transformers.DeepseekV3Config(**(cfg | overrides))


def build_hf(config, seed=0):
    torch.manual_seed(seed)
    model = transformers.DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():  # random init leaves the correction bias at zero: make it matter
        for layer in model.model.layers[config.first_k_dense_replace:]:
            layer.mlp.gate.e_score_correction_bias.normal_(0, 0.05)
    return model


@pytest.fixture(scope="module")
def hf_tiny(tmp_path_factory):
    model = build_hf(tiny_config())
    return model, save_checkpoint(model, tmp_path_factory.mktemp("deepseek-tiny"))


@pytest.fixture(scope="module")
def ours(hf_tiny):
    return load_model(str(hf_tiny[1]), "auto", CPU, torch.float32).model


def prompts(n=3, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 512, (length,), generator=gen).tolist() for length in (150, 41, 7)[:n]]


@pytest.mark.parametrize("chunk", [37, 1])
def test_logits_match_hf(hf_tiny, ours, chunk):
    """chunk 37: prefill chunks over cached context; chunk 1: every row a single-token decode."""
    hf, _ = hf_tiny
    for ids in prompts():
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0]
        torch.testing.assert_close(paged_logits(ours, ids, chunk=chunk), ref, atol=2e-5, rtol=1e-4)


def test_no_q_lora_and_plain_rope_match_hf(tmp_path):
    """The other query path (one q projection) and rope without YaRN, non-interleaved."""
    cfg = tiny_config(q_lora_rank=None, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                      rope_interleave=False, first_k_dense_replace=0, n_group=1, topk_group=1)
    hf = build_hf(cfg)
    model = load_model(str(save_checkpoint(hf, tmp_path)), "auto", CPU, torch.float32).model
    ids = prompts(1)[0]
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(paged_logits(model, ids, chunk=29), ref, atol=2e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def engines(hf_tiny):
    """A roomy engine, and a stressed one (tiny step budget: chunked prompts; 8 KV
    blocks: preemption; prefix caching on)."""
    common = dict(model=str(hf_tiny[1]), dtype="float32", device="cpu", max_model_len=96)
    return (LLMEngine(EngineConfig(**common, num_kv_blocks=64, enable_prefix_caching=False)),
            LLMEngine(EngineConfig(**common, max_num_batched_tokens=16, num_kv_blocks=8, block_size=16,
                                   enable_prefix_caching=True)))


@pytest.mark.parametrize("backend", ["torch", "cpp"])
def test_greedy_tokens_match_hf(hf_tiny, backend):
    """torch: latent attention as multi-query SDPA / batched matmuls; cpp: the C++
    latent kernel (csrc/mla_decode_attention.cpp)."""
    if backend == "cpp" and load_cpu_kernels() is None:
        pytest.skip("the C++ kernels do not build here")
    hf, path = hf_tiny
    engine = LLMEngine(EngineConfig(model=str(path), dtype="float32", device="cpu", num_kv_blocks=64,
                                    attention_backend=backend, max_num_batched_tokens=48))
    assert (engine.core.runner.latent_kernel is not None) == (backend == "cpp")
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    batch = [p[:60] for p in prompts()]
    got = engine.generate(batch, params)
    for prompt, result in zip(batch, got):
        assert result.token_ids == hf_greedy(hf, prompt, 12)


def test_chunking_prefix_hits_and_preemption_keep_the_tokens(engines):
    plain, stress = engines
    shared = [(7 * i) % 500 + 3 for i in range(32)]
    batch = [shared + [(11 * i + j) % 500 + 3 for j in range(30)] for i in range(4)]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    before = stress.stats()
    together = stress.generate(batch, params)
    after = stress.stats()
    assert after.num_preemptions > before.num_preemptions
    assert after.prefix_cache_hits > before.prefix_cache_hits
    for prompt, result in zip(batch, together):
        assert result.token_ids == plain.generate([prompt], params)[0].token_ids


def expanded_logits(model, ids):
    """The whole sequence without any cache, every layer's attention in HF's expanded form."""
    ops = TORCH_FUSED_OPS
    x = model.embed_tokens(torch.tensor(ids))
    rope = ops.rope_inputs(model.rope_cos, model.rope_sin, torch.arange(len(ids)), x.dtype)
    x, pending = x.float(), None
    for layer in model.layers:
        attn_out = layer.self_attn.forward_expanded(layer.input_layernorm(x, pending, ops), rope, ops)
        pending = layer.mlp(layer.post_attention_layernorm(x, attn_out, ops), ops)
    return model.compute_logits(model.norm(x, pending, ops))


@pytest.mark.parametrize("chunk", [150, 1])
def test_absorbed_attention_equals_expanded(ours, chunk):
    ids = prompts(1)[0]
    with torch.no_grad():
        ref = expanded_logits(ours, ids)
    torch.testing.assert_close(paged_logits(ours, ids, chunk=chunk), ref, atol=2e-5, rtol=1e-4)


def test_latent_cache_bytes_per_token():
    """DeepSeek-R1: 61 layers x (512 + 64) values; expanded K and V would hold
    128 heads x (192 + 128) per layer."""
    arch = dummy_arch("deepseek-r1")
    with torch.device("meta"):
        from tokenmill.model.deepseek import DeepseekV3ForCausalLM
        spec = DeepseekV3ForCausalLM(arch, 16).kv_cache_spec()
    assert spec.parts == ("latent",) and spec.elements_per_token() == 576
    assert spec.bytes_per_token(2) == 61 * 576 * 2
    expanded = 61 * 128 * (192 + 128) * 2
    assert expanded / spec.bytes_per_token(2) == pytest.approx(71.1, abs=0.1)
    assert arch.num_params() == pytest.approx(671.0e9, rel=1e-3)


@pytest.mark.parametrize("preset", ["deepseek-v3-tiny", "deepseek-v3-bench", "deepseek-r1"])
def test_presets_round_trip_through_config_json(preset):
    arch = dummy_arch(preset)
    assert arch_from_hf_config(hf_config(arch)) == arch


def make_routers(seed=0):
    cfg = tiny_config()
    hf = transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3TopkRouter(cfg)
    moe = MoEConfig(num_experts=16, top_k=4, intermediate_size=64, scoring="sigmoid", num_groups=4, topk_groups=2,
                    norm_topk_prob=True, routed_scaling_factor=2.5, num_shared_experts=1, score_correction_bias=True)
    ours = Router(128, moe)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        # Ties on purpose: in each group of 4, experts 1 and 2 copy expert 0 (top-4 cuts
        # through such triples), and group 3 copies group 1 (top-2 groups cut between them).
        weight = torch.randn(16, 128, generator=gen)
        bias = torch.randn(16, generator=gen).mul_(0.05)
        for t in (weight, bias):
            t[12:] = t[4:8]
            for g in range(4):
                t[4 * g + 1] = t[4 * g + 2] = t[4 * g]
        for r in (hf, ours):
            r.weight.copy_(weight)
            r.e_score_correction_bias.copy_(bias)
    return hf, ours


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_router_choice_equals_hf_ties_included(seed):
    hf, ours = make_routers(seed)
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(seed + 10))
    x[32:] = x[32:].round()  # coarse inputs: more exactly equal scores
    with torch.no_grad():
        _, ref_weights, ref_experts = hf(x)
        routing = ours(x)
    assert boundary_ties(ours, x, routing) > 5  # the inputs do exercise tie-breaking
    ref_order, our_order = ref_experts.argsort(dim=-1), routing.experts.argsort(dim=-1)
    assert torch.equal(routing.experts.gather(1, our_order), ref_experts.gather(1, ref_order))
    torch.testing.assert_close(routing.weights.gather(1, our_order), ref_weights.gather(1, ref_order))


def boundary_ties(router, x, routing) -> int:
    """Rows where an expert left out scores exactly like the weakest one chosen."""
    with torch.no_grad():
        s = torch.nn.functional.linear(x, router.weight).sigmoid() + router.e_score_correction_bias
    chosen = torch.zeros_like(s, dtype=torch.bool).scatter_(1, routing.experts, True)
    weakest = s.masked_fill(~chosen, float("inf")).min(dim=1).values
    return int(((s == weakest[:, None]) & ~chosen).any(dim=1).sum())


def rewrite_checkpoint(src: Path, dst: Path, change) -> Path:
    """Copy an HF directory, passing its tensors (name -> tensor) and config through ``change``."""
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors |= load_file(str(f))
    cfg = json.loads((src / "config.json").read_text())
    tensors, cfg = change(tensors, cfg)
    save_file(tensors, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_fp8_block_quantized_checkpoint(hf_tiny, tmp_path):
    """Every 2-D projection stored as float8_e4m3fn with 128 x 128 block scales,
    as DeepSeek ships; the loader dequantizes each block with its scale."""
    src = hf_tiny[1]
    originals = {}

    def to_fp8(tensors, cfg):
        out = {}
        for name, t in tensors.items():
            if t.dim() == 2 and name.endswith("proj.weight"):
                rows, cols = -(-t.shape[0] // 128), -(-t.shape[1] // 128)
                scale = torch.rand(rows, cols) * 1e-3 + 1e-3
                q = (t / scale.repeat_interleave(128, 0)[:t.shape[0]].repeat_interleave(128, 1)[:, :t.shape[1]])
                out[name] = q.to(torch.float8_e4m3fn)
                out[name + "_scale_inv"] = scale
                originals[name] = (out[name], scale)
            else:
                out[name] = t
        cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
        return out, cfg

    fp8_dir = rewrite_checkpoint(src, tmp_path / "fp8", to_fp8)
    model = load_model(str(fp8_dir), "hf", CPU, torch.float32).model
    w, s = originals["model.layers.0.mlp.down_proj.weight"]
    expect = torch.empty(w.shape)
    for i in range(0, w.shape[0], 128):  # block by block, independently of dequantize_fp8
        for j in range(0, w.shape[1], 128):
            expect[i:i + 128, j:j + 128] = w[i:i + 128, j:j + 128].float() * s[i // 128, j // 128]
    assert torch.equal(model.layers[0].mlp.down_proj.weight, expect)
    assert torch.equal(dequantize_fp8(w, s, (128, 128)), expect)
    w, s = originals["model.layers.1.mlp.experts.3.up_proj.weight"]
    assert torch.equal(model.layers[1].mlp.experts.w13[3].weight[64:], dequantize_fp8(w, s, (128, 128)))


def test_stacked_experts_checkpoint_loads_the_same(hf_tiny, ours, tmp_path):
    def stack(tensors, cfg):
        out = {k: v for k, v in tensors.items() if ".mlp.experts." not in k}
        for layer in (1, 2):
            p = f"model.layers.{layer}.mlp.experts."
            gate_up = [torch.cat([tensors[f"{p}{e}.gate_proj.weight"], tensors[f"{p}{e}.up_proj.weight"]])
                       for e in range(16)]
            out[p + "gate_up_proj"] = torch.stack(gate_up)
            out[p + "down_proj"] = torch.stack([tensors[f"{p}{e}.down_proj.weight"] for e in range(16)])
        return out, cfg

    model = load_model(str(rewrite_checkpoint(hf_tiny[1], tmp_path / "stacked", stack)), "hf", CPU,
                       torch.float32).model
    for a, b in zip(model.state_dict().values(), ours.state_dict().values()):
        assert torch.equal(a, b)


def test_missing_and_unexpected_weights_are_named(hf_tiny, tmp_path):
    def drop(tensors, cfg):
        del tensors["model.layers.2.mlp.experts.5.down_proj.weight"]
        return tensors, cfg

    with pytest.raises(ValueError, match=r"layers\.2\.mlp\.experts\.w2\.5"):
        load_model(str(rewrite_checkpoint(hf_tiny[1], tmp_path / "missing", drop)), "hf", CPU, torch.float32)

    def extra(tensors, cfg):
        tensors["model.layers.0.self_attn.bogus.weight"] = torch.zeros(2)
        return tensors, cfg

    with pytest.raises(ValueError, match="bogus"):
        load_model(str(rewrite_checkpoint(hf_tiny[1], tmp_path / "extra", extra)), "hf", CPU, torch.float32)

    def no_q_lora(tensors, cfg):
        cfg["q_lora_rank"] = None
        return tensors, cfg

    with pytest.raises(ValueError, match=r"unexpected weight 'model\.layers\.0\.self_attn\.q_a"):
        load_model(str(rewrite_checkpoint(hf_tiny[1], tmp_path / "no_q_lora", no_q_lora)), "hf", CPU, torch.float32)


def test_tiny_preset_runs_in_bfloat16():
    engine = LLMEngine(EngineConfig(model="dummy:deepseek-v3-tiny", dtype="bfloat16", device="cpu",
                                    num_kv_blocks=32))
    out = engine.generate([[5, 6, 7, 8] * 10], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    assert len(out[0].token_ids) == 8
    router = engine.core.model.layers[1].mlp.gate
    assert router.weight.dtype == torch.float32 and router.e_score_correction_bias.dtype == torch.float32


@pytest.mark.skipif(load_cpu_kernels() is None, reason="--deterministic needs the C++ kernels")
def test_deterministic_mode_refuses_moe_and_latent_weights():
    with pytest.raises(ValueError, match=r"deterministic: .*w_uk"):
        LLMEngine(EngineConfig(model="dummy:deepseek-v3-tiny", deterministic=True, num_kv_blocks=16))


def test_latent_kv_blocks_transfer_between_engines():
    """Disaggregated serving's KV handoff (engine/kv_transfer.py) carries the
    one-part latent cache: a prompt prefilled on one engine continues on another
    exactly as on a single engine (float32, one prefill chunk, batch of one on
    each side, so the same ops run in the same shapes)."""
    from test_kv_transfer import prefill_then_decode

    from tokenmill.engine.core import EngineCore

    config = EngineConfig(model="dummy:deepseek-v3-tiny", dtype="float32", device="cpu", num_kv_blocks=32,
                          max_model_len=256, max_num_batched_tokens=64)
    prompt = list(range(40, 40 + 3 * config.block_size + 5))
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    want = LLMEngine(config).generate([prompt], params)[0].token_ids
    prefill, decode = EngineCore(config), EngineCore(config)
    tokens, reason, sent = prefill_then_decode(prefill, decode, "r", prompt, params)
    assert tokens == want and reason == "length" and sent == 4
    assert decode.kv_layout.parts == ("latent",)
    assert prefill.pool.num_used_blocks == 0 == decode.pool.num_used_blocks
