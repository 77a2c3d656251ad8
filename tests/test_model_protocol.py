"""The model boundary: the CausalLM protocol, KV cache specs and layout, and
the model registry, exercised with a second architecture whose cache holds
one part per token (tests/_latent_model.py) next to the Llama family."""

from __future__ import annotations

import json

import pytest
import torch
from _latent_model import HF_NAME, LATENT_ENTRY, LatentArch, LatentForCausalLM

from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.request import Request
from tokenmill.engine.runner import ModelRunner
from tokenmill.engine.scheduler import Scheduler
from tokenmill.kernels.cpu_kernels import load_cpu_kernels, missing_toolchain
from tokenmill.model import registry
from tokenmill.model.kv_cache_spec import KVCacheSpec, allocate_kv_caches
from tokenmill.model.loaders import load_model
from tokenmill.model.protocol import ArchInfo, CausalLM
from tokenmill.sampling_params import SamplingParams

CPU = torch.device("cpu")


@pytest.fixture
def latent_registered():
    registry.register(LATENT_ENTRY)
    yield LATENT_ENTRY
    registry.unregister(LATENT_ENTRY.name)


def latent_model(seed: int = 0) -> LatentForCausalLM:
    torch.manual_seed(seed)
    model = LatentForCausalLM(LatentArch(), LatentArch().max_position_embeddings).eval()
    with torch.no_grad():  # unit-scale embeddings: logits far from uniform, differences visible
        model.embed_tokens.weight.normal_()
        model.embed_positions.weight.normal_()
    return model


def decode_kernels():
    kernels = [None]
    if missing_toolchain() is None:
        module = load_cpu_kernels()
        assert module is not None, "the C++ kernel failed to build (see the warning in the log)"
        kernels.append(module.paged_decode_attention)
    return kernels


def test_models_satisfy_the_protocol():
    model = latent_model()
    assert isinstance(model, CausalLM) and isinstance(model.arch, ArchInfo)
    llama = load_model("dummy:tiny", "dummy", CPU, torch.float32).model
    assert isinstance(llama, CausalLM) and isinstance(llama.arch, ArchInfo)


def test_cache_shape_follows_the_spec():
    runner = ModelRunner(latent_model(), num_blocks=6, block_size=4, device=CPU, dtype=torch.float32)
    assert runner.kv_cache_spec == KVCacheSpec(num_layers=2, parts=("latent",), num_heads=1, head_dim=48)
    assert [tuple(c.shape) for c in runner.kv_caches] == [(6, 1, 1, 4, 48)] * 2
    llama = load_model("dummy:tiny", "dummy", CPU, torch.bfloat16).model
    runner = ModelRunner(llama, num_blocks=5, block_size=8, device=CPU, dtype=torch.bfloat16)
    assert [tuple(c.shape) for c in runner.kv_caches] == [(5, 2, 2, 8, 32)] * 2  # [N, (K, V), Hkv, bs, D]
    assert all(c.is_contiguous() and c.dtype == torch.bfloat16 for c in runner.kv_caches)


def test_bytes_per_token():
    latent = latent_model().kv_cache_spec()
    assert latent.bytes_per_token(2) == 2 * 48 * 2  # layers x one 48-wide latent x bf16
    llama = load_model("dummy:tiny", "dummy", CPU, torch.float32).model
    spec = llama.kv_cache_spec()
    assert spec.bytes_per_token(4) == 2 * 2 * 2 * 32 * 4  # layers x (K, V) x Hkv x D x fp32
    for s in (latent, spec):  # what the runner allocates is what the engine budgets
        caches = allocate_kv_caches(s, 7, 16, CPU, torch.bfloat16)
        assert sum(c.numel() * c.element_size() for c in caches) == s.bytes_per_token(2) * 7 * 16


def test_spec_rejects_bad_fields():
    with pytest.raises(ValueError, match="head_dim"):
        KVCacheSpec(num_layers=2, parts=("k", "v"), num_heads=2, head_dim=0)
    with pytest.raises(ValueError, match="parts"):
        KVCacheSpec(num_layers=2, parts=(), num_heads=1, head_dim=8)


def run_through_runner(model, prompts, max_tokens, decode_kernel):
    """Greedy generation through Scheduler + ModelRunner.execute (chunked
    prefill, decodes batched beside prefills). Returns, per request, the
    sequence it ended with and the logits row of every step that sampled it."""
    block_size = 4
    kv = KVCacheManager(BlockPool(16, block_size))
    sched = Scheduler(kv, max_num_seqs=4, max_num_batched_tokens=7)  # 7: prompts are chunked
    runner = ModelRunner(model, 16, block_size, CPU, torch.float32, decode_kernel)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    requests = [Request(f"r{i}", p, params) for i, p in enumerate(prompts)]
    for r in requests:
        sched.add(r)
    rows = {r.request_id: [] for r in requests}
    while sched.has_work():
        out = sched.schedule()
        result = runner.execute(out, kv)
        sampled = {}
        for s, logits in zip(result.sampling, result.logits):
            rows[s.request.request_id].append(logits)
            sampled[s.request.request_id] = [int(logits.argmax())]
        sched.update(out, sampled)
    return {r.request_id: (list(r.token_ids), torch.stack(rows[r.request_id])) for r in requests}


@pytest.mark.parametrize("kernel", decode_kernels(), ids=lambda k: "torch" if k is None else "cpp")
def test_one_part_cache_matches_full_recompute(kernel):
    model = latent_model()
    prompts = [[5, 17, 3, 99, 42, 8, 8, 1, 60, 23, 77, 4, 31], [9, 2, 50, 11, 6], [70]]
    max_tokens = 6
    with torch.inference_mode():
        results = run_through_runner(model, prompts, max_tokens, kernel)
        for prompt, (tokens, rows) in zip(prompts, results.values()):
            assert len(tokens) == len(prompt) + max_tokens and len(rows) == max_tokens
            # Row i sampled token len(prompt) + i from the sequence before it.
            ref = model.reference_logits(tokens[:-1])[len(prompt) - 1:]
            torch.testing.assert_close(rows, ref, atol=1e-4, rtol=1e-4)


def test_unknown_architecture_names_the_registered_ones(latent_registered):
    with pytest.raises(ValueError, match=r"GPT2LMHeadModel.*registered:.*LatentToyForCausalLM.*LlamaForCausalLM"):
        registry.entry_for_hf_config({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})
    with pytest.raises(ValueError, match=r"'gpt2'.*registered: \['deepseek2', 'llama', 'mistral', 'qwen2'\]"):
        registry.entry_for_gguf("gpt2")
    assert registry.entry_for_hf_config({"architectures": ["Qwen2ForCausalLM"]}).name == "llama"
    assert registry.entry_for_hf_config({"model_type": "mistral"}).name == "llama"
    assert registry.entry_for_hf_config({"architectures": [HF_NAME]}) is LATENT_ENTRY


def test_registry_refuses_a_second_owner(latent_registered):
    registry.register(LATENT_ENTRY)  # the same entry again: a no-op
    clash = registry.ModelEntry(name="other", model_class=LatentForCausalLM, arch_type=dict,
                                parse_hf_config=dict, weights=LATENT_ENTRY.weights,
                                hf_architectures=("LlamaForCausalLM",))
    with pytest.raises(ValueError, match=r"LlamaForCausalLM.*entry 'llama'"):
        registry.register(clash)
    assert "other" not in registry.entries()


def latent_config() -> dict:
    a = LatentArch()
    return {"architectures": [HF_NAME], "vocab_size": a.vocab_size, "hidden_size": a.hidden_size,
            "num_hidden_layers": a.num_layers, "num_attention_heads": a.num_heads, "latent_dim": a.latent_dim,
            "max_position_embeddings": a.max_position_embeddings}


def test_generic_loaders_build_a_registered_architecture(latent_registered, tmp_path):
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(json.dumps(latent_config()))
    dummy = load_model(f"dummy:{tmp_path / 'config.json'}", "dummy", CPU, torch.float32)
    assert isinstance(dummy.model, LatentForCausalLM) and dummy.arch == LatentArch()
    source = latent_model(seed=3)
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "model.safetensors"))
    loaded = load_model(str(tmp_path), "auto", CPU, torch.float32)
    assert isinstance(loaded.model, LatentForCausalLM) and not loaded.model.training
    for name, p in source.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], p), name


def test_unregistered_architecture_is_refused_by_the_loader(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(latent_config()))
    with pytest.raises(ValueError, match=rf"\['{HF_NAME}'\].*registered: .*LlamaForCausalLM"):
        load_model(f"dummy:{tmp_path / 'config.json'}", "dummy", CPU, torch.float32)


def test_gguf_rope_frequency_factors_arrive_with_the_weights():
    """A GGUF file with Llama-3 ``rope_freqs``: the model is built without rope
    tables and the weight map builds them when the factors arrive."""
    from dataclasses import replace

    from tokenmill.model.llama_weights import LLAMA_ENTRY, ROPE_FREQS, _slice, _target, expected_hf_names
    from tokenmill.model.loaders.common import build_empty_model
    from tokenmill.model.rope import cos_sin_table, inverse_frequencies

    source = load_model("dummy:tiny", "dummy", CPU, torch.float32).model
    params = dict(source.named_parameters(remove_duplicate=False))
    tensors = [(n, _slice(params[t], t, part, source.arch)) for n in expected_hf_names(source.arch)
               for t, part in [_target(n)]]
    arch = replace(source.arch, rope_scaling={"rope_type": "gguf_freq_factors"})
    freq = torch.linspace(1.0, 4.0, arch.head_dim // 2)
    model = build_empty_model(arch, CPU, torch.float32, 64)
    assert not hasattr(model, "rope_cos")
    LLAMA_ENTRY.weights.load(model, tensors + [(ROPE_FREQS, freq)])
    assert torch.equal(model.rope_cos, cos_sin_table(inverse_frequencies(arch, freq), 64)[0])
    assert all(torch.equal(p, params[n]) for n, p in model.named_parameters())
    with pytest.raises(ValueError, match=ROPE_FREQS):
        LLAMA_ENTRY.weights.load(build_empty_model(arch, CPU, torch.float32, 64), tensors)


def test_weight_only_quantization_needs_no_architecture_names():
    """quantize_model swaps what the model lists in decoder_linears(), whatever
    it calls its projections: the latent model quantizes and still runs."""
    from tokenmill.kernels.int8_linear import Int8Linear
    from tokenmill.kernels.quantize import quantize_model

    model = latent_model()
    reference = model.reference_logits([5, 6, 7, 8])
    quantize_model(model, "int8")
    assert all(isinstance(getattr(owner, name), Int8Linear) for owner, name in model.decoder_linears())
    assert isinstance(model.lm_head, Int8Linear)
    got = model.reference_logits([5, 6, 7, 8])
    assert got.shape == reference.shape and torch.allclose(got, reference, atol=0.05, rtol=0.05)
