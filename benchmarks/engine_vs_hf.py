"""tokenmill vs Hugging Face transformers ``generate`` on the same prompts, one run.

Offline: N requests with mixed prompt/output lengths (~128/~128), all
submitted at once to tokenmill; HF runs them in batches of --hf-batch with left
padding. Both ignore EOS and produce exactly the requested number of tokens per
request, so output tokens are equal on both sides; HF's extra tokens for
padded rows are generated but not counted.
Batch-1 decode: one request, decode tokens/s after the first token (with
--b1-quantization, also on a second, quantized engine).
Also prints the fraction of the machine's matmul peak (measured here, now)
that the Offline run achieves.

    python -m benchmarks.engine_vs_hf --num-requests 256 --b1-quantization int4
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from tokenmill.config import LINEAR_BACKENDS, EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams


def make_workload(n: int, vocab: int, seed: int, mean_in: int, mean_out: int):
    """Seeded prompts of random token ids (avoiding the first 100 special-ish ids)
    with lengths uniform in [mean/2, 3*mean/2]."""
    rng = random.Random(seed)
    work = []
    for _ in range(n):
        n_in = rng.randint(mean_in // 2, mean_in * 3 // 2)
        n_out = rng.randint(mean_out // 2, mean_out * 3 // 2)
        work.append(([rng.randrange(100, vocab) for _ in range(n_in)], n_out))
    return work


def matmul_peak(dtype: torch.dtype, size: int = 2048, shape_m: int = 256, k: int = 576, n: int = 1536) -> dict:
    """GFLOP/s of a large square GEMM and of the model's own 256-row shape."""
    out = {}
    for label, (m, kk, nn) in {"square": (size, size, size), "model_256rows": (shape_m, k, n)}.items():
        a, b = torch.randn(m, kk, dtype=dtype), torch.randn(kk, nn, dtype=dtype)
        for _ in range(2):
            a @ b
        reps = max(3, int(3e9 / (2 * m * kk * nn)))
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        out[label] = 2 * m * kk * nn * reps / (time.perf_counter() - t) / 1e9
    return out


def run_tokenmill_offline(engine: LLMEngine, work) -> dict:
    params = [SamplingParams(max_tokens=n_out, temperature=0.0, ignore_eos=True) for _, n_out in work]
    t = time.perf_counter()
    results = engine.generate([p for p, _ in work], params, use_tqdm=True)
    dt = time.perf_counter() - t
    out_tokens = sum(len(r.token_ids) for r in results)
    return {"seconds": dt, "output_tokens": out_tokens, "output_tok_s": out_tokens / dt,
            "preemptions": engine.stats().num_preemptions}


def run_hf_offline(model, work, batch: int, pad_id: int) -> dict:
    from tqdm import tqdm

    t = time.perf_counter()
    counted = 0
    for i in tqdm(range(0, len(work), batch), desc="HF generate", unit="batch"):
        chunk = work[i:i + batch]
        width = max(len(p) for p, _ in chunk)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p, _ in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk])
        n_new = max(n for _, n in chunk)
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new,
                           do_sample=False, pad_token_id=pad_id)
        counted += sum(n for _, n in chunk)
    dt = time.perf_counter() - t
    return {"seconds": dt, "output_tokens": counted, "output_tok_s": counted / dt}


def decode_rate_tokenmill(engine: LLMEngine, prompt, n: int) -> float:
    rid = engine.add_request(None, prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
    step_times = []
    first = True
    while engine.has_unfinished_requests():
        t = time.perf_counter()
        engine.step()
        if not first:
            step_times.append(time.perf_counter() - t)
        first = False
    assert rid not in engine.core.scheduler.requests
    return 1.0 / statistics.median(step_times)


def decode_rate_hf(model, prompt, n: int, pad_id: int) -> float:
    ids = torch.tensor([prompt])

    def timed(k):
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, max_new_tokens=k, min_new_tokens=k, do_sample=False, pad_token_id=pad_id)
        return time.perf_counter() - t

    timed(2)
    return (n - 1) / (timed(n) - timed(1))


def load_hf(dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    from tokenmill.model.embedded import embedded_gguf_path

    path = embedded_gguf_path()
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype).eval()


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-requests", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=128, help="mean prompt tokens")
    ap.add_argument("--output-len", type=int, default=128, help="mean output tokens")
    ap.add_argument("--hf-batch", type=int, default=32)
    ap.add_argument("--decode-tokens", type=int, default=128, help="tokens for the batch-1 decode runs")
    ap.add_argument("--dtype", default="auto", help="tokenmill dtype (HF runs float32)")
    ap.add_argument("--quantization", default=None, choices=["int8", "int4"],
                    help="tokenmill weight-only quantization for the Offline and batch-1 runs")
    ap.add_argument("--b1-quantization", default=None, choices=["int8", "int4"],
                    help="also measure batch-1 decode with a second engine quantized this way "
                         "(quantization lowers batch-1 latency but not large-batch throughput)")
    ap.add_argument("--hf-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="dtype of the HF transformers peer")
    ap.add_argument("--attention-backend", default="auto", choices=["auto", "cpp", "torch"],
                    help="tokenmill decode attention (see --attention-backend of tokenmill serve)")
    ap.add_argument("--linear-backend", default="auto", choices=LINEAR_BACKENDS,
                    help="tokenmill linear layers (see --linear-backend of tokenmill serve)")
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--skip-hf", action="store_true", help="tokenmill only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this file")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)

    engine = LLMEngine(EngineConfig(dtype=args.dtype, max_num_seqs=args.max_num_seqs,
                                    max_num_batched_tokens=args.max_num_batched_tokens,
                                    quantization=args.quantization, attention_backend=args.attention_backend,
                                    linear_backend=args.linear_backend))
    arch = engine.core.arch
    work = make_workload(args.num_requests, arch.vocab_size, args.seed, args.input_len, args.output_len)
    report = {"machine": machine(), "workload": {"requests": len(work), "mean_input": args.input_len,
                                                  "mean_output": args.output_len},
              "tokenmill_dtype": str(engine.core.dtype), "quantization": args.quantization,
              "attention_backend": engine.core.attention_backend, "linear_backend": engine.core.linear_backend}

    report["peak_gflops"] = matmul_peak(engine.core.dtype)
    report["tokenmill_offline"] = run_tokenmill_offline(engine, work)
    print(f"tokenmill Offline: {report['tokenmill_offline']['output_tok_s']:.1f} output tok/s", flush=True)
    processed = sum(len(p) + n for p, n in work)
    avg_ctx = args.input_len + args.output_len / 2
    flops = processed * arch.flops_per_token(int(avg_ctx / 2))
    report["tokenmill_offline"]["achieved_gflops"] = flops / report["tokenmill_offline"]["seconds"] / 1e9
    prompt = work[0][0]
    report["tokenmill_decode_b1_tok_s"] = decode_rate_tokenmill(engine, prompt, args.decode_tokens)
    pad_id = hf_pad_id(engine)
    if args.b1_quantization:
        del engine
        quantized = LLMEngine(EngineConfig(dtype=args.dtype, quantization=args.b1_quantization,
                                           attention_backend=args.attention_backend))
        report[f"tokenmill_decode_b1_{args.b1_quantization}_tok_s"] = decode_rate_tokenmill(
            quantized, prompt, args.decode_tokens)
        del quantized
    report["hf_dtype"] = args.hf_dtype
    if not args.skip_hf:
        hf = load_hf(getattr(torch, args.hf_dtype))
        report["hf_offline"] = run_hf_offline(hf, work, args.hf_batch, pad_id)
        report["hf_decode_b1_tok_s"] = decode_rate_hf(hf, prompt, args.decode_tokens, pad_id)
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


def hf_pad_id(engine: LLMEngine) -> int:
    return engine.tokenizer.eos_token_id if engine.tokenizer and engine.tokenizer.eos_token_id is not None else 0


def machine() -> str:
    import os
    import platform

    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads"


def print_report(r: dict) -> None:
    tm = r["tokenmill_offline"]
    peak = r["peak_gflops"]
    print(f"\nmachine: {r['machine']}")
    print(f"workload: {r['workload']['requests']} requests, ~{r['workload']['mean_input']} in / "
          f"~{r['workload']['mean_output']} out tokens; tokenmill dtype {r['tokenmill_dtype']}"
          f"{', ' + r['quantization'] if r['quantization'] else ''}, attention {r['attention_backend']}, "
          f"linears {r.get('linear_backend', '?')}; "
          f"HF dtype {r['hf_dtype']}")
    print(f"{'':28}{'tokenmill':>12}{'HF generate':>14}{'ratio':>8}")
    hf = r.get("hf_offline")
    ratio = f"{tm['output_tok_s'] / hf['output_tok_s']:.2f}x" if hf else "-"
    hf_tok_s = (hf or {}).get("output_tok_s", float("nan"))
    print(f"{'Offline output tok/s':28}{tm['output_tok_s']:>12.1f}{hf_tok_s:>14.1f}{ratio:>8}")
    hf_b1 = r.get("hf_decode_b1_tok_s")
    for key, label in [("tokenmill_decode_b1_tok_s", "batch-1 decode tok/s"),
                       ("tokenmill_decode_b1_int8_tok_s", "batch-1 decode tok/s, int8"),
                       ("tokenmill_decode_b1_int4_tok_s", "batch-1 decode tok/s, int4")]:
        if key in r:
            ratio = f"{r[key] / hf_b1:.2f}x" if hf_b1 else "-"
            print(f"{label:28}{r[key]:>12.1f}{hf_b1 or float('nan'):>14.1f}{ratio:>8}")
    print(f"matmul peak here: {peak['square']:.0f} GFLOP/s (2048^3), {peak['model_256rows']:.0f} GFLOP/s "
          f"(256x576x1536); Offline achieved {tm['achieved_gflops']:.0f} GFLOP/s = "
          f"{tm['achieved_gflops'] / peak['square']:.0%} of the square-GEMM peak")


if __name__ == "__main__":
    main()
