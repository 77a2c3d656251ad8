"""What a benchmark issues: samples (one prompt each) grouped into a workload.

A Sample carries both forms of its prompt so that one workload runs unchanged
against the in-process engine (token ids), an OpenAI chat route (messages) and
an OpenAI completions route (text).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    index: int
    """Position in the workload; LoadGen's sample index."""
    prompt: str
    """Text for /v1/completions. For chat samples: the chat template rendered
    with the generation prompt, so both routes see the same tokens."""
    prompt_token_ids: tuple[int, ...]
    """The prompt as the model's tokenizer encodes it (what the engine is given)."""
    max_tokens: int
    """Output tokens asked for; benchmarks send ignore_eos so this many come back."""
    messages: tuple[dict, ...] | None = None
    """Chat form (OpenAI messages) for /v1/chat/completions; None: a text prompt,
    sent to the chat route as one user message."""
    reference: str | None = None
    """Expected answer, when the workload has one (accuracy mode scores against it)."""
    group: str | None = None
    """Shared-prefix group or conversation id (for prefix-cache analysis)."""


@dataclass
class Workload:
    name: str
    """Short label, e.g. 'synthetic', 'shared-prefix', 'sharegpt:file.json'."""
    samples: list[Sample]
    description: str = ""
    """One line on how it was made (seed, distributions, source file)."""
    params: dict = field(default_factory=dict)
    """The knobs it was built with, for the results file."""

    def stats(self) -> dict:
        """Token counts of the prompts and requested outputs."""
        ins = [len(s.prompt_token_ids) for s in self.samples]
        outs = [s.max_tokens for s in self.samples]
        return {
            "num_samples": len(self.samples),
            "input_tokens_mean": statistics.fmean(ins) if ins else 0.0,
            "input_tokens_max": max(ins, default=0),
            "output_tokens_mean": statistics.fmean(outs) if outs else 0.0,
            "output_tokens_max": max(outs, default=0),
        }
