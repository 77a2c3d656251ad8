"""The tile rule: what a GEMM's shape costs it on a GPU, beyond the fitted fraction of the peak.

A GPU GEMM computes its output in tiles, one tile per SM at a time (NVIDIA's Matrix Multiplication
Background User's Guide, DU-09799-001, "Dimension Quantization Effects"): a tile's rows past the
GEMM's last row are computed and thrown away (tile quantization), and when the tiles do not fill the
SMs a whole number of times the last wave runs part of them idle (wave quantization). The fitted GEMM
fractions (hardware.py ``LOW_PRECISION_GEMM``) come from steps of thousands of rows on large
weights, where both losses are small; a step of a few hundred rows, or a small model's narrow
projections (Llama-3.1-8B's 4,096-wide outputs), loses a share the fraction does not hold.

The rule, per GEMM of ``rows`` x ``n`` (output) over ``k``, on ``sms`` SMs with a (tile_rows,
tile_cols) output tile per SM:
- rows below one tile are not padded: such steps run small-row kernels (the weights as the
  tiled operand), which the weight stream bounds anyway;
- a GEMM with fewer tiles than SMs splits its ``k`` over the idle SMs (split-K), in slices of
  at least ``MIN_SPLIT_K`` deep;
- the work units (tiles x splits) run in waves over the SMs; the last wave's idle SMs and the
  padded rows and columns are the loss.
``tile_factor`` is the useful share of the tensor cores' time over a list of GEMMs weighted by
their work: cost.step_time divides the tiled GEMMs' compute time by it. The rule is off unless
asked for (``tokenmill sim --tile-rule``, hardware.py ``with_tile_rule``): on the validation table
it brings the small steps closer and moves some Offline rows away (docs/SIMULATOR-LOG.md "GEMM tiles on
the SMs").

What it covers: the dense (Llama-family) layers and the LM head, whose GEMM shapes the model
shape lists (models.py ``ModelShape.layer_gemms``). MoE experts (grouped GEMMs of a few rows per
expert, priced by their weight stream: hardware.py ``EXPERT_WEIGHT_STREAM``) and MLA's small
latent projections (fused and split-K kernels of their own) keep the flat fraction.
"""

from __future__ import annotations

import functools
import math

MIN_SPLIT_K = 256
"""The shallowest ``k`` slice a split-K GEMM gives one SM (deeper slices amortise the partial
sums' reduction)."""

HOPPER_SMS, BLACKWELL_SMS, BLACKWELL_ULTRA_SMS = 132, 148, 160
"""SMs per device: H100/H200 SXM and the H200 NVL card 132; B200 and GB200 148; B300 and GB300 160
(NVIDIA's Hopper whitepaper; Blackwell Ultra: NVIDIA's Hot Chips 2025 description, 160 SMs of 128
CUDA cores, https://www.tweaktown.com/news/107373; the B200's 148 as published in its specs)."""

HOPPER_TILE = (64, 256)
"""Hopper's GEMM tile for the tile rule: its warpgroup MMA (wgmma) computes 64 rows at full rate,
so 64 rows is the finest tile a kernel runs without loss; 256 columns, the instruction's widest."""
BLACKWELL_TILE = (128, 256)
"""Blackwell's: its tensor-core MMA (tcgen05) computes 128 rows per SM at full rate (256 over an SM
pair); 256 columns, the instruction's widest."""


def tile_efficiency(rows: int, n: int, k: int, sms: int, tile: tuple[int, int]) -> float:
    """Useful share (0, 1] of the tensor-core time of one ``rows`` x ``n`` x ``k`` GEMM."""
    tile_rows, tile_cols = tile
    rows = max(rows, 1)
    padded_rows = max(rows, tile_rows)  # below one tile: small-row kernels, no padding
    row_tiles = math.ceil(padded_rows / tile_rows)
    col_tiles = math.ceil(n / tile_cols)
    tiles = row_tiles * col_tiles
    splits = max(1, min(sms // tiles, k // MIN_SPLIT_K)) if tiles < sms else 1
    units = tiles * splits
    waves = math.ceil(units / sms)
    padding = (padded_rows * n) / (row_tiles * tile_rows * col_tiles * tile_cols)
    return padding * units / (waves * sms)


@functools.lru_cache(maxsize=65536)  # a run prices the same few step shapes many times
def tile_factor(gemms: tuple[tuple[int, int, int, int], ...], sms: int, tile: tuple[int, int]) -> float:
    """Work-weighted useful share over ``gemms``, each (rows, n, k, calls): sum of work over the
    sum of work / efficiency (1.0 for no GEMMs)."""
    work = sum(m * n * k * calls for m, n, k, calls in gemms)
    if work == 0:
        return 1.0
    spent = sum(m * n * k * calls / tile_efficiency(m, n, k, sms, tile) for m, n, k, calls in gemms)
    return work / spent


def device_gemms(layer_gemms: tuple[tuple[int, int, bool], ...], num_layers: int, lm_head: tuple[int, int],
                 rows: int, logit_rows: int, dp: int, tp: int) -> tuple[tuple[int, int, int, int], ...]:
    """One device's (rows, n, k, calls) of a step: each layer GEMM ((n, k, column_parallel):
    tensor parallelism splits a column-parallel GEMM's ``n``, a row-parallel one's ``k``) on the
    device's share of the rows (``rows / dp`` under attention DP), ``num_layers`` calls each,
    and the LM head ((vocab, hidden), column-parallel) on the logit rows. Empty without layer GEMMs."""
    if not layer_gemms:
        return ()
    m = max(1, round(rows / dp))
    out = [(m, n // tp if col else n, k if col else k // tp, num_layers) for n, k, col in layer_gemms]
    if logit_rows:
        vocab, hidden = lm_head
        out.append((max(1, round(logit_rows / dp)), vocab // tp, hidden, 1))
    return tuple(out)
