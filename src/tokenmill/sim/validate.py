"""``tokenmill sim validate``: the simulator against published results (sim/published.py).

Each published row names a model, a hardware kind, a GPU count, a precision, a
parallel layout and a workload; the simulator runs the same deployment and the
row's error is simulated / published - 1 in output tokens/s per GPU.

Which rows run: those whose model the simulator knows and whose layout it
can express (tensor parallel, expert parallel, attention DP, and pipeline
parallel as sim/pipeline.py prices it). TensorRT-LLM's tables are Offline runs of fixed ISL/OSL-token
requests. MLPerf rows draw their requests from the dataset's length
distribution (sim/mlperf_lengths.py; outputs of the mean the published run's
log shows) and run the row's scenario as long as the published run and
counted as LoadGen counts it: as many samples or queries as its log says it
issued (``Workload.min_queries``; at least MLPerf's 600 s): Offline, all at
once; or Server / Interactive, Poisson arrivals at the peak QPS that meets
MLPerf's p99 TTFT/TPOT limits (the bench presets), counted as "Completed
tokens per second" (up to the finish of the last query issued, not the drain
of long outputs issued before it). The length matters: a DeepSeek-R1 Server
run's running batch, and so its TPOT, still grows after 3,000 s. An
MLPerf row that names no layout gets the best of the deployment search's
layouts (sim/search.py ``layouts``) of up to ``MAX_SEARCHED_DEVICES``
devices: the submitter chose its own too. Rows whose configs fuse the
tensor-parallel all-reduces into the GEMMs run so (``PublishedResult.fused_allreduce``:
the MLPerf Llama-3.1-405B rows but one), and the DeepSeek-R1 Server rows with their
configs' attention-DP prompt balancing and whole prompts (``adp_balance``, ``chunked_prefill``).
A row served by disaggregated pools ("26 x TP2 prefill (batch 64, 4096 tokens) + 5 x TP4 decode (batch 256)", its
published configs' worker counts, layouts and limits; "4 x DEP2 prefill (batch 128, 12288 tokens) + 4 x
DEP16 decode (batch 128)", per attention-DP rank) runs exactly that deployment (``_check_pools``), with
the MTP drafts its config sets (``PublishedResult.mtp``). Every row sizes its KV cache as
TensorRT-LLM does, at the fraction of free memory its run set (``PublishedResult.kv_free_fraction``:
the MLPerf configs' value, trtllm-bench's default 0.9 for TensorRT-LLM's tables).

Batch size: a max-throughput run is measured at the batch its engine was
tuned to, so each row is simulated at every ``max_num_seqs`` of the
deployment search (sim/search.py ``SEQ_CHOICES``; per device under attention
DP) that the KV cache holds whole, and at that limit (larger batches would
only preempt), and the best is kept; a row whose source states its concurrency
and step budget (``PublishedResult.max_num_seqs``, ``max_num_batched_tokens``:
the trtllm-bench commands of TensorRT-LLM's DeepSeek-R1 guide) runs at those; a row whose
config gives only its budget (the v5.1 Llama-3.1-405B rows, sim/published_harness.py) runs
at that budget and searches the batch. A TensorRT-LLM row
simulates the request count its source states (1,000-3,000 requests), ramp-up
and drain included, as the published figure does. An MLPerf row first runs
``--num-requests`` per replica (at least two batches) at each batch as a
bound and an order; then Offline rows run their full count on the best few
(``_timed_offline``). Server and Interactive rows run the peak search on each layout's
batch limits from the largest down while they improve (``_peak``), skipping
layouts whose Offline figure cannot reach the best found.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from tokenmill.sim.cost import Parallel
from tokenmill.sim.disagg import PoolSplit
from tokenmill.sim.hardware import Hardware, get_hardware
from tokenmill.sim.jobs import check_jobs, run_all
from tokenmill.sim.mlperf_lengths import DATASET_DISTRIBUTIONS, dataset_means
from tokenmill.sim.models import SIM_MODELS, get_model
from tokenmill.sim.predict import Deployment, Workload, check_deployment, predict
from tokenmill.sim.published import RESULTS, PublishedResult
from tokenmill.sim.scenarios import MLPERF_MIN_DURATION_S
from tokenmill.sim.search import BOUND_MARGIN, SEQ_CHOICES, layouts

TOLERANCE = 0.25
"""The issue's bar for a published row: within 25%."""
TIMED_OFFLINE = 2
"""Candidates of an MLPerf Offline row (best of the short runs first) simulated at the full count."""
MAX_SEARCHED_DEVICES = 8
"""Replica sizes searched for a row that names no layout: up to one 8-GPU node (a replica's
batch, and so the cost of simulating it, grows with its devices under attention DP)."""


@dataclass(frozen=True)
class Checked:
    row: PublishedResult
    simulated: float | None
    """Output tokens/s per GPU at the best batch; None when skipped."""
    max_num_seqs: int | None
    skipped: str = ""
    """Why the row did not run."""
    parallel: Parallel | None = None
    """The layout simulated (the row's own, or the best searched)."""

    @property
    def error(self) -> float | None:
        return None if self.simulated is None else self.simulated / self.row.tokens_per_s_per_gpu - 1.0


def parse_parallel(text: str | None) -> Parallel:
    """A published layout ("TP8", "TP2 x4", "DEP4", "TP8 EP8 attention-DP", "TP1 x8", "TP2 PP2") as
    one replica's Parallel (a pipeline stage's: ``parse_pp`` reads the stages)."""
    if not text:
        raise ValueError("no layout published")
    if m := re.fullmatch(r"DEP(\d+)", text):
        return Parallel(tp=1, ep=int(m[1]), attention_dp=True)
    tp = int(m[1]) if (m := re.search(r"\bTP(\d+)", text)) else 1
    ep = int(m[1]) if (m := re.search(r"\bEP(\d+)", text)) else 1
    if "attention-DP" in text:
        return Parallel(tp=1, ep=ep, attention_dp=True)
    return Parallel(tp=tp, ep=ep)


def parse_pp(text: str | None) -> int:
    """Pipeline stages of a published layout ("TP2 PP2": 2); 1 where it names none."""
    m = re.search(r"\bPP(\d+)", text or "")
    return int(m[1]) if m else 1


_POOLS = re.compile(r"(\d+) x (.+?) prefill \(batch (\d+), (\d+) tokens\) \+ (\d+) x (.+?) decode \(batch (\d+)\)")
"""A disaggregated row's layout: prefill replicas, their layout, batch limit and token budget;
decode replicas, their layout and batch limit. Batch limits and budgets are TensorRT-LLM's
``max_batch_size`` and ``max_num_tokens``: a replica's, or each rank's under attention DP."""


def parse_pools(text: str | None) -> Deployment | None:
    """A disaggregated row's layout (``_POOLS``) as a Deployment (its GPU count taken from the
    pools; ``precision`` left to the caller), or None for an aggregated layout."""
    m = _POOLS.fullmatch(text or "")
    if m is None:
        return None
    prefill, decode = parse_parallel(m[2]), parse_parallel(m[6])
    split = PoolSplit(int(m[1]), int(m[5]), decode_parallel=decode, decode_max_num_seqs=int(m[7]) * _ranks(decode))
    return Deployment(split.devices(prefill), prefill, "", max_num_seqs=int(m[3]) * _ranks(prefill),
                      max_num_batched_tokens=int(m[4]), disagg=split)


def _ranks(parallel: Parallel) -> int:
    """Ranks a per-rank batch limit counts over: the attention-DP ranks, else the one replica."""
    return parallel.dp if parallel.attention_dp else 1


def row_workload(row: PublishedResult, num_requests: int, duration_s: float = MLPERF_MIN_DURATION_S) -> Workload:
    """The requests a row was measured on: fixed ISL/OSL, or its MLPerf dataset's
    lengths (module docstring); ValueError when the dataset's are not known."""
    if row.dataset is None:
        return Workload("offline", row.isl, row.osl, num_requests)
    if row.dataset not in DATASET_DISTRIBUTIONS:
        raise ValueError(f"{row.dataset} dataset: input lengths not published")
    isl, osl, osl_max = dataset_means(row.dataset)
    return Workload(row.scenario, isl, osl, num_requests, preset=row.dataset, dataset=row.dataset, osl_max=osl_max,
                    duration_s=duration_s, min_queries=row.num_requests)


def check_row(row: PublishedResult, num_requests: int, seq_choices: tuple[int, ...] = SEQ_CHOICES,
              hardware_for: Callable[[str], Hardware] = get_hardware,
              duration_s: float = MLPERF_MIN_DURATION_S) -> Checked:
    """Simulate one row at each layout and batch size; the best tokens/s per GPU.
    ``hardware_for``: the profile of a ``--hardware`` name (a fit swaps efficiencies);
    ``duration_s``: how long an MLPerf row's run lasts (shorter only in tests)."""
    if row.model not in SIM_MODELS:
        return Checked(row, None, None, f"model {row.model} not in the simulator")
    if row.dataset is None and (row.isl is None or row.osl is None):
        return Checked(row, None, None, "no input and output lengths published")
    try:
        workload = row_workload(row, num_requests, duration_s)
        pools = parse_pools(row.parallel)
        given = parse_parallel(row.parallel) if row.parallel and not pools else None
    except ValueError as e:
        return Checked(row, None, None, str(e))
    if pools:
        mtp_depth, mtp_tokens = row.mtp or (0, 1.0)
        return _check_pools(row, workload, replace(pools, precision=row.precision, fused_allreduce=row.fused_allreduce,
                                                   chunked_prefill=row.chunked_prefill, adp_balance=row.adp_balance,
                                                   overlap_scheduler=row.overlap_scheduler,
                                                   kv_free_fraction=row.kv_free_fraction, kernels=row.kernels,
                                                   kv_cache_dtype=row.kv_cache_dtype, host_seq_s=row.host_seq_s,
                                                   mtp_depth=mtp_depth, mtp_tokens_per_step=mtp_tokens), hardware_for)
    pp = parse_pp(row.parallel)
    if given and row.num_gpus % (given.devices * pp):
        return Checked(row, None, None, f"{row.parallel} does not divide {row.num_gpus} GPUs")
    arch, hw = get_model(row.model), hardware_for(row.hardware)
    parallels = [given] if given else [p for p in layouts(arch, hw, row.num_gpus) if p.devices <= MAX_SEARCHED_DEVICES]
    candidates, why = _offline_candidates(arch, hw, row, workload, parallels, seq_choices, pp)
    if not candidates:
        return Checked(row, None, None, why)
    if workload.scenario == "offline":
        score, deployment = candidates[0] if workload.duration_s is None else _timed_offline(arch, hw, workload,
                                                                                              candidates)
    else:
        score, deployment = _peak(arch, hw, workload, candidates)
    return Checked(row, score, deployment.max_num_seqs, parallel=deployment.parallel)


def _check_pools(row: PublishedResult, workload: Workload, d: Deployment,
                 hardware_for: Callable[[str], Hardware]) -> Checked:
    """A disaggregated row: its published pools, layouts and limits, no search (Server and
    Interactive: the peak QPS meeting the limits)."""
    if d.num_gpus != row.num_gpus:
        return Checked(row, None, None, f"{row.parallel} takes {d.num_gpus} GPUs, not {row.num_gpus}")
    arch, hw = get_model(row.model), hardware_for(row.hardware)
    try:
        check_deployment(arch, hw, d)
    except ValueError as e:
        return Checked(row, None, None, str(e))
    w = replace(workload, num_requests=max(workload.num_requests, 2 * d.decode_max_num_seqs))
    if w.scenario in ("server", "interactive") and w.duration_s is not None:
        # The peak search starts at the published rate (it brackets and bisects from there: a start,
        # not an answer), sparing the Offline run that would size the start of a 72-GPU deployment.
        w = replace(w, qps_hint=row.tokens_per_s_per_gpu * row.num_gpus / w.osl)
    return Checked(row, predict(arch, hw, d, w)["tokens_per_s_per_gpu"], d.decode_max_num_seqs, parallel=d.parallel)


def _offline_candidates(arch, hw, row: PublishedResult, workload: Workload, parallels: list[Parallel],
                        seq_choices: tuple[int, ...], pp: int = 1) -> tuple[list[tuple[float, Deployment]], str]:
    """(Offline tokens/s per GPU, deployment) for every layout (of ``pp`` pipeline stages) and batch
    the KV cache holds, best first; with the reason none ran when the list is empty. An MLPerf row's
    runs here are short ones of ``--num-requests`` (at least two batches): a bound and an
    order for the timed runs (``_timed_offline``, ``_peak``)."""
    out, why = [], "no layout fits"
    for parallel in parallels:
        base = Deployment(row.num_gpus, parallel, row.precision, fused_allreduce=row.fused_allreduce, router=row.router,
                          chunked_prefill=row.chunked_prefill, adp_balance=row.adp_balance,
                          overlap_scheduler=row.overlap_scheduler, kv_free_fraction=row.kv_free_fraction,
                          kernels=row.kernels, kv_cache_dtype=row.kv_cache_dtype,
                          host_stream_rate=row.host_stream_rate, host_seq_s=row.host_seq_s,
                          stream_interval=row.stream_interval, pipeline_parallel=pp,
                          max_num_batched_tokens=row.max_num_batched_tokens or Deployment.max_num_batched_tokens)
        try:
            blocks = check_deployment(arch, hw, base)
        except ValueError as e:  # the weights do not fit
            why = str(e)
            continue
        fit = blocks // pp // -(-(workload.isl + workload.osl) // base.block_size)  # per scheduler
        if fit < 1:
            why = f"one {workload.isl}+{workload.osl}-token request does not fit the KV cache"
            continue
        per = parallel.devices if parallel.attention_dp else 1
        # A TensorRT-LLM run of a published request count: exactly that many per replica, and no batch
        # above it. (An MLPerf row's count is its timed run's, Workload.min_queries.)
        measured = -(-row.num_requests // base.engines) if row.num_requests and row.dataset is None else None
        top = min(fit, max(seq_choices) * per, measured or fit)
        choices = {s * per for s in seq_choices if s * per <= top} | {top}
        if row.max_num_seqs:  # the source's own concurrency, per replica: no search
            choices = {min(fit, -(-row.max_num_seqs // base.engines))}
        for seqs in sorted(choices):
            d = replace(base, max_num_seqs=seqs)
            requests = measured or max(workload.num_requests, 2 * seqs)
            short = replace(workload, scenario="offline", num_requests=requests, duration_s=None)
            out.append((predict(arch, hw, d, short)["tokens_per_s_per_gpu"], d))
    return sorted(out, key=lambda c: -c[0]), why


def _timed_offline(arch, hw, workload: Workload,
                   candidates: list[tuple[float, Deployment]]) -> tuple[float, Deployment]:
    """An MLPerf Offline row's figure: its published sample count (``Workload.min_queries``;
    a DeepSeek-R1 run of 100,000+ samples is a minute or more to simulate) for the
    ``TIMED_OFFLINE`` best candidates of the short runs and the best layout's largest batch
    (a short run's order is only a guide: its drain weighs far more than in a long run, and
    a long run's steady state favours the largest batch), the best of them."""
    layout = candidates[0][1].parallel
    largest = max((d for _, d in candidates if d.parallel == layout), key=lambda d: d.max_num_seqs)
    picks = dict.fromkeys([d for _, d in candidates[:TIMED_OFFLINE]] + [largest])
    return max(((predict(arch, hw, d, workload)["tokens_per_s_per_gpu"], d) for d in picks), key=lambda c: c[0])


def _peak(arch, hw, workload: Workload, candidates: list[tuple[float, Deployment]]) -> tuple[float, Deployment]:
    """The best peak-QPS tokens/s per GPU over ``candidates`` (module docstring).

    Per layout, best Offline bound first, the batch limits run from the largest down, each
    search starting at the peak QPS of the limit above, until one does no better than the
    limit above it: a larger limit serves more at a given QPS, but admits bursts of prompts
    whose chunks slow the decodes beside them, so the best limit is often the largest or
    the next ones below it (DeepSeek-R1 on 8 x B200, 2026-11-27: 6,000 tokens/s per GPU at a
    limit of 5,153 per replica, whose mean batch was only 1,388, and 8,038 at 4,096: a rule
    "stop when the next limit would not bind" misjudges it). A layout whose Offline bound,
    scaled by the best layout's Server / Offline ratio, times ``BOUND_MARGIN`` cannot reach
    the best found is skipped (an assumption: that ratio differs little between layouts of one workload)."""
    best: tuple[float, Deployment] | None = None
    ratio = 1.0  # Server / Offline bound of the best so far
    for parallel in dict.fromkeys(d.parallel for _, d in candidates):
        mine = sorted(((b, d) for b, d in candidates if d.parallel == parallel), key=lambda c: -c[1].max_num_seqs)
        if best is not None and max(b for b, _ in mine) * ratio * BOUND_MARGIN < best[0]:
            continue
        layout: tuple[float, Deployment, float] | None = None
        hint = None
        for bound, d in mine:
            w = replace(workload, num_requests=max(workload.num_requests, 2 * d.max_num_seqs), qps_hint=hint)
            figures = predict(arch, hw, d, w)
            score = figures["tokens_per_s_per_gpu"]
            if layout is not None and score <= layout[0]:
                break  # a smaller limit holds the runs back further
            layout, hint = (score, d, bound), figures["qps"] or None
        if layout is not None and (best is None or layout[0] > best[0]):
            best, ratio = (layout[0], layout[1]), max(layout[0] / layout[2], 1.0)
    return best


def validate(num_requests: int = 1000, rows: tuple[PublishedResult, ...] = RESULTS,
             progress: Callable[[int], None] | None = None,
             hardware_for: Callable[[str], Hardware] = get_hardware, jobs: int = 1,
             on_row: Callable[[int, Checked], None] | None = None) -> list[Checked]:
    """Every row checked, in ``rows``' order; ``jobs`` > 1 spreads the rows over that
    many processes (``hardware_for`` must then be picklable: a module-level function);
    ``on_row(i, checked)`` is called as each row finishes (rows[i]), in finishing order."""
    check_jobs(jobs)
    # Rows that differ only in their published figure (v5.1 and v6.0 results of one deployment)
    # are one simulation: run each deployment once, then hand its result to every such row.
    same: dict[PublishedResult, list[int]] = {}
    for i, row in enumerate(rows):
        same.setdefault(_deployment_key(row), []).append(i)
    done: dict[int, Checked] = {}

    def finished(key: PublishedResult, checked: Checked) -> None:
        for i in same[key]:
            done[i] = replace(checked, row=rows[i])
            if on_row:
                on_row(i, done[i])
            if progress:
                progress(1)

    keys = list(same)
    run_all(partial(check_row, num_requests=num_requests, hardware_for=hardware_for), [(key,) for key in keys], jobs,
            on_done=lambda i, checked: finished(keys[i], checked))
    return [done[i] for i in range(len(rows))]


def _deployment_key(row: PublishedResult) -> PublishedResult:
    """The row with what the simulation does not read blanked (figure, source, note)."""
    return replace(row, tokens_per_s_per_gpu=0.0, source="", note="")


def _layout(c: Checked) -> str:
    """The row's published layout, or the one the search chose (marked)."""
    if c.row.parallel or c.parallel is None:
        return c.row.parallel or "-"
    p = c.parallel
    text = f"TP{p.tp}" + (f" EP{p.ep}" if p.ep > 1 else "") + (" attention-DP" if p.attention_dp else "")
    return f"{text} (searched)"


def table(checked: list[Checked]) -> str:
    """Markdown: the rows that ran, then a summary line, then the skipped rows by reason."""
    ran = [c for c in checked if c.simulated is not None]
    lines = ["| model | hardware | GPUs | precision | scenario | layout | ISL/OSL | published tok/s/GPU | simulated | "
             "sim / published | best max-num-seqs |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in ran:
        r = c.row
        mark = "" if abs(c.error) <= TOLERANCE else " **x**"
        lengths = f"{r.isl}/{r.osl}" if r.dataset is None else f"{r.dataset} dataset"
        lines.append(f"| {r.model} | {r.hardware} | {r.num_gpus} | {r.precision} | {r.scenario} | {_layout(c)} | "
                     f"{lengths} | {r.tokens_per_s_per_gpu:,.0f} | {c.simulated:,.0f} | {c.error + 1:.2f}{mark} | "
                     f"{c.max_num_seqs} |")
    within = sum(abs(c.error) <= TOLERANCE for c in ran)
    errors = sorted(abs(c.error) for c in ran)
    median = errors[len(errors) // 2] if errors else float("nan")
    lines.append("")
    lines.append(f"{within} of {len(ran)} rows within {TOLERANCE:.0%} (median |error| {median:.0%}); "
                 f"{len(checked) - len(ran)} skipped.")
    reasons: dict[str, int] = {}
    for c in checked:
        if c.simulated is None:
            reasons[c.skipped] = reasons.get(c.skipped, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        lines.append(f"- skipped ({count}): {reason}")
    return "\n".join(lines)
