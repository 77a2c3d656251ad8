"""``tokenmill sim validate``: the simulator against published results (sim/published.py).

Each published row names a model, a hardware kind, a GPU count, a precision, a
parallel layout and a workload; the simulator runs the same deployment and the
row's error is simulated / published - 1 in output tokens/s per GPU.

Which rows run: the fixed-length throughput rows (TensorRT-LLM's tables: an
Offline run of ISL/OSL-token requests) whose model the simulator knows and
whose layout it can express (tensor parallel, expert parallel, attention DP;
not pipeline parallel). The MLPerf rows need their datasets' input lengths,
which no source read states (published.py), so they are listed as skipped
with that reason rather than run on a guess.

Batch size: a max-throughput table is measured at the batch its engine was
tuned to, so each row is simulated at every ``max_num_seqs`` of the
deployment search (sim/search.py ``SEQ_CHOICES``; per device under attention
DP) that the KV cache holds whole, and at that limit, and the best is kept
(larger batches would only preempt).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import SIM_MODELS, get_model
from tokenmill.sim.predict import Deployment, Workload, check_deployment, predict
from tokenmill.sim.published import RESULTS, PublishedResult
from tokenmill.sim.search import SEQ_CHOICES

TOLERANCE = 0.25
"""The issue's bar for a published row: within 25%."""


@dataclass(frozen=True)
class Checked:
    row: PublishedResult
    simulated: float | None
    """Output tokens/s per GPU at the best batch; None when skipped."""
    max_num_seqs: int | None
    skipped: str = ""
    """Why the row did not run."""

    @property
    def error(self) -> float | None:
        return None if self.simulated is None else self.simulated / self.row.tokens_per_s_per_gpu - 1.0


def parse_parallel(text: str | None) -> Parallel:
    """A published layout ("TP8", "TP2 x4", "DEP4", "TP8 EP8 attention-DP", "TP1 x8") as
    one replica's Parallel; ValueError for what the simulator does not model (PP)."""
    if not text:
        raise ValueError("no layout published")
    if re.search(r"\bPP\d", text):
        raise ValueError(f"pipeline parallel ({text}) is not modelled")
    if m := re.fullmatch(r"DEP(\d+)", text):
        return Parallel(tp=1, ep=int(m[1]), attention_dp=True)
    tp = int(m[1]) if (m := re.search(r"\bTP(\d+)", text)) else 1
    ep = int(m[1]) if (m := re.search(r"\bEP(\d+)", text)) else 1
    if "attention-DP" in text:
        return Parallel(tp=1, ep=ep, attention_dp=True)
    return Parallel(tp=tp, ep=ep)


def check_row(row: PublishedResult, num_requests: int, seq_choices: tuple[int, ...] = SEQ_CHOICES) -> Checked:
    """Simulate one row at each batch size of ``seq_choices``; the best tokens/s per GPU."""
    if row.model not in SIM_MODELS:
        return Checked(row, None, None, f"model {row.model} not in the simulator")
    if row.isl is None or row.osl is None:
        return Checked(row, None, None, f"{row.dataset} dataset: input lengths not published")
    try:
        parallel = parse_parallel(row.parallel)
    except ValueError as e:
        return Checked(row, None, None, str(e))
    if row.num_gpus % parallel.devices:
        return Checked(row, None, None, f"{row.parallel} does not divide {row.num_gpus} GPUs")
    arch, hw = get_model(row.model), get_hardware(row.hardware)
    base = Deployment(row.num_gpus, parallel, row.precision)
    try:
        blocks = check_deployment(arch, hw, base)
    except ValueError as e:  # the weights do not fit
        return Checked(row, None, None, str(e))
    # Batches the KV cache holds whole (more only preempt), and that limit itself.
    fit = blocks // -(-(row.isl + row.osl) // base.block_size)
    if fit < 1:
        return Checked(row, None, None, f"one {row.isl}+{row.osl}-token request does not fit the KV cache")
    per = parallel.devices if parallel.attention_dp else 1
    batches = sorted({s * per for s in seq_choices if s * per <= fit} | {min(fit, max(seq_choices) * per)})
    best: tuple[float, int] | None = None
    for seqs in batches:
        deployment = replace(base, max_num_seqs=seqs, max_num_batched_tokens=max(8192, seqs))
        figures = predict(arch, hw, deployment, Workload("offline", row.isl, row.osl, max(num_requests, 2 * seqs)))
        if best is None or figures["tokens_per_s_per_gpu"] > best[0]:
            best = (figures["tokens_per_s_per_gpu"], seqs)
    return Checked(row, best[0], best[1])


def validate(num_requests: int = 1000, rows: tuple[PublishedResult, ...] = RESULTS,
             progress: Callable[[int], None] | None = None) -> list[Checked]:
    out = []
    for row in rows:
        out.append(check_row(row, num_requests))
        if progress:
            progress(1)
    return out


def table(checked: list[Checked]) -> str:
    """Markdown: the rows that ran, then a summary line, then the skipped rows by reason."""
    ran = [c for c in checked if c.simulated is not None]
    lines = ["| model | hardware | GPUs | precision | layout | ISL/OSL | published tok/s/GPU | simulated | "
             "sim / published | best max-num-seqs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in ran:
        r = c.row
        mark = "" if abs(c.error) <= TOLERANCE else " **x**"
        lines.append(f"| {r.model} | {r.hardware} | {r.num_gpus} | {r.precision} | {r.parallel} | {r.isl}/{r.osl} "
                     f"| {r.tokens_per_s_per_gpu:,.0f} | {c.simulated:,.0f} | {c.error + 1:.2f}{mark} | "
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
