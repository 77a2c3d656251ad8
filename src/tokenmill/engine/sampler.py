"""Token sampling for one engine step.

Order per row: penalties on the raw logits -> logprobs -> temperature ->
top-k -> top-p -> min-p -> draw. Greedy rows (temperature 0) take the argmax
of the penalized logits (ties go to the lowest id); without penalties, a tie
that bf16/fp16 rounding made is broken by the exact logits (Sampler._greedy).

Logprobs are the "processed" kind: log-softmax of the penalized logits, before
temperature and truncation, i.e. the model's distribution as OpenAI clients
expect it (vLLM's default, "raw", differs only for requests with penalties).

Sampling works on unnormalised weights w = exp((x - max) / T) (the top token
has w = 1): top-k, top-p and min-p zero weights out, keeping every token tied
with the cut-off value. The draw is an inverse-CDF lookup with one float64
uniform per row per step, done in two levels (blocks of 256 ids, then inside
the chosen block) so float64 prefix sums stay cheap and exact enough. A seeded
request's uniform is a function of its seed and the output position being
sampled (engine/counter_rng.py), so its tokens depend only on its own logits
and seed, never on the batch, its row, or where it ran its earlier steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import torch

from tokenmill.engine.counter_rng import seeded_uniform
from tokenmill.engine.exact_head import ExactLogits
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS
from tokenmill.outputs import TokenLogprob
from tokenmill.sampling_params import SamplingParams

log = logging.getLogger(__name__)

_BLOCK = 256
"""Ids per block in the two-level inverse-CDF draw."""
_TOP_P_CANDIDATES = (256, 4096)
"""Top-p first looks for its cut-off among this many most likely ids; rows
whose nucleus is wider fall back to a full sort."""


@dataclass
class SamplingRow:
    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    """Tokens generated before the one sampled now (its position is their count)."""


@dataclass
class SamplerOutput:
    token_ids: list[int]
    """One id per row; -1 for a row in ``errors``."""
    logprobs: list[TokenLogprob | None]
    errors: dict[int, str] = field(default_factory=dict)
    """Rows whose sampling raised -> the error. Only those rows failed; the
    others got their tokens as usual (see Sampler.__call__)."""


class Sampler:
    def __init__(self, vocab_size: int, seed: int = 0, argmax: Callable | None = None, row_by_row: bool = False):
        """argmax: greedy rows' argmax with tie counts (FusedOps.argmax: the C++ one
        reads bf16 logits directly on CPU); None: torch's.
        row_by_row: sample each row on its own (deterministic mode): torch splits a
        sum over the vocabulary differently for different row counts, which moves
        top-p cut-offs and draws in their last bits."""
        self.vocab_size = vocab_size
        self.generator = torch.Generator().manual_seed(seed)
        self.argmax = argmax or TORCH_FUSED_OPS.argmax
        self.row_by_row = row_by_row

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow],
                 exact: ExactLogits | None = None) -> SamplerOutput:
        """logits: [R, >= vocab] (extra columns are padding); one token per row.
        exact: the LM head and the R hidden rows behind the logits; greedy rows
        use them to break ties that bf16/fp16 rounding made (see _greedy).

        One row's failure is that row's alone: the random numbers are drawn
        before anything can raise, and if the batched pass raises, each row is
        sampled on its own with the same number. Every op here is row-wise, so
        a good row gets the token the batched pass would have given: exactly for
        greedy rows; for sampled rows up to the rounding of sums over the
        vocabulary (torch splits them by row count), which moves a draw only
        when it lands within that rounding of a boundary. row_by_row (the
        deterministic mode) always takes the per-row path, so there even that
        cannot happen."""
        if not rows:
            return SamplerOutput([], [])
        logits = logits[:, :self.vocab_size]  # [R, V]
        u = self._uniforms(rows)  # [R] float64; NaN on greedy rows (they draw nothing)
        if not self.row_by_row:
            try:
                return self._sample_rows(logits, rows, u, exact)
            except Exception:
                log.exception("sampling a batch of %d rows raised; sampling each row on its own", len(rows))
        out = SamplerOutput([-1] * len(rows), [None] * len(rows))
        for i, row in enumerate(rows):
            try:
                one = self._sample_rows(logits[i:i + 1], [row], u[i:i + 1],
                                        exact.rows(slice(i, i + 1)) if exact is not None else None)
            except Exception as exc:
                out.errors[i] = f"{type(exc).__name__}: {exc}"
                continue
            out.token_ids[i], out.logprobs[i] = one.token_ids[0], one.logprobs[0]
        return out

    def _sample_rows(self, logits: torch.Tensor, rows: list[SamplingRow], u: torch.Tensor,
                     exact: ExactLogits | None) -> SamplerOutput:
        """logits [R, V], u [R] -> one token per row (the batched pass)."""
        params = [r.params for r in rows]
        if all(p.greedy and not p.uses_penalties and p.logprobs is None for p in params):
            return SamplerOutput(self._greedy(logits, exact).tolist(), [None] * len(rows))
        x = logits.float()  # [R, V]
        if any(p.uses_penalties for p in params):
            x = x.clone(memory_format=torch.contiguous_format)  # never touch the caller's tensor
            apply_penalties(x, rows)
        tokens = torch.empty(len(rows), dtype=torch.long, device=x.device)  # [R]
        plain = [i for i, p in enumerate(params) if p.greedy and not p.uses_penalties]
        penalized = [i for i, p in enumerate(params) if p.greedy and p.uses_penalties]
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        if plain:  # the same call as the all-greedy path: a row's token never depends on the batch
            tokens[plain] = self._greedy(_take_rows(logits, plain), exact.rows(plain) if exact is not None else None)
        if penalized:
            tokens[penalized] = argmax_finite(_take_rows(x, penalized))
        if sampled:
            tokens[sampled] = self._sample(_take_rows(x, sampled), [params[i] for i in sampled], u[sampled])
        token_ids = tokens.tolist()
        return SamplerOutput(token_ids, compute_logprobs(x, params, token_ids))

    def _greedy(self, logits: torch.Tensor, exact: ExactLogits | None) -> torch.Tensor:
        """logits: [G, V], exact: their G hidden rows -> [G] argmax ids.

        In bf16 a logit keeps 8 significant bits (a step of 0.0625 between 8 and 16), so
        distinct top logits often round to the same value; the first id would
        then win by id order alone. Rounding is monotone, so the true maximum is
        always among the columns tied at the rounded maximum: the row's tied
        columns are recomputed exactly and the largest wins (first on exact ties).
        Float32 logits are exact already."""
        index, ties = self.argmax(logits)
        if exact is None or logits.dtype == torch.float32:
            return index
        for j in torch.nonzero(ties > 1).flatten().tolist():  # only rows whose maximum is tied
            cols = torch.nonzero(logits[j] == logits[j, index[j]]).flatten()
            index[j] = cols[exact.head.columns(exact.hidden[j], cols).argmax()]
        return index

    def _sample(self, x: torch.Tensor, params: list[SamplingParams], u: torch.Tensor) -> torch.Tensor:
        """x: [S, V] penalized logits of non-greedy rows (may be a view), u [S] -> [S] token ids.

        A row whose weights are not all finite (NaN or inf logits) or sum to
        zero has no distribution to draw from: it takes the argmax instead."""
        w = probability_weights(x, [p.temperature for p in params])  # [S, V]
        apply_top_k(w, [p.top_k for p in params])
        apply_top_p(w, [p.top_p for p in params])
        apply_min_p(w, [p.min_p for p in params])
        total = w.sum(dim=-1, dtype=torch.float64)  # [S]; NaN or inf if any weight is
        broken = ~(torch.isfinite(total) & (total > 0))
        if not broken.any():
            return draw(w, u.to(w.device))
        log.warning("%d sampled row(s) had no finite distribution; taking their argmax", int(broken.sum()))
        tokens = argmax_finite(x)  # [S]
        ok = torch.nonzero(~broken).flatten()
        if ok.numel():
            tokens[ok] = draw(w[ok], u.to(w.device)[ok])
        return tokens

    def _uniforms(self, rows: list[SamplingRow]) -> torch.Tensor:
        """One U[0, 1) float64 per sampled row (NaN for greedy rows): seeded rows
        from their seed and output position, the others from the shared generator."""
        u = torch.full((len(rows),), float("nan"), dtype=torch.float64)  # [R]
        sampled = [i for i, r in enumerate(rows) if not r.params.greedy]
        shared = [i for i in sampled if rows[i].params.seed is None]
        if shared:
            u[shared] = torch.rand(len(shared), dtype=torch.float64, generator=self.generator)
        for i in sampled:
            seed = rows[i].params.seed
            if seed is not None:
                u[i] = seeded_uniform(seed, len(rows[i].output_token_ids))
        return u


def argmax_finite(x: torch.Tensor) -> torch.Tensor:
    """x [R, V] float -> [R] argmax, NaN counting as -inf (torch's argmax picks NaN)."""
    if torch.isnan(x).any():
        x = torch.nan_to_num(x, nan=float("-inf"))
    return x.argmax(dim=-1)


def _take_rows(x: torch.Tensor, idx: list[int]) -> torch.Tensor:
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


def compute_logprobs(x: torch.Tensor, params: list[SamplingParams],
                     tokens: list[int]) -> list[TokenLogprob | None]:
    """Log-softmax of the penalized logits x [R, V] for rows that asked for logprobs."""
    out: list[TokenLogprob | None] = [None] * len(params)
    wanted = [i for i, p in enumerate(params) if p.logprobs is not None]
    if not wanted:
        return out
    lp = torch.log_softmax(_take_rows(x, wanted), dim=-1)  # [W, V]
    chosen = lp.gather(1, torch.tensor([[tokens[i]] for i in wanted], device=lp.device)).view(-1).tolist()
    top_vals, top_ids = _top(lp, max(params[i].logprobs for i in wanted))  # [W, n_max]
    top_vals, top_ids = top_vals.tolist(), top_ids.tolist()
    for j, i in enumerate(wanted):
        n = params[i].logprobs
        out[i] = TokenLogprob(tokens[i], chosen[j], list(zip(top_ids[j][:n], top_vals[j][:n])))
    return out


def token_logprobs(logits: torch.Tensor, targets: list[int], n_top: int) -> list[TokenLogprob]:
    """Prompt logprobs: logits [n, V] -> row i's log-softmax (float32) at
    targets[i], with its n_top most likely tokens (ties in id order, as _top)."""
    lp = torch.log_softmax(logits.float(), dim=-1)  # [n, V]
    chosen = lp.gather(1, torch.tensor(targets, device=lp.device).view(-1, 1)).view(-1).tolist()
    vals, ids = _top(lp, n_top)  # [n, n_top]
    return [TokenLogprob(t, c, list(zip(i, v))) for t, c, i, v in zip(targets, chosen, ids.tolist(), vals.tolist())]


def _top(lp: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n largest values of each row of lp [W, V] and their ids, ties in id
    order (topk orders tied values arbitrarily, differently for different batch
    shapes, so a row's alternatives would depend on its batch)."""
    if n == 0:
        return lp[:, :0], lp[:, :0].long()
    vals, ids = lp.topk(min(n + 1, lp.shape[1]), dim=-1)  # one extra: a tie across the cut shows
    tied = torch.nonzero((vals[:, 1:] == vals[:, :-1]).any(dim=-1)).flatten()
    if tied.numel():  # rare (exactly equal logprobs): a stable sort of those rows
        s_vals, s_ids = lp[tied].sort(dim=-1, descending=True, stable=True)
        vals[tied], ids[tied] = s_vals[:, :vals.shape[1]], s_ids[:, :vals.shape[1]]
    return vals[:, :n], ids[:, :n]


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
    top = largest(_take_rows(w, idx), max(ks))  # [K, k_max]
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
    sub = _take_rows(w, idx)  # [P, V]
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
