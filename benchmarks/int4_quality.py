"""What int4 costs in quality, per kernel path, against the float32 model: the
embedded model as bf16 (no quantization) and int4 on torch's kernel, on
tokenmill's kernel with float activations and (AVX512-VNNI) with int8
activations. Teacher-forced over a text in prompt chunks of 4 tokens, so every
linear call has at most 4 rows and runs on the int4 kernel as decode steps do
(int4's bf16 copy takes calls of 5 rows or more): perplexity, mean KL
divergence from the float32 next-token distribution, and how often the top
token equals float32's. Then greedy chat answers: the share of tokens before
the first divergence from float32's.

    python -m benchmarks.int4_quality
"""

from __future__ import annotations

import argparse
import json
import math
from contextlib import contextmanager
from unittest import mock

import torch

from benchmarks.paged_forward import paged_logits
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. He carried a small brass lamp, "
    "a notebook, and a thermos of strong black tea. From the top of the tower he could see the whole bay: the "
    "fishing boats coming home, the gulls circling over the harbour, and the long line of hills turning purple "
    "in the fading light. Over forty years the notebooks filled three shelves in his kitchen. When the town "
    "council decided to replace the keeper with an automatic beacon, the children of the village asked him to "
    "teach them how to read the sky. A function that sorts a list in Python: def sort_items(items): return "
    "sorted(items, key=lambda item: item.name). The train leaves the station at seven and arrives at noon."
)
PROMPTS = ["What is the capital of France?", "Write a short poem about autumn leaves.",
           "Explain in two sentences why the sky is blue.", "List three uses of a paperclip.",
           "How do I boil an egg?", "Give me a recipe for pancakes.", "What is a prime number?",
           "Describe the water cycle."]
VARIANTS = {
    "bf16": {"dtype": "bfloat16"},
    "int4 (torch kernel)": {"dtype": "bfloat16", "quantization": "int4", "torch_kernel": True},
    "int4 (float act.)": {"dtype": "bfloat16", "quantization": "int4", "int4_activations": "float"},
    "int4 (int8 act.)": {"dtype": "bfloat16", "quantization": "int4", "int4_activations": "int8"},
}


@contextmanager
def _torch_int4_kernel(on: bool):
    """Int4Linear built while this is on takes torch's kernel, as before tokenmill had its own."""
    if not on:
        yield
        return
    with mock.patch("tokenmill.kernels.int4_linear._vector_int4_kernels", return_value=None):
        yield


def _engine(spec: dict) -> LLMEngine:
    spec = dict(spec)
    with _torch_int4_kernel(spec.pop("torch_kernel", False)):
        return LLMEngine(EngineConfig(device="cpu", kv_cache_memory_gib=0.2, **spec))


def _answers(engine: LLMEngine, max_tokens: int) -> list[list[int]]:
    prompts = [engine.tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
               for p in PROMPTS]
    return [r.token_ids for r in engine.generate(prompts, SamplingParams(max_tokens=max_tokens, temperature=0.0))]


def _prefix_share(reference: list[list[int]], got: list[list[int]]) -> float:
    agreed = sum(next((i for i, (a, b) in enumerate(zip(r, g)) if a != b), min(len(r), len(g)))
                 for r, g in zip(reference, got))
    return agreed / sum(len(r) for r in reference)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunk", type=int, default=4, help="prompt chunk (rows per linear call) of the forced pass")
    ap.add_argument("--max-tokens", type=int, default=48, help="greedy answer length")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    reference = LLMEngine(EngineConfig(device="cpu", dtype="float32", kv_cache_memory_gib=0.2))
    ids = reference.tokenizer.encode(TEXT)
    ref_logp = torch.log_softmax(paged_logits(reference.core.model, ids, args.chunk).float(), -1)
    ref_answers = _answers(reference, args.max_tokens)
    targets = torch.tensor(ids[1:])
    rows = {"float32": {"perplexity": math.exp(-ref_logp[:-1].gather(1, targets[:, None]).mean().item())}}
    for name in args.variants.split(","):
        engine = _engine(VARIANTS[name])
        logp = torch.log_softmax(paged_logits(engine.core.model, ids, args.chunk, dtype=engine.core.dtype)
                                 .float(), -1)
        rows[name] = {
            "perplexity": math.exp(-logp[:-1].gather(1, targets[:, None]).mean().item()),
            "kl_from_fp32": (ref_logp.exp() * (ref_logp - logp)).sum(-1).mean().item(),
            "top1_equal": (logp.argmax(-1) == ref_logp.argmax(-1)).float().mean().item(),
            "greedy_prefix_share": _prefix_share(ref_answers, _answers(engine, args.max_tokens)),
        }
        del engine
    print(f"{len(ids)} forced tokens in chunks of {args.chunk}; {len(PROMPTS)} greedy answers of "
          f"{args.max_tokens} tokens against float32's")
    print(f"{'':26}{'perplexity':>11}{'KL from fp32':>14}{'top-1 = fp32':>14}{'greedy prefix':>15}")
    for name, r in rows.items():
        print(f"{name:26}{r['perplexity']:11.3f}" + (f"{r['kl_from_fp32']:14.5f}{r['top1_equal']:14.1%}"
                                                       f"{r['greedy_prefix_share']:15.1%}" if name != "float32"
                                                       else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
