"""CUDA graphs for engine steps: the model's forward captured once per
(rows, context span) bucket and replayed.

Eager PyTorch launches every op of a step from Python, so a small model's
decode step on a GPU is launch-bound (benchmarks/step_profile.py on an H200:
batch-1 step 13.5 ms of wall time, 4.2 ms of it GPU-busy). A graph replays the
whole forward with one launch. A graph's shapes are fixed, so a step runs in
the smallest bucket that holds it, padded:

- batch: the step's decodes padded to the next captured size with rows that
  read token 0 at position 0, write their K/V into the runner's scratch block
  (one block past the pool's, never given to a request) and attend to that
  one slot;
- context span: the decodes' gathered KV (kernels/attention.py, torch path)
  is num_blocks * block_size wide; a bucket's num_blocks is a power of two
  from 8 up to what max_model_len needs, the tail hidden by the bias.

Static buffers hold every input (token ids, positions and slots in one
[3, max_batch] tensor, block tables in another); a replay copies the step's
inputs into them, so the addresses a graph recorded never change. The graphs
share one memory pool and are captured largest first, so the smaller ones
reuse the larger ones' memory; a replay may overwrite any other graph's
output, so each output is read before the next replay (the runner takes its
rows out at once).

The graphs serve more than decodes: a step's rows are any tokens, each at its
own position over its sequence's block table, so a multi-token run (a draft
verification: a request's last token and its k drafts; a short prompt chunk)
is that many rows at consecutive positions (engine/runner.py lays them out;
``cuda_graph_mode`` ``decode`` keeps them eager). Each row gathers its whole
context span, which for a prompt chunk repeats the gather per row: traffic
that a GPU moves in far less time than the eager step's launches take (an
H200 served a 135M model's prompts with TTFT p99 6.6-10.8 ms this way, against
0.13-4.5 s when each prompt chunk ran as a ~30 ms eager step: docs/PERFORMANCE.md).
Steps of more rows than the largest size run eagerly. With
``capture=False`` the same padded static-buffer forward runs without graphs:
what CPU tests check for exactness (padding, buckets); the CUDA tests add the
capture itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import torch
from tqdm import tqdm

from tokenmill.kernels.attention import TorchAttentionMetadata

log = logging.getLogger(__name__)

MIN_BLOCK_BUCKET = 8
"""Smallest captured context span, in blocks (128 tokens at block size 16)."""


def default_batch_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16, up to and including max_num_seqs
    (padding wastes at most 15 rows past 8, where a step is no longer launch-bound)."""
    sizes = [s for s in (1, 2, 4, 8) if s < max_num_seqs] + list(range(16, max_num_seqs, 16))
    return sorted(set(sizes + [max_num_seqs]))


def block_buckets(max_blocks: int) -> list[int]:
    """Context spans captured, in blocks: powers of two from MIN_BLOCK_BUCKET,
    the last one max_blocks itself."""
    buckets, n = [], MIN_BLOCK_BUCKET
    while n < max_blocks:
        buckets.append(n)
        n *= 2
    return buckets + [max_blocks]


class DecodeGraphs:
    def __init__(self, model: torch.nn.Module, kv_caches: Sequence[torch.Tensor], block_size: int,
                 scratch_block: int, batch_sizes: Sequence[int], max_model_len: int, capture: bool):
        """kv_caches: the runner's (their block ``scratch_block`` is never a
        request's); batch_sizes: decode batch sizes to capture; max_model_len:
        the longest context a decode attends to."""
        if not batch_sizes or min(batch_sizes) < 1:
            raise ValueError(f"cuda_graph_sizes: positive batch sizes expected, got {list(batch_sizes)}")
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.scratch_block = scratch_block
        self.batch_sizes = sorted(set(batch_sizes))
        self.block_buckets = block_buckets(-(-max_model_len // block_size))
        self.capture = capture
        device = kv_caches[0].device
        max_batch, max_blocks = self.batch_sizes[-1], self.block_buckets[-1]
        with torch.inference_mode():
            # Rows: token id, position, KV slot. Unused rows keep pointing at the scratch slot.
            self.rows = torch.zeros(3, max_batch, dtype=torch.long, device=device)
            self.rows[2] = scratch_block * block_size
            self.tables = torch.full((max_batch, max_blocks), scratch_block, dtype=torch.long, device=device)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[int, int], torch.Tensor] = {}
        """(batch size, blocks) -> the graph's output [batch, hidden] (capture=False:
        filled per run)."""
        self.replays = 0
        """Decode steps run through this object (for tests and the log)."""
        self.capture_seconds = 0.0
        self.capture_mib = 0.0
        """What capture_all took: wall time, and device memory the caching
        allocator reserved meanwhile (the graphs' pool and warm-up workspaces)."""

    def bucket(self, batch: int, max_context: int) -> tuple[int, int] | None:
        """The (batch size, blocks) bucket for ``batch`` decodes whose longest
        context is ``max_context`` tokens, or None when none holds them."""
        size = next((s for s in self.batch_sizes if s >= batch), None)
        need = -(-max_context // self.block_size)
        blocks = next((n for n in self.block_buckets if n >= need), None)
        return None if size is None or blocks is None else (size, blocks)

    @torch.inference_mode()
    def capture_all(self) -> None:
        """Capture every bucket (CUDA), largest first, with a progress bar."""
        if not self.capture:
            return
        start, pool = time.perf_counter(), torch.cuda.graph_pool_handle()
        keys = sorted(((b, n) for b in self.batch_sizes for n in self.block_buckets), reverse=True)
        reserved_before = torch.cuda.memory_reserved()
        for key in tqdm(keys, desc="Capturing CUDA graphs (decode)", unit="graph", leave=False):
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up off the capture (cuBLAS handles, workspaces)
                self._forward(*key)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[key] = self._forward(*key)
            self.graphs[key] = graph
        torch.cuda.synchronize()
        self.capture_mib = (torch.cuda.memory_reserved() - reserved_before) / 2**20
        self.capture_seconds = time.perf_counter() - start
        log.info("captured %d CUDA graphs (batch sizes %s x %d context spans up to %d blocks) in %.1f s, %.0f MiB",
                 len(keys), self.batch_sizes, len(self.block_buckets), self.block_buckets[-1],
                 self.capture_seconds, self.capture_mib)

    def run(self, token_ids: list[int], positions: list[int], tables: list[list[int]]) -> torch.Tensor | None:
        """One query row each: token_ids[i] at positions[i] of the sequence
        whose blocks are tables[i] (a sequence may have several rows, at
        consecutive positions, in order). Returns the final hidden rows
        [len(token_ids), hidden] (a view of the graph's output: read it before
        the next run), or None when no bucket holds the step."""
        batch = len(token_ids)
        key = self.bucket(batch, max(positions) + 1)
        if key is None:
            return None
        size, blocks = key
        pad = size - batch
        rows = torch.tensor([token_ids + [0] * pad, positions + [0] * pad,
                             [_slot(t, p, self.block_size) for t, p in zip(tables, positions)]
                             + [self.scratch_block * self.block_size] * pad], dtype=torch.long)
        # Only the widest table's columns are written (at most the bucket's: blocks
        # past it, allocated ahead for drafts, hold no context): columns past it may
        # hold older steps' blocks, which the bias hides (they are valid block ids).
        width = min(max(len(t) for t in tables), blocks)
        table = torch.tensor([t[:width] + [self.scratch_block] * (width - len(t)) for t in tables]
                             + [[self.scratch_block] * width] * pad, dtype=torch.long)
        self.rows[:, :size].copy_(rows)
        self.tables[:size, :width].copy_(table)
        self.replays += 1
        if self.capture:
            self.graphs[key].replay()
            return self.outputs[key][:batch]
        return self._forward(*key)[:batch]

    def _forward(self, size: int, num_blocks: int) -> torch.Tensor:
        """The model over the static buffers' first ``size`` rows, each
        attending over ``num_blocks`` blocks of its table -> [size, hidden]."""
        ids, positions, slots = self.rows[:, :size]
        span = num_blocks * self.block_size
        blocks = self.tables[:size, :num_blocks].contiguous()  # [size, num_blocks]
        outside = torch.arange(span, device=positions.device)[None, :] > positions[:, None]  # [size, span]
        bias = torch.zeros(size, span, device=positions.device).masked_fill_(outside, float("-inf"))
        bs = self.block_size
        meta = TorchAttentionMetadata(slots, slots // bs, slots % bs, size, blocks, bias, [], bs)
        return self.model(ids, positions, meta, self.kv_caches)


def _slot(table: list[int], position: int, block_size: int) -> int:
    return table[position // block_size] * block_size + position % block_size
