"""Where the engine is built vs where it steps: the OpenMP pool effect
(engine/step_thread.py explains it).

    python -m benchmarks.step_thread --threads 2

Each case runs in a fresh process (an OpenMP pool, once made, stays): one
request's batch-1 decode steps, median step time, for an engine
- built and stepped on the main thread,
- built on the main thread, stepped on another (what AsyncEngine did before),
- built and stepped on one other thread (what AsyncEngine and the Ray worker do).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time

CASES = ("main/main", "main/thread", "thread/thread")


def _steps(engine, tokens: int) -> float:
    from tokenmill.sampling_params import SamplingParams

    engine.add_request(None, list(range(1000, 1128)), SamplingParams(max_tokens=tokens, temperature=0.0,
                                                                     ignore_eos=True))
    times = []
    while engine.has_unfinished_requests():
        t = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t)
    return statistics.median(times[2:])  # after the prefill and the first decode


def run_case(case: str, threads: int, tokens: int) -> float:
    from tokenmill.config import EngineConfig
    from tokenmill.engine.engine import LLMEngine

    built_on, stepped_on = case.split("/")
    box = {}

    def build():
        box["engine"] = LLMEngine(EngineConfig(num_threads=threads))

    def step():
        box["step"] = _steps(box["engine"], tokens)

    def on_thread(fn):
        t = threading.Thread(target=fn)
        t.start()
        t.join()

    if built_on == stepped_on == "thread":
        on_thread(lambda: (build(), step()))
    else:
        build()
        step() if stepped_on == "main" else on_thread(step)
    return box["step"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="decode steps per case")
    ap.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # one case, in this process
    args = ap.parse_args(argv)
    if args.case:
        print(f"{run_case(args.case, args.threads, args.tokens) * 1e3:.2f}")
        return
    for case in CASES:
        out = subprocess.run([sys.executable, "-m", "benchmarks.step_thread", "--case", case, "--threads",
                              str(args.threads), "--tokens", str(args.tokens)], capture_output=True, text=True,
                             check=True)
        built_on, stepped_on = case.split("/")
        print(f"built on {built_on:6s} stepped on {stepped_on:6s}: batch-1 decode step {out.stdout.strip()} ms")


if __name__ == "__main__":
    main()
