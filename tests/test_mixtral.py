"""Mixtral (the softmax-routed MoE family, through the same MoE layer as
DeepSeek) against HF transformers: logits through the paged cache, greedy
tokens through the engine, and the router's choice, ties included."""

from __future__ import annotations

import pytest
import torch
from _reference import paged_logits
from _tiny_hf import hf_greedy, save_checkpoint

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.model.loaders import load_model
from tokenmill.model.moe import MoEConfig, Router
from tokenmill.sampling_params import SamplingParams

transformers = pytest.importorskip("transformers")

CONFIG = dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=256,
              sliding_window=None)


@pytest.fixture(scope="module")
def hf_mixtral(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**CONFIG)).eval()
    return model, save_checkpoint(model, tmp_path_factory.mktemp("mixtral-tiny"))


def test_logits_match_hf(hf_mixtral):
    hf, path = hf_mixtral
    loaded = load_model(str(path), "auto", torch.device("cpu"), torch.float32)
    assert loaded.arch.family == "mixtral" and loaded.arch.moe.num_experts == 8
    for length, chunk in ((120, 33), (20, 1)):
        ids = torch.randint(3, 512, (length,), generator=torch.Generator().manual_seed(length)).tolist()
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0]
        torch.testing.assert_close(paged_logits(loaded.model, ids, chunk=chunk), ref, atol=2e-5, rtol=1e-4)


def test_greedy_tokens_match_hf(hf_mixtral):
    hf, path = hf_mixtral
    engine = LLMEngine(EngineConfig(model=str(path), dtype="float32", device="cpu", num_kv_blocks=64))
    batch = [[(5 * i + j) % 500 + 3 for j in range(10 + 7 * i)] for i in range(3)]
    got = engine.generate(batch, SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True))
    for prompt, result in zip(batch, got):
        assert result.token_ids == hf_greedy(hf, prompt, 10)


def test_softmax_router_equals_hf_ties_included():
    cfg = transformers.MixtralConfig(**CONFIG)
    hf = transformers.models.mixtral.modeling_mixtral.MixtralTopKRouter(cfg)
    ours = Router(64, MoEConfig(num_experts=8, top_k=2, intermediate_size=96, scoring="softmax"))
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(8, 64, generator=gen)
    weight[1] = weight[2] = weight[0]  # three experts alike: top-2 cuts through them
    with torch.no_grad():
        hf.weight.copy_(weight)
        ours.weight.copy_(weight)
    x = torch.randn(64, 64, generator=gen)
    with torch.no_grad():
        _, ref_weights, ref_experts = hf(x)
        routing = ours(x)
    assert (routing.experts < 3).sum(dim=1).eq(1).any()  # some rows took one of the three tied experts
    assert torch.equal(routing.experts, ref_experts)
    torch.testing.assert_close(routing.weights, ref_weights)


def test_chunking_prefix_hits_and_preemption_keep_the_tokens(hf_mixtral):
    common = dict(model=str(hf_mixtral[1]), dtype="float32", device="cpu", max_model_len=96)
    plain = LLMEngine(EngineConfig(**common, num_kv_blocks=64, enable_prefix_caching=False))
    stress = LLMEngine(EngineConfig(**common, max_num_batched_tokens=16, num_kv_blocks=8, block_size=16,
                                    enable_prefix_caching=True))
    shared = [(7 * i) % 500 + 3 for i in range(32)]
    batch = [shared + [(11 * i + j) % 500 + 3 for j in range(30)] for i in range(4)]
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    together = stress.generate(batch, params)
    stats = stress.stats()
    assert stats.num_preemptions > 0 and stats.prefix_cache_hits > 0
    for prompt, result in zip(batch, together):
        assert result.token_ids == plain.generate([prompt], params)[0].token_ids
