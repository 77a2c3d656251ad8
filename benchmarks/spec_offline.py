"""Speculative decoding at a large batch: Offline output tok/s with and without drafts.

The issue's bound: an Offline run at batch 256 is never more than 3% slower
with speculation on than without. Requests of random token ids (prompts and
outputs of ``--min-len``..``--max-len`` tokens, greedy, ``ignore_eos``), all
submitted at once to an engine with ``max_num_seqs`` 256; each configuration
runs ``--rounds`` times, alternating (this machine's speed drifts between
minutes, so each configuration meets the same drifts), and the median round
counts. Outputs are compared token by token with the plain run.

    python -m benchmarks.spec_offline --speculative-config '{"method": "ngram", "num_speculative_tokens": 4}' \\
        --speculative-config '{"method": "self-int4", "num_speculative_tokens": 4}'
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams


def workload(n: int, min_len: int, max_len: int, vocab: int, seed: int = 0):
    rng = random.Random(seed)
    prompts = [[rng.randrange(100, vocab) for _ in range(rng.randint(min_len, max_len))] for _ in range(n)]
    params = [SamplingParams(max_tokens=rng.randint(min_len, max_len), temperature=0.0, ignore_eos=True)
              for _ in range(n)]
    return prompts, params


def run(engine: LLMEngine, prompts, params) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    results = engine.generate(prompts, params)
    seconds = time.perf_counter() - start
    return sum(len(r.token_ids) for r in results) / seconds, [r.token_ids for r in results]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speculative-config", action="append", required=True,
                    help="a JSON given to --speculative-config (repeat to compare several)")
    ap.add_argument("--num-requests", type=int, default=256)
    ap.add_argument("--min-len", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)

    common = dict(dtype=args.dtype, max_num_seqs=256, max_num_batched_tokens=2048)
    engines = {"plain": LLMEngine(EngineConfig(**common))}
    for spec in args.speculative_config:
        engines[spec] = LLMEngine(EngineConfig(**common, speculative_config=spec))
    prompts, params = workload(args.num_requests, args.min_len, args.max_len, engines["plain"].core.arch.vocab_size)
    rates: dict[str, list[float]] = {name: [] for name in engines}
    outputs = {}
    for _ in range(args.rounds):
        for name, engine in engines.items():
            rate, outputs[name] = run(engine, prompts, params)
            rates[name].append(rate)
            print(f"  {name}: {rate:.1f} output tok/s", flush=True)
    report = {"num_requests": args.num_requests, "dtype": str(engines["plain"].core.dtype), "configs": {}}
    plain = statistics.median(rates["plain"])
    for name, engine in engines.items():
        stats = engine.stats()
        entry = {"output_tok_s": rates[name], "median_ratio": statistics.median(rates[name]) / plain,
                 "round_ratios": [r / p for r, p in zip(rates[name], rates["plain"])],
                 "identical_outputs": outputs[name] == outputs["plain"],
                 "drafts_verified": stats.spec_draft_tokens, "drafts_accepted": stats.spec_accepted_tokens}
        report["configs"][name] = entry
        print(f"{name}: median {statistics.median(rates[name]):.1f} tok/s ({entry['median_ratio']:.3f}x plain; "
              f"per round {', '.join(f'{r:.3f}' for r in entry['round_ratios'])}), identical outputs: "
              f"{entry['identical_outputs']}, drafts verified {stats.spec_draft_tokens}, "
              f"accepted {stats.spec_accepted_tokens}", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
