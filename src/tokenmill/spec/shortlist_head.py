"""A draft model's greedy pick from a fraction of its LM head's bytes.

A batch-1 draft pass reads every weight once, so its time is bytes over memory
bandwidth, and the LM head is a large share of them: the embedded model's int8
head (49,152 x 576) is 28 MB of a self-int4 pass's ~94 MB. A greedy draft
needs only an argmax, not the logits, so the head is read more cheaply: an int4
copy (groups of 32, kernels/int4_linear.py: 18 MB with its scales) scores every
token, and its ``candidates`` best are scored again, exactly, on the rows of
the target model's own head (``rescore_on``; the draft's int8 head until the
engine hands the target's over), a few KB; their best is the draft. So the pick
is the argmax the target's head would give the draft's hidden state, unless
that token is not among the int4 copy's top candidates.

Sampled drafts (spec/draft_sampling.py) need the whole distribution and still
read the int8 head.
"""
from __future__ import annotations

import torch
from torch import nn

from tokenmill.engine.exact_head import ExactHead
from tokenmill.kernels.int4_linear import Int4Linear, supports_int4
from tokenmill.kernels.int8_linear import Int8Linear

CANDIDATES = 16
"""Tokens rescored per row. On the embedded model's benchmark prompts
(benchmarks/spec_decode.py), rescored on the target's bf16 head, the pick was
that head's argmax over the whole vocabulary in 302 of 302 grounded drafts and
216 of 216 open ones."""


class ShortlistHead:
    def __init__(self, head: nn.Linear, int8_head: Int8Linear, compute_dtype: torch.dtype, activations: str,
                 vocab_size: int, candidates: int = CANDIDATES):
        """head: the full-precision LM head (before quantization); int8_head: the
        draft's int8 copy of it, whose rows rescore until ``rescore_on``;
        activations: the int4 copy's (EngineConfig.int4_activations, resolved)."""
        self.int4 = Int4Linear(head, compute_dtype, activations=activations)
        self.rows = ExactHead.of_linear(int8_head)
        """The head whose rows rescore the candidates (``rescore_on``)."""
        self.vocab_size = vocab_size
        self.candidates = min(candidates, vocab_size)

    def rescore_on(self, head: ExactHead) -> None:
        """Rescore on ``head``'s rows (the engine hands over the target's own, which it
        keeps for the sampler's tie rule anyway: no bytes added)."""
        self.rows = head

    @torch.inference_mode()
    def argmax(self, hidden: torch.Tensor) -> list[int]:
        """hidden [B, H] -> each row's greedy token id (see the module docstring)."""
        approx = self.int4(hidden)[:, :self.vocab_size]  # [B, V]
        cand = approx.topk(self.candidates, dim=-1).indices  # [B, C]
        exact = self.rows.row_columns(hidden, cand)  # [B, C] float32
        return cand.gather(1, exact.argmax(dim=-1, keepdim=True)).squeeze(1).tolist()


def shortlist_head(head: nn.Module, int8_head: nn.Module, compute_dtype: torch.dtype, activations: str,
                   vocab_size: int) -> ShortlistHead | None:
    """A ShortlistHead for a draft whose head is ``head`` (nn.Linear) and whose
    int8 copy is ``int8_head``, or None where it does not apply: a head of another
    kind, widths the int4 kernel does not take, or no C++ int4 kernel here (torch's
    int4 fallback reads no fewer bytes per pass than it saves)."""
    if not isinstance(head, nn.Linear) or not isinstance(int8_head, Int8Linear) or not supports_int4(head):
        return None
    if head.weight.device.type != "cpu" or head.bias is not None:
        return None
    shortlist = ShortlistHead(head, int8_head, compute_dtype, activations, vocab_size)
    return shortlist if shortlist.int4.on_cpp_kernel else None
