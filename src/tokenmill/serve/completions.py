"""POST /v1/completions: prompt (text or token ids) -> tokens -> engine."""

from __future__ import annotations

import time
import uuid

from fastapi import Request
from fastapi.responses import Response

from tokenmill.outputs import RequestOutput
from tokenmill.serve.generation import run_generation
from tokenmill.serve.logprobs import TokenDecoder, completion_logprobs
from tokenmill.serve.protocol import CompletionRequest
from tokenmill.serve.responses import CompletionChoice, CompletionLogprobs, CompletionResponse, Usage
from tokenmill.serve.state import ServerState


async def create_completion(request: Request, state: ServerState) -> Response:
    timer = state.metrics.timer()  # latencies count from arrival
    req = state.parse(CompletionRequest, await request.body())
    req.check_supported()
    state.check_model(req.model)
    prompt_ids = state.tokenize(req.single_prompt())
    field, requested = req.requested_max_tokens()
    max_tokens = state.max_tokens_for(field, requested, len(prompt_ids))
    params = req.sampling_params(max_tokens, req.logprobs)
    formatter = CompletionFormatter(state.model_name, state.decoder, params.logprobs is not None)
    return await run_generation(request, state.engine, formatter, prompt_ids, params, timer,
                                stream=req.stream, include_usage=req.include_usage, prompt_param="prompt",
                                stream_interval=state.stream_interval)


class CompletionFormatter:
    def __init__(self, model: str, decoder: TokenDecoder, want_logprobs: bool):
        self.request_id = f"cmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())
        self.decoder = decoder
        self.want_logprobs = want_logprobs
        self.text: list[str] = []
        self.logprobs = []
        self.text_offset = 0  # characters of completion text covered by logprobs so far

    def _body(self, text: str, logprobs: CompletionLogprobs | None, finish_reason: str | None,
              usage: Usage | None = None) -> CompletionResponse:
        choice = CompletionChoice(text=text, logprobs=logprobs, finish_reason=finish_reason)
        return CompletionResponse(id=self.request_id, created=self.created, model=self.model,
                                  choices=[choice], usage=usage)

    def _logprobs(self, entries) -> CompletionLogprobs | None:
        if not self.want_logprobs:
            return None
        result, self.text_offset = completion_logprobs(entries or [], self.decoder, self.text_offset)
        return result

    def chunks(self, out: RequestOutput, first: bool) -> list[CompletionResponse]:
        # Text held back (a possible stop-string prefix) makes an empty chunk: skip it.
        if not (out.new_text or out.logprobs or out.finished):
            return []
        return [self._body(out.new_text, self._logprobs(out.logprobs), out.finish_reason)]

    def usage_chunk(self, usage: Usage) -> CompletionResponse:
        chunk = self._body("", None, None, usage)
        chunk.choices = []
        return chunk

    def add(self, out: RequestOutput) -> None:
        self.text.append(out.new_text)
        if out.logprobs:
            self.logprobs.extend(out.logprobs)

    def response(self, last: RequestOutput) -> CompletionResponse:
        return self._body("".join(self.text), self._logprobs(self.logprobs), last.finish_reason,
                          Usage.from_output(last))
