"""POST /v1/chat/completions: messages -> chat template -> tokens -> engine."""

from __future__ import annotations

import copy
import time
import uuid

from fastapi import Request
from fastapi.responses import Response

from tokenmill.errors import RequestError
from tokenmill.outputs import RequestOutput
from tokenmill.serve.chat_output import ChatOutput
from tokenmill.serve.fanout import PromptJob
from tokenmill.serve.generation import run_generation
from tokenmill.serve.logprobs import TokenDecoder, chat_logprobs
from tokenmill.serve.protocol import ChatCompletionRequest
from tokenmill.serve.responses import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatMessageOut,
    Usage,
)
from tokenmill.serve.state import ServerState
from tokenmill.serve.tools import ToolPlan, plan_tools


async def create_chat_completion(request: Request, state: ServerState) -> Response:
    timer = state.metrics.timer()  # latencies count from arrival
    req = state.parse(ChatCompletionRequest, await request.body())
    req.check_supported()
    state.check_model(req.model)
    plan = plan_tools(req, state.tool_config)
    prompt_ids = state.render_chat(req.template_messages(), plan.tools)
    field, requested = req.requested_max_tokens()
    max_tokens = state.max_tokens_for(field, requested, len(prompt_ids))
    constraint = await state.output_constraint(req)
    if plan.constraint is not None:
        if constraint is not None:
            raise RequestError("tool_choice", "a forced tool choice cannot be combined with response_format "
                               "or another output constraint")
        constraint = plan.constraint
        await state.constraints.check(constraint, "tools")  # a bad parameters schema names the tools
    params = req.sampling_params(max_tokens, req.num_logprobs(), constraint)
    formatter = ChatFormatter(state.model_name, state.decoder, params.logprobs is not None,
                              state.reasoning_parser, plan)
    return await run_generation(request, state.engine, formatter, [PromptJob(prompt_ids, params, "messages")],
                                req.num_choices, timer, stream=req.stream, include_usage=req.include_usage,
                                stream_interval=state.stream_interval)


class ChatFormatter:
    """One choice of a chat answer; ``sibling`` makes the others. With a
    reasoning parser or tools, the text goes through ChatOutput (chat_output.py)."""

    def __init__(self, model: str, decoder: TokenDecoder, want_logprobs: bool,
                 reasoning_parser: str | None = None, tools: ToolPlan | None = None):
        self.want_logprobs = want_logprobs
        self.request_id = f"chatcmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())
        self.decoder = decoder
        self.reasoning_parser = reasoning_parser
        self.tools = tools
        self._reset(0)

    def _reset(self, index: int) -> None:
        self.index = index
        self.text: list[str] = []
        self.logprobs = []
        self.output = ChatOutput(self.reasoning_parser, self.tools.new_parser() if self.tools else None)

    def sibling(self, index: int) -> ChatFormatter:
        """Choice ``index`` of the same answer: same id, time and model, its own text and parsers."""
        other = copy.copy(self)
        other._reset(index)
        return other

    @property
    def reasoning_tokens(self) -> int | None:
        return self.output.reasoning_tokens

    def _chunk(self, choices: list[ChatChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.request_id, created=self.created, model=self.model,
                                   choices=choices, usage=usage)

    def _finish_reason(self, reason: str | None) -> str | None:
        return "tool_calls" if reason in ("stop", "length") and self.output.has_tool_calls else reason

    def chunks(self, out: RequestOutput, first: bool) -> list[ChatCompletionChunk]:
        result = []
        if first:  # OpenAI opens every choice's stream with the role
            result.append(self._chunk([ChatChunkChoice(index=self.index, delta={"role": "assistant", "content": ""})]))
        logprobs = chat_logprobs(out.logprobs, self.decoder) if out.logprobs else None
        delta = self._delta(out)
        # Text held back (a possible stop-string or tag prefix) makes an empty delta: skip it.
        if delta or logprobs or out.finished:
            result.append(self._chunk([ChatChunkChoice(index=self.index, delta=delta, logprobs=logprobs,
                                                       finish_reason=self._finish_reason(out.finish_reason))]))
        return result

    def _delta(self, out: RequestOutput) -> dict:
        if not self.output.active:
            return {"content": out.new_text} if out.new_text else {}
        self.output.count_tokens([self.decoder(t) for t in out.new_token_ids])
        delta = self.output.feed(out.new_text) if out.new_text else {}
        if out.finished:
            for key, value in self.output.finish().items():
                delta[key] = delta.get(key, type(value)()) + value  # strings concatenate, call lists extend
        return delta

    def usage_chunk(self, usage: Usage) -> ChatCompletionChunk:
        return self._chunk([], usage)

    def add(self, out: RequestOutput) -> None:
        self.text.append(out.new_text)
        if self.output.active:
            self.output.count_tokens([self.decoder(t) for t in out.new_token_ids])
        if out.logprobs:
            self.logprobs.extend(out.logprobs)

    def choice(self, last: RequestOutput) -> ChatChoice:
        logprobs = chat_logprobs(self.logprobs, self.decoder) if self.want_logprobs else None
        text = "".join(self.text)
        message = self.output.message(text) if self.output.active else {"content": text}
        reason = last.finish_reason
        if message.get("tool_calls") and reason in ("stop", "length"):
            reason = "tool_calls"
        return ChatChoice(index=self.index, message=ChatMessageOut(**message), logprobs=logprobs,
                          finish_reason=reason)

    def response(self, choices: list[ChatChoice], usage: Usage) -> ChatCompletionResponse:
        return ChatCompletionResponse(id=self.request_id, created=self.created, model=self.model,
                                      choices=choices, usage=usage)
