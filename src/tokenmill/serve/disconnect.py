"""Notice a client that leaves while its request is still waiting for output.

A request can wait long before its first token: in the waiting queue, or in a
chunked prefill. Nothing is sent to the client in that time, so a dead socket
shows only as an ``http.disconnect`` message on the ASGI receive channel. The
watcher listens on that channel for the whole wait and aborts the request the
moment it arrives (the engine drops it at its next step), instead of finding
out when the first token is finally produced for nobody.

One listener at a time: the watcher must be closed before anything else reads
``receive`` (Starlette's streaming response listens there itself).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import Request

from tokenmill.outputs import RequestOutput


class ClientGone(Exception):
    """The client disconnected before the request finished."""


class DisconnectWatcher:
    def __init__(self, request: Request):
        self._gone = asyncio.ensure_future(self._wait_for_disconnect(request))

    @staticmethod
    async def _wait_for_disconnect(request: Request) -> None:
        # The body was read already: what comes next is the disconnect (uvicorn
        # also sends one after the response completes; by then we are closed).
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def next(self, outputs: AsyncIterator[RequestOutput]) -> RequestOutput:
        """The next output, or ClientGone if the client leaves first. On
        ClientGone the pending read is cancelled, which closes the engine's
        stream and so aborts the request (AsyncEngine.generate's finally)."""
        step = asyncio.ensure_future(outputs.__anext__())
        await asyncio.wait({step, self._gone}, return_when=asyncio.FIRST_COMPLETED)
        if step.done():
            return step.result()  # raises what the engine raised (StopAsyncIteration included)
        step.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await step
        raise ClientGone

    def close(self) -> None:
        """Stop listening (idempotent)."""
        self._gone.cancel()
