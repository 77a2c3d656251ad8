"""tokenmill vs Hugging Face transformers on a DeepSeek-V3-shaped model, one run.

The model: the ``deepseek-v3-bench`` preset (8 layers, MLA with a 256 + 32
latent, 64 experts top-6 + 1 shared in 8 groups, hidden 1024) with random
weights, built by transformers and saved once as an HF directory (bf16
safetensors + a word-level tokenizer) under --cache-dir; both sides load that
directory, so they run the same weights.

Figures: Offline output tokens/s (N requests of ~128 in / ~128 out; HF
``generate`` in batches of --hf-batch with left padding), batch-1 decode
tokens/s, KV cache bytes per token (ours: the latent; HF's cache measured
after a forward; the expanded per-head K/V an MHA-style cache would hold) and
the sequences of --context tokens that fit a 1 GiB cache, and the MoE layer's
achieved GEMM rate at the expert batch sizes a step sees, as a fraction of a
dense GEMM of the same shape and of the machine's square-GEMM peak (and, for
the few-row steps of decoding, which are bound by reading the weights, the
expert weight bytes read per second).

HF runs its ``eager`` experts (a per-expert loop), the fastest of its
implementations on this CPU; its default, ``grouped_mm``, gave 1 output tok/s on
a short Offline run (docs/PERFORMANCE.md).

    python -m benchmarks.deepseek_vs_hf --num-requests 64 --json results/deepseek/vs_hf.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.engine_vs_hf import (
    decode_rate_hf,
    decode_rate_tokenmill,
    machine,
    make_workload,
    matmul_peak,
    run_hf_offline,
    run_tokenmill_offline,
)
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS
from tokenmill.model.deepseek_arch import DeepseekArch, hf_config
from tokenmill.model.loaders.dummy import dummy_arch
from tokenmill.model.moe import MoELayer, dispatch
from tokenmill.model.word_tokenizer import save_word_tokenizer

GIB = 1 << 30


def build_checkpoint(preset: str, root: Path, seed: int) -> Path:
    """The preset as an HF directory (built once; reused while its config matches)."""
    import transformers

    cfg = hf_config(dummy_arch(preset))
    done = root / "config.json"
    if done.exists():
        saved = json.loads(done.read_text())
        if all(saved.get(k) == v for k, v in cfg.items() if k != "rope_parameters"):
            return root
    print(f"building a random {preset} checkpoint with transformers in {root} (once)", flush=True)
    torch.manual_seed(seed)
    model = transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config(**cfg)).to(torch.bfloat16).eval()
    with torch.no_grad():  # random init leaves the correction bias at zero: make routing uneven like a real one
        for layer in model.model.layers[cfg["first_k_dense_replace"]:]:
            layer.mlp.gate.e_score_correction_bias.normal_(0, 0.05)
    root.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(root, safe_serialization=True)
    save_word_tokenizer(root, cfg["vocab_size"])
    return root


def kv_cache_report(arch: DeepseekArch, hf_model, context: int) -> dict:
    """Bytes per token (bf16) and how many ``context``-token sequences fit in 1 GiB."""
    ours = arch.num_layers * arch.latent_dim * 2
    expanded = arch.num_layers * arch.num_heads * (arch.qk_head_dim + arch.v_head_dim) * 2
    out = {"tokenmill_latent": ours, "expanded_kv": expanded}
    if hf_model is not None:
        n = 64
        with torch.no_grad():
            cache = hf_model(torch.arange(3, 3 + n)[None], use_cache=True).past_key_values
        tensors = [t for layer in cache.layers for t in (layer.keys, layer.values) if t is not None]
        out["hf_cache"] = sum(t.numel() * t.element_size() for t in tensors) // n
    return {"bytes_per_token": out,
            "sequences_per_gib": {k: GIB // (v * context) for k, v in out.items()}, "context": context}


def timed(fn, reps: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def moe_gemm_fraction(arch: DeepseekArch, dtype: torch.dtype, token_counts: list[int], peak: float) -> list[dict]:
    """The MoE layer alone (random weights of the preset's shape): its routed
    experts' achieved GFLOP/s at T tokens (T * top_k rows over the experts)
    against one dense GEMM pair with the average rows per expert, and against
    the square-GEMM peak."""
    m, h = arch.moe, arch.hidden_size
    layer = MoELayer(h, m).to(dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.02)
    layer.gate.weight.data = layer.gate.weight.data.float()
    layer.gate.e_score_correction_bias = torch.zeros(m.num_experts)
    rows = []
    for t in token_counts:
        x = torch.randn(t, h, dtype=dtype)
        with torch.inference_mode():
            routing = layer.gate(x)
            plan = dispatch(x, routing, m.num_experts)
            sec = timed(lambda: layer.experts(plan.rows, plan.rows_per_expert, TORCH_FUSED_OPS), 5)
            active = sum(1 for c in plan.rows_per_expert if c)
            avg = max(1, round(t * m.top_k / active))
            w13, w2 = layer.experts.w13[0], layer.experts.w2[0]
            a = torch.randn(avg, h, dtype=dtype)
            dense = timed(lambda: w2(TORCH_FUSED_OPS.silu_and_mul(w13(a))), 20)
        flops = 2 * t * m.top_k * 3 * h * m.intermediate_size
        weight_bytes = active * 3 * h * m.intermediate_size * x.element_size()  # each active expert read once
        dense_rate = 2 * avg * 3 * h * m.intermediate_size / dense / 1e9
        rate = flops / sec / 1e9
        rows.append({"tokens": t, "active_experts": active, "avg_rows_per_expert": avg,
                     "experts_gflops": rate, "experts_weight_gb_s": weight_bytes / sec / 1e9,
                     "dense_same_shape_gflops": dense_rate,
                     "fraction_of_dense_same_shape": rate / dense_rate, "fraction_of_square_peak": rate / peak})
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="deepseek-v3-bench")
    ap.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "tokenmill" / "bench-models"))
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128, help="mean prompt tokens")
    ap.add_argument("--output-len", type=int, default=128, help="mean output tokens")
    ap.add_argument("--hf-batch", type=int, default=32)
    ap.add_argument("--decode-tokens", type=int, default=64, help="tokens for the batch-1 decode runs")
    ap.add_argument("--context", type=int, default=2048, help="sequence length for the sequences-per-GiB figure")
    ap.add_argument("--skip-hf", action="store_true", help="tokenmill only")
    ap.add_argument("--hf-experts", default="eager", choices=["eager", "batched_mm", "grouped_mm"],
                    help="transformers' experts implementation: eager (its per-expert loop) is the fastest "
                         "on CPU here; its default, grouped_mm, was far slower (docs/PERFORMANCE.md)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this file")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    arch = dummy_arch(args.preset)
    root = build_checkpoint(args.preset, Path(args.cache_dir) / args.preset, args.seed)
    engine = LLMEngine(EngineConfig(model=str(root), dtype="bfloat16", max_num_seqs=256,
                                    max_num_batched_tokens=2048, kv_cache_memory_gib=1.0))
    work = make_workload(args.num_requests, arch.vocab_size, args.seed, args.input_len, args.output_len)
    report = {"machine": machine(), "preset": args.preset, "params": arch.num_params(),
              "workload": {"requests": len(work), "mean_input": args.input_len, "mean_output": args.output_len},
              "attention_backend": engine.core.attention_backend, "linear_backend": engine.core.linear_backend}
    report["peak_gflops"] = matmul_peak(torch.bfloat16)
    report["tokenmill_offline"] = run_tokenmill_offline(engine, work)
    print(f"tokenmill Offline: {report['tokenmill_offline']['output_tok_s']:.1f} output tok/s", flush=True)
    prompt = work[0][0]
    report["tokenmill_decode_b1_tok_s"] = decode_rate_tokenmill(engine, prompt, args.decode_tokens)
    print(f"tokenmill batch-1 decode: {report['tokenmill_decode_b1_tok_s']:.1f} tok/s", flush=True)
    del engine
    hf = None
    if not args.skip_hf:
        import transformers

        hf = transformers.AutoModelForCausalLM.from_pretrained(str(root), dtype=torch.bfloat16,
                                                               experts_implementation=args.hf_experts).eval()
        report["hf_experts_implementation"] = getattr(hf.config, "_experts_implementation", None)
        report["hf_offline"] = run_hf_offline(hf, work, args.hf_batch, 0)
        print(f"HF Offline: {report['hf_offline']['output_tok_s']:.1f} output tok/s", flush=True)
        report["hf_decode_b1_tok_s"] = decode_rate_hf(hf, prompt, args.decode_tokens, 0)
    report["kv_cache"] = kv_cache_report(arch, hf, args.context)
    peak = report["peak_gflops"]["square"]
    report["moe_layer"] = moe_gemm_fraction(arch, torch.bfloat16, [1, 8, 32, 256, 2048], peak)
    print_report(report)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))


def print_report(r: dict) -> None:
    print(f"\nmachine: {r['machine']}\nmodel: {r['preset']} ({r['params'] / 1e9:.2f} B parameters, random bf16), "
          f"{r['workload']['requests']} requests ~{r['workload']['mean_input']} in / ~{r['workload']['mean_output']} "
          f"out; tokenmill attention {r['attention_backend']}, linears {r['linear_backend']}; "
          f"HF experts implementation {r.get('hf_experts_implementation')}")
    print(f"{'':28}{'tokenmill':>12}{'HF':>12}{'ratio':>8}")
    hf_offline = r.get("hf_offline", {}).get("output_tok_s")
    for label, ours, theirs in [("Offline output tok/s", r["tokenmill_offline"]["output_tok_s"], hf_offline),
                                ("batch-1 decode tok/s", r["tokenmill_decode_b1_tok_s"], r.get("hf_decode_b1_tok_s"))]:
        ratio = f"{ours / theirs:.2f}x" if theirs else "-"
        print(f"{label:28}{ours:>12.1f}{theirs or float('nan'):>12.1f}{ratio:>8}")
    kv = r["kv_cache"]
    for k, v in kv["bytes_per_token"].items():
        print(f"KV bytes/token {k:18}{v:>10}   sequences of {kv['context']} tokens per GiB: "
              f"{kv['sequences_per_gib'][k]}")
    print(f"{'MoE tokens':>10}{'active':>8}{'rows/expert':>12}{'GFLOP/s':>9}{'weights GB/s':>13}{'of dense':>10}"
          f"{'of peak':>9}")
    for row in r["moe_layer"]:
        print(f"{row['tokens']:>10}{row['active_experts']:>8}{row['avg_rows_per_expert']:>12}"
              f"{row['experts_gflops']:>9.1f}{row['experts_weight_gb_s']:>13.1f}"
              f"{row['fraction_of_dense_same_shape']:>10.0%}{row['fraction_of_square_peak']:>9.0%}")


if __name__ == "__main__":
    main()
