"""One record per engine step (``AsyncEngine.step_log``), and the file a benchmark keeps them in.

``tokenmill bench`` on the in-process engine writes its run's steps to ``engine_steps.jsonl``
beside results.json (bench/runner.py), each start on the run's query clock (``start_s``);
``tokenmill serve --step-log FILE`` appends its engine's steps to FILE as they run, each start
as Unix seconds (``start_unix``: a server outlives runs, and a run's results.json says where its
clock starts, ``t0_unix``). ``tokenmill sim --replay`` prices each of a run's steps at its own
shape (sim/served_steps.py), which separates the cost model's error from the scheduling
simulation's. ``tokenmill sim calibrate`` times its shapes from the same records.

A step's sequences fall in two parts, as the simulator's ``StepShape`` has them: those that
computed one position (a decode, or the last token of a prompt whose rest was cached or
computed before), kept as their count and their KV lengths summed; and the longer runs (prompt
chunks, a decode with drafts), each kept as (positions, KV length before the step).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import NamedTuple

from tokenmill.engine.scheduler import SchedulerOutput

STEPS_FILE = "engine_steps.jsonl"

log = logging.getLogger(__name__)


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


def _line(step: LoggedStep, start_key: str, start: float) -> str:
    return json.dumps({start_key: round(start, 6), "seconds": round(step.seconds, 6), "decodes": step.decodes,
                       "decode_context_sum": step.decode_context_sum,
                       "chunks": [list(c) for c in step.chunks]}) + "\n"


def save_steps(path: str | Path, steps: list[LoggedStep], t0_unix: float) -> Path:
    """One JSON object per line, each step's start moved to the run's query clock (t0 at ``t0_unix``)."""
    path = Path(path)
    with path.open("w") as f:
        for s in steps:
            f.write(_line(s, "start_s", s.start - t0_unix))
    return path


class StepLogFile:
    """A step log kept in a file as it grows (``tokenmill serve --step-log``; an AsyncEngine's
    ``step_log``, a cluster worker's): one JSON line per step, its start as Unix seconds,
    line-buffered so that a server stopped hard keeps every step it finished. Appended by the
    engine thread only; a write that fails (a full disk) stops the log with a warning, never the
    engine."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file = self.path.open("a", buffering=1)

    def append(self, step: LoggedStep) -> None:
        if self._file is None:
            return
        try:
            self._file.write(_line(step, "start_unix", step.start))
        except (OSError, ValueError) as exc:  # ValueError: written after close
            log.warning("step log %s stopped: %s", self.path, exc)
            self._file = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load_steps(path: str | Path, t0_unix: float = 0.0) -> list[LoggedStep]:
    """The steps of a step file, each start on a run's query clock: a bench's ``start_s`` as it is, a
    server's ``start_unix`` less ``t0_unix``. ValueError names the file and line."""
    steps = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            chunks = tuple((int(n), int(c)) for n, c in d["chunks"])
            start = float(d["start_s"]) if "start_s" in d else float(d["start_unix"]) - t0_unix
            steps.append(LoggedStep(int(d["decodes"]), sum(n for n, _ in chunks), float(d["seconds"]),
                                    start, int(d["decode_context_sum"]), chunks))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"engine steps: {path} line {i} is not a step record ({exc})") from None
    return steps
