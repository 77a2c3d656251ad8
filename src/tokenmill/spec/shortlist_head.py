"""A draft model's greedy pick from a fraction of its LM head's bytes.

A batch-1 draft pass reads every weight once, so its time is bytes over memory
bandwidth, and the LM head is a large share of them: the embedded model's int8
head (49,152 x 576) is 28 MB of a self-int4 pass's ~94 MB. A greedy draft
needs only the head's argmax, not its logits, so the head is read twice as
cheaply: an int4 copy (groups of 32, kernels/int4_linear.py: 18 MB with its
scales) scores every token, and the ``candidates`` best of those are scored
again on the int8 head's own rows (a few KB), whose best is the draft. The
pick is the int8 head's argmax unless that token is not among the int4 copy's
top candidates, or the two are within rounding of each other (the rescoring
multiplies float32 activations, the int8 head bf16 ones).

Sampled drafts (spec/draft_sampling.py) need the whole distribution and still
read the int8 head.
"""

from __future__ import annotations

import torch
from torch import nn

from tokenmill.kernels.int4_linear import Int4Linear, supports_int4
from tokenmill.kernels.int8_linear import Int8Linear

CANDIDATES = 16
"""Tokens rescored per row. On the embedded model's benchmark prompts
(benchmarks/spec_decode.py) the pick was the int8 head's argmax in 319 of 319
grounded drafts and 611 of 616 open ones (4 candidates: 318/318, 605/612)."""


class ShortlistHead:
    def __init__(self, head: nn.Linear, int8_head: Int8Linear, compute_dtype: torch.dtype, activations: str,
                 vocab_size: int, candidates: int = CANDIDATES):
        """head: the full-precision LM head (before quantization); int8_head: the
        draft's int8 copy of it, whose rows rescore; activations: the int4
        copy's (EngineConfig.int4_activations, resolved)."""
        self.int4 = Int4Linear(head, compute_dtype, activations=activations)
        self.qweight, self.scales = int8_head.qweight, int8_head.scales  # [V, H] int8, [V]
        self.vocab_size = vocab_size
        self.candidates = min(candidates, vocab_size)

    @torch.inference_mode()
    def argmax(self, hidden: torch.Tensor) -> list[int]:
        """hidden [B, H] -> each row's greedy token id (see the module docstring)."""
        approx = self.int4(hidden)[:, :self.vocab_size]  # [B, V]
        cand = approx.topk(self.candidates, dim=-1).indices  # [B, C]
        rows = self.qweight[cand].float()  # [B, C, H]
        exact = torch.bmm(rows, hidden.float().unsqueeze(-1)).squeeze(-1) * self.scales[cand].float()  # [B, C]
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
