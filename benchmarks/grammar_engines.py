"""Which grammar engine for structured outputs: llguidance vs xgrammar, measured.

For the embedded model's vocabulary, the same JSON schemas in both engines:
tokenizer set-up time, grammar compile time (first and cached), matcher creation
(per request), and the
per-token cost along a valid answer (mask fill + advance), the part that sits
on every decode step of a constrained request. Prints one table; medians of
``--rounds`` rounds.

    .venv/bin/python -m benchmarks.grammar_engines

xgrammar is not a tokenmill dependency (it pulls triton and transformers); to
include it: ``.venv/bin/pip install --no-deps xgrammar apache-tvm-ffi``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from tokenmill.model.embedded import embedded_gguf_path
from tokenmill.model.tokenizer import load_tokenizer

SCHEMAS = {
    "object-3-fields": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                       "email": {"type": "string", "format": "email"}},
        "required": ["name", "age", "email"], "additionalProperties": False,
    },
    "nested-array": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "properties": {"day": {"type": "string", "enum": ["mon", "tue", "wed", "thu", "fri"]},
                               "high": {"type": "number"}, "low": {"type": "number"},
                               "rain": {"type": "boolean"}},
                "required": ["day", "high", "low", "rain"], "additionalProperties": False}},
        },
        "required": ["city", "days"], "additionalProperties": False,
    },
}
ANSWERS = {
    "object-3-fields": {"name": "Ada Lovelace", "age": 36, "email": "ada@example.org"},
    "nested-array": {"city": "Paris", "days": [{"day": d, "high": 21.5, "low": 12.0, "rain": i % 2 == 0}
                                              for i, d in enumerate(["mon", "tue", "wed", "thu", "fri"])]},
}


class LLGuidanceEngine:
    name = "llguidance"

    def __init__(self, tok):
        import llguidance
        self.llg = llguidance
        self.tokenizer = llguidance.LLTokenizer(tok._backend.to_str(), n_vocab=tok.vocab_size,
                                                eos_token=tok.eos_token_id)
        self.cache: dict[str, str] = {}

    def compile(self, schema: str):
        grammar = self.cache.get(schema)
        if grammar is None:
            grammar = self.cache[schema] = self.llg.LLMatcher.grammar_from_json_schema(schema)
        return grammar

    def matcher(self, grammar):
        return self.llg.LLMatcher(self.tokenizer, grammar)

    def run(self, m, tokens: list[int], mask: torch.Tensor) -> None:
        for t in tokens:
            m.unsafe_compute_mask_ptr(mask.data_ptr(), mask.numel() * 4)
            if not m.consume_token(t):
                raise RuntimeError(f"llguidance refused token {t}: {m.get_error()}")


class XGrammarEngine:
    name = "xgrammar"

    def __init__(self, tok):
        import xgrammar
        self.xgr = xgrammar
        vocab = tok._backend.get_vocab(with_added_tokens=True)
        encoded = [""] * tok.vocab_size
        for text, i in vocab.items():
            encoded[i] = text
        info = xgrammar.TokenizerInfo(encoded, xgrammar.VocabType.BYTE_LEVEL, vocab_size=tok.vocab_size,
                                      stop_token_ids=[tok.eos_token_id])
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=2)

    def compile(self, schema: str):
        return self.compiler.compile_json_schema(schema)

    def matcher(self, grammar):
        return self.xgr.GrammarMatcher(grammar)

    def run(self, m, tokens: list[int], mask: torch.Tensor) -> None:
        for t in tokens:
            m.fill_next_token_bitmask(mask.view(1, -1))
            if not m.accept_token(t):
                raise RuntimeError(f"xgrammar refused token {t}")


def _engines(tok, wanted: list[str]):
    classes = {"llguidance": LLGuidanceEngine, "xgrammar": XGrammarEngine}
    for name in wanted:
        start = time.perf_counter()
        try:
            engine = classes[name](tok)
        except ImportError as exc:
            print(f"{name}: not installed ({exc}); skipped")
            continue
        yield engine, time.perf_counter() - start


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="llguidance,xgrammar")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tok = load_tokenizer(embedded_gguf_path())
    mask = torch.zeros((tok.vocab_size + 31) // 32, dtype=torch.int32)
    print(f"vocabulary: {tok.vocab_size} tokens; per-token = mask fill + advance, median of {args.rounds} rounds")
    print(f"{'engine':<11} {'schema':<16} {'setup s':>8} {'compile ms':>10} {'cached ms':>9} {'tokens':>6} "
          f"{'matcher ms':>10} {'us/token':>9}")
    for engine, setup in _engines(tok, args.engines.split(",")):
        for name, schema in SCHEMAS.items():
            text = json.dumps(schema)
            start = time.perf_counter()
            grammar = engine.compile(text)
            compile_ms = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            engine.compile(text)
            cached_ms = (time.perf_counter() - start) * 1e3
            tokens = tok.encode(json.dumps(ANSWERS[name]), add_special_tokens=False) + [tok.eos_token_id]
            times, matcher_ms = [], []
            for _ in range(args.rounds):
                start = time.perf_counter()
                m = engine.matcher(grammar)
                matcher_ms.append((time.perf_counter() - start) * 1e3)
                start = time.perf_counter()
                engine.run(m, tokens, mask)
                times.append((time.perf_counter() - start) / len(tokens) * 1e6)
            print(f"{engine.name:<11} {name:<16} {setup:>8.2f} {compile_ms:>10.1f} {cached_ms:>9.2f} "
                  f"{len(tokens):>6} {statistics.median(matcher_ms):>10.2f} {statistics.median(times):>9.1f}")


if __name__ == "__main__":
    main()
