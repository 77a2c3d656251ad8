"""Token sampling for one engine step.

Order per row: penalties on the raw logits -> logprobs -> temperature ->
top-k -> top-p -> min-p -> draw. Greedy rows (temperature 0) take the argmax
of the penalized logits (ties go to the lowest id); without penalties, a tie
that bf16/fp16 rounding made is broken by the exact logits (Sampler._greedy).

Logprobs are the "processed" kind: log-softmax of the penalized logits, before
temperature and truncation, i.e. the model's distribution as OpenAI clients
expect it (vLLM's default, "raw", differs only for requests with penalties).

Sampled rows draw from the processed weights of engine/distribution.py with
one float64 uniform per row per step. A seeded request's uniform is a
function of its seed and the output position being sampled
(engine/counter_rng.py), so its tokens depend only on its own logits and
seed, never on the batch, its row, or where it ran its earlier steps.

A sampled row that verifies a draft drawn from a draft model's distribution
(SamplingRow.draft) keeps or replaces it by the rejection rule
(engine/rejection.py), with a second uniform for the accept test.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tokenmill.engine.counter_rng import STREAM_ACCEPT, seeded_uniform
from tokenmill.engine.distribution import apply_penalties, argmax_finite, draw, filtered_weights, take_rows
from tokenmill.engine.exact_head import ExactLogits
from tokenmill.engine.rejection import accept_or_resample
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS
from tokenmill.outputs import TokenLogprob
from tokenmill.sampling_params import SamplingParams

log = logging.getLogger(__name__)


@dataclass
class SamplingRow:
    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    """Tokens generated before the one sampled now (its position is their count)."""
    draft: int | None = None
    draft_probs: torch.Tensor | None = None
    """A sampled row verifying a draft that a draft model drew from its own
    distribution: the draft and that distribution ([V_draft] float32, sums to
    1). The row keeps it or replaces it by the rejection rule. None: the row
    draws as usual (greedy rows, and drafts without a distribution: exact match)."""


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
        u = self._uniforms(rows)  # [R, 2] float64: draw, accept test; NaN where a row needs none
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
        """logits [R, V], u [R, 2] -> one token per row (the batched pass)."""
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
            tokens[plain] = self._greedy(take_rows(logits, plain), exact.rows(plain) if exact is not None else None)
        if penalized:
            tokens[penalized] = argmax_finite(take_rows(x, penalized))
        if sampled:
            tokens[sampled] = self._sample(take_rows(x, sampled), [rows[i] for i in sampled], u[sampled])
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

    def _sample(self, x: torch.Tensor, rows: list[SamplingRow], u: torch.Tensor) -> torch.Tensor:
        """x: [S, V] penalized logits of non-greedy rows (may be a view), u [S, 2] -> [S] token ids.

        A row whose weights are not all finite (NaN or inf logits) or sum to
        zero has no distribution to draw from: it takes the argmax instead
        (and so rejects its draft unless the draft is that argmax)."""
        w = filtered_weights(x, [r.params for r in rows])  # [S, V]
        u = u.to(w.device)
        total = w.sum(dim=-1, dtype=torch.float64)  # [S]; NaN or inf if any weight is
        ok = torch.isfinite(total) & (total > 0)
        tokens = torch.empty(len(rows), dtype=torch.long, device=w.device)  # [S]
        if not ok.all():
            log.warning("%d sampled row(s) had no finite distribution; taking their argmax", int((~ok).sum()))
            tokens[~ok] = argmax_finite(x[~ok])
        ok_rows = torch.nonzero(ok).flatten().tolist()
        verify = [i for i in ok_rows if rows[i].draft is not None]
        plain = [i for i in ok_rows if rows[i].draft is None]
        if plain:
            tokens[plain] = draw(take_rows(w, plain), u[plain, 0])
        if verify:
            drafts = torch.tensor([rows[i].draft for i in verify], dtype=torch.long, device=w.device)
            q = torch.nn.utils.rnn.pad_sequence([rows[i].draft_probs.to(w.device) for i in verify], batch_first=True)
            tokens[verify] = accept_or_resample(take_rows(w, verify), drafts, q, u[verify, 1], u[verify, 0])
        return tokens

    def _uniforms(self, rows: list[SamplingRow]) -> torch.Tensor:
        """[R, 2] U[0, 1) float64: column 0 each sampled row's draw, column 1 the
        accept test of a row verifying a sampled draft; NaN where a row needs
        none. Seeded rows' numbers come from their seed, output position and
        stream (engine/counter_rng.py), the others' from the shared generator."""
        u = torch.full((len(rows), 2), float("nan"), dtype=torch.float64)  # [R, 2]
        sampled = [i for i, r in enumerate(rows) if not r.params.greedy]
        shared = [(i, 0) for i in sampled if rows[i].params.seed is None]
        shared += [(i, 1) for i, _ in shared if rows[i].draft is not None]
        if shared:
            idx = torch.tensor(shared, dtype=torch.long)
            u[idx[:, 0], idx[:, 1]] = torch.rand(len(shared), dtype=torch.float64, generator=self.generator)
        for i in sampled:
            seed, position = rows[i].params.seed, len(rows[i].output_token_ids)
            if seed is not None:
                u[i, 0] = seeded_uniform(seed, position)
                if rows[i].draft is not None:
                    u[i, 1] = seeded_uniform(seed, position, STREAM_ACCEPT)
        return u


def compute_logprobs(x: torch.Tensor, params: list[SamplingParams],
                     tokens: list[int]) -> list[TokenLogprob | None]:
    """Log-softmax of the penalized logits x [R, V] for rows that asked for logprobs."""
    out: list[TokenLogprob | None] = [None] * len(params)
    wanted = [i for i, p in enumerate(params) if p.logprobs is not None]
    if not wanted:
        return out
    lp = torch.log_softmax(take_rows(x, wanted), dim=-1)  # [W, V]
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
