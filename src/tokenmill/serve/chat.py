"""POST /v1/chat/completions: messages -> chat template -> tokens -> engine."""

from __future__ import annotations

import copy
import time
import uuid

from fastapi import Request
from fastapi.responses import Response

from tokenmill.outputs import RequestOutput
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


async def create_chat_completion(request: Request, state: ServerState) -> Response:
    timer = state.metrics.timer()  # latencies count from arrival
    req = state.parse(ChatCompletionRequest, await request.body())
    req.check_supported()
    state.check_model(req.model)
    prompt_ids = state.render_chat(req.template_messages())
    field, requested = req.requested_max_tokens()
    max_tokens = state.max_tokens_for(field, requested, len(prompt_ids))
    params = req.sampling_params(max_tokens, req.num_logprobs(), await state.output_constraint(req))
    formatter = ChatFormatter(state.model_name, state.decoder, params.logprobs is not None)
    return await run_generation(request, state.engine, formatter, [PromptJob(prompt_ids, params, "messages")],
                                req.num_choices, timer, stream=req.stream, include_usage=req.include_usage,
                                stream_interval=state.stream_interval)


class ChatFormatter:
    """One choice of a chat answer; ``sibling`` makes the others."""

    def __init__(self, model: str, decoder: TokenDecoder, want_logprobs: bool):
        self.want_logprobs = want_logprobs
        self.request_id = f"chatcmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())
        self.decoder = decoder
        self.index = 0
        self.text: list[str] = []
        self.logprobs = []

    def sibling(self, index: int) -> ChatFormatter:
        """Choice ``index`` of the same answer: same id, time and model, its own text."""
        other = copy.copy(self)
        other.index, other.text, other.logprobs = index, [], []
        return other

    def _chunk(self, choices: list[ChatChunkChoice], usage: Usage | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.request_id, created=self.created, model=self.model,
                                   choices=choices, usage=usage)

    def chunks(self, out: RequestOutput, first: bool) -> list[ChatCompletionChunk]:
        result = []
        if first:  # OpenAI opens every choice's stream with the role
            result.append(self._chunk([ChatChunkChoice(index=self.index, delta={"role": "assistant", "content": ""})]))
        logprobs = chat_logprobs(out.logprobs, self.decoder) if out.logprobs else None
        # Text held back (a possible stop-string prefix) makes an empty delta: skip it.
        if out.new_text or logprobs or out.finished:
            delta = {"content": out.new_text} if out.new_text else {}
            result.append(self._chunk([ChatChunkChoice(index=self.index, delta=delta, logprobs=logprobs,
                                                       finish_reason=out.finish_reason)]))
        return result

    def usage_chunk(self, usage: Usage) -> ChatCompletionChunk:
        return self._chunk([], usage)

    def add(self, out: RequestOutput) -> None:
        self.text.append(out.new_text)
        if out.logprobs:
            self.logprobs.extend(out.logprobs)

    def choice(self, last: RequestOutput) -> ChatChoice:
        logprobs = chat_logprobs(self.logprobs, self.decoder) if self.want_logprobs else None
        return ChatChoice(index=self.index, message=ChatMessageOut(content="".join(self.text)), logprobs=logprobs,
                          finish_reason=last.finish_reason)

    def response(self, choices: list[ChatChoice], usage: Usage) -> ChatCompletionResponse:
        return ChatCompletionResponse(id=self.request_id, created=self.created, model=self.model,
                                      choices=choices, usage=usage)
