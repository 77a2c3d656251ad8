"""Whole engine steps of given shapes (decoding requests beside a prefill chunk)
under several linear backends in one process, alternated round by round (this
VM's speed drifts by tens of percent within minutes, so backends timed one after
another are not comparable).

    python -m benchmarks.step_shapes --backends mixed,panels --shapes 1:128,8:128,4:256,256:0

A shape ``D:P`` is one step of D requests decoding (64-token prompts, already
past their prefill) beside one new prompt of P tokens (0: a decode-only step);
D + P is the rows every linear layer multiplies. A Server run's arrivals land in
such steps: their first token waits on one. Prints the median step per shape and
backend, and each backend's speed-up over the first.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

CONTEXT = 64  # prompt tokens of each decoding request


class _Steps:
    """One engine and its own request ids and random prompts."""

    def __init__(self, backend: str, dtype: str):
        self.engine = LLMEngine(EngineConfig(dtype=dtype, linear_backend=backend, kv_cache_memory_gib=1.0,
                                             max_num_batched_tokens=2048, max_num_seqs=512))
        self.rng = random.Random(0)
        self.next_id = 0

    def _add(self, tokens: int, max_tokens: int) -> str:
        self.next_id += 1
        prompt = [self.rng.randrange(10, self.engine.core.arch.vocab_size) for _ in range(tokens)]
        self.engine.add_request(str(self.next_id), prompt,
                                SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))
        return str(self.next_id)

    def time_one(self, decodes: int, prefill: int) -> float:
        """Seconds of one step of ``decodes`` decoding requests and a ``prefill``-token prompt."""
        engine = self.engine
        ids = [self._add(CONTEXT, 1 << 20) for _ in range(decodes)]
        while True:  # their prefill steps, then one step in which every one of them decodes
            engine.step()
            if all(s.num_new_tokens == 1 for s in engine.core.last_schedule.scheduled):
                break
        if prefill:
            ids.append(self._add(prefill, 1))
        start = time.perf_counter()
        engine.step()
        seconds = time.perf_counter() - start
        rows = sum(s.num_new_tokens for s in engine.core.last_schedule.scheduled)
        if rows != decodes + prefill:
            raise SystemExit(f"shape {decodes}:{prefill}: the step ran {rows} rows, not {decodes + prefill}")
        for request_id in ids:
            engine.abort(request_id)
        while engine.has_unfinished_requests():
            engine.step()
        return seconds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="mixed,panels", help="comma-separated --linear-backend values")
    ap.add_argument("--shapes", default="1:128,8:128,4:256,1:511,256:0",
                    help="comma-separated DECODES:PREFILL_TOKENS")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    backends = args.backends.split(",")
    shapes = [tuple(int(x) for x in shape.split(":")) for shape in args.shapes.split(",")]
    engines = {backend: _Steps(backend, args.dtype) for backend in backends}
    for steps in engines.values():
        steps.time_one(1, 128)  # warm-up
    times: dict[tuple[str, tuple[int, int]], list[float]] = {(b, s): [] for b in backends for s in shapes}
    for round_ in range(args.rounds):
        for shape in shapes:
            for backend in backends if round_ % 2 == 0 else backends[::-1]:
                times[(backend, shape)].append(engines[backend].time_one(*shape))
    print(f"{args.dtype}, {args.threads} threads, median of {args.rounds} steps per cell (ms)")
    print(f"{'decodes':>8} {'prefill':>8} {'rows':>6} " + " ".join(f"{b:>10}" for b in backends) +
          "".join(f" {b + ' speed-up':>16}" for b in backends[1:]))
    for decodes, prefill in shapes:
        ms = [statistics.median(times[(b, (decodes, prefill))]) * 1e3 for b in backends]
        print(f"{decodes:>8} {prefill:>8} {decodes + prefill:>6} " + " ".join(f"{m:>10.1f}" for m in ms) +
              "".join(f" {ms[0] / m:>15.2f}x" for m in ms[1:]))


if __name__ == "__main__":
    main()
