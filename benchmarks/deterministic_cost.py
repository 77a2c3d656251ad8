"""What --deterministic costs: Offline and batch-1 decode tok/s, default vs
deterministic engine, side by side in one run (alternating, median of --repeats).

Offline: --num-requests greedy requests (mixed ~input/~output lengths, random
token ids, EOS ignored) submitted at once. Batch-1: decode tok/s of one request
after its first token. Both engines run the same workload in the same process.

    python -m benchmarks.deterministic_cost --dtype bfloat16 --dtype float32
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.engine_vs_hf import decode_rate_tokenmill, machine, make_workload, run_tokenmill_offline
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine


def measure(dtype: str, args) -> dict:
    engines = {mode: LLMEngine(EngineConfig(dtype=dtype, deterministic=mode == "deterministic",
                                            max_num_seqs=args.max_num_seqs,
                                            max_num_batched_tokens=args.max_num_batched_tokens))
               for mode in ("default", "deterministic")}
    arch = engines["default"].arch
    work = make_workload(args.num_requests, arch.vocab_size, args.seed, args.input_len, args.output_len)
    runs = {mode: {"offline": [], "b1": []} for mode in engines}
    for _ in range(args.repeats):
        for mode, engine in engines.items():
            runs[mode]["offline"].append(run_tokenmill_offline(engine, work)["output_tok_s"])
            runs[mode]["b1"].append(decode_rate_tokenmill(engine, work[0][0], args.decode_tokens))
    return {mode: {k: statistics.median(v) for k, v in r.items()} | {"runs": r} for mode, r in runs.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", action="append", choices=["float32", "bfloat16"],
                    help="dtypes to measure (repeat; default: bfloat16 and float32)")
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128, help="mean prompt tokens")
    ap.add_argument("--output-len", type=int, default=64, help="mean output tokens")
    ap.add_argument("--decode-tokens", type=int, default=64, help="tokens for the batch-1 decode runs")
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--max-num-batched-tokens", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    print(f"machine: {machine()}")
    print(f"workload: {args.num_requests} requests, ~{args.input_len} in / ~{args.output_len} out; "
          f"batch-1: {args.decode_tokens} tokens; median of {args.repeats}")
    print(f"{'dtype':10}{'':16}{'default':>10}{'determ.':>10}{'ratio':>8}   runs (default | deterministic)")
    for dtype in args.dtype or ["bfloat16", "float32"]:
        r = measure(dtype, args)
        for key, label in (("offline", "Offline tok/s"), ("b1", "batch-1 tok/s")):
            d, x = r["default"][key], r["deterministic"][key]
            runs = " ".join(f"{v:.0f}" for v in r["default"]["runs"][key]) + " | " + \
                " ".join(f"{v:.0f}" for v in r["deterministic"]["runs"][key])
            print(f"{dtype:10}{label:16}{d:>10.1f}{x:>10.1f}{x / d:>7.2f}x   {runs}", flush=True)


if __name__ == "__main__":
    main()
