"""Deployment search: the replica layout and batch size that give the most
tokens/s per GPU for a workload on a number of GPUs (Server and Interactive:
at the peak QPS that meets the p99 limits), as AIConfigurator searches its
configuration space: every candidate is simulated, none is guessed.

Candidates, for ``num_gpus`` GPUs split into identical replicas of ``d``
devices (every ``d`` among 1, 2, 4, 8, 16, 32, 64, 72 that divides it):
- a dense model: tensor parallel over the replica, ``tp = d`` (``d`` at most the
  NVLink domain and 8: wider TP all-reduces cost more than they save);
- an MoE model: experts over ``ep = d`` ranks with the non-expert layers
  either tensor-parallel (``tp = min(d, 8)``) or data-parallel (attention DP,
  DeepSeek's decode layout), and plain ``tp = d`` without EP for ``d <= 8``;
and for each, ``max_num_seqs`` per replica from ``SEQ_CHOICES`` (attention DP:
per device, since each device holds its own sequences). Layouts whose weights
do not fit are skipped.

With ``splits`` (``--search --disagg auto``), each layout of two or more
replicas is also tried disaggregated (sim/disagg.py), with the prefill pool
taking each of ``PREFILL_SHARES`` of the replicas (rounded, at least one
replica per pool).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tokenmill.sim.cost import Parallel
from tokenmill.sim.disagg import PoolSplit
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.models import model_shape
from tokenmill.sim.predict import Deployment, Workload, check_deployment, predict

REPLICA_SIZES = (1, 2, 4, 8, 16, 32, 64, 72)
SEQ_CHOICES = (32, 64, 128, 256, 512, 1024)
MAX_TP = 8
PREFILL_SHARES = (1 / 8, 1 / 4, 1 / 3, 1 / 2, 2 / 3)


@dataclass(frozen=True)
class Candidate:
    parallel: Parallel
    max_num_seqs: int
    figures: dict
    disagg: PoolSplit | None = None
    """predict()'s figures for this candidate."""

    @property
    def score(self) -> float:
        return self.figures["tokens_per_s_per_gpu"]


def layouts(arch, hw: Hardware, num_gpus: int) -> list[Parallel]:
    """The replica layouts tried for ``num_gpus`` (module docstring)."""
    moe = model_shape(arch).num_moe_layers > 0
    out = []
    for d in (n for n in REPLICA_SIZES if n <= num_gpus and num_gpus % n == 0):
        if d <= min(MAX_TP, hw.scale_up_size):
            out.append(Parallel(tp=d))
        if moe and d > 1:
            tp = max(t for t in (1, 2, 4, 8) if t <= min(d, MAX_TP, hw.scale_up_size) and d % t == 0)
            out += [Parallel(tp=tp, ep=d), Parallel(tp=1, ep=d, attention_dp=True)]
    return list(dict.fromkeys(out))


def pool_splits(replicas: int) -> list[PoolSplit | None]:
    """Aggregated (None), then each prefill share of ``replicas`` as a P:D split."""
    prefill = sorted({min(replicas - 1, max(1, round(replicas * f))) for f in PREFILL_SHARES}) if replicas > 1 else []
    return [None] + [PoolSplit(p, replicas - p) for p in prefill]


def search(arch, hw: Hardware, base: Deployment, workload: Workload,
           progress: Callable[[int], None] | None = None, splits: bool = False) -> list[Candidate]:
    """Every candidate that runs, best first. ``base`` gives the GPU count,
    precision, token budget and MTP settings; ``splits`` also tries the
    disaggregated splits; ``progress(n)`` is called as candidates finish (n of
    them each time)."""
    found = []
    for parallel in layouts(arch, hw, base.num_gpus):
        trial = replace(base, parallel=parallel, disagg=None)
        options = pool_splits(base.num_gpus // parallel.devices) if splits else [None]
        try:
            check_deployment(arch, hw, trial)
        except ValueError:  # weights do not fit this layout
            if progress:
                progress(len(SEQ_CHOICES) * len(options))
            continue
        per = parallel.devices if parallel.attention_dp else 1
        for split in options:
            for seqs in SEQ_CHOICES:
                deployment = replace(trial, max_num_seqs=seqs * per, disagg=split,
                                     max_num_batched_tokens=max(base.max_num_batched_tokens, seqs * per))
                figures = predict(arch, hw, deployment, workload)
                found.append(Candidate(parallel, seqs * per, figures, split))
                if progress:
                    progress(1)
    return sorted(found, key=lambda c: -c.score)


def num_candidates(arch, hw: Hardware, num_gpus: int, splits: bool = False) -> int:
    options = sum(len(pool_splits(num_gpus // p.devices)) if splits else 1 for p in layouts(arch, hw, num_gpus))
    return options * len(SEQ_CHOICES)
