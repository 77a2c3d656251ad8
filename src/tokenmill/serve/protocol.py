"""Request schemas of the OpenAI-compatible API, and their mapping to SamplingParams.

Models are strict (no "5" -> 5, no true -> 1) so a wrong type is a 400 naming
the field, never a silently different request. Unknown fields are accepted
and ignored (clients such as the openai SDK or LangChain send extras), except
the few in ``UNSUPPORTED`` whose silent omission would change the answer.
Response schemas live in ``responses.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tokenmill.errors import RequestError
from tokenmill.sampling_params import SamplingParams
from tokenmill.structured.params import StructuredOutputsParams

MAX_CHOICES = 128
"""The largest ``n`` (samples per prompt), as OpenAI allows."""

# Fields that change what the client gets back; ignoring them would be a lie.
UNSUPPORTED = ("functions", "function_call",
               "logit_bias", "suffix", "best_of", "prediction", "audio", "modalities")


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Strict):
    include_usage: bool = False


class JsonSchemaFormat(_Strict):
    name: str | None = None
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    """OpenAI's response_format (serve/structured.py turns it into a constraint)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None
    """A JSON schema of the arguments object."""
    strict: bool | None = None


class ToolDef(_Strict):
    type: Literal["function"]
    function: FunctionDef


class FunctionName(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: FunctionName


class FunctionCallIn(_Strict):
    name: str
    arguments: str
    """JSON text, as the API returned it."""


class ToolCallIn(_Strict):
    """A tool call of an earlier assistant turn, sent back by the client."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ContentPart(_Strict):
    type: str
    text: str | None = None


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

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
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            message["tool_calls"] = [_template_call(call, f"messages[{index}].tool_calls[{i}]")
                                     for i, call in enumerate(self.tool_calls)]
        return message


def _template_call(call: ToolCallIn, param: str) -> dict:
    """A tool call as chat templates expect it: arguments as an object (they apply tojson)."""
    try:
        arguments = json.loads(call.function.arguments)
    except ValueError as exc:
        raise RequestError(f"{param}.function.arguments", f"must be JSON text: {exc}") from exc
    return {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": arguments}}


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
    response_format: ResponseFormat | None = None
    structured_outputs: dict | None = None  # vLLM's: {"json" | "json_object" | "regex" | "choice" | "grammar": ...}

    @property
    def num_choices(self) -> int:
        """Samples per prompt (``n``; checked by check_supported)."""
        return 1 if self.n is None else self.n

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def requested_max_tokens(self) -> tuple[str, int | None]:
        """(field name, value) of the output-length cap the client asked for."""
        return "max_tokens", self.max_tokens

    def check_supported(self) -> None:
        if self.n is not None and not 1 <= self.n <= MAX_CHOICES:
            raise RequestError("n", f"must be between 1 and {MAX_CHOICES}, got {self.n}")
        for name in UNSUPPORTED:
            value = (self.model_extra or {}).get(name)
            if value not in (None, [], {}):
                raise RequestError(name, f"{name!r} is not supported by this server")

    def sampling_params(self, max_tokens: int, logprobs: int | None,
                        structured: StructuredOutputsParams | None = None) -> SamplingParams:
        """Raises RequestError naming the field for an out-of-range value.
        ``structured``: the output constraint (serve/structured.py reads it from the request)."""
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
            structured=structured,
        )


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None

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
    max_tokens: int | None = Field(None, ge=0)  # 0: score the prompt (echo), generate nothing

    def check_supported(self) -> None:
        super().check_supported()
        if self.max_tokens == 0 and not self.echo:
            raise RequestError("max_tokens", "0 is allowed only with echo=true (scoring the prompt)")

    def sampling_params(self, max_tokens: int, logprobs: int | None,
                        structured: StructuredOutputsParams | None = None) -> SamplingParams:
        """With echo, the engine also returns the prompt's logprobs when the
        answer shows logprobs, or when max_tokens is 0 (the engine needs them
        then: nothing else to compute)."""
        params = super().sampling_params(max(max_tokens, 1), logprobs, structured)  # 0 needs prompt_logprobs: below
        if not self.echo or (logprobs is None and max_tokens):
            return params
        return replace(params, max_tokens=max_tokens, prompt_logprobs=logprobs or 0)

    def prompts(self) -> list[tuple[str, str | list[int]]]:
        """(param, prompt) of each prompt of this request, a string or a list of
        token ids; ``param`` names it in an error ('prompt', or 'prompt[i]' in a batch)."""
        p = self.prompt
        if isinstance(p, str) or (p and isinstance(p[0], int)):
            return [("prompt", p)]
        if not p:  # no prompt, or an empty token list: either way nothing to complete
            raise RequestError("prompt", "the prompt is empty: send a string, token ids, or a list of those")
        return [(f"prompt[{i}]", one) for i, one in enumerate(p)]


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
