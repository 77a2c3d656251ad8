"""Eager vs CUDA-graph decode on a GPU, same engine settings, one process:
decode step wall time per batch size, an Offline run (every request at once,
fixed lengths, output tokens/s) and batch-1 TPOT (one request at a time).

    python -m benchmarks.cuda_graphs --model dummy:smollm2-135m --tokenizer DIR --json results.json

Random weights (dummy:) where no checkpoint is at hand: speed depends on the
shapes, not the values. The Offline figures are what ``tokenmill sim
--hardware h200 --scenario offline`` predicts for the same workload
(docs/SIMULATOR.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from benchmarks.step_profile import decode_steps
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def offline(engine: LLMEngine, num_requests: int, input_len: int, output_len: int) -> dict:
    """Every request added at once (distinct prompts: no prefix hits), run to
    completion; output tokens per second of wall time."""
    vocab = engine.core.arch.vocab_size
    prompts = [[(1000 + 7919 * i + j) % vocab for j in range(input_len)] for i in range(num_requests)]
    params = SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True)
    _sync()
    start = time.perf_counter()
    results = engine.generate(prompts, params)
    _sync()
    elapsed = time.perf_counter() - start
    tokens = sum(len(r.token_ids) for r in results)
    return {"requests": num_requests, "output_tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}


def single_stream_tpot_ms(engine: LLMEngine, requests: int, input_len: int, output_len: int) -> float:
    """Median over requests run one at a time of (end - first token) / (output_len - 1)."""
    tpots, vocab = [], engine.core.arch.vocab_size
    for i in range(requests):
        engine.add_request(None, [(500 + 31 * i + j) % (vocab - 10) + 10 for j in range(input_len)],
                           SamplingParams(max_tokens=output_len, temperature=0.0, ignore_eos=True))
        first = None
        while engine.has_unfinished_requests():
            if any(o.new_token_ids for o in engine.step()) and first is None:
                _sync()
                first = time.perf_counter()
        _sync()
        tpots.append((time.perf_counter() - first) / (output_len - 1) * 1e3)
    return statistics.median(tpots)


def measure(args, enforce_eager: bool) -> dict:
    start = time.perf_counter()
    engine = LLMEngine(EngineConfig(
        model=args.model, load_format="dummy" if args.model.startswith("dummy:") else "auto",
        tokenizer=args.tokenizer, device=args.device, dtype=args.dtype, enforce_eager=enforce_eager,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_memory_gib=args.kv_cache_memory_gib, max_model_len=args.max_model_len))
    out = {"mode": "eager" if enforce_eager else "cuda graphs", "startup_s": time.perf_counter() - start}
    graphs = engine.core.runner.decode_graphs
    out["graphs"] = len(graphs.graphs) if graphs is not None else 0
    if graphs is not None:
        out["capture_s"], out["capture_mib"] = graphs.capture_seconds, graphs.capture_mib
    out["decode_step_ms"] = {}
    for batch in args.batch_sizes:
        decode_steps(engine, batch, 5)  # warm-up
        out["decode_step_ms"][batch] = statistics.median(decode_steps(engine, batch, args.steps)) * 1e3
    offline(engine, min(args.num_requests, 64), args.input_len, 16)  # warm-up
    out["offline"] = offline(engine, args.num_requests, args.input_len, args.output_len)
    out["batch1_tpot_ms"] = single_stream_tpot_ms(engine, 5, args.input_len, args.output_len)
    print(json.dumps(out), flush=True)
    del engine
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="dummy:smollm2-135m")
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of this script (both runs eager there)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-sizes", type=lambda s: [int(b) for b in s.split(",")], default=[1, 8, 32, 128])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--num-requests", type=int, default=1024)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--kv-cache-memory-gib", type=float, default=8.0)
    ap.add_argument("--json", default=None, help="write both runs here")
    args = ap.parse_args(argv)
    runs = [measure(args, enforce_eager=True), measure(args, enforce_eager=False)]
    eager, graphs = runs
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"\n{device}, {args.model} {args.dtype}")
    print(f"{'':28}{'eager':>10}{'graphs':>10}{'ratio':>8}")
    for batch in args.batch_sizes:
        e, g = eager["decode_step_ms"][batch], graphs["decode_step_ms"][batch]
        print(f"{f'decode step, batch {batch} (ms)':28}{e:10.2f}{g:10.2f}{e / g:8.2f}")
    e, g = eager["offline"]["tokens_per_s"], graphs["offline"]["tokens_per_s"]
    print(f"{f'Offline {args.num_requests}x{args.input_len}/{args.output_len} tok/s':28}{e:10.0f}{g:10.0f}"
          f"{g / e:8.2f}")
    e, g = eager["batch1_tpot_ms"], graphs["batch1_tpot_ms"]
    print(f"{'batch-1 TPOT (ms)':28}{e:10.2f}{g:10.2f}{e / g:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
