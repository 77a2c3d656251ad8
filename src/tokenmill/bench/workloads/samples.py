"""Samples tokenized exactly as the server tokenizes their requests.

Chat samples: the chat template rendered with the generation prompt, encoded
without special tokens (the template writes its own BOS), as the chat route
does. Text samples: ``encode(prompt)`` with its defaults, as the completions
route does. So ``prompt_token_ids`` is what a server sees on either route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenmill.bench.workload import Sample

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer

# OpenAI roles; 'developer' is the newer name of 'system' (the server maps it the same way).
OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")


def chat_sample(index: int, tokenizer: Tokenizer, messages: list[dict], max_tokens: int, *,
                reference: str | None = None, group: str | None = None) -> Sample:
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    return Sample(index=index, prompt=prompt, prompt_token_ids=tuple(ids), max_tokens=max_tokens,
                  messages=tuple(messages), reference=reference, group=group)


def text_sample(index: int, tokenizer: Tokenizer, prompt: str, max_tokens: int, *,
                reference: str | None = None, group: str | None = None) -> Sample:
    return Sample(index=index, prompt=prompt, prompt_token_ids=tuple(tokenizer.encode(prompt)),
                  max_tokens=max_tokens, reference=reference, group=group)


def fits(sample: Sample, max_model_len: int | None) -> bool:
    """Whether prompt + max_tokens fit the context (the engine's admission rule)."""
    return max_model_len is None or len(sample.prompt_token_ids) + sample.max_tokens <= max_model_len


def check_fits(samples: list[Sample], max_model_len: int | None, field: str) -> None:
    """ValueError naming ``field`` (the knob to lower) for the first sample that does not fit."""
    for s in samples:
        if not fits(s, max_model_len):
            raise ValueError(f"{field}: sample {s.index} needs {len(s.prompt_token_ids)} prompt + {s.max_tokens} "
                             f"output tokens, more than max_model_len {max_model_len}")


def openai_message(value, where: str) -> dict:
    """One OpenAI chat message as the {'role', 'content'} dict a chat template takes:
    text content parts joined, 'developer' as 'system', null content as ''."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a message object, got {type(value).__name__}")
    role = value.get("role")
    if role not in OPENAI_ROLES:
        raise ValueError(f"{where}.role: must be one of {OPENAI_ROLES}, got {role!r}")
    content = value.get("content")
    if isinstance(content, list):
        content = "".join(_text_part(part, f"{where}.content[{i}]") for i, part in enumerate(content))
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise ValueError(f"{where}.content: must be a string or a list of text parts, got {type(content).__name__}")
    message = {"role": "system" if role == "developer" else role, "content": content}
    if isinstance(value.get("name"), str):
        message["name"] = value["name"]
    return message


def _text_part(part, where: str) -> str:
    if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
        raise ValueError(f"{where}: only {{\"type\": \"text\", \"text\": str}} parts are supported")
    return part["text"]


def positive_int(field: str, value) -> None:
    """ValueError naming ``field`` unless value is an int >= 1 (bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field}: must be an integer >= 1, got {value!r}")


def require_int(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: must be an integer, got {value!r}")
