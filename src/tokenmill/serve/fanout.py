"""One API request -> one engine request per choice; their output streams merged.

Choice index = prompt_index * n + sample_index, OpenAI's order. Each choice is
an engine request of its own (id ``{response id}-{index}``), so any
EngineClient serves n > 1 and prompt batches unchanged.

Prefill once: the prefix cache indexes a block only after its K/V is computed
(engine/kv_cache_manager.py). So a prompt's sample 0 goes first; once its
first output is in (prefill done, its full blocks indexed), samples 1..n-1
follow and find every full block of the prompt cached. The prompts of a batch
are independent requests and all go at once.

Closing: a choice's iterator may be closed only when no read of it is pending
(an async generator being read cannot be closed), so whoever starts reads
(``start_all``, ``merged``) cancels and awaits them on every exit; a cancelled
read ends the engine's generator, which aborts the request. ``close_all`` then
closes what is left (an unfinished request is aborted, its KV blocks freed).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass, replace

from tokenmill.outputs import RequestOutput
from tokenmill.sampling_params import SamplingParams
from tokenmill.serve.errors import ApiError, from_request_error
from tokenmill.serve.metrics import RequestTimer

_SEED_MIN = -(1 << 63)
_SEED_SPAN = (1 << 64) - _SEED_MIN  # seeds live in [-2^63, 2^64), what a torch.Generator takes


@dataclass(frozen=True)
class PromptJob:
    """One prompt of the request, ready for the engine."""

    token_ids: list[int]
    params: SamplingParams
    """Sample 0's; sample k gets seed + k (sample_params)."""
    param: str
    """The request field a refusal of this prompt names: 'prompt', 'prompt[i]', 'messages'."""


class Choice:
    """One choice of the answer: its engine request, formatter and latency timer."""

    def __init__(self, index: int, sample: int, job: PromptJob, formatter, timer: RequestTimer):
        self.index = index
        self.sample = sample
        self.job = job
        self.formatter = formatter
        self.timer = timer
        self.outputs: AsyncIterator[RequestOutput] | None = None  # None until submitted
        self.first: RequestOutput | None = None
        self.last: RequestOutput | None = None
        """The latest output handed on by ``merged``; the finished one at the end."""

    async def start(self, engine) -> None:
        """Submit the engine request and wait for its first output: the engine
        checks and admits a request on its first iteration, so a bad prompt,
        a full queue or a failed prefill surface here, before any answer."""
        params = sample_params(self.job.params, self.sample)
        try:
            self.outputs = engine.generate(self.job.token_ids, params, f"{self.formatter.request_id}-{self.index}")
            self.first = await self.outputs.__anext__()
        except ValueError as exc:  # RequestError and the engine's other input checks
            raise from_request_error(exc, {"prompt": self.job.param}) from exc
        except StopAsyncIteration as exc:
            raise ApiError(500, "the engine ended the request without output") from exc
        check_output(self.first)

    async def next(self) -> RequestOutput:
        try:
            return await self.outputs.__anext__()
        except StopAsyncIteration as exc:  # the stream ends with a finished output, never before
            raise ApiError(500, "the engine ended the request before it finished") from exc

    async def close(self) -> None:
        if self.outputs is not None:
            await self.outputs.aclose()  # aborts the request unless it finished


def sample_params(params: SamplingParams, sample: int) -> SamplingParams:
    """Sample k of a seeded request draws from seed + k (wrapped into the
    seed range), so the n choices differ yet the same request repeats them;
    unseeded samples all draw from the engine's shared generator. Prompt
    logprobs are computed by sample 0 alone (the others take its: see
    _start_prompt), so the others can use the prefix cache; a scoring request
    (max_tokens 0) keeps them, since it needs them to be valid."""
    if sample == 0:
        return params
    if params.prompt_logprobs is not None and params.max_tokens > 0:
        params = replace(params, prompt_logprobs=None)
    if params.seed is None:
        return params
    return replace(params, seed=(params.seed + sample - _SEED_MIN) % _SEED_SPAN + _SEED_MIN)


def make_choices(jobs: list[PromptJob], n: int, formatter, timer: RequestTimer) -> list[Choice]:
    """The choices in index order. Metrics: each choice is one engine request
    and gets its own copy of the arrival timer (the same start), so TTFT,
    TPOT, e2e latency and prompt/generation token counters observe every
    engine request exactly once, as for n = 1; the HTTP request counter
    (middleware) still counts the API request once."""
    choices = []
    for p, job in enumerate(jobs):
        for k in range(n):
            index = p * n + k
            choices.append(Choice(index, k, job, formatter.sibling(index) if index else formatter,
                                  copy.copy(timer) if index else timer))
    return choices


def check_output(out: RequestOutput) -> None:
    if out.finish_reason == "error":  # the engine failed this request alone (the others in its step went on)
        raise ApiError(500, out.error or "the engine failed this request", code="engine_error")


async def start_all(engine, choices: list[Choice], n: int) -> None:
    """Start every choice: per prompt sample 0 first (prefill once), then the
    rest; all prompts at once. The first failure cancels the starts still
    pending and is raised (the caller closes the choices)."""
    await _all_or_none(_start_prompt(engine, choices[i:i + n]) for i in range(0, len(choices), n))


async def _start_prompt(engine, samples: list[Choice]) -> None:
    await samples[0].start(engine)  # prefilled: the prompt's full blocks are in the prefix cache now
    await _all_or_none(choice.start(engine) for choice in samples[1:])
    prompt_logprobs = samples[0].first.prompt_logprobs
    for choice in samples[1:]:  # the prompt's logprobs, computed once, shown with every sample
        if prompt_logprobs is not None and choice.first.prompt_logprobs is None:
            choice.first = replace(choice.first, prompt_logprobs=prompt_logprobs)


async def _all_or_none(starts: Iterable[Awaitable[None]]) -> None:
    tasks = [asyncio.ensure_future(s) for s in starts]
    try:
        await asyncio.gather(*tasks)
    finally:  # after a failure (or our own cancellation) no read may stay pending
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def merged(choices: list[Choice]) -> AsyncIterator[tuple[Choice, RequestOutput]]:
    """(choice, output) pairs: every choice's first output in index order,
    then the rest as they arrive (one pending read per unfinished choice)."""
    for choice in choices:
        choice.last = choice.first
        yield choice, choice.first
    live = [c for c in choices if not c.first.finished]
    if len(live) == 1:  # one stream: read it directly, no task per token
        choice = live[0]
        while not choice.last.finished:
            choice.last = await choice.next()
            yield choice, choice.last
        return
    reads = {asyncio.ensure_future(c.next()): c for c in live}
    try:
        while reads:
            done, _ = await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
            for read in sorted(done, key=lambda r: reads[r].index):
                choice = reads.pop(read)
                choice.last = read.result()
                if not choice.last.finished:
                    reads[asyncio.ensure_future(choice.next())] = choice
                yield choice, choice.last
    finally:
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)


async def close_all(choices: list[Choice]) -> None:
    for choice in choices:
        await choice.close()
