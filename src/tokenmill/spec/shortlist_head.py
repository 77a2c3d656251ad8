"""A draft model's greedy pick from a fraction of its LM head's bytes.

A batch-1 draft pass reads every weight once, so its time is bytes over memory
bandwidth, and the LM head is a large share of them: the embedded model's int8
head (49,152 x 576) is 28 MB of a self-int4 pass's ~94 MB. A greedy draft
needs only an argmax, not the logits, so the head is read more cheaply:

- an int4 copy (groups of 32, kernels/int4_linear.py) of the head's first
  ``scored_vocab`` rows scores those tokens. A BPE vocabulary numbers its
  tokens in merge order, so low ids are the common ones: on the benchmark's
  answers (benchmarks/spec_decode.py) 89-97% of the embedded model's output
  tokens have ids under 8,192 and 96-99% under 16,384;
- the request's own tokens past that range (a rare word of the prompt, which a
  copying answer repeats) join the candidates, as ``extras`` per row;
- the int4 scores' ``candidates`` best and those extras are scored again,
  exactly, on the rows of the target model's own head (``rescore_on``; the
  draft's int8 head until the engine hands the target's over), a few KB; their
  best is the draft.

So the pick is the argmax the target's head would give the draft's hidden
state, unless that token is neither among the int4 scores' best nor in the
request's context: then the draft is wrong and the verification rejects it
(the output never changes, only how many drafts are kept).

Sampled drafts (spec/draft_sampling.py) need the whole distribution and still
read the int8 head.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from tokenmill.engine.exact_head import ExactHead
from tokenmill.kernels.int4_linear import Int4Linear, supports_int4
from tokenmill.kernels.int8_linear import Int8Linear
from tokenmill.spec.config import DRAFT_HEAD_VOCAB

CANDIDATES = 16
"""Tokens rescored per row from the int4 scores. On the embedded model's benchmark
prompts, rescored on the target's bf16 head over the whole vocabulary, the pick
was that head's argmax in 302 of 302 grounded drafts and 216 of 216 open ones."""
MAX_EXTRAS = 256
"""Most context tokens past ``scored_vocab`` rescored per row (the latest seen)."""


class ShortlistHead:
    def __init__(self, head: nn.Linear, int8_head: Int8Linear, compute_dtype: torch.dtype, activations: str,
                 vocab_size: int, candidates: int = CANDIDATES, scored_vocab: int | None = DRAFT_HEAD_VOCAB):
        """head: the full-precision LM head (before quantization); int8_head: the
        draft's int8 copy of it, whose rows rescore until ``rescore_on``;
        activations: the int4 copy's (EngineConfig.int4_activations, resolved);
        scored_vocab: how many of the lowest token ids the int4 copy scores, rounded
        up to the kernel's 16 (None: the whole vocabulary)."""
        rows = head.out_features if scored_vocab is None else min(-(-scored_vocab // 16) * 16, head.out_features)
        part = head if rows == head.out_features else _first_rows(head, rows)
        self.int4 = Int4Linear(part, compute_dtype, activations=activations)
        self.rows = ExactHead.of_linear(int8_head)
        """The head whose rows rescore the candidates (``rescore_on``)."""
        self.vocab_size = vocab_size
        self.scored_vocab = min(rows, vocab_size)
        """Token ids [0, scored_vocab) are scored by the int4 copy; the rest only as extras."""
        self.candidates = min(candidates, self.scored_vocab)

    def rescore_on(self, head: ExactHead) -> None:
        """Rescore on ``head``'s rows (the engine hands over the target's own, which it
        keeps for the sampler's tie rule anyway: no bytes added)."""
        self.rows = head

    def extras(self, token_ids: Sequence[int]) -> list[int]:
        """The ids of ``token_ids`` (a request's context) that the int4 copy does not
        score, each once, the latest seen first, at most MAX_EXTRAS."""
        if self.scored_vocab >= self.vocab_size:
            return []
        ids = torch.tensor(token_ids, dtype=torch.long)
        rare = ids[(ids >= self.scored_vocab) & (ids < self.vocab_size)].flip(0).tolist()
        return list(dict.fromkeys(rare))[:MAX_EXTRAS]

    @torch.inference_mode()
    def argmax(self, hidden: torch.Tensor, extras: list[list[int]] | None = None) -> list[int]:
        """hidden [B, H] -> each row's greedy token id (see the module docstring);
        extras: per row, ids past ``scored_vocab`` to rescore too (``extras``)."""
        approx = self.int4(hidden)[:, :self.scored_vocab]  # [B, N]
        cand = approx.topk(self.candidates, dim=-1).indices  # [B, C]
        width = max((len(e) for e in extras), default=0) if extras else 0
        if width:
            # Pad each row's extras with its best int4 candidate: a repeated column cannot change an argmax.
            rows = [e + [top] * (width - len(e)) for e, top in zip(extras, cand[:, 0].tolist())]
            cand = torch.cat([cand, torch.tensor(rows, dtype=torch.long)], dim=1)  # [B, C + E]
        exact = self.rows.row_columns(hidden, cand)  # [B, C (+ E)] float32
        return cand.gather(1, exact.argmax(dim=-1, keepdim=True)).squeeze(1).tolist()


def _first_rows(head: nn.Linear, n: int) -> nn.Linear:
    """A bias-free linear over ``head``'s first ``n`` output rows (a view of its weights)."""
    part = nn.Linear(head.in_features, n, bias=False, device=head.weight.device, dtype=head.weight.dtype)
    part.weight = nn.Parameter(head.weight.detach()[:n], requires_grad=False)
    return part


def shortlist_head(head: nn.Module, int8_head: nn.Module, compute_dtype: torch.dtype, activations: str,
                   vocab_size: int, scored_vocab: int | None = DRAFT_HEAD_VOCAB) -> ShortlistHead | None:
    """A ShortlistHead for a draft whose head is ``head`` (nn.Linear) and whose
    int8 copy is ``int8_head``, or None where it does not apply: a head of another
    kind, widths the int4 kernel does not take, or no C++ int4 kernel here (torch's
    int4 fallback reads no fewer bytes per pass than it saves)."""
    if not isinstance(head, nn.Linear) or not isinstance(int8_head, Int8Linear) or not supports_int4(head):
        return None
    if head.weight.device.type != "cpu" or head.bias is not None:
        return None
    shortlist = ShortlistHead(head, int8_head, compute_dtype, activations, vocab_size, scored_vocab=scored_vocab)
    return shortlist if shortlist.int4.on_cpp_kernel else None
