"""Drive one engine request and answer it as JSON or as an SSE stream.

The first output is pulled before any response starts: the engine validates
and admits a request on the first iteration, so a bad prompt or a full queue
becomes a plain 400/429 instead of an error inside a 200 stream. Until the
answer starts, a DisconnectWatcher aborts the request as soon as its client
leaves (queued or prefilling). Every exit path closes the engine's iterator,
which aborts an unfinished request and frees its KV blocks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from tokenmill.outputs import RequestOutput, merge_outputs
from tokenmill.serve.disconnect import ClientGone, DisconnectWatcher
from tokenmill.serve.errors import ApiError, error_body, from_request_error
from tokenmill.serve.metrics import RequestTimer
from tokenmill.serve.responses import Usage

log = logging.getLogger(__name__)

CLIENT_CLOSED = 499  # nginx's "client closed request"; never reaches the client


class Formatter(Protocol):
    """Endpoint-specific shapes of one request's answer."""

    request_id: str

    def chunks(self, out: RequestOutput, first: bool) -> list[BaseModel]: ...
    def usage_chunk(self, usage: Usage) -> BaseModel: ...
    def add(self, out: RequestOutput) -> None: ...
    def response(self, last: RequestOutput) -> BaseModel: ...


class SSEResponse(StreamingResponse):
    """Closes its body iterator on every exit (normal end, cancellation by a
    disconnect, send failure), so the engine request behind it is aborted now
    rather than whenever the generator gets garbage-collected."""

    media_type = "text/event-stream"

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


async def run_generation(request: Request, engine, formatter: Formatter, prompt, params,
                         timer: RequestTimer, *, stream: bool, include_usage: bool,
                         prompt_param: str, stream_interval: int = 1) -> Response:
    outputs = engine.generate(prompt, params, formatter.request_id)
    watcher = DisconnectWatcher(request)  # from now until the answer starts
    try:
        try:
            first = await watcher.next(outputs)
        except ValueError as exc:  # RequestError and the engine's other input checks
            raise from_request_error(exc, {"prompt": prompt_param}) from exc
        except StopAsyncIteration as exc:
            raise ApiError(500, "the engine ended the request without output") from exc
        except ClientGone:  # left while queued or prefilling: aborted, nobody to answer
            return Response(status_code=CLIENT_CLOSED)
        if first.finish_reason == "error":  # nothing sent yet: a plain error answer
            raise _engine_failure(first)
        if stream:
            watcher.close()  # the streaming response listens for the disconnect itself
            body = _sse(outputs, first, formatter, timer, include_usage, stream_interval)
            return SSEResponse(body, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await _collect(watcher, outputs, first, formatter, timer)
    except BaseException:
        await outputs.aclose()  # aborts the request unless it finished
        raise
    finally:
        watcher.close()


async def _collect(watcher: DisconnectWatcher, outputs: AsyncIterator[RequestOutput], out: RequestOutput,
                   formatter: Formatter, timer: RequestTimer) -> Response:
    try:
        while True:
            if out.finish_reason == "error":
                raise _engine_failure(out)
            timer.observe(out)
            formatter.add(out)
            if out.finished:
                return JSONResponse(formatter.response(out).model_dump(mode="json"))
            out = await watcher.next(outputs)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED)
    finally:
        await outputs.aclose()


async def _sse(outputs: AsyncIterator[RequestOutput], out: RequestOutput,
               formatter: Formatter, timer: RequestTimer, include_usage: bool,
               interval: int) -> AsyncIterator[str]:
    """One SSE event per ``interval`` tokens: the first output goes at once
    (time to first token), later ones are held until they add up to
    ``interval`` tokens or the request finishes, then sent merged."""
    first = True
    held: list[RequestOutput] = []
    held_tokens = 0
    try:
        while True:
            if out.finish_reason == "error":
                raise _engine_failure(out)
            timer.observe(out)
            held.append(out)
            held_tokens += len(out.new_token_ids)
            if first or out.finished or held_tokens >= interval:
                for chunk in formatter.chunks(merge_outputs(held) if len(held) > 1 else out, first):
                    yield _event(chunk.model_dump_json())
                first, held, held_tokens = False, [], 0
            if out.finished:
                break
            # No disconnect poll here (it cost ~10% of the event loop's time,
            # one anyio cancel scope per token): on ASGI spec < 2.4 (uvicorn)
            # the response's disconnect listener cancels this generator; on
            # >= 2.4 the next send fails. Either way SSEResponse closes it and
            # the request is aborted.
            out = await outputs.__anext__()
        if include_usage:
            yield _event(formatter.usage_chunk(Usage.from_output(out)).model_dump_json())
    except ApiError as exc:  # the engine failed this request mid-stream: the 200 is already sent
        log.error("request %s failed mid-stream: %s", formatter.request_id, exc.message)
        yield _event(json.dumps(error_body(exc.status, f"generation failed: {exc.message}", code=exc.code)))
    except Exception as exc:
        log.exception("request %s failed mid-stream", formatter.request_id)
        yield _event(json.dumps(error_body(500, f"generation failed: {exc}")))
    finally:
        await outputs.aclose()
    yield "data: [DONE]\n\n"


def _engine_failure(out: RequestOutput) -> ApiError:
    """The engine failed this request alone (the others in its step went on)."""
    return ApiError(500, out.error or "the engine failed this request", code="engine_error")


def _event(payload: str) -> str:
    return f"data: {payload}\n\n"
