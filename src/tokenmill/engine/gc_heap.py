"""Keep Python's cyclic garbage collector off the serving path's tail.

A loaded engine leaves hundreds of thousands of GC-tracked objects that live
as long as the process: modules, parameters, the tokenizer, captured CUDA
graphs and compiled kernels' Python state (306,842 for the embedded model in
a `tokenmill bench` process on CPU). A full (generation 2) collection walks
all of them, and it runs whenever enough younger objects have survived into
generation 2 (CPython: more than a quarter of what the last full collection
kept). While it walks it holds the GIL, so the engine thread and every
request's stream stop together: 145-304 ms per full collection of that heap
on a 2-core Xeon (timed with ``GcPauseLog`` while the engine loaded). None
came during 100-s serving runs on CPU or an H200 (docs/PERFORMANCE.md,
"Interactive turned VALID by ngram drafts"); a server that runs for hours
meets one now and then.

``freeze_startup_heap`` collects once, then moves every object alive into the
permanent generation (``gc.freeze``), which collections never walk: the
startup heap costs nothing any more, and a full collection walks only what
serving created since. Reference counting still frees frozen objects that
become unreachable; only reference cycles among frozen objects would wait for
``unfreeze_heap`` (``gc.unfreeze``), which the entry points run after the
engine's shutdown, so an engine shut down in a process that goes on
(``tokenmill bench --uplift``, tests) is collected as before.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect, then put every object alive now out of the collector's reach;
    returns how many objects are frozen. Call it once the engine is built."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("froze %d startup objects out of the garbage collector's reach", frozen)
    return frozen


def unfreeze_heap() -> None:
    """Hand the frozen objects back to the collector (after the engine's shutdown)."""
    gc.unfreeze()


class GcPauseLog:
    """Every collection while installed: (generation, start as time.time(),
    seconds the collector held the GIL). A context manager: installed on
    entry, removed on exit."""

    def __init__(self):
        self.pauses: list[tuple[int, float, float]] = []
        self._started: dict[int, tuple[float, float]] = {}  # thread id -> (wall, perf_counter) at start

    def _callback(self, phase: str, info: dict) -> None:
        tid = threading.get_ident()
        if phase == "start":
            self._started[tid] = (time.time(), time.perf_counter())
        elif tid in self._started:
            wall, t0 = self._started.pop(tid)
            self.pauses.append((info["generation"], wall, time.perf_counter() - t0))

    def __enter__(self) -> "GcPauseLog":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)

    def stalls(self, since_unix: float, min_ms: float) -> list[list]:
        """[generation, start in seconds after ``since_unix``, ms] of each pause of ``min_ms`` or more."""
        return [[g, round(wall - since_unix, 4), round(s * 1e3, 3)]
                for g, wall, s in self.pauses if s * 1e3 >= min_ms]

    def summary(self) -> dict[str, dict[str, float]]:
        """Per generation: collections, total and longest pause (ms)."""
        out: dict[str, dict[str, float]] = {}
        for generation, _, seconds in self.pauses:
            row = out.setdefault(f"gen{generation}", {"collections": 0, "total_ms": 0.0, "max_ms": 0.0})
            row["collections"] += 1
            row["total_ms"] += seconds * 1e3
            row["max_ms"] = max(row["max_ms"], seconds * 1e3)
        return out
