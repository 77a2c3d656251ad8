"""Speculative decoding of sampled requests: exact match vs the rejection rule.

At temperature > 0 a greedy draft is kept only where the target's own draw
equals it; a draft drawn from the draft model's distribution is kept with
probability min(1, p/q) (engine/rejection.py). One speculative engine (a
large model loads once) runs each workload three ways per round,
alternating: drafting off (plain), ``exact_match`` and ``rejection_sampler``
(the drafter's sampling switched between the two; the rule follows the
drafts). Each drafting run starts its adaptive policy afresh, so it learns
its own acceptance, as a server with that setting would. Requests are seeded
(prompt i with seed i), batch 1 as MLPerf's SingleStream runs.
Prints decode tok/s (first token excluded; best of the rounds), drafts
accepted / verified and tokens appended per verification.

    python -m benchmarks.spec_sampling --temperatures 0.7,1.0 \\
        --speculative-config '{"method": "self-int4", "num_speculative_tokens": 4}'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.spec_decode import WORKLOADS, run
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.spec.adaptive import DraftPolicy

MODES = ("plain", "exact_match", "rejection_sampler")


def measure(engine: LLMEngine, prompts: list[list[int]], mode: str, max_tokens: int, temperature: float) -> dict:
    """One run of every prompt in ``mode``: tok/s and its drafting counters."""
    drafting = engine.core.drafting
    drafting.proposer.sampler.sample = mode == "rejection_sampler"
    if drafting.policy is not None:
        drafting.policy = DraftPolicy(drafting.proposer.drafts_cost_passes)
    before = engine.stats()
    result = run(engine, prompts, max_tokens, drafts=mode != "plain", temperature=temperature)
    after = engine.stats()
    drafts = after.spec_draft_tokens - before.spec_draft_tokens
    accepted = after.spec_accepted_tokens - before.spec_accepted_tokens
    steps = after.spec_verifications - before.spec_verifications
    return {"decode_tok_s": result["decode_tok_s"], "drafts": drafts, "accepted": accepted, "verifications": steps}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speculative-config", required=True,
                    help="a model drafter's JSON (self-int4, draft_model or mtp); this script switches its "
                         "acceptance method")
    ap.add_argument("--model", help="GGUF file or HF directory (default: the embedded model)")
    ap.add_argument("--temperatures", default="0.7,1.0", help="comma-separated, each > 0")
    ap.add_argument("--workloads", default="open", help=f"comma-separated, from {sorted(WORKLOADS)}")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2, help="alternate the three modes this many times")
    ap.add_argument("--json", help="also write the figures to this file")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    if any(t <= 0 for t in temperatures):
        raise SystemExit("--temperatures: each must be > 0 (greedy requests are checked by exact match always)")
    spec = json.loads(args.speculative_config)
    engine = LLMEngine(EngineConfig(model=args.model, dtype=args.dtype, speculative_config=spec))
    if not hasattr(engine.core.drafting.proposer, "sampler"):
        raise SystemExit("--speculative-config: needs a model drafter (self-int4, draft_model or mtp)")
    tok = engine.tokenizer

    def chat(text):
        return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]), add_special_tokens=False)

    report = {"model": engine.core.config.served_model_name, "dtype": str(engine.core.dtype),
              "speculative_config": spec, "max_tokens": args.max_tokens, "runs": []}
    run(engine, [chat(WORKLOADS["open"][0])], 8, temperature=1.0)  # warm-up
    for name in args.workloads.split(","):
        prompts = [chat(t) for t in WORKLOADS[name]]
        for temperature in temperatures:
            runs = {mode: [] for mode in MODES}
            for _ in range(args.rounds):
                for mode in MODES:
                    runs[mode].append(measure(engine, prompts, mode, args.max_tokens, temperature))
            row = {"workload": name, "temperature": temperature}
            for mode, results in runs.items():
                drafts, accepted = sum(r["drafts"] for r in results), sum(r["accepted"] for r in results)
                steps = sum(r["verifications"] for r in results)
                row[mode] = {"decode_tok_s": [r["decode_tok_s"] for r in results],
                             "acceptance_rate": accepted / drafts if drafts else None,
                             "tokens_per_verification": (accepted + steps) / steps if steps else None}
            report["runs"].append(row)
            best = {mode: max(row[mode]["decode_tok_s"]) for mode in MODES}
            print(f"{name:8} T={temperature:<4} plain {best['plain']:6.1f} tok/s | " + " | ".join(
                f"{mode} {best[mode]:6.1f} tok/s ({best[mode] / best['plain']:.2f}x), acceptance "
                f"{row[mode]['acceptance_rate'] or 0:.0%}, {row[mode]['tokens_per_verification'] or 0:.2f} "
                f"tokens/verification" for mode in MODES[1:]), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
