"""The thread an engine's steps run on, which must also be the thread that builds it.

Why build there: torch's CPU ops run on OpenMP (libgomp), and libgomp keeps a
pool of worker threads per thread that opens a parallel region. Once more
threads are managed than there are CPUs, as soon as a second thread has its
own pool, every pool's workers stop spinning between regions and sleep, and
each parallel op pays a wake-up. Loading the model on the main thread (the
GGUF dequantize, the weight prepacking) gives the main thread a pool; a step
loop on another thread then ran every op at the sleeping pools' pace: the same
batch-1 decode step took 30 ms there vs 18 ms on the main thread (measured,
2 cores; docs/PERFORMANCE.md, "The engine thread"). Built and stepped on one
thread, the process has one pool and keeps the fast path.

Rule that follows: nothing outside this thread should run multi-threaded torch
ops in an engine process (the asyncio side only moves bytes and text).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def start_step_thread(build: Callable[[], None], loop: Callable[[], None], name: str) -> threading.Thread:
    """Start a daemon thread that runs ``build()`` then ``loop()``; return once
    ``build()`` finished, re-raising here whatever it raised (the thread then ends)."""
    built = threading.Event()
    failure: list[BaseException] = []

    def main() -> None:
        try:
            build()
        except BaseException as exc:  # noqa: BLE001  handed to the constructing thread, re-raised there
            failure.append(exc)
            return
        finally:
            built.set()
        loop()

    thread = threading.Thread(target=main, name=name, daemon=True)
    thread.start()
    built.wait()
    if failure:
        raise failure[0]
    return thread
