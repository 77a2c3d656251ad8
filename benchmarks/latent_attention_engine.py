"""DeepSeek's latent attention in the engine: ``--attention-backend torch`` vs ``cpp``.

Two engines on the same HF directory (built by benchmarks.deepseek_vs_hf: the
``deepseek-v3-bench`` preset with random weights), bf16, alternating rounds:
- batch-1 decode tok/s after a 1024-token prompt (64 tokens, median step);
- the median decode step of 32 requests with 512-token prompts (~530 tokens
  of context while they decode).

    python -m benchmarks.latent_attention_engine --rounds 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from benchmarks.engine_vs_hf import decode_rate_tokenmill
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams


def batch_step_ms(engine: LLMEngine, rng: random.Random, batch: int, prompt_len: int, vocab: int) -> float:
    """Median wall time of the steps in which every request is decoding."""
    for _ in range(batch):
        engine.add_request(None, [rng.randrange(100, vocab) for _ in range(prompt_len)],
                           SamplingParams(max_tokens=33, temperature=0.0, ignore_eos=True))
    times = []
    while engine.has_unfinished_requests():
        t = time.perf_counter()
        engine.step()
        dt = time.perf_counter() - t
        running = engine.core.scheduler.running
        if running and all(r.num_computed_tokens >= r.num_prompt_tokens for r in running):
            times.append(dt)
    return 1000 * statistics.median(times[2:])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(Path.home() / ".cache" / "tokenmill" / "bench-models" / "deepseek-v3-bench"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    rng = random.Random(0)
    engines = {b: LLMEngine(EngineConfig(model=args.model, dtype="bfloat16", attention_backend=b,
                                         kv_cache_memory_gib=1.0, max_num_batched_tokens=2048))
               for b in ("torch", "cpp")}
    vocab = engines["cpp"].core.arch.vocab_size
    for r in range(args.rounds):
        for backend, engine in engines.items():
            b1 = decode_rate_tokenmill(engine, [rng.randrange(100, vocab) for _ in range(1024)], 64)
            step = batch_step_ms(engine, rng, 32, 512, vocab)
            print(f"round {r}  {backend:5}  batch-1 decode {b1:6.1f} tok/s   batch-32 decode step {step:6.1f} ms",
                  flush=True)


if __name__ == "__main__":
    main()
