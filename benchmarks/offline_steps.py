"""Where an Offline run's time goes: engine steps grouped by kind (steps that
prefill vs decode-only steps, by decode batch size), with time, steps and
tokens/s per group, and the time per step inside the C++ paged attention when
the engine runs it. No peers; the same workload as engine_vs_hf's Offline run.

    python -m benchmarks.offline_steps --num-requests 256
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

from benchmarks.decode_step import time_attention
from benchmarks.engine_vs_hf import make_workload
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

_BATCH_GROUPS = ((192, "192+"), (128, "128-191"), (64, "64-127"), (1, "1-63"))
_KINDS = ("with prefill", *(f"decode only, batch {label}" for _, label in _BATCH_GROUPS))  # print order


def step_kind(prefill_tokens: int, decodes: int) -> str:
    if prefill_tokens:
        return _KINDS[0]
    return _KINDS[1 + next(i for i, (low, _) in enumerate(_BATCH_GROUPS) if decodes >= low)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-requests", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--fused-ops", default="auto", choices=["auto", "cpp", "torch"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    engine = LLMEngine(EngineConfig(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                                    fused_ops=args.fused_ops))
    for prompt, n_out in make_workload(args.num_requests, engine.core.arch.vocab_size, args.seed, args.input_len,
                                       args.output_len):
        engine.add_request(None, prompt, SamplingParams(max_tokens=n_out, temperature=0.0, ignore_eos=True))

    attention_s = time_attention(engine)  # time inside the C++ attention kernel during the current step
    scheduled = []  # the scheduler's output of the step being timed
    schedule = engine.core.scheduler.schedule
    engine.core.scheduler.schedule = lambda: scheduled.append(schedule()) or scheduled[-1]
    # group -> [steps, seconds, prompt tokens, output tokens, attention seconds]
    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0, 0.0])
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        if attention_s is not None:
            attention_s[0] = 0.0
        t = time.perf_counter()
        outputs = engine.step()
        seconds = time.perf_counter() - t
        out = scheduled.pop()
        if not out:
            continue
        prefill_tokens = sum(s.num_new_tokens for s in out.scheduled if s.num_new_tokens > 1)
        g = groups[step_kind(prefill_tokens, len(out.scheduled))]
        g[0] += 1
        g[1] += seconds
        g[2] += prefill_tokens
        g[3] += len(outputs)
        g[4] += attention_s[0] if attention_s is not None else 0.0
    total = time.perf_counter() - start
    print(f"{engine.core.dtype}, fused ops {engine.core.fused_ops}, {args.num_requests} requests: {total:.1f} s")
    attention = "attention ms/step" if attention_s is not None else ""
    print(f"{'steps':<28}{'count':>7}{'seconds':>9}{'share':>7}{'ms/step':>9}{'prompt tok/s':>14}{'output tok/s':>14}"
          f"{attention:>19}")
    for name in (k for k in _KINDS if k in groups):
        n, s, p, o, a = groups[name]
        split = f"{a / n * 1e3:>19.0f}" if attention_s is not None else ""
        print(f"{name:<28}{n:>7}{s:>9.1f}{s / total:>7.0%}{s / n * 1e3:>9.0f}{p / s:>14.0f}{o / s:>14.0f}{split}")


if __name__ == "__main__":
    main()
