"""Structured outputs inside one engine core: a grammar matcher per constrained
request, token bitmasks for the step's sample rows, and the matchers' advance.

Per step: ``start_masks`` hands the bitmask work to a background thread as soon
as the step is scheduled, so it runs while the forward pass does (llguidance
drops the GIL while it computes); ``apply`` waits for it and sets the
disallowed logits of the constrained rows to -inf, in place, before the
sampler sees them; ``advance`` feeds each request's accepted tokens to its
matcher. Masking is row-wise: an unconstrained row's logits, and so its
tokens, are exactly what they would be without the constrained rows beside it.

A request that verifies drafts (speculative decoding) gets one mask per sample
row: row j's mask is the grammar's state after drafts 0..j-1 (computed on the
matcher and rolled back, llguidance's draft-token fill). A draft the grammar
refuses cannot equal the (masked) token sampled at its row, so verification
rejects it; the rows after it get their masks but are never used.

Matchers live until their request ends (``forget``). A grammar that has
finished allows only end-of-generation tokens (its mask says so), which end
the request; one that goes on past them (``ignore_eos``) is no longer constrained.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from tokenmill.engine.request import Request
from tokenmill.engine.scheduler import ScheduledRequest
from tokenmill.errors import RequestError

log = logging.getLogger(__name__)


@dataclass
class StepMasks:
    """Bitmasks of one step: ``bits`` [R, W] int32 (W words of 32 tokens per row)."""

    bits: torch.Tensor
    rows: dict[str, tuple[int, int]]
    """Request id -> (its first row in ``bits``, its number of rows: one per sample row)."""
    errors: dict[str, str]
    """Requests whose matcher failed while computing (their rows are all-allowed)."""


class StructuredOutputs:
    def __init__(self, tokenizer_source: str | None, vocab_size: int):
        self._tokenizer_source = tokenizer_source
        self._vocab_size = vocab_size
        self._engine = None  # GrammarEngine, built on the first constrained request (~0.5 s)
        self._executor = None  # llguidance.LLExecutor: masks of several requests in parallel
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="grammar-masks")
        self.matchers: dict[str, object] = {}
        """Request id -> its llguidance.LLMatcher, for live constrained requests."""

    def _grammar_engine(self):
        if self._engine is None:
            if self._tokenizer_source is None:
                raise RequestError("structured_outputs", "this model has no tokenizer (dummy weights): "
                                   "structured outputs need one to map grammars onto tokens")
            import llguidance

            from tokenmill.model.tokenizer import load_tokenizer
            from tokenmill.structured.grammar import GrammarEngine
            self._engine = GrammarEngine(load_tokenizer(self._tokenizer_source), self._vocab_size)
            self._executor = llguidance.LLExecutor(num_threads=1)
        return self._engine

    def add(self, req: Request) -> None:
        """Build the request's matcher (RequestError naming the field for a bad
        constraint; nothing is kept then). A resumed request replays its earlier output."""
        matcher = self._grammar_engine().matcher(req.params.structured)
        resumed = req.token_ids[req.num_prompt_tokens:]
        if resumed and not matcher.consume_tokens(resumed):
            raise RequestError("resume.output_token_ids", f"the earlier output breaks the request's "
                               f"{req.params.structured.kind} constraint: {matcher.get_error()}")
        self.matchers[req.request_id] = matcher

    def forget(self, request_id: str) -> None:
        self.matchers.pop(request_id, None)

    def start_masks(self, scheduled: list[ScheduledRequest]) -> Future | None:
        """Compute the masks of the constrained requests that sample this step,
        on the background thread; None when there are none."""
        work = [(self.matchers[s.request.request_id], s) for s in scheduled
                if s.samples and s.request.request_id in self.matchers]
        if not work:
            return None
        return self._thread.submit(self._fill, work)

    def _fill(self, work: list[tuple[object, ScheduledRequest]]) -> StepMasks:
        rows, total = {}, 0
        for _, s in work:
            rows[s.request.request_id] = (total, s.num_sample_rows)
            total += s.num_sample_rows
        bits = torch.full((total, self._engine.mask_words), -1, dtype=torch.int32)  # [R, W]: all allowed
        errors = {}
        try:
            self._fill_batch(work, rows, bits)
        except Exception:  # an API-level failure: each request on its own, so only its own fails
            log.exception("computing %d grammar masks at once raised; computing each on its own", len(work))
            for matcher, s in work:
                rid = s.request.request_id
                try:
                    self._fill_batch([(matcher, s)], {rid: rows[rid]}, bits)
                except Exception as exc:
                    errors[rid] = f"{type(exc).__name__}: {exc}"
        errors.update({s.request.request_id: m.get_error() for m, s in work if m.is_error()})
        return StepMasks(bits, rows, errors)

    def _fill_batch(self, work: list[tuple[object, ScheduledRequest]], rows: dict[str, tuple[int, int]],
                    bits: torch.Tensor) -> None:
        """llguidance's parallel fill into ``bits``: requests without drafts in one
        call, those with drafts (one mask per draft after the first) in another."""
        plain, drafted = [], []
        for matcher, s in work:
            first = rows[s.request.request_id][0]
            drafts = s.request.draft_token_ids[:s.num_draft_tokens]
            if drafts:
                drafted.append((matcher, first, drafts))
            else:
                plain.append((matcher, first))
        row_bytes = bits.shape[1] * 4
        if plain:
            self._executor.unsafe_compute_mask_ptr(plain, bits.data_ptr(), row_bytes, bits.shape[0])
        if drafted:
            self._executor.unsafe_compute_mask_ptr_with_draft_token(drafted, bits.data_ptr(), row_bytes,
                                                                    bits.shape[0])

    @staticmethod
    @torch.inference_mode()
    def apply(masks: StepMasks, logits: torch.Tensor, first_rows: dict[str, int]) -> None:
        """In place on logits [S, >= V]: -inf where a constrained row's mask has a
        0 bit (and on padding columns past the mask). first_rows: request id ->
        its first row in ``logits`` (its sample rows are consecutive)."""
        idx, src = [], []
        for rid, (first, n) in masks.rows.items():
            if rid in masks.errors or rid not in first_rows:
                continue
            idx.extend(range(first_rows[rid], first_rows[rid] + n))
            src.extend(range(first, first + n))
        if not idx:
            return
        allowed = unpack_bits(masks.bits[src], logits.shape[1]).to(logits.device, non_blocking=True)  # [N, V'] bool
        logits[idx] = logits[idx].masked_fill_(~allowed, float("-inf"))

    def advance(self, request_id: str, tokens: list[int]) -> str | None:
        """Feed the step's accepted tokens to the request's matcher; the error
        when the grammar refuses one (None when fine or unconstrained)."""
        matcher = self.matchers.get(request_id)
        if matcher is None:
            return None
        for t in tokens:
            if matcher.is_stopped() and t not in self._engine.end_ids:
                # Past the grammar's end (ignore_eos kept it going): unconstrained from here on.
                del self.matchers[request_id]
                return None
            if not matcher.consume_token(t):
                return f"token {t} breaks the grammar: {matcher.get_error()}"
        return None


def unpack_bits(bits: torch.Tensor, width: int) -> torch.Tensor:
    """[N, W] int32 bitmasks -> [N, width] bool (bit i of word w is column 32 w + i;
    columns past 32 W are False)."""
    flat = np.unpackbits(bits.contiguous().numpy().view(np.uint8), axis=-1, bitorder="little")  # [N, 32 W]
    allowed = torch.from_numpy(flat.view(np.bool_))
    if allowed.shape[1] >= width:
        return allowed[:, :width]
    return torch.nn.functional.pad(allowed, (0, width - allowed.shape[1]), value=False)
