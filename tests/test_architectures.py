"""Safetensors loader and the other architectures against HF logits.

Tiny random-weight Llama-3 (llama3 rope scaling), Qwen2 (q/k/v bias) and
Mistral models are built with transformers, saved with save_pretrained, loaded
by tokenmill's HF-directory loader, and run through the paged engine path; the
embedded model is written out as an HF directory the same way.
"""

import copy

import pytest
import torch
from _reference import paged_logits

from tokenmill.model.loaders import load_model

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def tiny_configs():
    llama3 = transformers.LlamaConfig(
        **TINY, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    qwen2 = transformers.Qwen2Config(**TINY, rope_theta=1000000.0, tie_word_embeddings=True)
    mistral = transformers.MistralConfig(**TINY, sliding_window=None)
    return {"llama3": (llama3, transformers.LlamaForCausalLM),
            "qwen2": (qwen2, transformers.Qwen2ForCausalLM),
            "mistral": (mistral, transformers.MistralForCausalLM)}


@pytest.mark.parametrize("name", ["llama3", "qwen2", "mistral"])
def test_tiny_architecture_matches_hf(tmp_path, name):
    config, cls = tiny_configs()[name]
    torch.manual_seed(0)
    hf = cls(config).eval()
    if name == "qwen2":  # random init leaves biases at zero; make them matter
        with torch.no_grad():
            for layer in hf.model.layers:
                layer.self_attn.q_proj.bias.normal_(0, 0.5)
                layer.self_attn.k_proj.bias.normal_(0, 0.5)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    loaded = load_model(str(tmp_path), "auto", torch.device("cpu"), torch.float32)
    assert loaded.arch.family == name if name != "llama3" else loaded.arch.family == "llama"
    ids = torch.randint(0, TINY["vocab_size"], (150,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    ours = paged_logits(loaded.model, ids, chunk=37)
    torch.testing.assert_close(ours, ref, atol=2e-4, rtol=1e-4)


def test_llama3_rope_scaling_changes_logits(tmp_path):
    """Guard against the scaling being silently ignored."""
    config, cls = tiny_configs()["llama3"]
    torch.manual_seed(0)
    cls(config).save_pretrained(tmp_path)
    scaled = load_model(str(tmp_path), "hf", torch.device("cpu"), torch.float32)
    assert scaled.arch.rope_scaling["rope_type"] == "llama3"
    assert not torch.equal(scaled.model.rope_cos[200], load_unscaled_cos(scaled.arch))


def load_unscaled_cos(arch):
    from dataclasses import replace

    from tokenmill.model.rope import cos_sin_table, inverse_frequencies
    return cos_sin_table(inverse_frequencies(replace(arch, rope_scaling=None)), 256)[0][200]


def test_embedded_model_as_hf_directory(tmp_path, hf_reference):
    hf_model, _ = hf_reference
    # transformers refuses to save a model it loaded from GGUF; the weights are
    # plain fp32 after dequantization, so save a copy without the GGUF marker.
    plain = copy.deepcopy(hf_model)
    del plain.config.quantization_config
    plain.hf_quantizer = None
    plain.save_pretrained(tmp_path, safe_serialization=True)
    assert list(tmp_path.glob("*.safetensors"))
    loaded = load_model(str(tmp_path), "hf", torch.device("cpu"), torch.float32)
    ids = list(range(1000, 1060))
    with torch.no_grad():
        ref = hf_model(torch.tensor([ids])).logits[0]
    ours = paged_logits(loaded.model, ids, chunk=64)
    torch.testing.assert_close(ours, ref, atol=2e-3, rtol=1e-3)


def test_missing_and_unsupported_sources_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        load_model(str(tmp_path / "nope.gguf"), "auto", torch.device("cpu"), torch.float32)
    (tmp_path / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}')
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        load_model(str(tmp_path), "hf", torch.device("cpu"), torch.float32)
