"""ShareGPT conversations as a chat workload (the dataset vLLM's and SGLang's
serving benchmarks use).

The file is a JSON list, or JSON Lines, of ``{"conversations": [turn, ...]}``;
a turn is ``{"from": "human" | "gpt" | "system", "value": str}`` or
``{"role": "user" | "assistant" | "system", "content": str}``. Each
conversation gives at most one sample: its first human turn (after the system
turn right before it, if any) is the prompt, the gpt turn right after it is
the reference, and the reference's token count, capped at ``max_output_len``,
is max_tokens -- so outputs are as long as real answers were.

Conversations without that pair, with empty text, or whose prompt +
max_tokens exceed max_model_len are skipped (a dump holds many). A file
whose structure is wrong is a ValueError naming the record. The subsample is
seeded: conversations are visited in a seeded shuffle until ``num_samples``
are taken, so only those are tokenized.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenmill.bench.workload import Sample, Workload
from tokenmill.bench.workloads.records import read_records
from tokenmill.bench.workloads.samples import chat_sample, fits, positive_int, require_int

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer

# Speaker names found in ShareGPT-style dumps -> chat roles. 'other' turns
# (tool output) are kept in place but never form the prompt/reference pair.
_ROLES = {"human": "user", "user": "user",
          "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
          "bing": "assistant", "model": "assistant",
          "system": "system",
          "tool": "other", "function": "other", "observation": "other"}


@dataclass(frozen=True)
class ShareGPTSpec:
    path: str
    num_samples: int | None = 256
    """At most this many conversations; None: every usable one."""
    max_output_len: int = 1024
    """Cap on max_tokens (a reference longer than this is still the reference)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_samples is not None:
            positive_int("num_samples", self.num_samples)
        positive_int("max_output_len", self.max_output_len)
        require_int("seed", self.seed)


@dataclass(frozen=True)
class _Pair:
    messages: list[dict]
    reference: str


def load_sharegpt(tokenizer: Tokenizer, spec: ShareGPTSpec, max_model_len: int | None = None) -> Workload:
    records = list(read_records(spec.path, allow_json_list=True))
    pairs = [pair for where, record in records if (pair := _first_exchange(_turns(record, where)))]
    order = list(range(len(pairs)))
    random.Random(f"{spec.seed}/sharegpt").shuffle(order)
    samples: list[Sample] = []
    too_long = 0
    for i in order:
        if spec.num_samples is not None and len(samples) == spec.num_samples:
            break
        pair = pairs[i]
        max_tokens = min(len(tokenizer.encode(pair.reference, add_special_tokens=False)), spec.max_output_len)
        # max_tokens >= 1: _first_exchange keeps only references with non-blank text.
        sample = chat_sample(len(samples), tokenizer, pair.messages, max_tokens, reference=pair.reference)
        if fits(sample, max_model_len):
            samples.append(sample)
        else:
            too_long += 1
    if not samples:
        fitting = f", fitting max_model_len {max_model_len}" if max_model_len is not None else ""
        raise ValueError(f"dataset: {spec.path}: no usable conversation among {len(records)} (each needs a human "
                         f"turn followed by a gpt turn, both non-empty{fitting})")
    name = Path(spec.path).name
    description = (f"{len(samples)} of {len(records)} conversations from {name} (first human turn -> prompt, "
                   f"next gpt turn -> reference, max_tokens <= {spec.max_output_len}), seed {spec.seed}")
    params = {"workload": "sharegpt", "dataset": str(spec.path), "num_samples": spec.num_samples,
              "max_output_len": spec.max_output_len, "seed": spec.seed, "conversations": len(records),
              "with_exchange": len(pairs), "skipped_too_long": too_long}
    return Workload(f"sharegpt:{name}", samples, description, params)


def _turns(record, where: str) -> list[dict]:
    """The conversation as {'role', 'content'} dicts; ValueError for a malformed record."""
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        raise ValueError(f'{where}: expected an object with a "conversations" list')
    turns = []
    for i, turn in enumerate(record["conversations"]):
        if not isinstance(turn, dict):
            raise ValueError(f"{where}: conversations[{i}]: expected an object, got {type(turn).__name__}")
        speaker_key, text_key = ("from", "value") if "from" in turn else ("role", "content")
        speaker, text = turn.get(speaker_key), turn.get(text_key)
        if speaker not in _ROLES:
            raise ValueError(f"{where}: conversations[{i}]: unknown speaker {speaker!r} "
                             f"(expected one of {', '.join(_ROLES)})")
        if not isinstance(text, str):
            raise ValueError(f"{where}: conversations[{i}]: the text must be a string, got {type(text).__name__}")
        turns.append({"role": _ROLES[speaker], "content": text})
    return turns


def _first_exchange(turns: list[dict]) -> _Pair | None:
    """The first user turn (with the system turn right before it) and the reply after it."""
    first = next((i for i, t in enumerate(turns) if t["role"] == "user"), None)
    if first is None or first + 1 >= len(turns):
        return None
    user, reply = turns[first], turns[first + 1]
    if reply["role"] != "assistant" or not user["content"].strip() or not reply["content"].strip():
        return None
    system = [turns[first - 1]] if first > 0 and turns[first - 1]["role"] == "system" else []
    return _Pair(messages=[*system, user], reference=reply["content"])
