"""What the sampler needs to break bf16/fp16 greedy ties: the LM head's
weights as data (no callback into the model).

A bf16 logit keeps 8 significant bits, so distinct top logits often round to
the same value. For a greedy row whose maximum is tied, the sampler recomputes
only the tied columns in float32 from the head's weights and the row's final
hidden state (Sampler._greedy). ``ExactHead`` is that head: plain tensors,
built once by the model (LlamaForCausalLM.exact_head) after any quantization
or deterministic-mode swap of its LM head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tokenmill.kernels.int8_linear import Int8Linear


@dataclass(frozen=True)
class ExactHead:
    weight: torch.Tensor
    """[V, H]: the head's weights (model dtype, or int8 for a quantized head)."""
    scales: torch.Tensor | None
    """[V]: per-row scales of an int8 head; None for a full-precision head."""
    bias: torch.Tensor | None
    """[V] or None."""
    input_dtype: torch.dtype | None
    """The dtype the head rounds its input to (an int8 head's compute dtype);
    None: the hidden rows' own dtype."""

    @staticmethod
    def of_linear(head) -> ExactHead:
        """The head of a model whose LM head is an ``nn.Linear`` or, quantized, an ``Int8Linear``."""
        if isinstance(head, Int8Linear):
            return ExactHead(head.qweight, head.scales, head.bias, head.compute_dtype)
        return ExactHead(head.weight, None, head.bias, None)

    def columns(self, hidden: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """hidden: [H] one row of the head's input; columns: [k] long -> float32 [k]:
        those logits accumulated and returned in float32, i.e. the head's output
        before its rounding to the model dtype."""
        w = self.weight[columns].float()  # [k, H]
        if self.scales is not None:
            w = w * self.scales[columns].float()[:, None]
        x = hidden if self.input_dtype is None else hidden.to(self.input_dtype)
        out = w @ x.float()
        return out if self.bias is None else out + self.bias[columns].float()

    def row_columns(self, hidden: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """``columns`` for a batch: hidden [B, H], columns [B, k] long -> float32
        [B, k], row b's logits at columns[b] (spec/shortlist_head.py rescores with it)."""
        w = self.weight[columns].float()  # [B, k, H]
        if self.scales is not None:
            w = w * self.scales[columns].float()[..., None]
        x = hidden if self.input_dtype is None else hidden.to(self.input_dtype)
        out = torch.bmm(w, x.float().unsqueeze(-1)).squeeze(-1)
        return out if self.bias is None else out + self.bias[columns].float()


@dataclass(frozen=True)
class ExactLogits:
    """The sampler's input for tie-breaking: the head and the step's final hidden rows."""

    head: ExactHead
    hidden: torch.Tensor
    """[R, H]: row r is the input that produced logits row r."""

    def rows(self, index: slice | list[int]) -> ExactLogits:
        return ExactLogits(self.head, self.hidden[index])
