"""A served run's own engine steps, each priced at its shape (``tokenmill sim --replay`` of a run
whose steps were kept: ``tokenmill bench`` on the in-process engine, engine_steps.jsonl, or
``tokenmill serve --step-log FILE`` given as ``--step-log FILE``), and the replay again at their prices.

A replay's busy time and latencies mix two errors: what the cost model charges for a step, and
which steps the scheduling simulation forms (their batches, their prompt chunks). Pricing the
steps the engine really ran takes the second away: priced over measured seconds is the cost
model's error alone, shown per kind of step and batch size, where a replay's figures cannot say
which steps they lost time on. Each step's decodes are priced at their mean KV length (the log
keeps their sum: the cost model reads only the sum, except for a sliding window's layers), its
prompt chunks (and decodes with drafts) each at its own length and cached context.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

from tokenmill.engine.step_log import LoggedStep
from tokenmill.sim.shapes import PrefillChunk, StepShape


def logged_shape(step: LoggedStep) -> StepShape:
    """The step as the cost model sees it: its decodes' contexts spread evenly over its sum."""
    n = step.decodes
    contexts = np.full(n, step.decode_context_sum // n if n else 0, dtype=np.int64)
    if n:
        contexts[: step.decode_context_sum % n] += 1  # the sum kept exact
    return StepShape(decode_contexts=contexts, prefills=tuple(PrefillChunk(t, c) for t, c in step.chunks))


def _bucket(decodes: int, prompt: bool) -> tuple[str, int]:
    """(kind, the decodes' power-of-two bucket's low end): 0, 1, 2-3, 4-7, ..."""
    return "with a prompt" if prompt else "decode-only", 0 if decodes == 0 else 1 << (decodes.bit_length() - 1)


MIN_BUCKET_STEPS = 20
"""A bucket of fewer of the run's steps takes the run's overall ratio at its served prices: one odd
step (the first of a run, say) is not a price."""


def at_served_prices(seconds: Callable[[StepShape], float], priced: dict) -> Callable[[StepShape], float]:
    """``seconds`` scaled, step by step, to what the run's own steps of the same kind and decode bucket
    took over their price (``price_steps``' figures; a bucket the run ran fewer than ``MIN_BUCKET_STEPS``
    steps of, or none, takes the run's overall ratio). A replay at these prices leaves the scheduling
    simulation as the only model of the run: where it then agrees with the measured latencies, their
    gap was the step prices'."""
    overall = priced["measured_s"] / priced["priced_s"]
    factors = {(g["kind"], g["decodes_from"]): g["measured_s"] / g["priced_s"] for g in priced["groups"]
               if g["priced_s"] > 0 and g["steps"] >= MIN_BUCKET_STEPS}

    def scaled(shape: StepShape) -> float:
        return seconds(shape) * factors.get(_bucket(shape.num_decodes, bool(shape.prefills)), overall)
    return scaled


def price_steps(steps: list[LoggedStep], seconds: Callable[[StepShape], float]) -> dict:
    """Measured against priced seconds: all steps, and by kind and decode bucket. ``seconds``
    prices one step (``step_price.replica_step_seconds``)."""
    if not steps:
        raise ValueError("engine steps: the run logged no step")
    priced = [float(seconds(logged_shape(s))) for s in steps]
    groups: dict[tuple[str, int], list[int]] = {}
    for i, s in enumerate(steps):
        groups.setdefault(_bucket(s.decodes, bool(s.chunks)), []).append(i)

    def figures(idx: list[int]) -> dict:
        measured, cost = sum(steps[i].seconds for i in idx), sum(priced[i] for i in idx)
        return {"steps": len(idx), "measured_s": measured, "priced_s": cost,
                "priced_over_measured": cost / measured if measured else None,
                "measured_median_ms": statistics.median(steps[i].seconds for i in idx) * 1e3,
                "priced_median_ms": statistics.median(priced[i] for i in idx) * 1e3,
                "mean_decodes": statistics.mean(steps[i].decodes for i in idx),
                "mean_chunk_tokens": statistics.mean(steps[i].chunk_tokens for i in idx)}

    rows = [{"kind": kind, "decodes_from": lo, "decodes_to": 2 * lo - 1 if lo else 0, **figures(idx)}
            for (kind, lo), idx in sorted(groups.items())]
    return {**figures(list(range(len(steps)))), "groups": rows}


def price_workers(worker_steps: dict[str, list[LoggedStep]], seconds: Callable[[StepShape], float],
                  on_core: dict | None) -> dict[str, dict]:
    """Each worker's steps priced (``price_steps``' totals), and where the run read the worker's counters
    (``BenchResult.metrics.engine_workers``) its role and its steps' seconds on a core, over the run."""
    out = {}
    for name, steps in sorted(worker_steps.items()):
        if not steps:
            continue
        f = price_steps(steps, seconds)
        counters = (on_core or {}).get(name, {})
        cpu, busy = counters.get("busy_cpu_s"), counters.get("busy_s")
        out[name] = {"role": counters.get("role"), "steps": f["steps"], "measured_s": f["measured_s"],
                     "priced_s": f["priced_s"], "priced_over_measured": f["priced_over_measured"],
                     "on_core_share": cpu / busy if cpu is not None and busy else None,
                     "priced_over_on_core": f["priced_s"] / (f["measured_s"] * cpu / busy) if cpu and busy else None}
    return out


def workers_table(workers: dict[str, dict]) -> str:
    """Markdown of ``price_workers``' figures."""
    lines = ["by worker (its own step file; on a core: its counters over the run)", "",
             "| worker | steps | measured | priced | priced / measured | on a core | priced / time on a core |",
             "|---|---|---|---|---|---|---|"]
    for name, w in workers.items():
        role = f" ({w['role']})" if w["role"] else ""
        share, over = w["on_core_share"], w["priced_over_on_core"]
        lines.append(f"| {name}{role} | {w['steps']:,} | {w['measured_s']:,.1f} s | {w['priced_s']:,.1f} s | "
                     f"{_ratio(w)} | {'n/a' if share is None else format(share, '.0%')} | "
                     f"{'n/a' if over is None else format(over, '.2f')} |")
    return "\n".join(lines)


def served_steps_table(f: dict) -> str:
    """Markdown of ``price_steps``' figures."""
    lines = [f"the engine's own {f['steps']:,} steps, each priced at its shape: measured {f['measured_s']:,.1f} s, "
             f"priced {f['priced_s']:,.1f} s ({_ratio(f)} of it)", "",
             "| steps | decodes | count | mean decodes / prompt tokens | measured median | priced median | "
             "priced / measured (sums) |", "|---|---|---|---|---|---|---|"]
    for g in f["groups"]:
        span = str(g["decodes_from"]) if g["decodes_from"] == g["decodes_to"] else \
            f"{g['decodes_from']}-{g['decodes_to']}"
        lines.append(f"| {g['kind']} | {span} | {g['steps']:,} | {g['mean_decodes']:.1f} / "
                     f"{g['mean_chunk_tokens']:.0f} | {g['measured_median_ms']:,.1f} ms | "
                     f"{g['priced_median_ms']:,.1f} ms | {_ratio(g)} |")
    return "\n".join(lines)


def _ratio(f: dict) -> str:
    r = f["priced_over_measured"]
    return "n/a" if r is None else f"{r:.2f}"
