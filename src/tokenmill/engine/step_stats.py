"""The engine core's steps and their wall time, by kind (EngineStats, /metrics).

A step's time runs from the core's ``step()`` call to its outputs, scheduling
and sampling included, output processing (detokenizing, streaming) not: that
is the frontend's. Two kinds, as the simulator prices them (sim/cost.py): a
``prefill`` step computed prompt tokens (a whole prompt, a chunk, or a
recompute after preemption) beside any decodes; a ``decode`` step computed
only the next tokens of running requests (with their drafts, if any). The
counters are cumulative; a benchmark reads them before and after a run
(bench/server_metrics.py), so busy seconds over the run's duration is how
much of it the engine spent computing, and busy seconds over steps its mean
step.

Each step's CPU time is counted too: the stepping thread's own (``time.thread_time``),
from the same start to the same end. Over the step's wall time it is the share of the
step that thread spent on a core; where cores are shared (two workers and a frontend
on two cores, a benchmark client beside the server) the rest is time it waited for
one. The thread runs the scheduler, Python's side of the forward and sampling, and
takes part in the forward's parallel regions (the kernels' OpenMP team includes it),
so the share is a lower bound of the step's use of the CPU, not the process's. Nor does
it see the team's other threads wait: while one of them is off its core, the stepping
thread spins at the region's end on its own, and counts as on a core (measured: two
threads on two cores beside a tenth of a core of other work, 8-14% slower steps at a
93-100% share; docs/SIMULATOR.md, "A figure's spread over draws").
"""

from __future__ import annotations

from tokenmill.engine.scheduler import SchedulerOutput

STEP_KINDS = ("prefill", "decode")


def step_kind(out: SchedulerOutput) -> str:
    """``prefill`` if the step computes any prompt position, else ``decode`` (before the
    step runs: afterwards the scheduler has moved the requests on)."""
    return "prefill" if any(s.start < s.request.num_prompt_tokens for s in out.scheduled) else "decode"


class StepCounters:
    """Steps run, their wall seconds and their stepping thread's CPU seconds, per kind (cumulative)."""

    def __init__(self) -> None:
        self.steps = dict.fromkeys(STEP_KINDS, 0)
        self.seconds = dict.fromkeys(STEP_KINDS, 0.0)
        self.cpu_seconds = dict.fromkeys(STEP_KINDS, 0.0)

    def record(self, kind: str, seconds: float, cpu_seconds: float) -> None:
        self.steps[kind] += 1
        self.seconds[kind] += seconds
        self.cpu_seconds[kind] += cpu_seconds
