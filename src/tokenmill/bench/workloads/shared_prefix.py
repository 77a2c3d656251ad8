"""Shared-prefix workload: the prefix-caching and KV-aware-routing benchmark.

``num_prefixes`` long system prompts, each followed by ``questions_per_prefix``
distinct user questions, in chat form (messages = [system, user]); a sample's
``group`` names its system prompt. Every sample of a group shares the rendered
template up to the end of the system turn: at least ``prefix_len`` tokens.

Order: round-robin over the prefixes (prefix 0's first question, prefix 1's
first, ..., prefix 0's second, ...), so consecutive samples never share a
prefix and a prefix recurs every ``num_prefixes`` samples. A cache (or a
router) that cannot hold that many prefixes misses; one that can hits on all
but each prefix's first sample. Issued in this order in accuracy mode;
LoadGen's performance mode draws samples in its own seeded order.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tokenmill.bench.workload import Workload
from tokenmill.bench.workloads.samples import chat_sample, check_fits, positive_int, require_int
from tokenmill.bench.workloads.text import WordSource

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer


@dataclass(frozen=True)
class SharedPrefixSpec:
    num_prefixes: int = 8
    questions_per_prefix: int = 16
    prefix_len: int = 256
    """System prompt length in tokens (the text alone, without the template's own tokens)."""
    question_len: int = 32
    """User question length in tokens."""
    output_len: int = 64
    """max_tokens of every sample."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_prefixes", "questions_per_prefix", "prefix_len", "question_len", "output_len"):
            positive_int(name, getattr(self, name))
        require_int("seed", self.seed)


def build_shared_prefix(tokenizer: Tokenizer, spec: SharedPrefixSpec = SharedPrefixSpec(),
                        max_model_len: int | None = None) -> Workload:
    words = WordSource.from_tokenizer(tokenizer)
    rng = random.Random(f"{spec.seed}/shared-prefix")
    systems = [words.text(rng, spec.prefix_len)[0] for _ in range(spec.num_prefixes)]
    questions = [[words.text(rng, spec.question_len)[0] for _ in range(spec.questions_per_prefix)]
                 for _ in range(spec.num_prefixes)]
    samples = []
    for q in range(spec.questions_per_prefix):
        for p in range(spec.num_prefixes):
            messages = [{"role": "system", "content": systems[p]}, {"role": "user", "content": questions[p][q]}]
            samples.append(chat_sample(len(samples), tokenizer, messages, spec.output_len, group=f"prefix-{p}"))
    check_fits(samples, max_model_len, "prefix_len")
    description = (f"{spec.num_prefixes} system prompts of {spec.prefix_len} tokens x {spec.questions_per_prefix} "
                   f"questions of {spec.question_len} tokens, output {spec.output_len}, round-robin, seed {spec.seed}")
    return Workload("shared-prefix", samples, description, params={"workload": "shared-prefix", **asdict(spec)})
