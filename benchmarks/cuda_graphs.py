"""Eager vs CUDA-graph decode on a GPU, with the torch or the compiled fused
ops, same engine settings, one process: decode step wall time per batch size,
an Offline run (every request at once, fixed lengths, output tokens/s) and
batch-1 TPOT (one request at a time).

    python -m benchmarks.cuda_graphs --model dummy:smollm2-135m --tokenizer DIR --json results.json
    python -m benchmarks.cuda_graphs --modes eager:torch,graphs:torch,graphs:compiled

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


def offline(engine: LLMEngine, num_requests: int, input_len: int, output_len: int, first: int = 0) -> dict:
    """Every request added at once, run to completion; output tokens per second
    of wall time. Prompts ``first .. first + num_requests - 1`` of one family of
    distinct prompts: runs over disjoint ranges share no prefix (a run that
    repeats an earlier one's prompts would mostly hit the prefix cache)."""
    vocab = engine.core.arch.vocab_size
    prompts = [[(1000 + 7919 * i + j) % vocab for j in range(input_len)]
               for i in range(first, first + num_requests)]
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


def measure(args, mode: str) -> dict:
    """mode: "eager|graphs:torch|compiled|auto" (steps, then fused ops)."""
    steps, fused_ops = mode.split(":")
    start = time.perf_counter()
    engine = LLMEngine(EngineConfig(
        model=args.model, load_format="dummy" if args.model.startswith("dummy:") else "auto",
        tokenizer=args.tokenizer, device=args.device, dtype=args.dtype, enforce_eager=steps == "eager",
        fused_ops=fused_ops, max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_memory_gib=args.kv_cache_memory_gib, max_model_len=args.max_model_len))
    out = {"mode": mode, "fused_ops": engine.core.fused_ops, "startup_s": time.perf_counter() - start}
    graphs = engine.core.runner.decode_graphs
    out["graphs"] = len(graphs.graphs) if graphs is not None else 0
    if graphs is not None:
        out["capture_s"], out["capture_mib"] = graphs.capture_seconds, graphs.capture_mib
    out["decode_step_ms"] = {}
    for batch in args.batch_sizes:
        decode_steps(engine, batch, 5)  # warm-up
        out["decode_step_ms"][batch] = statistics.median(decode_steps(engine, batch, args.steps)) * 1e3
    offline(engine, min(args.num_requests, 64), args.input_len, 16, first=args.num_requests)  # warm-up
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
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of this script (eager steps in every mode)")
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
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["eager:torch", "graphs:torch", "graphs:compiled"],
                    help="engines to run, in turn: steps (eager | graphs) and fused ops (torch | compiled | auto)")
    ap.add_argument("--json", default=None, help="write every run here")
    args = ap.parse_args(argv)
    runs = [measure(args, mode) for mode in args.modes]
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"\n{device}, {args.model} {args.dtype}; ratios against the first mode")
    print(f"{'':30}" + "".join(f"{r['mode']:>17}" for r in runs))

    def row(label: str, values: list[float], digits: int, higher_is_better: bool) -> None:
        cells = [f"{v:.{digits}f} ({(v / values[0]) if higher_is_better else (values[0] / v):.2f}x)" for v in values]
        print(f"{label:30}" + "".join(f"{c:>17}" for c in cells))

    for batch in args.batch_sizes:
        row(f"decode step, batch {batch} (ms)", [r["decode_step_ms"][batch] for r in runs], 2, False)
    row(f"Offline {args.num_requests}x{args.input_len}/{args.output_len} tok/s",
        [r["offline"]["tokens_per_s"] for r in runs], 0, True)
    row("batch-1 TPOT (ms)", [r["batch1_tpot_ms"] for r in runs], 2, False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
