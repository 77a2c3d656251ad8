"""Pure ASGI middlewares: request counting by route/status, and the body size limit.

Pure ASGI (not BaseHTTPMiddleware) so streamed responses pass through
untouched and the client's disconnect still reaches the route.
"""

from __future__ import annotations

import asyncio
import json

from tokenmill.serve.errors import error_body
from tokenmill.serve.metrics import ServerMetrics

# A refused body is read to its end (for at most this long) before the 413 goes
# out: closing a socket with unread data makes the kernel send RST, and the
# client, still uploading, may never see the answer (nginx's lingering close).
_DRAIN_SECONDS = 30.0

KNOWN_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"})


class RequestCounterMiddleware:
    """Counts every answered request; unknown paths share one label so a
    scanner cannot blow up the metric's cardinality."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = None

        async def send_and_record(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        route = scope["path"] if scope["path"] in KNOWN_ROUTES else "other"
        try:
            await self.app(scope, receive, send_and_record)
        finally:
            # No response started: the error middleware above us answers 500.
            self.metrics.requests.labels(route=route, status=str(status or 500)).inc()


class BodyLimitMiddleware:
    """Reads the whole body up front (refusing it with 413 past ``max_bytes``),
    then replays it; later receives (http.disconnect) go to the server."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _drain(receive)
            return await self._too_large(send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # nobody left to answer
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            size += len(chunk)
            if size > self.max_bytes:
                if more:
                    await _drain(receive)
                return await self._too_large(send)
            chunks.append(chunk)
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        payload = json.dumps(error_body(413, f"the request body exceeds the limit of {self.max_bytes} bytes",
                                        code="request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})


async def _drain(receive) -> None:
    """Read and drop the rest of a refused body, for up to _DRAIN_SECONDS."""
    async def read_to_end() -> None:
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return

    try:
        await asyncio.wait_for(read_to_end(), _DRAIN_SECONDS)
    except asyncio.TimeoutError:
        pass  # a client still sending after that long gets the 413 and a closed connection


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # malformed: the streaming count below still applies
    return None
