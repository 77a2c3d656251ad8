"""A row's processed next-token distribution, and draws from it.

The sampler (engine/sampler.py), the draft models' own sampling
(spec/draft_sampling.py) and the rejection rule (engine/rejection.py) all
work on the same thing: unnormalised weights w = exp((x - max) / T) of the
penalized logits x (the top token has w = 1), with top-k, top-p and min-p
zeroing weights out and keeping every token tied with the cut-off value.
Draws are an inverse-CDF lookup with one float64 uniform per row, done in
two levels (blocks of 256 ids, then inside the chosen block) so float64
prefix sums stay cheap and exact enough.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from tokenmill.engine.sampler import SamplingRow
    from tokenmill.sampling_params import SamplingParams

_BLOCK = 256
"""Ids per block in the two-level inverse-CDF draw."""
_TOP_P_CANDIDATES = (256, 4096)
"""Top-p first looks for its cut-off among this many most likely ids; rows
whose nucleus is wider fall back to a full sort."""


def argmax_finite(x: torch.Tensor) -> torch.Tensor:
    """x [R, V] float -> [R] argmax, NaN counting as -inf (torch's argmax picks NaN)."""
    if torch.isnan(x).any():
        x = torch.nan_to_num(x, nan=float("-inf"))
    return x.argmax(dim=-1)


def take_rows(x: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """x[idx] without the copy when idx is every row in order."""
    return x if len(idx) == x.shape[0] else x[idx]

def apply_penalties(x: torch.Tensor, rows: list[SamplingRow]) -> None:
    """In place on contiguous x [R, V], through flat indices row * V + id.

    Repetition (HF): every id in prompt or output, logit > 0 divided by the
    penalty, otherwise multiplied. Frequency/presence (OpenAI): output ids
    only, logit -= count * frequency + presence.
    """
    flat_x = x.view(-1)  # [R * V]
    rep = [i for i, r in enumerate(rows) if r.params.repetition_penalty != 1.0]
    if rep:
        flat, row = _flat_ids([rows[i].prompt_token_ids + rows[i].output_token_ids for i in rep], rep, x)
        penalty = _per_row(x, rows, rep, lambda p: p.repetition_penalty)[row]  # [N]
        vals = flat_x[flat]
        # Duplicate ids all compute the same value from the original logit.
        flat_x[flat] = torch.where(vals > 0, vals / penalty, vals * penalty)
    fp = [i for i, r in enumerate(rows)
          if (r.params.frequency_penalty or r.params.presence_penalty) and r.output_token_ids]
    if fp:
        flat, _ = _flat_ids([rows[i].output_token_ids for i in fp], fp, x)
        uniq, counts = torch.unique(flat, return_counts=True)  # [U] distinct (row, id)
        row = torch.div(uniq, x.shape[1], rounding_mode="floor")
        freq = _per_row(x, rows, fp, lambda p: p.frequency_penalty)[row]
        pres = _per_row(x, rows, fp, lambda p: p.presence_penalty)[row]
        flat_x.index_add_(0, uniq, -(counts * freq + pres))


def _per_row(x: torch.Tensor, rows: list[SamplingRow], idx: list[int], get) -> torch.Tensor:
    """[R] float32 holding get(params) at rows idx (zero elsewhere)."""
    out = torch.zeros(len(rows), dtype=x.dtype, device=x.device)
    out[idx] = torch.tensor([get(rows[i].params) for i in idx], dtype=x.dtype, device=x.device)
    return out


def _flat_ids(ids: list[list[int]], rows: list[int], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row id lists -> ([N] flat indices row * V + id into x, [N] row of each).

    Ids outside the vocabulary are dropped."""
    vocab = x.shape[1]
    tok = torch.tensor(list(chain.from_iterable(ids)), dtype=torch.long, device=x.device)  # [N]
    row = torch.repeat_interleave(torch.tensor(rows, dtype=torch.long, device=x.device),
                                  torch.tensor([len(i) for i in ids], device=x.device))  # [N]
    keep = (tok >= 0) & (tok < vocab)
    tok, row = tok[keep], row[keep]
    return row * vocab + tok, row

def probability_weights(x: torch.Tensor, temperatures: list[float]) -> torch.Tensor:
    """x [S, V] -> new tensor exp((x - row max) / T): unnormalised probabilities, max 1."""
    w = x - x.amax(dim=-1, keepdim=True)  # [S, V], a fresh tensor
    if any(t != 1.0 for t in temperatures):
        w.div_(torch.tensor(temperatures, dtype=w.dtype, device=w.device)[:, None])
    return w.exp_()


def _masked_rows(w: torch.Tensor, idx: list[int], keep_from: torch.Tensor) -> None:
    """Zero w[idx] where below the per-row threshold keep_from [len(idx), 1]."""
    if len(idx) == w.shape[0]:
        w.masked_fill_(w < keep_from, 0.0)
    else:
        sub = w[idx]
        w[idx] = sub.masked_fill_(sub < keep_from, 0.0)


def apply_top_k(w: torch.Tensor, top_k: list[int]) -> None:
    """In place on w [S, V]: keep the k largest weights per row (and ties with the k-th)."""
    vocab = w.shape[1]
    idx = [i for i, k in enumerate(top_k) if 0 < k < vocab]
    if not idx:
        return
    ks = [top_k[i] for i in idx]
    top = largest(take_rows(w, idx), max(ks))  # [K, k_max]
    kth = top.gather(1, torch.tensor(ks, device=w.device)[:, None] - 1)  # [K, 1]
    _masked_rows(w, idx, kth)


def largest(x: torch.Tensor, m: int) -> torch.Tensor:
    """x [n, V] -> its m largest values per row [n, m], descending.

    On CPU through numpy, whose SIMD partition/sort is several times faster
    than torch.topk/torch.sort there.
    """
    vocab = x.shape[1]
    if x.device.type != "cpu":
        return x.sort(dim=-1, descending=True).values if m >= vocab else x.topk(m, dim=-1).values
    a = x.numpy()
    if m < vocab:
        a = np.partition(a, vocab - m, axis=-1)[:, vocab - m:]
    # A copy, not ascontiguousarray: that keeps the negative stride of a
    # [n, 1] view (it counts as contiguous), which torch.from_numpy refuses.
    return torch.from_numpy(np.sort(a, axis=-1)[:, ::-1].copy())


def apply_top_p(w: torch.Tensor, top_p: list[float]) -> None:
    """In place on w [S, V]: keep the smallest most-likely set whose mass reaches
    top_p (a token stays when the mass strictly above it is < top_p)."""
    idx = [i for i, p in enumerate(top_p) if p < 1.0]
    if not idx:
        return
    sub = take_rows(w, idx)  # [P, V]
    target = sub.sum(dim=-1, keepdim=True).double() * torch.tensor(
        [top_p[i] for i in idx], dtype=torch.float64, device=w.device)[:, None]  # [P, 1]
    thresh = torch.empty(len(idx), 1, dtype=w.dtype, device=w.device)  # [P, 1]
    todo = torch.arange(len(idx), device=w.device)
    for m in (*_TOP_P_CANDIDATES, w.shape[1]):
        m = min(m, w.shape[1])
        vals = largest(sub[todo], m)  # [n, m]
        cum = vals.cumsum(dim=-1, dtype=torch.float64)  # [n, m]
        above = torch.nn.functional.pad(cum[:, :-1], (1, 0))  # mass strictly above each candidate
        count = (above < target[todo]).sum(dim=-1, keepdim=True).clamp_(min=1)  # [n, 1]
        done = (cum[:, -1:] >= target[todo]).view(-1) | (m == w.shape[1])
        thresh[todo[done]] = vals.gather(1, count - 1)[done]
        todo = todo[~done]
        if todo.numel() == 0:
            break
    _masked_rows(w, idx, thresh)


def apply_min_p(w: torch.Tensor, min_p: list[float]) -> None:
    """In place on w [S, V]: drop weights below min_p x the top one (which is 1)."""
    idx = [i for i, p in enumerate(min_p) if p > 0.0]
    if idx:
        _masked_rows(w, idx, torch.tensor([min_p[i] for i in idx], dtype=w.dtype, device=w.device)[:, None])


def draw(w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF: w [S, V] unnormalised weights, u [S] float64 in [0, 1) -> [S] ids.

    First the block of _BLOCK ids whose cumulative mass passes u * total, then
    the id inside it. Both searches are clamped below the last prefix sum, so
    the id found always has weight > 0.
    """
    rows, vocab = w.shape
    n_blocks = -(-vocab // _BLOCK)
    if n_blocks * _BLOCK != vocab:
        w = torch.nn.functional.pad(w, (0, n_blocks * _BLOCK - vocab))
    blocks = w.view(rows, n_blocks, _BLOCK)  # [S, nb, B]
    mass = blocks.sum(dim=-1).double()  # [S, nb]
    cum = mass.cumsum(dim=-1)  # [S, nb]
    target = _below_last(u[:, None] * cum[:, -1:], cum)  # [S, 1]
    b = torch.searchsorted(cum, target, right=True)  # [S, 1]
    rest = target - (cum.gather(1, b) - mass.gather(1, b))  # mass still to cover inside block b
    chosen = blocks[torch.arange(rows, device=w.device), b.view(-1)]  # [S, B]
    inner = chosen.cumsum(dim=-1, dtype=torch.float64)  # [S, B]
    j = torch.searchsorted(inner, _below_last(rest.clamp_(min=0.0), inner), right=True)  # [S, 1]
    return (b * _BLOCK + j).view(-1)


def _below_last(t: torch.Tensor, cum: torch.Tensor) -> torch.Tensor:
    """Clamp t [S, 1] to just under the row's last prefix sum (so searchsorted stays in range)."""
    last = cum[:, -1:]
    return torch.minimum(t, torch.nextafter(last, torch.zeros_like(last)))


def filtered_weights(x: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """x [S, V] penalized logits of sampled rows -> new [S, V] weights after
    temperature, top-k, top-p and min-p (unnormalised; see the module docstring)."""
    w = probability_weights(x, [p.temperature for p in params])  # [S, V]
    apply_top_k(w, [p.top_k for p in params])
    apply_top_p(w, [p.top_p for p in params])
    apply_min_p(w, [p.min_p for p in params])
    return w
