"""POST /v1/completions: prompt(s) (text or token ids) -> tokens -> engine."""

from __future__ import annotations

import copy
import time
import uuid

from fastapi import Request
from fastapi.responses import Response

from tokenmill.outputs import RequestOutput
from tokenmill.serve.fanout import PromptJob
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
    field, requested = req.requested_max_tokens()
    structured = await state.output_constraint(req)
    jobs = []
    for param, prompt in req.prompts():
        prompt_ids = state.tokenize(prompt)
        max_tokens = state.max_tokens_for(field, requested, len(prompt_ids))  # the default depends on the prompt
        jobs.append(PromptJob(prompt_ids, req.sampling_params(max_tokens, req.logprobs, structured), param))
    formatter = CompletionFormatter(state.model_name, state.decoder, req.logprobs is not None)
    return await run_generation(request, state.engine, formatter, jobs, req.num_choices, timer,
                                stream=req.stream, include_usage=req.include_usage,
                                stream_interval=state.stream_interval)


class CompletionFormatter:
    """One choice of a completion answer; ``sibling`` makes the others."""

    def __init__(self, model: str, decoder: TokenDecoder, want_logprobs: bool):
        self.request_id = f"cmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())
        self.decoder = decoder
        self.want_logprobs = want_logprobs
        self.index = 0
        self.text: list[str] = []
        self.logprobs = []
        self.text_offset = 0  # characters of completion text covered by logprobs so far

    def sibling(self, index: int) -> CompletionFormatter:
        """Choice ``index`` of the same answer: same id, time and model, its own text."""
        other = copy.copy(self)
        other.index, other.text, other.logprobs, other.text_offset = index, [], [], 0
        return other

    def _body(self, choices: list[CompletionChoice], usage: Usage | None = None) -> CompletionResponse:
        return CompletionResponse(id=self.request_id, created=self.created, model=self.model,
                                  choices=choices, usage=usage)

    def _logprobs(self, entries) -> CompletionLogprobs | None:
        if not self.want_logprobs:
            return None
        result, self.text_offset = completion_logprobs(entries or [], self.decoder, self.text_offset)
        return result

    def chunks(self, out: RequestOutput, first: bool) -> list[CompletionResponse]:
        # Text held back (a possible stop-string prefix) makes an empty chunk: skip it.
        if not (out.new_text or out.logprobs or out.finished):
            return []
        return [self._body([CompletionChoice(index=self.index, text=out.new_text,
                                             logprobs=self._logprobs(out.logprobs),
                                             finish_reason=out.finish_reason)])]

    def usage_chunk(self, usage: Usage) -> CompletionResponse:
        return self._body([], usage)

    def add(self, out: RequestOutput) -> None:
        self.text.append(out.new_text)
        if out.logprobs:
            self.logprobs.extend(out.logprobs)

    def choice(self, last: RequestOutput) -> CompletionChoice:
        return CompletionChoice(index=self.index, text="".join(self.text), logprobs=self._logprobs(self.logprobs),
                                finish_reason=last.finish_reason)

    def response(self, choices: list[CompletionChoice], usage: Usage) -> CompletionResponse:
        return self._body(choices, usage)
