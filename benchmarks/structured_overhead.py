"""What a JSON schema costs per output token: TPOT with and without one.

B requests decode together in the in-process engine, every one constrained by
a JSON schema (an array of records long enough that the grammar never ends
before ``--max-tokens``) or none (``ignore_eos``, the same length). TPOT per
request = (last token time - first token time) / (tokens - 1); the table shows
the median over requests, the median over rounds, plain and constrained rounds
alternating so drift hits both alike.

    .venv/bin/python -m benchmarks.structured_overhead --batch-sizes 1,32
"""

from __future__ import annotations

import argparse
import statistics
import time

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams
from tokenmill.structured.params import StructuredOutputsParams

RECORDS = {
    "type": "array", "minItems": 200,
    "items": {"type": "object", "additionalProperties": False, "required": ["id", "city", "temp", "rain"],
              "properties": {"id": {"type": "integer"}, "city": {"type": "string", "maxLength": 12},
                             "temp": {"type": "number"}, "rain": {"type": "boolean"}}},
}
PROMPT = "List weather records for European cities as JSON: id, city, temperature in Celsius, rain."


def run_round(engine: LLMEngine, batch: int, max_tokens: int, constrained: bool) -> float:
    """Median TPOT (ms) over the batch's requests."""
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": PROMPT}]), add_special_tokens=False)
    structured = StructuredOutputsParams(json=RECORDS) if constrained else None
    times: dict[str, list[float]] = {}
    for i in range(batch):
        params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=i, ignore_eos=not constrained,
                                structured=structured)
        times[engine.add_request(None, prompt, params)] = []
    while engine.has_unfinished_requests():
        outputs = engine.step()
        now = time.perf_counter()
        for out in outputs:
            times[out.request_id] += [now] * len(out.new_token_ids)
    tpots = [(t[-1] - t[0]) / (len(t) - 1) * 1e3 for t in times.values() if len(t) > 1]
    if any(len(t) != max_tokens for t in times.values()):
        raise RuntimeError("a request ended before max_tokens: the comparison would not be like for like")
    return statistics.median(tpots)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-sizes", default="1,32")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args(argv)
    engine = LLMEngine(EngineConfig(dtype=args.dtype))
    run_round(engine, 2, 8, True)  # warm-up: kernels, the grammar engine's vocabulary
    print(f"TPOT ms (median over requests, then over {args.rounds} alternating rounds), "
          f"{args.max_tokens} tokens per request")
    print(f"{'batch':>5} {'plain':>8} {'json schema':>11} {'overhead':>9}")
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        plain, constrained = [], []
        for _ in range(args.rounds):
            plain.append(run_round(engine, batch, args.max_tokens, False))
            constrained.append(run_round(engine, batch, args.max_tokens, True))
        p, c = statistics.median(plain), statistics.median(constrained)
        print(f"{batch:>5} {p:>8.2f} {c:>11.2f} {(c / p - 1) * 100:>8.1f}%", flush=True)


if __name__ == "__main__":
    main()
