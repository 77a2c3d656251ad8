"""JSON Lines file of OpenAI requests as a workload, one sample per line.

A line is a chat request ``{"messages": [...], "max_completion_tokens" | "max_tokens": n}``
or a completions request ``{"prompt": "...", "max_tokens": n}``. Other request
fields (model, temperature, stream, ...) are ignored: the benchmark sends its
own (greedy, ignore_eos). A line without a token limit gets ``default_max_tokens``.
Samples keep file order; ``num_samples`` takes the first N requests. A bad
line, or one whose prompt + max_tokens exceed max_model_len, is a ValueError
naming file:line: a request file is written on purpose, so nothing is dropped
silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenmill.bench.workload import Sample, Workload
from tokenmill.bench.workloads.records import read_records
from tokenmill.bench.workloads.samples import chat_sample, fits, openai_message, positive_int, text_sample

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer

# OpenAI: max_completion_tokens supersedes the older max_tokens.
_LIMIT_KEYS = ("max_completion_tokens", "max_tokens")


@dataclass(frozen=True)
class JsonlSpec:
    path: str
    num_samples: int | None = None
    """At most this many requests, from the top; None: every line."""
    default_max_tokens: int = 128
    """max_tokens of a request that sets neither limit."""

    def __post_init__(self) -> None:
        if self.num_samples is not None:
            positive_int("num_samples", self.num_samples)
        positive_int("default_max_tokens", self.default_max_tokens)


def load_jsonl(tokenizer: Tokenizer, spec: JsonlSpec, max_model_len: int | None = None) -> Workload:
    samples: list[Sample] = []
    for where, record in read_records(spec.path):
        if spec.num_samples is not None and len(samples) == spec.num_samples:
            break
        sample = _sample(len(samples), tokenizer, record, where, spec.default_max_tokens)
        if not fits(sample, max_model_len):
            raise ValueError(f"{where}: {len(sample.prompt_token_ids)} prompt + {sample.max_tokens} output tokens "
                             f"exceed max_model_len {max_model_len}")
        samples.append(sample)
    if not samples:
        raise ValueError(f"dataset: {spec.path} holds no requests")
    name = Path(spec.path).name
    chats = sum(s.messages is not None for s in samples)
    description = (f"{len(samples)} requests from {name} ({chats} chat, {len(samples) - chats} completions), "
                   f"file order")
    params = {"workload": "jsonl", "dataset": str(spec.path), "num_samples": spec.num_samples,
              "default_max_tokens": spec.default_max_tokens}
    return Workload(f"jsonl:{name}", samples, description, params)


def _sample(index: int, tokenizer: Tokenizer, record, where: str, default_max_tokens: int) -> Sample:
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if ("messages" in record) == ("prompt" in record):
        raise ValueError(f'{where}: expected exactly one of "messages" (chat) or "prompt" (completions)')
    max_tokens = _max_tokens(record, where, default_max_tokens)
    if "prompt" in record:
        prompt = record["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{where}: prompt: must be a non-empty string, got {prompt!r:.60}")
        return text_sample(index, tokenizer, prompt, max_tokens)
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: messages: must be a non-empty list")
    chat = [openai_message(m, f"{where}: messages[{i}]") for i, m in enumerate(messages)]
    try:
        return chat_sample(index, tokenizer, chat, max_tokens)
    except ValueError as exc:  # the chat template refused the conversation
        raise ValueError(f"{where}: {exc}") from exc


def _max_tokens(record: dict, where: str, default: int) -> int:
    for key in _LIMIT_KEYS:
        value = record.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {key}: must be an integer >= 1, got {value!r}")
        return value
    return default
