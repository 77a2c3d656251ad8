"""Speculative decoding at batch 1: decode tok/s with and without drafts, same outputs.

Workloads of chat requests (greedy, one request at a time, as MLPerf's
SingleStream runs), on the embedded model unless ``--model`` says otherwise:
- grounded: the answer copies from the prompt (repeat, lightly edit or fix a
  given paragraph or function), where prompt lookup finds its drafts;
- open: questions with nothing to copy, where drafting can only cost;
- code: code editing (type hints, renames, docstrings, small fixes to a given
  function), the natural workload of a coder model and its draft.
For each: output tok/s over the decode phase (first token excluded; best of the
rounds, and the median over rounds of each round's speed-up), whether
the token ids equal the run without drafts, drafts accepted / verified, and the
mean tokens a verification step appends.

    python -m benchmarks.spec_decode --speculative-config '{"method": "ngram", "num_speculative_tokens": 4}'
    python -m benchmarks.spec_decode --int4-reference \
        --speculative-config '{"method": "self-int4", "num_speculative_tokens": 4}'
    python -m benchmarks.spec_decode --device cuda --one-engine --dtype bfloat16 \
        --speculative-config '{"method": "ngram", "num_speculative_tokens": 4}'   # add --cuda-graph-mode decode
    python -m benchmarks.fetch_draft_pair   # Qwen2.5-Coder-1.5B-Instruct and its 0.5B draft, 1.6 GB
    python -m benchmarks.spec_decode --workloads code --one-engine \
        --model ~/.cache/tokenmill/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --speculative-config \
        '{"method": "draft_model", "model": "'$HOME'/.cache/tokenmill/models/qwen2.5-0.5b-draft.gguf",
          "quantization": "int4", "num_speculative_tokens": 4}'
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

PARAGRAPHS = [
    "The river runs past the old mill, where the wheel has not turned for forty years. In spring the water rises "
    "over the stones and the village children come down to watch the ducks fight the current.",
    "To reset the router, hold the power button for ten seconds, wait until the light turns orange, then release "
    "it. The router restarts with its factory settings and the default password printed on its label.",
    "Our quarterly report shows revenue up eight percent, driven by the new subscription plan. Costs rose four "
    "percent, mostly from hiring in the support team, and the margin improved by two points.",
    "The meeting is moved to Thursday at three in the afternoon. Please bring the draft budget, the list of open "
    "hiring requests, and any questions about the office move planned for next month.",
]
CODE = [
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n",
    "def find_user(users, name):\n    for user in users:\n        if user['name'] == name:\n            return user\n"
    "    return None\n",
]
GROUNDED = ([f"Repeat the following text exactly:\n\n{p}" for p in PARAGRAPHS]
            + [f"Rewrite the following text, changing only 'the' to 'a' where it fits:\n\n{p}" for p in PARAGRAPHS[:2]]
            + [f"Add a docstring to this Python function and return the whole function:\n\n{c}" for c in CODE])
CODE_EDITS = [
    f"{task}\n\n```python\n{code}```" for task, code in (
        ("Add type hints to this Python function and return the whole function.", CODE[1]),
        ("Rename the variable 'total' to 'running_sum' in this function and return the whole function.", CODE[0]),
        ("Add a docstring to this function and return the whole function.", CODE[1]),
        ("This function fails on an empty list. Fix it and return the whole function.", CODE[0]),
        ("Rewrite this function to raise KeyError instead of returning None, and return the whole function.",
         CODE[1]),
        ("Add a 'values' check that raises TypeError for non-list input, and return the whole function.", CODE[0]),
    )]
OPEN = ["Write a short poem about winter.", "Give three tips for learning a new language.",
        "What is the capital of France, and why is it famous?", "Describe a sunset to someone who cannot see.",
        "Why is the sky blue?", "Suggest a name for a bakery and explain it.",
        "List four uses of a paper clip.", "What makes a good friend?"]

WORKLOADS = {"grounded": GROUNDED, "open": OPEN, "code": CODE_EDITS}


def run(engine: LLMEngine, prompts: list[list[int]], max_tokens: int, drafts: bool = True,
        temperature: float = 0.0) -> dict:
    """Each prompt alone; decode tok/s over the steps after its first token.
    ``drafts=False``: with the engine's speculative decoding switched off.
    ``temperature`` > 0: prompt i sampled with seed i."""
    saved = engine.core.drafting
    if not drafts:
        engine.core.drafting = None
    try:
        return _run(engine, prompts, max_tokens, temperature)
    finally:
        engine.core.drafting = saved


def _run(engine: LLMEngine, prompts: list[list[int]], max_tokens: int, temperature: float) -> dict:
    outputs, decode_tokens, decode_seconds = [], 0, 0.0
    for i, prompt in enumerate(prompts):
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=i if temperature else None)
        engine.add_request(None, prompt, params)
        tokens, t_first = [], None
        while engine.has_unfinished_requests():
            for out in engine.step():
                tokens += out.new_token_ids
                if t_first is None and tokens:
                    t_first, first_tokens = time.perf_counter(), len(tokens)
        outputs.append(tokens)
        decode_tokens += len(tokens) - first_tokens
        decode_seconds += time.perf_counter() - t_first
    return {"outputs": outputs, "decode_tok_s": decode_tokens / decode_seconds}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speculative-config", required=True, help="the JSON given to --speculative-config")
    ap.add_argument("--model", help="GGUF file or HF directory (default: the embedded model)")
    ap.add_argument("--quantization", choices=["int8", "int4"], help="the served model's weights, both runs")
    ap.add_argument("--workloads", default="grounded,open", help=f"comma-separated, from {sorted(WORKLOADS)}")
    ap.add_argument("--one-engine", action="store_true",
                    help="time plain decoding on the speculative engine with its drafting switched off, instead "
                         "of on a second engine (a model too large to load twice; the same kernels either way)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--device", default="auto", help="cpu | cuda | auto (both engines)")
    ap.add_argument("--cuda-graph-mode", choices=("full", "decode"), default="full",
                    help="CUDA, both engines: decode runs draft verifications eagerly (full: they replay graphs)")
    ap.add_argument("--linear-backend", default="auto",
                    help="both engines' linears (pin it for large models: auto picks by free memory, which the "
                         "first engine loaded has more of)")
    ap.add_argument("--int4-activations", default="auto", choices=("auto", "float", "int8"),
                    help="EngineConfig.int4_activations, both engines (self-int4's twin: auto picks per CPU)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="alternate plain and speculative runs this many times")
    ap.add_argument("--int4-reference", action="store_true",
                    help="also time the model with --quantization int4 alone (what self-int4 drafts with)")
    ap.add_argument("--json", help="also write the figures to this file")
    return ap.parse_args(argv)


def measure_workload(name: str, prompts: list[list[int]], plain: LLMEngine, spec: LLMEngine,
                     int4: LLMEngine | None, args: argparse.Namespace) -> dict:
    """``args.rounds`` alternating rounds of plain, speculative (and int4) runs of
    ``prompts``; prints one line and returns the workload's figures."""
    rates = {"plain": [], "spec": []} | ({"int4": []} if int4 else {})
    before = spec.stats()
    for _ in range(args.rounds):
        base, fast = run(plain, prompts, args.max_tokens, drafts=False), run(spec, prompts, args.max_tokens)
        rates["plain"].append(base["decode_tok_s"])
        rates["spec"].append(fast["decode_tok_s"])
        if int4:
            rates["int4"].append(run(int4, prompts, args.max_tokens)["decode_tok_s"])
    after = spec.stats()
    drafts = after.spec_draft_tokens - before.spec_draft_tokens
    accepted = after.spec_accepted_tokens - before.spec_accepted_tokens
    steps = after.spec_verifications - before.spec_verifications
    best = {k: max(v) for k, v in rates.items()}
    # Each round's spec run over the plain run just before it (the two nearest in time, where this
    # VM's speed drifts by tens of percent over minutes), the median over rounds.
    round_ratios = [s / p for s, p in zip(rates["spec"], rates["plain"])]
    r = {"requests": len(prompts), "plain_decode_tok_s": rates["plain"],
         "spec_decode_tok_s": rates["spec"], "speedup_of_best": best["spec"] / best["plain"],
         "speedup_median_of_rounds": statistics.median(round_ratios),
         "identical_outputs": base["outputs"] == fast["outputs"],
         "acceptance_rate": accepted / drafts if drafts else None,
         "mean_tokens_per_verification": (accepted + steps) / steps if steps else None}
    if int4:
        r["int4_decode_tok_s"] = rates["int4"]
    print(f"{name:9} plain {best['plain']:6.1f} tok/s  spec {best['spec']:6.1f} tok/s  "
          f"{r['speedup_of_best']:.2f}x (median of rounds {r['speedup_median_of_rounds']:.2f}x)  "
          f"identical outputs: {r['identical_outputs']}  "
          f"acceptance {r['acceptance_rate'] or 0:.0%}  tokens/verification "
          f"{r['mean_tokens_per_verification'] or 0:.2f}"
          + (f"  (int4 alone {best['int4']:6.1f} tok/s)" if int4 else ""), flush=True)
    return r


def main(argv=None) -> None:
    args = parse_args(argv)
    workloads = args.workloads.split(",")
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        raise SystemExit(f"--workloads: unknown {unknown}; choose from {sorted(WORKLOADS)}")
    common = dict(model=args.model, dtype=args.dtype, quantization=args.quantization,
                  linear_backend=args.linear_backend, device=args.device, cuda_graph_mode=args.cuda_graph_mode,
                  int4_activations=args.int4_activations)
    spec = LLMEngine(EngineConfig(**common, speculative_config=args.speculative_config))
    plain = spec if args.one_engine else LLMEngine(EngineConfig(**common))
    tok = plain.tokenizer

    def chat(text):
        return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]), add_special_tokens=False)

    report = {"model": plain.core.config.served_model_name, "quantization": args.quantization,
              "int4_activations": args.int4_activations,
              "linear_backend": spec.core.linear_backend, "one_engine": args.one_engine,
              "speculative_config": json.loads(args.speculative_config), "dtype": str(plain.core.dtype),
              "max_tokens": args.max_tokens, "device": str(plain.core.device),
              "decode_graphs": plain.core.runner.decode_graphs is not None,
              "cuda_graph_mode": args.cuda_graph_mode}
    run(plain, [chat(OPEN[0])], 8, drafts=False)  # warm both engines up
    run(spec, [chat(OPEN[0])], 8)
    int4 = LLMEngine(EngineConfig(**common | {"quantization": "int4"})) if args.int4_reference else None
    for name in workloads:
        report[name] = measure_workload(name, [chat(t) for t in WORKLOADS[name]], plain, spec, int4, args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
