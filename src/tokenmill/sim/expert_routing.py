"""How a step's routed tokens spread over a MoE model's experts and expert-parallel ranks: the
experts some row is routed to (their weights are read), the other ranks a token is sent to (the
all-to-all's payload), and the busiest rank's load against the mean (the layer's pace). The cost
model (cost.py) prices them."""

from __future__ import annotations

import math
from functools import lru_cache

EXPERT_LOAD_CV = 1.68
"""Spread of the tokens routed to each expert, set so that ``ep_imbalance`` gives the one
published figure: DeepSeek-R1 on 32 GB200 GPUs, EP32 without expert load balancing, the
hottest rank received 1.564 times more routed tokens than the mean, i.e. 2.56x it
(NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog4_Scaling_Expert_Parallelism_in_
TensorRT-LLM.md, Table 1: averages over layers and iterations). The same table's
per-expert spread (std 164.1 on a mean of 128: CV 1.28) over 8 experts per rank predicts
its per-rank spread (std 491.6 on 1,024: 0.48) as independent loads would (1.28 /
sqrt(8) = 0.45), but the Gaussian maximum of that (2.19x) falls short of the measured
2.56x: the tail is heavier, so the constant comes from the maximum itself. With
expert load balancing (EPLB) the same table measures 1.11x. Not measured for other models."""


def expected_distinct_experts(rows: int, num_experts: int, top_k: int) -> float:
    """Experts some row picks, each row choosing ``top_k`` distinct experts uniformly:
    E x (1 - (1 - k/E)^rows). One row: k; many rows: E."""
    if rows <= 0 or num_experts == 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** rows)


@lru_cache(maxsize=256)  # asked every step with the same few layouts
def remote_ranks_per_token(ep: int, num_experts: int, top_k: int) -> float:
    """Other EP ranks a token's ``top_k`` distinct experts land on (experts spread evenly,
    ``num_experts / ep`` per rank; a token's experts drawn uniformly without replacement):
    (ep - 1) x P(a given rank owns at least one). DeepSeek-R1 over EP8: 4.6 of 7; top_k 1: (ep-1)/ep."""
    if ep <= 1 or num_experts == 0:
        return 0.0
    per_rank = num_experts / ep
    miss = 1.0  # P(none of the top_k lands on a given rank) = C(E - E/ep, k) / C(E, k)
    for i in range(min(top_k, num_experts)):
        miss *= max(num_experts - per_rank - i, 0.0) / (num_experts - i)
    return (ep - 1) * (1.0 - miss)


@lru_cache(maxsize=256)  # asked every step with the same few layouts
def ep_imbalance(ep: int, num_experts: int, cv: float = EXPERT_LOAD_CV) -> float:
    """Busiest expert-parallel rank's tokens over the mean rank's. A rank holds
    E/ep experts, so its load's CV is cv / sqrt(E/ep) if experts' loads are
    independent; the largest of ep such loads sits about sqrt(2 ln ep) standard
    deviations above the mean (the Gaussian extreme-value estimate). 1 for ep = 1.
    DeepSeek-R1's 256 experts: 1.35 at EP4, 1.61 at EP8, 2.56 at EP32."""
    if ep <= 1 or num_experts <= 0:
        return 1.0
    return 1.0 + cv * math.sqrt(ep / num_experts) * math.sqrt(2.0 * math.log(ep))
