"""A second architecture for tests: a tiny decoder whose KV cache holds ONE part
per token, a shared latent vector used as both key and value (multi-query
latent attention in miniature, the shape DeepSeek's MLA gives the cache).

It satisfies ``CausalLM`` (model/protocol.py) without touching any Llama code,
so it shows what a new architecture needs: an arch type, a model class, a
weight map and a registry entry (``LATENT_ENTRY``, registered by the tests that
use it). ``reference_logits`` recomputes a whole sequence without any cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.engine.exact_head import ExactHead
from tokenmill.kernels.attention import paged_attention
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS
from tokenmill.model.kv_cache_spec import KVCacheSpec
from tokenmill.model.registry import ModelEntry

HF_NAME = "LatentToyForCausalLM"


@dataclass(frozen=True)
class LatentArch:
    family: str = "latent-toy"
    vocab_size: int = 101
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    """Query heads; all share the one latent (multi-query)."""
    latent_dim: int = 48
    """Values cached per token per layer."""
    max_position_embeddings: int = 128
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def num_params(self) -> int:
        h, c, L = self.hidden_size, self.latent_dim, self.num_layers
        return self.vocab_size * h * 2 + self.max_position_embeddings * h + L * (h * c + 2 * h * self.num_heads * c)

    def flops_per_token(self, context_len: int = 0) -> float:
        h, c, L = self.hidden_size, self.latent_dim, self.num_layers
        matmul = L * (h * c + 2 * h * self.num_heads * c) + self.vocab_size * h
        return 2.0 * matmul + L * 2 * 2 * self.num_heads * c * context_len


def arch_from_config(cfg: dict) -> LatentArch:
    return LatentArch(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                      num_layers=cfg["num_hidden_layers"], num_heads=cfg["num_attention_heads"],
                      latent_dim=cfg["latent_dim"], max_position_embeddings=cfg["max_position_embeddings"])


class LatentLayer(nn.Module):
    def __init__(self, arch: LatentArch):
        super().__init__()
        self.num_heads, self.latent_dim = arch.num_heads, arch.latent_dim
        self.kv_down = nn.Linear(arch.hidden_size, arch.latent_dim, bias=False)
        self.q_proj = nn.Linear(arch.hidden_size, arch.num_heads * arch.latent_dim, bias=False)
        self.o_proj = nn.Linear(arch.num_heads * arch.latent_dim, arch.hidden_size, bias=False)
        self.scale = arch.latent_dim**-0.5

    def project(self, x):
        """x [T, hidden] -> q [T, H, C], latent [T, 1, C]."""
        h = F.rms_norm(x, (x.shape[-1],))
        return self.q_proj(h).view(-1, self.num_heads, self.latent_dim), self.kv_down(h).view(-1, 1, self.latent_dim)

    def forward(self, x, meta, cache):
        """cache: this layer's [num_blocks, 1, 1, block_size, C]; its one part is both K and V."""
        q, latent = self.project(x)
        part = cache[:, 0]  # [num_blocks, 1, block_size, C]
        o = paged_attention(q, latent, latent, part, part, meta, self.scale)  # [T, H, C]
        return x + self.o_proj(o.reshape(x.shape[0], -1))


class LatentForCausalLM(nn.Module):
    def __init__(self, arch: LatentArch, max_positions: int):
        super().__init__()
        self.arch = arch
        self.ops = TORCH_FUSED_OPS
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size)
        self.embed_positions = nn.Embedding(max_positions, arch.hidden_size)  # positions matter, no rope needed
        self.layers = nn.ModuleList(LatentLayer(arch) for _ in range(arch.num_layers))
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)

    def kv_cache_spec(self) -> KVCacheSpec:
        return KVCacheSpec(num_layers=self.arch.num_layers, parts=("latent",), num_heads=1,
                           head_dim=self.arch.latent_dim)

    def forward(self, input_ids, positions, meta, kv_caches):
        x = self.embed_tokens(input_ids) + self.embed_positions(positions)
        for layer, cache in zip(self.layers, kv_caches):
            x = layer(x, meta, cache)
        return F.rms_norm(x, (x.shape[-1],))

    def compute_logits(self, hidden):
        return self.lm_head(hidden)

    def decoder_linears(self):
        return [(layer, name) for layer in self.layers for name in ("kv_down", "q_proj", "o_proj")]

    def exact_head(self) -> ExactHead:
        return ExactHead(self.lm_head.weight, None, None, None)

    def reference_logits(self, token_ids: list[int]) -> torch.Tensor:
        """[len(token_ids), vocab]: the whole sequence at once, plain causal
        attention over freshly computed latents, no cache, no paging."""
        ids = torch.tensor(token_ids)
        x = self.embed_tokens(ids) + self.embed_positions(torch.arange(len(ids)))
        for layer in self.layers:
            q, latent = layer.project(x)
            kv = latent.transpose(0, 1)  # [1, L, C], shared by every query head
            o = F.scaled_dot_product_attention(q.transpose(0, 1), kv, kv, is_causal=True, scale=layer.scale)
            x = x + layer.o_proj(o.transpose(0, 1).reshape(len(ids), -1))
        return self.lm_head(F.rms_norm(x, (x.shape[-1],)))


class LatentWeightMap:
    """Checkpoint names are the module's own parameter names."""

    def finish_empty(self, model: LatentForCausalLM) -> None:
        pass  # nothing tied, no computed buffers

    def load(self, model: LatentForCausalLM, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = dict(model.named_parameters())
        seen = set()
        for name, tensor in tensors:
            if name not in params:
                raise ValueError(f"unexpected weight {name!r} for a latent-toy model")
            with torch.no_grad():
                params[name].copy_(tensor)
            seen.add(name)
        if seen != set(params):
            raise ValueError(f"weights missing from the checkpoint: {sorted(set(params) - seen)}")

    def from_gguf(self, arch, name, tensor):
        raise ValueError("latent-toy has no GGUF form")


LATENT_ENTRY = ModelEntry(name="latent-toy", model_class=LatentForCausalLM, arch_type=LatentArch,
                          parse_hf_config=arch_from_config, weights=LatentWeightMap(),
                          hf_architectures=(HF_NAME,))
