"""Response schemas of the OpenAI-compatible API (what the openai SDK parses)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from tokenmill.outputs import RequestOutput


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails | None = None
    """Set when the server splits reasoning out (--reasoning-parser)."""

    def with_reasoning(self, counts: list[int | None]) -> Usage:
        """These counts plus each choice's reasoning tokens (None: not counted)."""
        if any(c is not None for c in counts):
            self.completion_tokens_details = CompletionTokensDetails(reasoning_tokens=sum(c or 0 for c in counts))
        return self

    @classmethod
    def of_choices(cls, lasts: list[RequestOutput], n: int) -> Usage:
        """Counts of an answer whose choices ended with ``lasts`` (index order,
        ``n`` samples per prompt; an output's counts are running totals):
        completion tokens of every choice, but each prompt once, as OpenAI
        bills it; cached tokens are those of each prompt's sample 0 (its later
        samples reuse its prefill by design)."""
        heads = lasts[::n]
        prompt = sum(o.num_prompt_tokens for o in heads)
        completion = sum(o.num_output_tokens for o in lasts)
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                   prompt_tokens_details=PromptTokensDetails(cached_tokens=sum(o.num_cached_tokens for o in heads)))


# ---- chat ---------------------------------------------------------------------------

class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob]


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = None
    """The thinking part (--reasoning-parser); None without a parser."""
    tool_calls: list[dict] | None = None
    """[{"id", "type": "function", "function": {"name", "arguments": JSON text}}] when the model called tools."""


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: dict
    """Some of {"role", "content", "reasoning_content", "tool_calls": [...]}; {} on a bare finish chunk."""
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


# ---- completions ----------------------------------------------------------------------

class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    """None for an echoed prompt's first token (nothing precedes it), as OpenAI does."""
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class CompletionResponse(BaseModel):
    """Both the full response and (with ``usage`` None) one streamed chunk."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


# ---- models ---------------------------------------------------------------------------

class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tokenmill"
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
