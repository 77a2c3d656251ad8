"""What the routes share: the engine, its tokenizer, limits, metrics.

The steps of a generation request before the engine (parse, model check,
chat template, tokenize, output budget) live here as small methods, each
raising an ApiError / RequestError that names the field at fault.
"""

from __future__ import annotations

import secrets
import time
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from tokenmill.engine.client import EngineClient
from tokenmill.errors import RequestError
from tokenmill.serve.errors import ApiError, from_validation_errors
from tokenmill.serve.logprobs import TokenDecoder
from tokenmill.serve.metrics import ServerMetrics
from tokenmill.serve.reasoning import make_reasoning_parser
from tokenmill.serve.structured import ConstraintChecker, requested_constraint
from tokenmill.serve.tools import ToolConfig, template_messages
from tokenmill.structured.params import StructuredOutputsParams

M = TypeVar("M", bound=BaseModel)


class ServerState:
    def __init__(self, engine: EngineClient, *, api_key: str | None, max_tokens_limit: int | None,
                 stream_interval: int = 1, tool_config: ToolConfig | None = None,
                 reasoning_parser: str | None = None):
        self.engine = engine
        self.model_name = engine.model_name
        self.max_model_len = engine.max_model_len
        # Not part of EngineClient: a remote engine may have none (token-id prompts only).
        self.tokenizer = getattr(engine, "tokenizer", None)
        self.decoder = TokenDecoder(self.tokenizer)
        self.api_key = api_key
        self.max_tokens_limit = max_tokens_limit
        self.stream_interval = stream_interval
        """Tokens per SSE event of a streamed answer (serve/generation.py)."""
        self.tool_config = tool_config or ToolConfig()
        """--enable-auto-tool-choice / --tool-call-parser (serve/tools.py)."""
        if reasoning_parser is not None:
            make_reasoning_parser(reasoning_parser)  # ValueError naming the flag for an unknown name
        self.reasoning_parser = reasoning_parser
        """--reasoning-parser: split chat answers into reasoning_content and content."""
        self.constraints = ConstraintChecker(self.tokenizer)
        """Compiles output constraints before they reach the engine (a bad one is a 400)."""
        self.metrics = ServerMetrics(engine)
        self.created = int(time.time())

    def check_api_key(self, authorization: str | None) -> None:
        if self.api_key is None:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), self.api_key.encode()):
            raise ApiError(401, "invalid or missing API key: send 'Authorization: Bearer <key>'",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    @staticmethod
    def parse(model: type[M], body: bytes) -> M:
        try:
            return model.model_validate_json(body or b"{}")
        except ValidationError as exc:
            raise from_validation_errors(exc.errors()) from exc

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise ApiError(404, f"the model {name!r} does not exist; this server serves {self.model_name!r}",
                           param="model", code="model_not_found")

    def render_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt's token ids; ``tools`` go through the template when it reads
        them, else into a system prompt (serve/tools.py)."""
        if self.tokenizer is None:
            raise RequestError("messages", "this model has no tokenizer (dummy weights): use /v1/completions "
                               "with token ids")
        template = self.tokenizer.chat_template
        messages = template_messages(messages, tools, template)
        template_tools = tools if template is not None and "tools" in template else None
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=template_tools)
        except ValueError as exc:
            message = str(exc).removeprefix("messages: ")
            raise RequestError("messages", f"cannot apply the chat template: {message}") from exc
        # The template writes its own BOS; encoding must not add a second one.
        return self.tokenizer.encode(text, add_special_tokens=False)

    def tokenize(self, prompt: str | list[int]) -> list[int]:
        if not isinstance(prompt, str):
            return list(prompt)  # token ids: the engine checks the vocabulary range
        if self.tokenizer is None:
            raise RequestError("prompt", "this model has no tokenizer (dummy weights): pass token ids")
        return self.tokenizer.encode(prompt)

    async def output_constraint(self, req) -> StructuredOutputsParams | None:
        """The request's output constraint (response_format, structured_outputs,
        guided_*), compiled once here; RequestError naming the client's field."""
        found = requested_constraint(req)
        if found is None:
            return None
        params, field = found
        await self.constraints.check(params, field)
        return params

    def max_tokens_for(self, field: str, requested: int | None, num_prompt_tokens: int) -> int:
        """The output budget: the client's, else the rest of the context,
        capped by --max-tokens-limit."""
        limit = self.max_tokens_limit
        if requested is not None:
            if limit is not None and requested > limit:
                raise RequestError(field, f"{requested} exceeds this server's limit of {limit} tokens")
            return requested
        # An over-long prompt keeps a budget of 1 so the engine reports the prompt, not max_tokens.
        remaining = max(self.max_model_len - num_prompt_tokens, 1)
        return min(remaining, limit) if limit is not None else remaining
