"""Simulations spread over processes (``--jobs``): the same answers, in the same order, as
one process, sooner where cores are free.

Each simulation is a pure function of picklable inputs (the model's shape, the hardware
profile, the deployment and the workload: dataclasses), so a worker process computes
exactly what the parent would. The callers keep their own order and decisions; only the
work moves (sim/search.py and sim/peak_qps.py run ahead speculatively and discard what
their sequential rules do not use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any


def check_jobs(jobs: int) -> int:
    if jobs < 1:
        raise ValueError(f"--jobs: must be >= 1, got {jobs}")
    return jobs


@contextmanager
def worker_pool(jobs: int) -> Iterator[ProcessPoolExecutor | None]:
    """A pool of ``jobs`` processes, or None for ``jobs == 1`` (run in this process). On the way
    out, work not yet started is cancelled (a caller that raised, or one that ran ahead and did not
    need it), and the pool waits for what is running."""
    if check_jobs(jobs) == 1:
        yield None
        return
    pool = ProcessPoolExecutor(max_workers=jobs)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_all(fn: Callable[..., Any], calls: Sequence[tuple], jobs: int = 1,
            on_done: Callable[[int, Any], None] | None = None) -> list:
    """``[fn(*args) for args in calls]`` over ``jobs`` processes; ``on_done(i, result)`` is
    called as each finishes (in finishing order; in order for one job). ``fn`` must be
    picklable (a module-level function) when ``jobs`` > 1. An exception in any call is raised."""
    out: list = [None] * len(calls)
    with worker_pool(jobs) as pool:
        if pool is None:
            for i, args in enumerate(calls):
                out[i] = fn(*args)
                if on_done:
                    on_done(i, out[i])
            return out
        futures: dict[Future, int] = {pool.submit(fn, *args): i for i, args in enumerate(calls)}
        for future in as_completed(futures):
            i = futures[future]
            out[i] = future.result()
            if on_done:
                on_done(i, out[i])
    return out
