"""One request's failure must not fail the others in its step.

The forward pass is shared by every request in the step, so when it raises
the step is retried without the suspects: the batch is split in halves and
each half run again, down to single requests; a request that still raises on
its own is the one that fails. The others' K/V are rewritten in full by the
retry (every layer, every slot of theirs in the step), so what a failed first
attempt left half-written does not matter. Sampling and output processing
fail per request already (Sampler, OutputProcessor.process).
"""

from __future__ import annotations

from collections.abc import Callable

from tokenmill.engine.runner import ForwardResult
from tokenmill.engine.scheduler import ScheduledRequest


Execute = Callable[[list[ScheduledRequest]], ForwardResult]


def execute_isolating(execute: Execute, scheduled: list[ScheduledRequest]
                      ) -> tuple[ForwardResult | None, dict[str, str], int]:
    """Run ``execute`` over ``scheduled``; on an exception, over halves, recursively.

    Returns (the merged result of every part that ran, or None if none did;
    request id -> error of each request that raised on its own; the number of
    failed attempts, 0 when the first one succeeded).
    """
    try:
        return execute(scheduled), {}, 0
    except Exception as exc:
        if len(scheduled) == 1:
            return None, {scheduled[0].request.request_id: f"{type(exc).__name__}: {exc}"}, 1
    half = len(scheduled) // 2
    results, errors, attempts = [], {}, 1
    for part in (scheduled[:half], scheduled[half:]):
        result, part_errors, part_attempts = execute_isolating(execute, part)
        if result is not None:
            results.append(result)
        errors.update(part_errors)
        attempts += part_attempts
    return (ForwardResult.concat(results) if results else None), errors, attempts
