"""The routed feed-forward layer's shape and routing rule, torch-free.

Its own module so that what only reads model shapes (the architecture configs,
`tokenmill sim`) does not import torch; the layer itself is model/moe.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    intermediate_size: int
    """Width of one routed expert."""
    scoring: str = "softmax"
    """'sigmoid' (DeepSeek-V3) or 'softmax' (Mixtral, Qwen3-MoE)."""
    num_groups: int = 1
    topk_groups: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    num_shared_experts: int = 0
    """Experts every token uses (DeepSeek: 1), computed as one dense MLP."""
    score_correction_bias: bool = False
    """DeepSeek-V3's per-expert bias, added to the scores for the choice only."""

    def __post_init__(self) -> None:
        if self.scoring not in ("sigmoid", "softmax"):
            raise ValueError(f"scoring: 'sigmoid' or 'softmax', got {self.scoring!r}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"top_k: must be in [1, num_experts={self.num_experts}], got {self.top_k}")
        if self.num_experts % self.num_groups:
            raise ValueError(f"num_groups: {self.num_groups} does not divide num_experts {self.num_experts}")
        if not 1 <= self.topk_groups <= self.num_groups:
            raise ValueError(f"topk_groups: must be in [1, num_groups={self.num_groups}], got {self.topk_groups}")
        if self.topk_groups * (self.num_experts // self.num_groups) < self.top_k:
            raise ValueError("topk_groups: the chosen groups hold fewer experts than top_k")
