"""Lower a worker process's CPU scheduling priority (its nice value).

Why: when prefill and decode workers share a host's cores (one CPU host, or
the host threads of GPU workers), a long prefill competes with decode steps
and with the server's own threads for the same cores, and every decode step
it delays stretches TPOT. A prefill worker started with a positive nice value
(``--prefill-worker-nice``) takes only the cycles the others leave: the
decode worker and the server get a core first, the prompt finishes a little
later. On separate machines it changes nothing.

Ray starts its worker processes at nice 15 (the raylet's ``worker_niceness``)
on their main thread, which the engine's step thread inherits; so a value
above 15 is what puts a prefill worker below its decode workers.

Linux keeps the nice value per thread (not per process, whatever POSIX says),
and a new thread inherits its creator's. So this renices every thread the
process has now; threads started afterwards by any of them (the engine's step
thread, OpenMP's pool) start with the lowered value.
"""

from __future__ import annotations

import os

MAX_NICE = 19


def lower_process_priority(nice: int) -> int:
    """Run every current thread of this process at nice value ``nice`` (0..19)
    or lower priority: a thread already above ``nice`` keeps its value (raising
    a priority needs privileges). Returns the number of threads changed."""
    if not 0 <= nice <= MAX_NICE:
        raise ValueError(f"prefill_worker_nice: must be 0..{MAX_NICE}, got {nice}")
    changed = 0
    for tid in _thread_ids():
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed += 1
        except ProcessLookupError:  # the thread ended between the listing and the call
            continue
    return changed


def _thread_ids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except FileNotFoundError:  # no procfs (not Linux): the process-wide call is all there is
        return [0]
