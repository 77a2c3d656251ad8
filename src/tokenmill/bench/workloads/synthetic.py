"""Synthetic workload: seeded random-word text prompts of drawn token lengths.

Prompts are text (messages None): the completions route sends them as they
are, the chat route as one user message. ``prompt_token_ids`` is the prompt
re-encoded as a server encodes it, and its length is the drawn input length.
Input lengths, output lengths and text come from three separate seeded
streams, so changing the output distribution keeps the same prompts.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from tokenmill.bench.workload import Sample, Workload
from tokenmill.bench.workloads.lengths import LengthDist
from tokenmill.bench.workloads.samples import check_fits, positive_int, require_int
from tokenmill.bench.workloads.text import WordSource

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer


@dataclass(frozen=True)
class SyntheticSpec:
    """The defaults are ``tokenmill bench``'s workload when no workload flag is
    given, sized for the embedded SmolLM2-135M on a 2-core CPU: 128-token
    prompts are a short chat turn (one prefill ~0.1-0.3 s there, which the
    smollm2-cpu preset's TTFT limit assumes) and 128 output tokens make decode,
    which is what a CPU serves slowly, the larger share of the work. Uniform
    +-50% mixes lengths so continuous batching meets uneven requests. 256
    samples give LoadGen enough distinct prompts that a server run's repeats
    are not mostly cache hits, while an offline pass over all of them (~33k
    prompt and ~33k output tokens) takes minutes, not hours, on that CPU."""

    num_samples: int = 256
    input_len: int = 128
    """Mean prompt length in tokens, as the server counts them (BOS included)."""
    output_len: int = 128
    """Mean max_tokens."""
    length_dist: str = "uniform"
    """Shape of both length distributions (see workloads.lengths.LENGTH_DISTS)."""
    range_ratio: float = 0.5
    """Spread of both distributions (uniform: +-50% of the mean)."""
    seed: int = 0

    def __post_init__(self) -> None:
        positive_int("num_samples", self.num_samples)
        require_int("seed", self.seed)
        _ = (self.input_dist, self.output_dist)  # validates both lengths now, not at first use

    @property
    def input_dist(self) -> LengthDist:
        return LengthDist("input_len", self.input_len, self.length_dist, self.range_ratio)

    @property
    def output_dist(self) -> LengthDist:
        return LengthDist("output_len", self.output_len, self.length_dist, self.range_ratio)


def build_synthetic(tokenizer: Tokenizer, spec: SyntheticSpec = SyntheticSpec(),
                    max_model_len: int | None = None) -> Workload:
    words = WordSource.from_tokenizer(tokenizer)
    in_rng, out_rng, text_rng = (random.Random(f"{spec.seed}/{stream}") for stream in ("input", "output", "text"))
    ins, outs = spec.input_dist, spec.output_dist
    samples = []
    for i in range(spec.num_samples):
        text, ids = words.text(text_rng, ins.draw(in_rng), add_special_tokens=True)
        samples.append(Sample(index=i, prompt=text, prompt_token_ids=tuple(ids), max_tokens=outs.draw(out_rng)))
    check_fits(samples, max_model_len, "input_len")
    description = (f"{spec.num_samples} random-word text prompts, input {ins.describe()} tokens, "
                   f"output {outs.describe()} tokens, seed {spec.seed}")
    return Workload("synthetic", samples, description, params={"workload": "synthetic", **asdict(spec)})
