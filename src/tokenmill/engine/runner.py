"""Turns a SchedulerOutput into model inputs, runs the forward pass and returns
the logits of the requests that sample this step.

Owns the KV cache tensors: per layer one [num_blocks, num_parts, num_heads,
block_size, head_dim] tensor, shaped by the model's ``kv_cache_spec()``
(model/kv_cache_spec.py; slot = block * block_size + offset). How a layer's
tensor splits into parts (K and V, or one latent) is the model's business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tokenmill.engine.decode_graphs import DecodeGraphs
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.scheduler import ScheduledRequest, SchedulerOutput
from tokenmill.kernels.attention import (
    AttentionMetadata,
    build_cpp_metadata,
    build_torch_metadata,
)
from tokenmill.model.kv_cache_spec import allocate_kv_caches
from tokenmill.model.protocol import CausalLM


@dataclass
class _StepLayout:
    """A scheduled step's rows as plain lists: the one-token runs (decodes)
    first, then each multi-token run (prefill chunk, or a token and its drafts)."""

    tables: list[list[int]]  # per sequence, in row order: its block table
    prefills: list[tuple[int, int]]  # per multi-token run: (start position, length)
    tokens: list[int] = field(default_factory=list)  # [T]
    positions: list[int] = field(default_factory=list)  # [T]
    sample_rows: list[int] = field(default_factory=list)  # the rows sampled
    sampling: list[ScheduledRequest] = field(default_factory=list)  # the requests that sample, in row order
    first_rows: dict[str, int] = field(default_factory=dict)  # request id -> its first row

    def row_tables(self) -> list[list[int]]:
        """[T]: each row's block table (a multi-token run's rows share its sequence's)."""
        num_decodes = len(self.tables) - len(self.prefills)
        runs = zip(self.tables[num_decodes:], self.prefills)
        return self.tables[:num_decodes] + [table for table, (_, n) in runs for _ in range(n)]


@dataclass
class ModelInputs:
    input_ids: torch.Tensor  # [T] long
    positions: torch.Tensor  # [T] long
    meta: AttentionMetadata
    sample_rows: torch.Tensor  # [S] long: the rows sampled (each sampling request's last token and drafts)
    sampling: list[ScheduledRequest]  # the requests that sample, in row order (num_sample_rows rows each)
    first_rows: dict[str, int]  # request id -> its first row (its rows are consecutive)


@dataclass
class ForwardResult:
    logits: torch.Tensor
    """[S, vocab] in the model dtype: ``num_sample_rows`` consecutive rows per
    sampling request (its last token's, then one per draft it verifies)."""
    hidden: torch.Tensor
    """[S, hidden]: the final hidden rows the logits came from."""
    sampling: list[ScheduledRequest]
    """The requests that sample this step, in row order."""
    step_hidden: torch.Tensor | None = None
    """[T, hidden]: every row's final hidden state, when the runner keeps them
    (``keep_step_hidden``: the MTP drafter reads them); else None."""
    step_rows: dict[str, int] = field(default_factory=dict)
    """Request id -> its first row in ``step_hidden`` (its rows are consecutive:
    positions start .. start + num_new_tokens - 1)."""
    prompt_logits: dict[str, tuple[int, torch.Tensor]] = field(default_factory=dict)
    """Requests with prompt_logprobs: id -> (first position p, logits [n, vocab]
    in the model dtype of positions p .. p + n - 1, row i predicting prompt
    token p + i + 1); see Request.prompt_logprob_positions. Apart from the
    sampled rows: normal sampling never sees them."""

    @staticmethod
    def concat(parts: list[ForwardResult]) -> ForwardResult:
        step_hidden, step_rows, offset = None, {}, 0
        if all(p.step_hidden is not None for p in parts):
            step_hidden = torch.cat([p.step_hidden for p in parts])
            for p in parts:
                step_rows.update({rid: row + offset for rid, row in p.step_rows.items()})
                offset += p.step_hidden.shape[0]
        return ForwardResult(torch.cat([p.logits for p in parts]), torch.cat([p.hidden for p in parts]),
                             [s for p in parts for s in p.sampling], step_hidden, step_rows,
                             {rid: v for p in parts for rid, v in p.prompt_logits.items()})


class ModelRunner:
    def __init__(self, model: CausalLM, num_blocks: int, block_size: int,
                 device: torch.device, dtype: torch.dtype, decode_kernel: Callable | None = None,
                 latent_kernel: Callable | None = None, scratch_block: bool = False):
        """decode_kernel: the C++ paged decode attention (CPU), or None for plain torch;
        latent_kernel: the C++ latent attention (DeepSeek MLA) beside it, or None;
        scratch_block: allocate one block past the pool's for padding rows
        (decode graphs write their K/V there)."""
        self.model = model
        self.decode_kernel = decode_kernel
        self.latent_kernel = latent_kernel
        self.device = device
        self.block_size = block_size
        self.kv_cache_spec = model.kv_cache_spec()
        self.scratch_block = num_blocks if scratch_block else None
        """Block id no request ever holds (the pool hands out 0 .. num_blocks - 1), or None."""
        self.kv_caches = allocate_kv_caches(self.kv_cache_spec, num_blocks + bool(scratch_block), block_size,
                                            device, dtype)
        """One tensor per layer: [num_blocks (+1 scratch), num_parts, num_heads, block_size, head_dim]."""
        self.keep_step_hidden = False
        """Return every row's hidden state with each step (ForwardResult.step_hidden)."""
        self.decode_graphs: DecodeGraphs | None = None
        """Steps replay captured graphs when set (engine/decode_graphs.py)."""
        self.graph_multi_token_runs = True
        """Steps with multi-token runs (prompt chunks, draft verifications) may
        replay graphs too (``cuda_graph_mode`` full); False: only steps of one
        token per request (``decode``). Set by capture_decode_graphs."""
        self.graph_multi_token_steps = 0
        """Steps with multi-token runs that replayed a graph (for tests and the log)."""

    def capture_decode_graphs(self, batch_sizes: list[int], max_model_len: int, capture: bool = True,
                              multi_token_runs: bool = True) -> None:
        """Run steps of up to max(batch_sizes) rows through graphs captured now
        (``capture=False``: the same padded forward, not captured; CPU tests):
        decodes, and with ``multi_token_runs`` (``cuda_graph_mode`` full) also
        prompt chunks and draft verifications. Needs the scratch block."""
        if self.scratch_block is None:
            raise ValueError("decode graphs need a runner built with scratch_block=True")
        self.graph_multi_token_runs = multi_token_runs
        self.decode_graphs = DecodeGraphs(self.model, self.kv_caches, self.block_size, self.scratch_block,
                                          batch_sizes, max_model_len, capture)
        self.decode_graphs.capture_all()

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput, kv: KVCacheManager) -> ForwardResult:
        """Run one step's forward pass and the logits of the requests that sample."""
        layout = self._layout(out, kv)
        step_hidden = self._replay(layout)
        if step_hidden is None:
            inputs = self._inputs(layout)
            step_hidden = self.model(inputs.input_ids, inputs.positions, inputs.meta, self.kv_caches)
            sample_rows = inputs.sample_rows
        else:
            sample_rows = torch.tensor(layout.sample_rows, dtype=torch.long, device=self.device)
        hidden = step_hidden[sample_rows]
        kept = (step_hidden, layout.first_rows) if self.keep_step_hidden else (None, {})
        prompt = self._prompt_logits(step_hidden, out, layout.first_rows)
        if not layout.sampling:  # every row is a prefill chunk short of its prompt's end
            return ForwardResult(hidden.new_empty((0, self.model.arch.vocab_size)), hidden, [], *kept, prompt)
        return ForwardResult(self.model.compute_logits(hidden), hidden, layout.sampling, *kept, prompt)

    def _replay(self, layout: _StepLayout) -> torch.Tensor | None:
        """A step through the captured graphs: its final hidden rows [T, hidden]
        (a copy when kept past the step: the next replay may overwrite the
        graph's output), or None to run it eagerly. A multi-token run (a prompt
        chunk, or a last token and its drafts) runs as rows at consecutive
        positions over its sequence's block table: each layer writes every
        row's K/V before attending, so a row sees the rows before it, as in the
        eager forward."""
        if self.decode_graphs is None or not layout.tokens:
            return None
        if layout.prefills and not self.graph_multi_token_runs:
            return None
        hidden = self.decode_graphs.run(layout.tokens, layout.positions, layout.row_tables())
        self.graph_multi_token_steps += hidden is not None and bool(layout.prefills)
        return hidden.clone() if hidden is not None and self.keep_step_hidden else hidden

    def _prompt_logits(self, step_hidden: torch.Tensor, out: SchedulerOutput,
                       first_rows: dict[str, int]) -> dict[str, tuple[int, torch.Tensor]]:
        """ForwardResult.prompt_logits: one LM-head pass over the prompt rows of
        every request that asked for prompt logprobs (step_hidden: [T, hidden])."""
        spans = {}  # request id -> (first position, its rows in step_hidden)
        for s in out.scheduled:
            positions = s.request.prompt_logprob_positions(s.start, s.num_new_tokens)
            if positions:
                first = first_rows[s.request.request_id] + positions.start - s.start
                spans[s.request.request_id] = (positions.start, range(first, first + len(positions)))
        if not spans:
            return {}
        rows = torch.tensor([r for _, span in spans.values() for r in span], dtype=torch.long, device=self.device)
        logits = self.model.compute_logits(step_hidden[rows])  # [sum of n, >= vocab]
        parts = logits.split([len(span) for _, span in spans.values()])
        return {rid: (start, part) for (rid, (start, _)), part in zip(spans.items(), parts)}

    def prepare(self, out: SchedulerOutput, kv: KVCacheManager) -> ModelInputs:
        """The eager forward's inputs for a scheduled step."""
        return self._inputs(self._layout(out, kv))

    def _layout(self, out: SchedulerOutput, kv: KVCacheManager) -> _StepLayout:
        decodes = [s for s in out.scheduled if s.num_new_tokens == 1]
        prefills = [s for s in out.scheduled if s.num_new_tokens > 1]
        layout = _StepLayout(tables=[kv.block_table(s.request.request_id) for s in decodes + prefills],
                             prefills=[(s.start, s.num_new_tokens) for s in prefills])
        for s in decodes:
            layout.tokens.append(s.request.token_ids[s.start])
            layout.positions.append(s.start)
        for s in prefills:
            layout.tokens.extend(_step_tokens(s))
            layout.positions.extend(range(s.start, s.start + s.num_new_tokens))
        row = 0
        for s in decodes + prefills:
            layout.first_rows[s.request.request_id] = row
            row += s.num_new_tokens
            if s.samples:  # its last token's row, then one per draft
                layout.sample_rows.extend(range(row - s.num_sample_rows, row))
                layout.sampling.append(s)
        return layout

    def _inputs(self, layout: _StepLayout) -> ModelInputs:
        dev = self.device
        pos = torch.tensor(layout.positions, dtype=torch.long, device=dev)
        num_decodes = len(layout.tables) - len(layout.prefills)
        meta = self._attention_metadata(layout.positions[:num_decodes], layout.prefills, layout.tables, pos)
        return ModelInputs(
            input_ids=torch.tensor(layout.tokens, dtype=torch.long, device=dev),
            positions=pos,
            meta=meta,
            sample_rows=torch.tensor(layout.sample_rows, dtype=torch.long, device=dev),
            sampling=layout.sampling,
            first_rows=layout.first_rows,
        )

    def _padded_tables(self, tables: list[list[int]]) -> torch.Tensor:
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]
        return torch.tensor(padded, dtype=torch.long, device=self.device)  # [B, max_blocks]

    @torch.inference_mode()
    def decode_rows(self, model: CausalLM, token_ids: list[int], positions: list[int],
                    tables: list[list[int]]) -> torch.Tensor:
        """One query row per sequence through ``model`` over this runner's caches
        (a draft model sharing the target's cache layout): token i at
        positions[i] of the sequence whose blocks are tables[i]. Writes their K/V
        at those positions; returns the final hidden rows [B, hidden]."""
        pos, meta = self.attention_inputs([(p, 1) for p in positions], tables)
        ids = torch.tensor(token_ids, dtype=torch.long, device=self.device)
        return model(ids, pos, meta, self.kv_caches)

    def attention_inputs(self, runs: list[tuple[int, int]], tables: list[list[int]]
                         ) -> tuple[torch.Tensor, AttentionMetadata]:
        """Positions [T] and attention metadata for rows outside a scheduled step
        (drafters): sequence i computes positions start .. start + n - 1 of the
        sequence whose blocks are tables[i], its rows consecutive, in the order
        of ``runs``, whose one-row runs must come first."""
        num_single = next((i for i, (_, n) in enumerate(runs) if n != 1), len(runs))
        if any(n == 1 for _, n in runs[num_single:]):
            raise ValueError("runs: one-row runs must come before the longer ones")
        positions = [p for start, n in runs for p in range(start, start + n)]
        pos = torch.tensor(positions, dtype=torch.long, device=self.device)
        return pos, self._attention_metadata([start for start, _ in runs[:num_single]], runs[num_single:], tables,
                                             pos)

    def _attention_metadata(self, decode_starts: list[int], prefills: list[tuple[int, int]],
                            tables: list[list[int]], pos: torch.Tensor) -> AttentionMetadata:
        """decode_starts: the position of each one-row sequence; prefills: (start,
        length) of each multi-row one, after them; tables: their block tables."""
        bs = self.block_size
        all_tables = self._padded_tables(tables)  # [B, max_blocks]
        # Per-token table row: decodes are rows 0..Bd-1, then each prefill's run.
        lengths = [1] * len(decode_starts) + [n for _, n in prefills]
        row_of_token = torch.repeat_interleave(
            torch.arange(len(lengths), device=self.device),
            torch.tensor(lengths, device=self.device))
        slot_mapping = all_tables[row_of_token, pos // bs] * bs + pos % bs  # [T]
        if self.decode_kernel is not None:
            return build_cpp_metadata(all_tables, row_of_token, pos, slot_mapping, bs, self.decode_kernel,
                                      self.latent_kernel)
        return build_torch_metadata(all_tables, decode_starts, prefills, slot_mapping, bs)


def _step_tokens(s: ScheduledRequest) -> list[int]:
    """The token ids a multi-token run feeds: its prompt chunk or its last token
    followed by the drafts it verifies."""
    req, end = s.request, s.start + s.num_new_tokens
    if not s.num_draft_tokens:
        return req.token_ids[s.start:end]
    return req.token_ids[s.start:] + req.draft_token_ids[:s.num_draft_tokens]
