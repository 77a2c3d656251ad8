"""Drive a request's choices (fanout.py) and answer them as JSON or as an SSE stream.

Every choice's first output is pulled before any response starts: the engine
validates and admits a request on the first iteration, so a bad prompt, a full
queue or a failed prefill becomes a plain 400/429/500 instead of an error
inside a 200 stream. Until the answer starts, a DisconnectWatcher aborts the
choices as soon as the client leaves (queued or prefilling). Every exit path
closes every choice's iterator, which aborts an unfinished engine request and
frees its KV blocks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from tokenmill.outputs import RequestOutput, merge_outputs
from tokenmill.serve.disconnect import ClientGone, DisconnectWatcher
from tokenmill.serve.errors import ApiError, error_body
from tokenmill.serve.fanout import Choice, PromptJob, check_output, close_all, make_choices, merged, start_all
from tokenmill.serve.metrics import RequestTimer
from tokenmill.serve.responses import Usage

log = logging.getLogger(__name__)

CLIENT_CLOSED = 499  # nginx's "client closed request"; never reaches the client


class Formatter(Protocol):
    """Endpoint-specific shapes of one choice of an answer. The formatters of
    one answer (``sibling``) share its id, creation time and model."""

    request_id: str
    index: int

    def sibling(self, index: int) -> Formatter: ...
    def chunks(self, out: RequestOutput, first: bool) -> list[BaseModel]: ...
    def usage_chunk(self, usage: Usage) -> BaseModel: ...
    def add(self, out: RequestOutput) -> None: ...
    def choice(self, last: RequestOutput) -> BaseModel: ...
    def response(self, choices: list[BaseModel], usage: Usage) -> BaseModel: ...


class SSEResponse(StreamingResponse):
    """Closes its body iterator, then runs ``on_close``, on every exit (normal
    end, cancellation by a disconnect, send failure), so the engine requests
    behind it are aborted now rather than whenever the generator gets
    garbage-collected. ``on_close`` covers a body cancelled before its first
    step: closing a generator that never ran skips its ``finally``."""

    media_type = "text/event-stream"

    def __init__(self, body: AsyncIterator[str], on_close: Callable[[], Awaitable[None]], **kwargs):
        super().__init__(body, **kwargs)
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()
            await self.on_close()


class _Step:
    """An awaitable in the shape DisconnectWatcher.next reads (an iterator's next step)."""

    def __init__(self, awaitable: Awaitable):
        self._awaitable = awaitable

    def __anext__(self) -> Awaitable:
        return self._awaitable


async def run_generation(request: Request, engine, formatter: Formatter, jobs: list[PromptJob], n: int,
                         timer: RequestTimer, *, stream: bool, include_usage: bool,
                         stream_interval: int = 1) -> Response:
    """Answer ``n`` samples of each prompt in ``jobs``; ``timer`` started at arrival."""
    choices = make_choices(jobs, n, formatter, timer)
    watcher = DisconnectWatcher(request)  # from now until the answer starts
    try:
        try:
            await watcher.next(_Step(start_all(engine, choices, n)))
        except ClientGone:  # left while queued or prefilling: the starts were cancelled, nobody to answer
            await close_all(choices)
            return Response(status_code=CLIENT_CLOSED)
        if stream:
            watcher.close()  # the streaming response listens for the disconnect itself
            body = _sse(choices, n, include_usage, stream_interval)
            return SSEResponse(body, partial(close_all, choices),
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await _collect(watcher, choices, n)
    except BaseException:
        await close_all(choices)
        raise
    finally:
        watcher.close()


async def _collect(watcher: DisconnectWatcher, choices: list[Choice], n: int) -> Response:
    outputs = merged(choices)
    try:
        while True:
            try:
                choice, out = await watcher.next(outputs)
            except StopAsyncIteration:
                break
            check_output(out)
            choice.timer.observe(out)
            choice.formatter.add(out)
        usage = _usage(choices, n)
        body = choices[0].formatter.response([c.formatter.choice(c.last) for c in choices], usage)
        return JSONResponse(body.model_dump(mode="json"))
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED)
    finally:
        await outputs.aclose()
        await close_all(choices)


class _Interval:
    """One choice's stream_interval: its first output goes at once (time to
    first token), later ones are held until they add up to ``interval``
    tokens or the choice finishes, then go merged into one delta."""

    def __init__(self, interval: int):
        self.interval = interval
        self.sent_any = False
        self.held: list[RequestOutput] = []
        self.held_tokens = 0

    def push(self, out: RequestOutput) -> RequestOutput | None:
        """The delta to send now, or None while holding."""
        if self.interval == 1:  # every output goes at once (the default)
            self.sent_any = True
            return out
        self.held.append(out)
        self.held_tokens += len(out.new_token_ids)
        if self.sent_any and not out.finished and self.held_tokens < self.interval:
            return None
        delta = merge_outputs(self.held) if len(self.held) > 1 else out
        self.sent_any, self.held, self.held_tokens = True, [], 0
        return delta


async def _sse(choices: list[Choice], n: int, include_usage: bool, interval: int) -> AsyncIterator[str]:
    """Each choice's chunks, with its ``index``, as its outputs arrive; then
    the usage of all choices; then [DONE]. A choice the engine fails
    mid-stream ends the whole answer with an error event (the 200 is sent)."""
    intervals = {c.index: _Interval(interval) for c in choices}
    outputs = merged(choices) if len(choices) > 1 else None
    try:
        if outputs is None:  # one choice (the common case): its stream read directly, no merging layer per token
            choice = choices[0]
            out = choice.last = choice.first
            interval_of, step = intervals[choice.index], choice.outputs.__anext__
            while True:
                for event in _events(choice, out, interval_of):
                    yield event
                if out.finished:
                    break
                try:
                    out = choice.last = await step()
                except StopAsyncIteration:  # the stream ends with a finished output, never before
                    raise ApiError(500, "the engine ended the request before it finished") from None
        else:
            async for choice, out in outputs:
                for event in _events(choice, out, intervals[choice.index]):
                    yield event
        # No disconnect poll here (it cost ~10% of the event loop's time,
        # one anyio cancel scope per token): on ASGI spec < 2.4 (uvicorn)
        # the response's disconnect listener cancels this generator; on
        # >= 2.4 the next send fails. Either way SSEResponse closes it and
        # the requests are aborted.
        if include_usage:
            usage = _usage(choices, n)
            yield _event(choices[0].formatter.usage_chunk(usage).model_dump_json())
    except ApiError as exc:  # the engine failed a choice mid-stream: the 200 is already sent
        log.error("request %s failed mid-stream: %s", choices[0].formatter.request_id, exc.message)
        yield _event(json.dumps(error_body(exc.status, f"generation failed: {exc.message}", code=exc.code)))
    except Exception as exc:
        log.exception("request %s failed mid-stream", choices[0].formatter.request_id)
        yield _event(json.dumps(error_body(500, f"generation failed: {exc}")))
    finally:
        if outputs is not None:
            await outputs.aclose()
        await close_all(choices)
    yield "data: [DONE]\n\n"


def _events(choice: Choice, out: RequestOutput, interval: _Interval) -> list[str]:
    """The SSE events one output of a choice makes now (none while its interval holds it)."""
    if out.finish_reason == "error":
        check_output(out)
    choice.timer.observe(out)
    first = not interval.sent_any
    delta = interval.push(out)
    if delta is None:
        return []
    return [_event(chunk.model_dump_json()) for chunk in choice.formatter.chunks(delta, first)]


def _usage(choices: list[Choice], n: int) -> Usage:
    """The answer's usage; reasoning tokens where the formatters count them (chat)."""
    usage = Usage.of_choices([c.last for c in choices], n)
    return usage.with_reasoning([getattr(c.formatter, "reasoning_tokens", None) for c in choices])


def _event(payload: str) -> str:
    return f"data: {payload}\n\n"
