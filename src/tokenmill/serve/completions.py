"""POST /v1/completions: prompt(s) (text or token ids) -> tokens -> engine.

echo: each choice's text starts with its prompt's text (the string sent, or
the prompt's token ids decoded), streamed as that choice's first chunk; with
logprobs=N the engine also scores the prompt (SamplingParams.prompt_logprobs)
and the choice's logprobs cover the prompt's tokens first, the first one's
null. max_tokens=0 with echo scores the prompt and generates nothing.
"""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass

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
    jobs, echoes = [], []
    for param, prompt in req.prompts():
        prompt_ids = state.tokenize(prompt)
        max_tokens = state.max_tokens_for(field, requested, len(prompt_ids))  # the default depends on the prompt
        jobs.append(PromptJob(prompt_ids, req.sampling_params(max_tokens, req.logprobs, structured), param))
        if req.echo:
            echoes.append(Echo(prompt if isinstance(prompt, str) else _prompt_text(state, prompt_ids), prompt_ids))
    formatter = CompletionFormatter(state.model_name, state.decoder, req.logprobs is not None, echoes,
                                    req.num_choices)
    return await run_generation(request, state.engine, formatter, jobs, req.num_choices, timer,
                                stream=req.stream, include_usage=req.include_usage,
                                stream_interval=state.stream_interval)


@dataclass(frozen=True)
class Echo:
    """A prompt as an echo shows it."""

    text: str
    token_ids: list[int]


def _prompt_text(state: ServerState, token_ids: list[int]) -> str:
    """Token-id prompt -> its echoed text, special tokens shown (as its prompt logprobs' tokens are)."""
    if state.tokenizer is None:  # dummy weights: the same placeholders as the logprobs' tokens
        return "".join(state.decoder(t) for t in token_ids)
    return state.tokenizer.decode(token_ids, skip_special_tokens=False)


class CompletionFormatter:
    """One choice of a completion answer; ``sibling`` makes the others."""

    def __init__(self, model: str, decoder: TokenDecoder, want_logprobs: bool, echoes: list[Echo] = (),
                 n: int = 1):
        """echoes: each prompt's echo (empty: no echo); n: samples per prompt
        (choice i shows prompt i // n)."""
        self.request_id = f"cmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())
        self.decoder = decoder
        self.want_logprobs = want_logprobs
        self.echoes, self.n = echoes, n
        self.index = 0
        self.echo: Echo | None = echoes[0] if echoes else None
        self.text: list[str] = []
        self.logprobs = []
        self.prompt_logprobs = []  # the echoed prompt's entries (its first output's), the first one None
        self.text_offset = 0  # characters of the choice's text (echo included) covered by logprobs so far

    def sibling(self, index: int) -> CompletionFormatter:
        """Choice ``index`` of the same answer: same id, time and model, its own text."""
        other = copy.copy(self)
        other.index, other.text, other.logprobs, other.prompt_logprobs, other.text_offset = index, [], [], [], 0
        other.echo = self.echoes[index // self.n] if self.echoes else None
        return other

    def _body(self, choices: list[CompletionChoice], usage: Usage | None = None) -> CompletionResponse:
        return CompletionResponse(id=self.request_id, created=self.created, model=self.model,
                                  choices=choices, usage=usage)

    def _logprobs(self, entries) -> CompletionLogprobs | None:
        """Entries may start with the echoed prompt's (the first one None)."""
        if not self.want_logprobs:
            return None
        token_ids = self.echo.token_ids if self.echo is not None else ()
        result, self.text_offset = completion_logprobs(entries or [], self.decoder, self.text_offset, token_ids)
        return result

    def chunks(self, out: RequestOutput, first: bool) -> list[CompletionResponse]:
        chunks = []
        if first and self.echo is not None:  # the echoed prompt comes first, in a chunk of its own
            chunks.append(self._body([CompletionChoice(index=self.index, text=self.echo.text,
                                                       logprobs=self._logprobs(out.prompt_logprobs))]))
        # Text held back (a possible stop-string prefix) makes an empty chunk: skip it.
        if out.new_text or out.logprobs or out.finished:
            chunks.append(self._body([CompletionChoice(index=self.index, text=out.new_text,
                                                       logprobs=self._logprobs(out.logprobs),
                                                       finish_reason=out.finish_reason)]))
        return chunks

    def usage_chunk(self, usage: Usage) -> CompletionResponse:
        return self._body([], usage)

    def add(self, out: RequestOutput) -> None:
        self.text.append(out.new_text)
        if out.prompt_logprobs is not None and self.echo is not None:
            self.prompt_logprobs = out.prompt_logprobs
        if out.logprobs:
            self.logprobs.extend(out.logprobs)

    def choice(self, last: RequestOutput) -> CompletionChoice:
        echo = self.echo.text if self.echo is not None else ""
        return CompletionChoice(index=self.index, text=echo + "".join(self.text),
                                logprobs=self._logprobs(self.prompt_logprobs + self.logprobs),
                                finish_reason=last.finish_reason)

    def response(self, choices: list[CompletionChoice], usage: Usage) -> CompletionResponse:
        return self._body(choices, usage)
