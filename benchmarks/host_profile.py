"""Where the host's time goes in an Offline run: the run timed plain, then again
under cProfile, with the functions that took the most time printed (own time
and cumulative). On a GPU with CUDA graphs a 135M model's step is short, so the
Python between replays (scheduling, input preparation, sampling, output
processing) decides the throughput; the time spent waiting for the GPU shows up
as the copy of the sampled tokens to the host (``Tensor.tolist``/``item``/
``cpu``), everything else is host work.

    python -m benchmarks.host_profile --model smollm2.gguf --device cuda --dtype bfloat16
    python -m benchmarks.host_profile --model dummy:smollm2-135m --tokenizer DIR --device cpu --num-requests 64

cProfile slows Python code down (about 1.5-2x here), so its shares are of a
slower run; the plain run's tokens/s is the figure to quote.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats

from benchmarks.cuda_graphs import _sync, offline
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine


def _top(stats: pstats.Stats, key: str, limit: int) -> list[dict]:
    """The ``limit`` functions with the most ``key`` ("tottime" or "cumtime")."""
    rows = []
    for (path, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        rows.append({"function": f"{path.split('site-packages/')[-1].split('src/')[-1]}:{line}({name})",
                     "calls": calls, "tottime": tottime, "cumtime": cumtime})
    return sorted(rows, key=lambda r: -r[key])[:limit]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="dummy:smollm2-135m")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--num-requests", type=int, default=1024)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--kv-cache-memory-gib", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=30, help="functions printed per table")
    ap.add_argument("--json", default=None, help="write the figures and both tables here")
    args = ap.parse_args(argv)

    engine = LLMEngine(EngineConfig(
        model=args.model, load_format="dummy" if args.model.startswith("dummy:") else "auto",
        tokenizer=args.tokenizer, device=args.device, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, kv_cache_memory_gib=args.kv_cache_memory_gib,
        max_model_len=2048))
    # Three disjoint prompt ranges: neither timed run hits the prefix cache.
    n = args.num_requests
    offline(engine, min(n, 64), args.input_len, 16, first=2 * n)  # warm-up
    plain = offline(engine, n, args.input_len, args.output_len)
    print(f"plain run: {plain['tokens_per_s']:.1f} output tok/s ({plain['seconds']:.2f} s)", flush=True)

    profiler = cProfile.Profile()
    profiler.enable()
    profiled = offline(engine, n, args.input_len, args.output_len, first=n)
    _sync()
    profiler.disable()
    print(f"profiled run: {profiled['tokens_per_s']:.1f} output tok/s ({profiled['seconds']:.2f} s)")
    stats = pstats.Stats(profiler, stream=io.StringIO())
    tables = {key: _top(stats, key, args.top) for key in ("tottime", "cumtime")}
    for key, rows in tables.items():
        print(f"\ntop {args.top} by {key} (seconds of the profiled run's {profiled['seconds']:.2f})")
        for r in rows:
            print(f"{r[key]:9.3f} {r['calls']:>9} {r['function']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "plain": plain, "profiled": profiled, **tables}, f, indent=1)


if __name__ == "__main__":
    main()
