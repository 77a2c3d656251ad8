"""Mixture-of-Experts feed-forward layer: router -> dispatch -> local experts -> combine.

One layer for every MoE family; what differs is the router:
- ``sigmoid`` (DeepSeek-V3/R1): float32 sigmoid scores; expert choice on the
  scores plus ``e_score_correction_bias``, limited to the ``topk_groups`` best
  of ``num_groups`` expert groups (a group's score is the sum of its two best);
  the weights are the chosen experts' plain scores, normalised if
  ``norm_topk_prob``, times ``routed_scaling_factor``;
- ``softmax`` (Mixtral, Qwen3-MoE): softmax over all experts, top-k, normalised
  if ``norm_topk_prob``.
Both use the same torch ops in the same order as HF transformers' routers, so
ties between equal scores break the same way.

Experts are computed the way serving engines do: the step's (token, expert)
pairs are sorted by expert (``dispatch``), each active expert runs one GEMM
pair over its contiguous run of rows (``GroupedExperts``), and the rows are
weighted and summed back per token (``combine``). No per-token loop, no work
for experts nobody chose. The three stages only meet through ``Dispatch``, so
expert parallelism can put an all-to-all between dispatch and the local
experts, and another before combine, without touching either side.

Weights: each routed expert is two ``nn.Linear`` layers, ``w13[e]`` (hidden ->
2I: gate rows then up rows) and ``w2[e]`` (I -> hidden), so every linear backend
and weight-only quantization the dense layers get (prepacked oneDNN / mixed
C++ GEMMs for few rows, int8, int4) applies to experts as well: the models list
them in ``decoder_linears()``. Shared experts are one dense MLP of width
``num_shared_experts * I``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.model.moe_config import MoEConfig


@dataclass
class Routing:
    weights: torch.Tensor
    """[T, k] float32: each chosen expert's weight in the token's output."""
    experts: torch.Tensor
    """[T, k] long: the chosen experts (order within a row is unspecified)."""


class Router(nn.Module):
    """hidden [T, hidden] -> Routing; ``weight`` [E, hidden] is float32 for
    sigmoid routing (DeepSeek keeps its gate in float32) and the model dtype
    for softmax routing (logits in the model dtype, softmax in float32: HF's)."""

    def __init__(self, hidden_size: int, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg.num_experts, hidden_size))
        if cfg.score_correction_bias:
            self.register_buffer("e_score_correction_bias", torch.zeros(cfg.num_experts))

    def forward(self, x: torch.Tensor) -> Routing:
        cfg = self.cfg
        if cfg.scoring == "softmax":
            probs = torch.softmax(F.linear(x, self.weight).float(), dim=-1)  # [T, E]
            weights, experts = torch.topk(probs, cfg.top_k, dim=-1)
            if cfg.norm_topk_prob:
                weights = weights / weights.sum(dim=-1, keepdim=True)
            return Routing(weights, experts)
        scores = F.linear(x.float(), self.weight.float()).sigmoid()  # [T, E]
        choice = scores + self.e_score_correction_bias if cfg.score_correction_bias else scores
        if cfg.num_groups > 1:
            choice = _limit_to_best_groups(choice, cfg.num_groups, cfg.topk_groups)
        experts = torch.topk(choice, cfg.top_k, dim=-1, sorted=False)[1]  # [T, k]
        weights = scores.gather(1, experts)
        if cfg.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return Routing(weights * cfg.routed_scaling_factor, experts)


def _limit_to_best_groups(choice: torch.Tensor, num_groups: int, topk_groups: int) -> torch.Tensor:
    """choice [T, E] -> the same with every expert outside the token's ``topk_groups``
    best groups set to -inf; a group scores the sum of its two best experts."""
    t, e = choice.shape
    grouped = choice.view(t, num_groups, e // num_groups)
    group_scores = grouped.topk(min(2, e // num_groups), dim=-1)[0].sum(dim=-1)  # [T, groups]
    best = torch.topk(group_scores, k=topk_groups, dim=-1, sorted=False)[1]
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)  # [T, groups]
    return grouped.masked_fill(~keep[:, :, None], float("-inf")).view(t, e)


@dataclass
class Dispatch:
    """One step's (token, expert) pairs sorted by expert: what the experts see
    and how their rows find their tokens again."""

    rows: torch.Tensor
    """[N, hidden] with N = T * k: the tokens' inputs, expert-major."""
    token_of_row: torch.Tensor
    """[N] long: the token each row belongs to."""
    weight_of_row: torch.Tensor
    """[N, 1] float32: the routing weight of each row."""
    rows_per_expert: list[int]
    """[E]: rows of each expert, in expert order (0 for experts nobody chose)."""
    num_tokens: int


def dispatch(x: torch.Tensor, routing: Routing, num_experts: int) -> Dispatch:
    """x [T, hidden] -> its rows grouped by expert (a stable sort keeps token order within an expert)."""
    t, k = routing.experts.shape
    flat = routing.experts.reshape(-1)  # [T * k], row i * k + j: token i's j-th choice
    order = torch.argsort(flat, stable=True)
    token_of_row = order // k
    counts = torch.bincount(flat, minlength=num_experts).tolist()
    return Dispatch(x.index_select(0, token_of_row), token_of_row,
                    routing.weights.reshape(-1, 1).index_select(0, order), counts, t)


def combine(expert_out: torch.Tensor, plan: Dispatch, shared: torch.Tensor | None) -> torch.Tensor:
    """expert_out [N, hidden] (rows in dispatch order) -> [T, hidden] in its dtype:
    each token's weighted sum over its experts, plus the shared experts' output.
    Sums in float32 (rows weighted in float32, as HF does)."""
    out = (shared.float() if shared is not None else
           expert_out.new_zeros((plan.num_tokens, expert_out.shape[1]), dtype=torch.float32))
    out.index_add_(0, plan.token_of_row, expert_out.float() * plan.weight_of_row)
    return out.to(expert_out.dtype)


class GroupedExperts(nn.Module):
    """The routed experts held here (all of them today; a slice under expert parallelism)."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.w13 = nn.ModuleList(nn.Linear(hidden_size, 2 * intermediate_size, bias=False) for _ in range(num_experts))
        self.w2 = nn.ModuleList(nn.Linear(intermediate_size, hidden_size, bias=False) for _ in range(num_experts))

    def forward(self, rows: torch.Tensor, rows_per_expert: list[int], ops) -> torch.Tensor:
        """rows [N, hidden], expert-major -> [N, hidden]: one gate/up GEMM and one
        down GEMM per expert with rows (its run of rows is contiguous)."""
        out = torch.empty_like(rows)
        start = 0
        for e, n in enumerate(rows_per_expert):
            if n:
                run = rows[start:start + n]
                out[start:start + n] = self.w2[e](ops.silu_and_mul(self.w13[e](run)))
                start += n
        return out

    def linears(self) -> list[tuple[nn.Module, str]]:
        """(owner, attribute) of every expert's two linears, for ``decoder_linears``."""
        return [(self.w13, str(e)) for e in range(len(self.w13))] + [(self.w2, str(e)) for e in range(len(self.w2))]


class DenseMLP(nn.Module):
    """SwiGLU feed-forward: dense layers, and the shared experts of an MoE layer."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, ops) -> torch.Tensor:
        return self.down_proj(ops.silu_and_mul(self.gate_up_proj(x)))


class MoELayer(nn.Module):
    """x [T, hidden] in the model dtype -> [T, hidden]: routed experts plus shared ones."""

    def __init__(self, hidden_size: int, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.gate = Router(hidden_size, cfg)
        self.experts = GroupedExperts(cfg.num_experts, hidden_size, cfg.intermediate_size)
        self.shared_experts = (DenseMLP(hidden_size, cfg.intermediate_size * cfg.num_shared_experts)
                               if cfg.num_shared_experts else None)

    def forward(self, x: torch.Tensor, ops) -> torch.Tensor:
        plan = dispatch(x, self.gate(x), self.cfg.num_experts)
        expert_out = self.experts(plan.rows, plan.rows_per_expert, ops)
        shared = self.shared_experts(x, ops) if self.shared_experts is not None else None
        return combine(expert_out, plan, shared)
