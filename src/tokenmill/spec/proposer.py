"""The interface every draft proposer implements, and the factory the engine calls.

A proposer sees the requests that are about to decode (their prompt computed,
one token pending) and returns up to ``limits[i]`` draft tokens for request
i. The engine puts them in ``request.draft_token_ids``; the next step feeds
each request's last token and its drafts as query rows of the same batched
forward and keeps the drafts the model confirms (engine/verify.py), so
outputs are the same as without drafts: only the number of steps changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from tokenmill.spec.config import SpeculativeConfig

if TYPE_CHECKING:
    from torch import nn

    from tokenmill.engine.kv_cache_manager import KVCacheManager
    from tokenmill.engine.request import Request
    from tokenmill.engine.runner import ModelRunner


class Proposer(Protocol):
    drafts_cost_passes: bool
    """True: each draft position costs a forward pass of a draft model, so the
    number of drafts is chosen before proposing (spec/adaptive.py); False:
    drafting is (nearly) free and its proposals are trimmed afterwards."""

    def propose(self, requests: list[Request], limits: list[int]) -> list[list[int]]:
        """Up to limits[i] drafts for requests[i], in order ([] for none)."""
        ...

    # Optional: ``last_probs``, per request of the last propose() and per draft,
    # the distribution the draft was drawn from ([V] float32) or None (an
    # argmax or a lookup: checked by exact match); spec/draft_sampling.py.
    # ``after_step(out, forward, live)``, called after each step's
    # update with the SchedulerOutput, its ForwardResult (or None) and the
    # scheduler's live requests by id (spec/mtp.py drafts there); and
    # ``catch_up_seconds``, the part of the last propose() that was not draft
    # passes (spec/draft_model.py), which the adaptive policy leaves out.


def make_draft_model(config: SpeculativeConfig, target: nn.Module, quantization: str | None, *,
                     tokenizer_source: str | None = None, device: torch.device | None = None,
                     dtype: torch.dtype | None = None, seed: int = 0,
                     int4_activations: str = "float") -> nn.Module | None:
    """Check that the method can draft for this target and build or load the
    draft model it needs, before the engine swaps the target's linears for its
    backend; None for methods without one. ``tokenizer_source`` (the target's),
    ``device``, ``dtype`` and ``seed``: how draft_model loads its model;
    ``int4_activations``: the self-int4 twin's (config.py).
    ValueError naming the ``speculative_config`` field when it cannot run here."""
    if config.method == "self-int4":
        if quantization is not None:
            raise ValueError(f"speculative_config.method: self-int4 drafts with int4 weights of the full-precision "
                             f"model; it cannot run with quantization {quantization!r}")
        from tokenmill.spec.model_drafter import int4_twin

        return int4_twin(target, int4_activations, config.draft_head_vocab)
    if config.method == "mtp":
        from tokenmill.spec.mtp import check_has_mtp

        check_has_mtp(target)  # before the KV cache is allocated
    if config.method == "draft_model":
        from tokenmill.spec.draft_model import load_draft_model

        return load_draft_model(config, target.arch, tokenizer_source, device, dtype, seed)
    return None


def extra_kv_bytes_per_token(config: SpeculativeConfig, target: nn.Module, draft: nn.Module | None,
                             dtype: torch.dtype) -> int:
    """Cache bytes per token the method keeps beside the target's (mtp: its
    block's layer; draft_model: the draft's own cache), which the engine counts
    when it sizes the KV cache."""
    dtype_bytes = torch.finfo(dtype).bits // 8
    if config.method == "mtp":
        spec = target.kv_cache_spec()
        return spec.elements_per_token() * dtype_bytes
    if config.method == "draft_model" and draft is not None:
        return draft.kv_cache_spec().bytes_per_token(dtype_bytes)
    return 0


def make_proposer(config: SpeculativeConfig, target: nn.Module | None = None, draft: nn.Module | None = None,
                  runner: ModelRunner | None = None, kv: KVCacheManager | None = None, seed: int = 0) -> Proposer:
    """The method's proposer; model drafters need the target model, the draft
    model (make_draft_model) and the engine's runner and KV cache manager, whose
    cache they share. ``seed``: their generator for unseeded requests' draft draws."""
    from tokenmill.spec.draft_sampling import DraftSampler

    sampler = DraftSampler(config.acceptance_method == "rejection_sampler", seed)
    if config.method == "ngram":
        from tokenmill.spec.ngram import NgramProposer

        return NgramProposer(config.prompt_lookup_min, config.prompt_lookup_max)
    if config.method == "self-int4":
        from tokenmill.spec.model_drafter import ModelDrafter

        if draft is None or runner is None or kv is None:
            raise ValueError("speculative_config.method: self-int4 needs the draft model, runner and KV cache")
        return ModelDrafter(draft, runner, kv, sampler)
    if config.method == "mtp":
        from tokenmill.spec.mtp import MTPDrafter

        if target is None or runner is None or kv is None:
            raise ValueError("speculative_config.method: mtp needs the target model, runner and KV cache")
        return MTPDrafter(target, runner, kv, config.num_speculative_tokens, sampler)
    if config.method == "draft_model":
        from tokenmill.spec.draft_model import DraftModelDrafter

        if draft is None or runner is None or kv is None:
            raise ValueError("speculative_config.method: draft_model needs the draft model, runner and KV cache")
        return DraftModelDrafter(draft, runner, kv, sampler)
    raise ValueError(f"speculative_config.method: {config.method!r} has no proposer")
