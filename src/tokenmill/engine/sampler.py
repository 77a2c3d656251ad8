"""Token sampling for one engine step.

Order per row: penalties on the raw logits -> logprobs (of the penalized model
distribution, before temperature and truncation: what OpenAI clients expect)
-> temperature -> top-k -> top-p -> min-p -> draw.

Draws use the exponential race (argmax of p / E with E ~ Exp(1)), which is an
exact sample from p. A seeded request draws its E from its own generator, one
vocab-sized draw per step, so its tokens depend only on its own logits and
seed, never on the batch it shares or its row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tokenmill.outputs import TokenLogprob
from tokenmill.sampling_params import SamplingParams


@dataclass
class SamplingRow:
    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator | None
    """The request's own generator (seeded requests); None: the shared one."""


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[TokenLogprob | None]


def make_generator(seed: int | None) -> torch.Generator | None:
    return None if seed is None else torch.Generator().manual_seed(seed)


class Sampler:
    def __init__(self, vocab_size: int, seed: int = 0):
        self.vocab_size = vocab_size
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        """logits: [R, >= vocab] on any device; returns one token per row."""
        logits = logits[:, :self.vocab_size].float().cpu()  # [R, V]
        params = [r.params for r in rows]
        if all(p.greedy and not p.uses_penalties and p.logprobs is None for p in params):
            return SamplerOutput(logits.argmax(dim=-1).tolist(), [None] * len(rows))
        if any(p.uses_penalties for p in params):
            logits = logits.clone()
            for i, row in enumerate(rows):
                if row.params.uses_penalties:
                    apply_penalties(logits[i], row)
        tokens = [0] * len(rows)
        greedy = [i for i, p in enumerate(params) if p.greedy]
        if greedy:
            for i, t in zip(greedy, logits[greedy].argmax(dim=-1).tolist()):
                tokens[i] = t
        sampled = [i for i, p in enumerate(params) if not p.greedy]
        if sampled:
            probs = truncated_probs(logits[sampled], [params[i] for i in sampled])
            for i, t in zip(sampled, self._draw(probs, [rows[i].generator for i in sampled])):
                tokens[i] = t
        return SamplerOutput(tokens, self._logprobs(logits, params, tokens))

    def _draw(self, probs: torch.Tensor, generators: list[torch.Generator | None]) -> list[int]:
        """probs: [S, V] -> one token per row by exponential race."""
        noise = torch.empty_like(probs)
        shared = [i for i, g in enumerate(generators) if g is None]
        if shared:
            noise[shared] = torch.empty(len(shared), probs.shape[1]).exponential_(generator=self.generator)
        for i, g in enumerate(generators):
            if g is not None:
                noise[i].exponential_(generator=g)
        return (probs / noise).argmax(dim=-1).tolist()

    @staticmethod
    def _logprobs(logits, params, tokens) -> list[TokenLogprob | None]:
        wanted = [i for i, p in enumerate(params) if p.logprobs is not None]
        out: list[TokenLogprob | None] = [None] * len(params)
        if not wanted:
            return out
        lp = torch.log_softmax(logits[wanted], dim=-1)  # [W, V]
        k = max(params[i].logprobs for i in wanted)
        top_vals, top_ids = lp.topk(max(k, 1), dim=-1)
        for j, i in enumerate(wanted):
            n = params[i].logprobs
            top = list(zip(top_ids[j, :n].tolist(), top_vals[j, :n].tolist()))
            out[i] = TokenLogprob(tokens[i], float(lp[j, tokens[i]]), top)
        return out


def apply_penalties(row_logits: torch.Tensor, row: SamplingRow) -> None:
    """In place on one row [V]. Repetition (HF): every id seen in prompt or
    output, positive logits divided, negative multiplied. Frequency/presence
    (OpenAI): over output ids only, logit -= count * f + (count > 0) * p."""
    p = row.params
    vocab = row_logits.shape[0]
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(row.prompt_token_ids) | set(row.output_token_ids)), dtype=torch.long)
        seen = seen[seen < vocab]
        vals = row_logits[seen]
        row_logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if (p.frequency_penalty or p.presence_penalty) and row.output_token_ids:
        out_ids = torch.tensor(row.output_token_ids, dtype=torch.long)
        counts = torch.bincount(out_ids[out_ids < vocab], minlength=vocab).to(row_logits.dtype)
        row_logits -= counts * p.frequency_penalty + (counts > 0).to(row_logits.dtype) * p.presence_penalty


def truncated_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """logits [S, V] -> probabilities after temperature, top-k, top-p, min-p."""
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype)
    x = logits / temps[:, None]
    ks = [p.top_k if p.top_k > 0 else 0 for p in params]
    if any(k and k < x.shape[1] for k in ks):
        x = _top_k(x, ks)
    if any(p.top_p < 1.0 for p in params):
        x = _top_p(x, torch.tensor([p.top_p for p in params], dtype=x.dtype))
    probs = torch.softmax(x, dim=-1)
    if any(p.min_p > 0.0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], dtype=probs.dtype)
        floor = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
        probs = torch.where(probs < floor, torch.zeros_like(probs), probs)
    return probs


def _top_k(x: torch.Tensor, ks: list[int]) -> torch.Tensor:
    vocab = x.shape[1]
    k_max = max(k for k in ks if k) if any(ks) else vocab
    top = x.topk(min(k_max, vocab), dim=-1).values  # [S, k_max], descending
    # Row threshold: its k-th largest value (no truncation where k is off).
    idx = torch.tensor([min(k, k_max) - 1 if k else 0 for k in ks])
    thresh = top.gather(1, idx[:, None])
    off = torch.tensor([k == 0 or k >= vocab for k in ks])[:, None]
    return torch.where(off | (x >= thresh), x, torch.full_like(x, float("-inf")))


def _top_p(x: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    sorted_x, order = x.sort(dim=-1, descending=True)
    cum = sorted_x.softmax(dim=-1).cumsum(dim=-1)
    # Drop a token when the mass strictly before it already reaches top_p;
    # the most likely token is always kept.
    drop = (cum - sorted_x.softmax(dim=-1)) >= top_p[:, None]
    drop[:, 0] = False
    sorted_x = sorted_x.masked_fill(drop, float("-inf"))
    return torch.empty_like(x).scatter_(1, order, sorted_x)
