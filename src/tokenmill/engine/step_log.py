"""One record per engine step (``AsyncEngine.step_log``), and the file a benchmark keeps them in.

``tokenmill bench`` on the in-process engine writes its run's steps to ``engine_steps.jsonl``
beside results.json (bench/runner.py); ``tokenmill sim --replay`` prices each of them at its
own shape (sim/served_steps.py), which separates the cost model's error from the scheduling
simulation's. ``tokenmill sim calibrate`` times its shapes from the same records.

A step's sequences fall in two parts, as the simulator's ``StepShape`` has them: those that
computed one position (a decode, or the last token of a prompt whose rest was cached or
computed before), kept as their count and their KV lengths summed; and the longer runs (prompt
chunks, a decode with drafts), each kept as (positions, KV length before the step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from tokenmill.engine.scheduler import SchedulerOutput

STEPS_FILE = "engine_steps.jsonl"


class LoggedStep(NamedTuple):
    decodes: int
    """Sequences that computed one position."""
    chunk_tokens: int
    """Positions the longer runs computed (``chunks`` summed)."""
    seconds: float
    """From the engine thread taking its inbox to the step's outputs ready to hand off."""
    start: float
    """When the step started: ``time.time()`` in the engine's log; seconds on the run's
    query clock in ``engine_steps.jsonl`` (its t0 is results.json's ``t0_unix``)."""
    decode_context_sum: int = 0
    """The one-position sequences' KV lengths before the step, summed."""
    chunks: tuple[tuple[int, int], ...] = ()
    """(positions computed, KV length before the step) of each longer run."""


def logged_step(out: SchedulerOutput, seconds: float, start: float) -> LoggedStep:
    """The record of the step that ran ``out`` (read before the requests move on, or after:
    ``start`` and ``num_new_tokens`` are fixed when scheduled)."""
    decodes = context_sum = 0
    chunks = []
    for s in out.scheduled:
        if s.num_new_tokens == 1:
            decodes += 1
            context_sum += s.start
        else:
            chunks.append((s.num_new_tokens, s.start))
    return LoggedStep(decodes, sum(n for n, _ in chunks), seconds, start, context_sum, tuple(chunks))


def save_steps(path: str | Path, steps: list[LoggedStep], t0_unix: float) -> Path:
    """One JSON object per line, each step's start moved to the run's query clock (t0 at ``t0_unix``)."""
    path = Path(path)
    with path.open("w") as f:
        for s in steps:
            f.write(json.dumps({"start_s": round(s.start - t0_unix, 6), "seconds": round(s.seconds, 6),
                                "decodes": s.decodes, "decode_context_sum": s.decode_context_sum,
                                "chunks": [list(c) for c in s.chunks]}) + "\n")
    return path


def load_steps(path: str | Path) -> list[LoggedStep]:
    """The steps of an ``engine_steps.jsonl`` file (starts on the run's query clock). ValueError
    names the file and line."""
    steps = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            chunks = tuple((int(n), int(c)) for n, c in d["chunks"])
            steps.append(LoggedStep(int(d["decodes"]), sum(n for n, _ in chunks), float(d["seconds"]),
                                    float(d["start_s"]), int(d["decode_context_sum"]), chunks))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"engine steps: {path} line {i} is not a step record ({exc})") from None
    return steps
