"""Attention-DP prompt balancing: the steps at which TensorRT-LLM lets waiting prompts in.

Under attention DP each of an instance's dp ranks runs the attention of its own sequences, and
all of them step together (the MoE layers between attentions are collective), so a step lasts
as long as its slowest rank's part: a prompt on one rank stretches every rank's step. TensorRT-LLM's
balancing (``attention_dp_config.enable_balance``; the MLPerf configs' ``adp_balancing_enable``)
therefore holds prompts back so that they start together on every rank. Its rule
(``_balance_adp_requests``, run once per iteration over the prompts and decodes each rank
scheduled):

- every rank has a prompt and room for it: the timeout counter resets; if every rank also has
  decodes, the prompts wait ``batching_wait_iters`` more iterations (to gather more of them)
  and then go;
- otherwise the prompts wait and the timeout counter counts the iteration; at
  ``timeout_iters``, or at once when some rank has no decodes to stall, they go and the counter
  resets.

The counter counts iterations whether or not a prompt waits, so a lone prompt waits for the next
timeout: up to ``timeout_iters`` steps. At the published MLPerf DeepSeek-R1 Server rates (about
one prompt per step per 8-GPU instance, steps of 55-75 ms, wait 3 and timeout 9) that is most
of the published TTFT (p99 0.56-1.43 s).

serving.py simulates one scheduler for the whole instance, not one per rank. TensorRT-LLM gives
each new request to the least-loaded rank, so "every rank has a prompt" is read as "at least
``ranks`` prompts wait", "every rank has decodes" as "at least ``ranks`` sequences run", and
"room" as the running batch below ``max_num_seqs``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdpBalance:
    ranks: int
    """Attention-DP ranks of the instance (Parallel.dp)."""
    batching_wait_iters: int
    timeout_iters: int

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise ValueError(f"ranks: must be >= 1, got {self.ranks}")
        if self.batching_wait_iters < 0 or self.timeout_iters < 0:
            raise ValueError(f"adp balance: wait and timeout iterations must be >= 0, got "
                             f"{self.batching_wait_iters} and {self.timeout_iters}")


class AdpGate:
    """The rule's two counters; ``admits`` is asked once per step, before admission."""

    def __init__(self, balance: AdpBalance):
        self.balance = balance
        self.waited = 0  # iterations since the last release while not every rank had a prompt
        self.batched = 0  # iterations held while every rank had one

    def admits(self, waiting: int, running: int, room: bool) -> bool:
        """Whether this step may admit prompts: ``waiting`` prompts queued, ``running`` sequences
        in the batch, ``room`` for more of them."""
        b = self.balance
        every_rank_decodes = running >= b.ranks
        if waiting >= b.ranks and room:
            self.waited = 0
            if not every_rank_decodes:
                return True
            if self.batched < b.batching_wait_iters:
                self.batched += 1
                return False
            self.batched = 0
            return True
        self.waited += 1
        if self.waited >= b.timeout_iters or not every_rank_decodes:
            self.waited = 0
            return True
        return False
