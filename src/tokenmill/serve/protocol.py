"""Request schemas of the OpenAI-compatible API, and their mapping to SamplingParams.

Models are strict (no "5" -> 5, no true -> 1) so a wrong type is a 400 naming
the field, never a silently different request. Unknown fields are accepted
and ignored (clients such as the openai SDK or LangChain send extras), except
the few in ``UNSUPPORTED`` whose silent omission would change the answer.
Response schemas live in ``responses.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tokenmill.errors import RequestError
from tokenmill.sampling_params import SamplingParams

# Fields that change what the client gets back; ignoring them would be a lie.
UNSUPPORTED = ("tools", "functions", "tool_choice", "function_call", "response_format",
               "logit_bias", "suffix", "best_of", "prediction", "audio", "modalities")


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Strict):
    include_usage: bool = False


class ContentPart(_Strict):
    type: str
    text: str | None = None


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None

    def to_template_dict(self, index: int) -> dict:
        """The plain {"role", "content"} dict a chat template expects."""
        content = self.content
        if isinstance(content, list):
            for part in content:
                if part.type != "text" or part.text is None:
                    raise RequestError(f"messages[{index}].content",
                                       f"only text content parts are supported, got type {part.type!r}")
            content = "".join(part.text for part in content)
        message = {"role": "system" if self.role == "developer" else self.role, "content": content or ""}
        if self.name is not None:
            message["name"] = self.name
        return message


class _GenerationRequest(_Strict):
    """Fields shared by /v1/chat/completions and /v1/completions."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(1 << 63), lt=1 << 64)  # what a torch.Generator accepts
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    user: str | None = None
    # Extensions (vLLM names).
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def requested_max_tokens(self) -> tuple[str, int | None]:
        """(field name, value) of the output-length cap the client asked for."""
        return "max_tokens", self.max_tokens

    def check_supported(self) -> None:
        if self.n is not None and self.n != 1:
            raise RequestError("n", f"only n=1 is supported, got {self.n}")
        for name in UNSUPPORTED:
            value = (self.model_extra or {}).get(name)
            if value not in (None, [], {}) and not _is_plain_text_format(name, value):
                raise RequestError(name, f"{name!r} is not supported by this server")

    def sampling_params(self, max_tokens: int, logprobs: int | None) -> SamplingParams:
        """Raises RequestError naming the field for an out-of-range value."""
        def pick(value, default):
            return default if value is None else value

        return SamplingParams(
            max_tokens=max_tokens,
            temperature=pick(self.temperature, 1.0),
            top_p=pick(self.top_p, 1.0),
            top_k=pick(self.top_k, -1),
            min_p=pick(self.min_p, 0.0),
            repetition_penalty=pick(self.repetition_penalty, 1.0),
            presence_penalty=pick(self.presence_penalty, 0.0),
            frequency_penalty=pick(self.frequency_penalty, 0.0),
            seed=self.seed,
            stop=pick(self.stop, ()),
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
        )


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def requested_max_tokens(self) -> tuple[str, int | None]:
        if self.max_completion_tokens is not None:
            return "max_completion_tokens", self.max_completion_tokens
        return "max_tokens", self.max_tokens

    def num_logprobs(self) -> int | None:
        if not self.logprobs:
            if self.top_logprobs:
                raise RequestError("top_logprobs", "top_logprobs requires logprobs=true")
            return None
        return self.top_logprobs or 0

    def template_messages(self) -> list[dict]:
        return [m.to_template_dict(i) for i, m in enumerate(self.messages)]


class CompletionRequest(_GenerationRequest):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False

    def check_supported(self) -> None:
        super().check_supported()
        if self.echo:
            raise RequestError("echo", "echo is not supported by this server")

    def single_prompt(self) -> str | list[int]:
        """The one prompt of this request: a string or a list of token ids."""
        p = self.prompt
        if isinstance(p, str) or not p or isinstance(p[0], int):
            return p  # an empty list is an empty prompt: the engine names it
        if len(p) != 1:
            raise RequestError("prompt", f"only one prompt per request is supported, got {len(p)}")
        return p[0]


def _is_plain_text_format(name: str, value) -> bool:
    return name == "response_format" and value == {"type": "text"}


def param_from_loc(loc: tuple) -> str | None:
    """pydantic error location -> OpenAI ``param`` ('messages[0].role').

    Union members show up in the location as type names ('list[int]'); the
    path stops there, since the client never wrote those.
    """
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        elif part.isidentifier() and part not in _TYPE_TAGS:
            param += f".{part}" if param else part
        else:
            break
    return param or None


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "function-after"})
