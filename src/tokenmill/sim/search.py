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
- a dense model, also pipelines of ``PIPELINE_STAGES`` stages of ``tp = d / 2``
  (sim/pipeline.py; the published Llama-3.1-405B Offline runs' TP2 PP2 and TP4 PP2),
  ``d`` at most 8;
and for each, ``max_num_seqs`` per replica (per micro-batch of a pipeline) from
``SEQ_CHOICES`` (attention DP: per device, since each device holds its own sequences).
Layouts whose weights do not fit are skipped.

With ``splits`` (``--search --disagg auto``), each layout of two or more
replicas is also tried disaggregated (sim/disagg.py), with the prefill pool
taking each of ``PREFILL_SHARES`` of the replicas (rounded, at least one
replica per pool), every prompt sent to the prefill pool unless ``split_rule``
gives our cluster's rule (``--disagg-min-prefill-tokens``, ``--disagg-max-prefill-queue``),
which each split then applies.

Server and Interactive searches are pruned by a bound: a candidate's peak
QPS search costs several simulations, its Offline run one (over every
candidate of a 2 x H100 search, the Offline runs took 1.4 s and the peak
searches, then doubling up from 1 QPS, 129 s). So every candidate's Offline
figure (``workload.num_requests`` requests, untimed) is computed first,
candidates are searched best bound first, and one whose bound, scaled by
the best candidate's Server / bound ratio (at least 1), times
``BOUND_MARGIN`` is below the best Server figure found is skipped. With a
fixed request count the peak search caps the QPS at the Offline rate, so
Server / Offline stays under 1 (0.63-0.80 measured in that search); a timed
Server run (``Workload.duration_s``) has no cap and does not count the drain
of long outputs, so it can pass the bound (DeepSeek-R1 on its dataset, 8 x
B200, one batch limit: 8,038 tokens/s per GPU Server, 5,859 Offline), hence
the scaling, which assumes the ratio differs by less than the
margin between candidates of one workload.

With ``jobs`` > 1 the candidates run in that many processes (sim/jobs.py) and the
answer is the same as with one: the Offline bounds all at once, then the peak
searches in the order above, each skip decided on the results before it as in one
process, while the next candidates the best so far does not skip run ahead (one the
rule then skips is discarded). The first peak search is run alone, spreading its own
runs (sim/peak_qps.py), when no other bound is within ``BOUND_MARGIN`` of its bound
(``_rivals``: the others would then likely be skipped; e.g. the layout chosen at one
batch limit, where the first is often the only search).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tokenmill.sim.cost import Parallel
from tokenmill.sim.disagg import PoolSplit
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.jobs import run_all, worker_pool
from tokenmill.sim.models import model_shape
from tokenmill.sim.predict import Deployment, Workload, check_deployment, is_peak_search, predict

REPLICA_SIZES = (1, 2, 4, 8, 16, 32, 64, 72)
SEQ_CHOICES = (32, 64, 128, 256, 512, 1024)
MAX_TP = 8
PIPELINE_STAGES = 2
"""The stages the search tries for dense models (deeper pipelines: ``--pp`` by hand)."""
PREFILL_SHARES = (1 / 8, 1 / 4, 1 / 3, 1 / 2, 2 / 3)
BOUND_MARGIN = 1.25
"""How far a Server run's tokens/s may be trusted not to pass the Offline
bound: the QPS is capped at the Offline rate, but a run's own Poisson draw
can finish its requests sooner than that rate implies (by roughly
1/sqrt(requests), ~10% at 100: an estimate, not a measurement), so only
candidates clearly below the best are skipped."""


@dataclass(frozen=True)
class Candidate:
    parallel: Parallel
    max_num_seqs: int
    figures: dict
    disagg: PoolSplit | None = None
    """predict()'s figures for this candidate."""
    pipeline_parallel: int = 1

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


def pipeline_layouts(arch, hw: Hardware, num_gpus: int) -> list[tuple[Parallel, int]]:
    """(stage layout, stages) pairs the search tries: every ``layouts`` one unpipelined, then for a
    dense model ``PIPELINE_STAGES`` stages of ``tp`` devices wherever the replica holds at most
    ``MAX_TP`` devices and divides ``num_gpus`` (module docstring)."""
    out = [(p, 1) for p in layouts(arch, hw, num_gpus)]
    pp = PIPELINE_STAGES
    if model_shape(arch).num_moe_layers == 0 and model_shape(arch).num_layers >= pp:
        out += [(Parallel(tp=tp), pp) for tp in (1, 2, 4, 8)
                if tp * pp <= min(MAX_TP, num_gpus) and num_gpus % (tp * pp) == 0 and tp <= hw.scale_up_size]
    return out


def pool_splits(replicas: int, rule: dict | None = None) -> list[PoolSplit | None]:
    """Aggregated (None), then each prefill share of ``replicas`` as a P:D split, each with ``rule``'s
    PoolSplit fields (``min_prefill_tokens``, ``max_prefill_queue``: our cluster's rule) where given."""
    prefill = sorted({min(replicas - 1, max(1, round(replicas * f))) for f in PREFILL_SHARES}) if replicas > 1 else []
    return [None] + [PoolSplit(p, replicas - p, **(rule or {})) for p in prefill]


def search(arch, hw: Hardware, base: Deployment, workload: Workload,
           progress: Callable[[int], None] | None = None, splits: bool = False,
           pruned: list[Candidate] | None = None, seq_choices: tuple[int, ...] = SEQ_CHOICES,
           jobs: int = 1, split_rule: dict | None = None) -> list[Candidate]:
    """Every candidate simulated, best first. ``base`` gives the GPU count,
    precision, token budget and MTP settings; ``splits`` also tries the
    disaggregated splits, each applying ``split_rule`` (``pool_splits``); ``seq_choices`` are the
    batch limits tried (per device under attention DP); ``progress(n)`` is called as the search advances, n
    of ``progress_steps`` at a time (a peak search: each candidate's bound, then
    its peak search or its skip). Candidates skipped by the Offline bound (Server
    and Interactive peak searches) are appended to ``pruned`` when given, with
    their Offline figures. ``jobs``: processes (module docstring; the same answer)."""
    peak_search = is_peak_search(workload)
    rule = (split_rule or {}) if splits else None
    runs = list(_candidates(arch, hw, base, progress, rule, seq_choices, 2 if peak_search else 1))
    if not peak_search:
        return sorted(_evaluate(arch, hw, runs, workload, progress, jobs), key=lambda c: -c.score)
    offline = replace(workload, scenario="offline", duration_s=None)  # a bound and an order: one short run each
    bounds = sorted(_evaluate(arch, hw, runs, offline, progress, jobs), key=lambda c: -c.score)
    found: list[Candidate] = []
    ratio = 1.0  # the best candidate's Server figure over its own bound

    def skipped(bound: Candidate) -> bool:
        return bool(found) and bound.score * ratio * BOUND_MARGIN < found[0].score

    with worker_pool(jobs) as pool:
        ahead: dict[int, object] = {}  # bounds' index -> its peak search's Future, submitted ahead
        for i, bound in enumerate(bounds):
            if skipped(bound):
                if i in ahead:
                    ahead.pop(i).cancel()  # ran ahead of the rule: discarded
                if pruned is not None:
                    pruned.append(bound)
            else:
                if pool is None or (not found and not _rivals(bounds)):
                    figures = predict(arch, hw, candidate_deployment(base, bound), workload, jobs=jobs)
                else:
                    _run_ahead(pool, jobs, ahead, i, bounds, skipped,
                               lambda b: pool.submit(predict, arch, hw, candidate_deployment(base, b), workload))
                    figures = ahead.pop(i).result()
                c = replace(bound, figures=figures)
                if not found or c.score > found[0].score:
                    ratio = max(1.0, c.score / bound.score) if bound.score else 1.0
                found.append(c)
                found.sort(key=lambda c: -c.score)
            if progress:
                progress(1)
    return found


def _rivals(bounds: list[Candidate]) -> bool:
    """Whether a candidate besides the best bound is sure to be searched whatever the best one's
    Server figure, as long as that figure stays under its own bound (as it does with a fixed
    request count): its bound is within ``BOUND_MARGIN`` of the best. Where none is, the first
    search (often the only one, as when the layout is chosen at one batch limit) spreads its own
    runs over the processes instead of running candidates ahead that the rule would likely skip."""
    return len(bounds) > 1 and bounds[1].score * BOUND_MARGIN >= bounds[0].score


def _run_ahead(pool, jobs: int, ahead: dict, i: int, bounds: list[Candidate], skipped, submit) -> None:
    """Submit bounds[i]'s peak search if it is not running, then the next candidates that the
    rule does not skip on what is known now, until ``jobs`` searches are in flight."""
    if i not in ahead:
        ahead[i] = submit(bounds[i])
    j = i + 1
    while j < len(bounds) and sum(not f.done() for f in ahead.values()) < jobs:
        if j not in ahead and not skipped(bounds[j]):
            ahead[j] = submit(bounds[j])
        j += 1


def candidate_deployment(base: Deployment, c: Candidate) -> Deployment:
    # The step budget stays the engine's flag: predict.step_budget scales it per dp rank, never under the batch.
    return replace(base, parallel=c.parallel, max_num_seqs=c.max_num_seqs, disagg=c.disagg,
                   pipeline_parallel=c.pipeline_parallel)


def _candidates(arch, hw: Hardware, base: Deployment, progress, split_rule: dict | None,
                seq_choices: tuple[int, ...], steps_each: int):
    """(Candidate without figures, its deployment) for every candidate whose weights fit; ``split_rule``:
    None to try no split, else the rule each disaggregated split applies (empty: every prompt sent)."""
    for parallel, pp in pipeline_layouts(arch, hw, base.num_gpus):
        trial = replace(base, parallel=parallel, disagg=None, pipeline_parallel=pp)
        splits = split_rule is not None and pp == 1
        options = pool_splits(base.num_gpus // parallel.devices, split_rule) if splits else [None]
        try:
            check_deployment(arch, hw, trial)
        except ValueError:  # weights do not fit this layout
            if progress:
                progress(len(seq_choices) * len(options) * steps_each)
            continue
        per = parallel.devices if parallel.attention_dp else 1
        for split in options:
            for seqs in seq_choices:
                c = Candidate(parallel, seqs * per, {}, split, pp)
                yield c, candidate_deployment(trial, c)


def _evaluate(arch, hw: Hardware, runs, workload: Workload, progress=None, jobs: int = 1) -> list[Candidate]:
    """Each (candidate, deployment) of ``runs`` with its figures, in order (``jobs`` processes)."""
    figures = run_all(predict, [(arch, hw, d, workload) for _, d in runs], jobs,
                      on_done=(lambda i, f: progress(1)) if progress else None)
    return [replace(c, figures=f) for (c, _), f in zip(runs, figures)]


def num_candidates(arch, hw: Hardware, num_gpus: int, splits: bool = False,
                   num_seq_choices: int = len(SEQ_CHOICES)) -> int:
    options = sum(len(pool_splits(num_gpus // p.devices)) if splits and pp == 1 else 1
                  for p, pp in pipeline_layouts(arch, hw, num_gpus))
    return options * num_seq_choices


def searched_figures(found: list[Candidate], pruned: list[Candidate]) -> dict:
    """The best of ``found`` (at least one) with its figures, the ten best under
    "searched" and the count the Offline bound skipped."""
    return {**found[0].figures, "pruned_by_offline_bound": len(pruned), "searched": [
        {"tp": c.parallel.tp, "ep": c.parallel.ep, "attention_dp": c.parallel.attention_dp, "pp": c.pipeline_parallel,
         "max_num_seqs": c.max_num_seqs, "tokens_per_s_per_gpu": c.score, "qps": c.figures["qps"],
         "disagg": f"{c.disagg.prefill_replicas}:{c.disagg.decode_replicas}" if c.disagg else None}
        for c in found[:10]]}



def progress_steps(arch, hw: Hardware, num_gpus: int, workload: Workload, splits: bool = False,
                   num_seq_choices: int = len(SEQ_CHOICES)) -> int:
    """The total ``search`` reports to ``progress``: a step per candidate, two in a peak search."""
    return num_candidates(arch, hw, num_gpus, splits, num_seq_choices) * (2 if is_peak_search(workload) else 1)
