"""A real OpenAI-compatible HTTP server with scripted timing and faults, for
testing HTTP clients (the bench's OpenAIBackend, the LoadGen driver) exactly.

It serves ``GET /v1/models`` and streaming ``POST /v1/chat/completions`` and
``POST /v1/completions`` from uvicorn in a child process, on 127.0.0.1 and a
port the OS picks (plus ``/_fake/...`` control routes that the handle below
uses). Every stream follows a known schedule, measured from the request's
arrival at the handler:

- chat only: a role chunk ``delta: {"role": "assistant", "content": ""}`` at
  once (as vLLM sends it; it carries no content and is not a first token);
- ``max_tokens`` content chunks (default ``default_max_tokens``), chunk i at
  ``ttft_s + i * tpot_s`` (an absolute schedule: delays do not drift), each
  with the text ``token_text``;
- a finish chunk (``finish_reason: "length"``), then, when the request asks
  for ``stream_options.include_usage``, a usage chunk, then ``data: [DONE]``.

With the default ``token_text`` (" the") the SmolLM2 tokenizer encodes the
concatenation of n chunks as exactly n tokens, so a client that re-encodes
the streamed text must count ``max_tokens``. ``usage.prompt_tokens`` is the
number of whitespace-separated words of the prompt (or of all message
contents): the fake has no tokenizer.

Use::

    with FakeOpenAIServer(ttft_s=0.2, tpot_s=0.05) as fake:
        backend = OpenAIBackend(fake.url, tokenizer=tokenizer)
        fake.configure(fault="http_500")   # later requests misbehave
        fake.reset()                       # back to the constructor's behaviour
        fake.requests[-1].body             # what the client sent

or as a fixture::

    @pytest.fixture(scope="module")
    def fake():
        with FakeOpenAIServer() as server:
            yield server

Behaviour is read once per request, when it arrives: a stream in progress
keeps the behaviour it started with.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields, replace

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

TOKEN_TEXT = " the"
"""One chunk's text: " the" * n encodes as exactly n SmolLM2 tokens (checked in the tests)."""

STREAM_FAULTS = ("malformed_json", "no_done", "drop_connection", "error_chunk")
"""Faults inside a stream, after ``fault_after`` content chunks:
malformed_json: a truncated JSON event, then [DONE];
no_done: the response ends cleanly but without [DONE];
drop_connection: the connection is closed in the middle of the chunked body;
error_chunk: ``data: {"error": {...}}`` (vLLM's mid-stream failure), then [DONE]."""
REQUEST_FAULTS = ("http_500", "models_not_json", "models_malformed")
"""Faults of a whole response: http_500: completions routes answer HTTP 500 with
an OpenAI error body; models_not_json: /v1/models answers an HTML page;
models_malformed: /v1/models answers JSON without ``data``."""
FAULT_MESSAGE = "fake server failure"
"""The message of the fake's error bodies (http_500, error_chunk)."""
_START_TIMEOUT_S = 30.0  # the child imports uvicorn and starlette; a loaded shared machine is slow
_STOP_TIMEOUT_S = 5.0
_CONTROL_TIMEOUT_S = 10.0
_LISTEN_BACKLOG = 2048  # room for hundreds of clients connecting at once


@dataclass(frozen=True)
class FakeBehaviour:
    ttft_s: float = 0.0
    """Seconds from a request's arrival to its first content chunk."""
    tpot_s: float = 0.0
    """Seconds between consecutive content chunks."""
    token_text: str = TOKEN_TEXT
    """Text of every content chunk."""
    models: tuple[str, ...] = ("fake-model",)
    """Ids /v1/models lists, in order."""
    default_max_tokens: int = 16
    """Content chunks of a request that sends no max_tokens."""
    reported_completion_tokens: int | None = None
    """usage.completion_tokens to report; None: the true number of content chunks
    (set it to a wrong value to test mismatch reporting)."""
    fault: str | None = None
    """One of STREAM_FAULTS or REQUEST_FAULTS; None: behave."""
    fault_after: int = 0
    """Content chunks sent before a stream fault (capped at the request's max_tokens)."""
    send_done: bool = True
    """False: end a complete stream after its last chunk without ``data: [DONE]``
    (as HF ``transformers serve`` does)."""
    api_key: str | None = None
    """When set, every route answers 401 unless sent ``Authorization: Bearer <api_key>``."""

    def __post_init__(self):
        if self.ttft_s < 0 or self.tpot_s < 0:
            raise ValueError(f"fake server: ttft_s and tpot_s must be >= 0, got {self.ttft_s}, {self.tpot_s}")
        if self.fault is not None and self.fault not in STREAM_FAULTS + REQUEST_FAULTS:
            raise ValueError(f"fake server: unknown fault {self.fault!r}; "
                             f"known: {', '.join(STREAM_FAULTS + REQUEST_FAULTS)}")
        if self.fault_after < 0 or self.default_max_tokens < 0:
            raise ValueError("fake server: fault_after and default_max_tokens must be >= 0")


@dataclass(frozen=True)
class ReceivedRequest:
    path: str
    body: dict | None
    """The JSON body (None for GET)."""
    headers: dict[str, str]
    arrival_s: float
    """time.monotonic() in the server process when the handler got the request (a stream's
    schedule starts here); CLOCK_MONOTONIC is system-wide, so it compares with the test's."""
    client_port: int
    """The client's TCP port: requests with the same port came over one kept-alive connection."""


class _DropConnection(Exception):
    """Raised inside a stream to make uvicorn close the connection mid-body."""


class _HideDrops(logging.Filter):
    """Keeps uvicorn from logging the deliberate drops as application errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _contains_drop(record.exc_info[1]))


def _contains_drop(exc: BaseException | None) -> bool:
    if isinstance(exc, _DropConnection):
        return True
    group = getattr(exc, "exceptions", None)  # an exception group (Python 3.11+, or anyio's backport)
    return isinstance(group, (list, tuple)) and any(_contains_drop(e) for e in group)


class FakeOpenAIServer:
    """The parent's handle on a fake server process.

    Keyword arguments: the fields of FakeBehaviour (what ``reset()`` returns to).
    The server runs in a child process so that its event loop never waits for
    the test process's GIL (in a thread, a busy client delays the server's
    chunks by whole GIL switch intervals and the schedule stops being exact).
    The child exits when the parent closes its stdin, or dies.
    """

    def __init__(self, **behaviour):
        self._defaults = FakeBehaviour(**behaviour)
        self._behaviour = self._defaults
        self._proc: subprocess.Popen | None = None
        self._port: int | None = None
        self._control: httpx.Client | None = None

    # ---- lifecycle ------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("fake server: not started")
        return self._port

    @property
    def url(self) -> str:
        """Base URL without /v1, e.g. http://127.0.0.1:41234."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeOpenAIServer:
        if self._proc is not None:
            raise RuntimeError("fake server: already started")
        # The parent binds the port (0: the OS picks a free one) and hands the listening
        # socket to the child, so the port is known at once and never guessed.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen(_LISTEN_BACKLOG)
            self._port = sock.getsockname()[1]
            self._proc = subprocess.Popen(
                [sys.executable, __file__, str(sock.fileno()), json.dumps(asdict(self._behaviour))],
                stdin=subprocess.PIPE, pass_fds=[sock.fileno()])
        self._control = httpx.Client(base_url=f"{self.url}/_fake", timeout=_CONTROL_TIMEOUT_S, trust_env=False)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                self._control.get("/state").raise_for_status()
                return self
            except httpx.HTTPError as exc:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"fake server: did not come up ({exc})") from exc
                time.sleep(0.05)

    def stop(self) -> None:
        if self._control is not None:
            self._control.close()
        if self._proc is not None:
            self._proc.stdin.close()  # the child's signal to shut down
            try:
                self._proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = self._control = self._port = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # ---- behaviour and observations ----------------------------------------------------

    @property
    def behaviour(self) -> FakeBehaviour:
        return self._behaviour

    def configure(self, **changes) -> None:
        """Change behaviour fields for the requests that arrive from now on."""
        behaviour = replace(self._behaviour, **changes)  # validated here, before the child sees it
        self._post("/configure", asdict(behaviour))
        self._behaviour = behaviour

    def reset(self) -> None:
        """Back to the constructor's behaviour; forget requests and the stream peak."""
        self._post("/reset", asdict(self._defaults))
        self._behaviour = self._defaults

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received since start or reset(), in arrival order."""
        return [ReceivedRequest(**r) for r in self._state()["requests"]]

    @property
    def open_streams(self) -> int:
        """Streaming responses in progress now."""
        return self._state()["open_streams"]

    @property
    def peak_streams(self) -> int:
        """Most streaming responses in progress at once since start or reset()."""
        return self._state()["peak_streams"]

    def _state(self) -> dict:
        resp = self._require_control().get("/state")
        resp.raise_for_status()
        return resp.json()

    def _post(self, path: str, body: dict) -> None:
        self._require_control().post(path, json=body).raise_for_status()

    def _require_control(self) -> httpx.Client:
        if self._control is None:
            raise RuntimeError("fake server: not started")
        return self._control


class _FakeApp:
    """The child's side: the routes and what they have seen."""

    def __init__(self, behaviour: FakeBehaviour):
        self.behaviour = behaviour
        self.requests: list[dict] = []  # ReceivedRequest fields, ready for /_fake/state
        self.open_streams = 0  # only the event loop touches these: no lock
        self.peak_streams = 0

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/_fake/state", self._state, methods=["GET"]),
            Route("/_fake/configure", self._configure, methods=["POST"]),
            Route("/_fake/reset", self._reset, methods=["POST"]),
        ]

    # ---- control --------------------------------------------------------------------

    async def _state(self, request: Request) -> Response:
        return JSONResponse({"requests": self.requests, "open_streams": self.open_streams,
                             "peak_streams": self.peak_streams})

    async def _configure(self, request: Request) -> Response:
        self.behaviour = _behaviour_from_json(await request.json())
        return JSONResponse({})

    async def _reset(self, request: Request) -> Response:
        self.behaviour = _behaviour_from_json(await request.json())
        self.requests.clear()
        self.peak_streams = self.open_streams
        return JSONResponse({})

    def _record(self, request: Request, body: dict | None, arrival: float) -> None:
        self.requests.append({"path": request.url.path, "body": body, "headers": dict(request.headers),
                              "arrival_s": arrival, "client_port": request.client.port})

    # ---- OpenAI routes --------------------------------------------------------------

    async def _models(self, request: Request) -> Response:
        b = self.behaviour
        self._record(request, None, time.monotonic())
        if (denied := _check_key(request, b)) is not None:
            return denied
        if b.fault == "models_not_json":
            return PlainTextResponse("<html><body>not an API</body></html>", media_type="text/html")
        if b.fault == "models_malformed":
            return JSONResponse({"object": "list", "models": list(b.models)})
        return JSONResponse({"object": "list",
                             "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in b.models]})

    async def _chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def _completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def _generate(self, request: Request, chat: bool) -> Response:
        arrival = time.monotonic()  # the stream schedule's origin
        b = self.behaviour
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        self._record(request, body, arrival)
        if (denied := _check_key(request, b)) is not None:
            return denied
        if b.fault == "http_500":
            return _error(500, FAULT_MESSAGE, "server_error")
        if body.get("stream") is not True:
            return _error(400, "the fake server only streams; send stream: true")
        max_tokens = body.get("max_tokens", b.default_max_tokens)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        model = body.get("model") or (b.models[0] if b.models else "fake-model")
        events = self._events(b, chat, model, max_tokens, include_usage, _word_count(body), arrival)
        return StreamingResponse(events, media_type="text/event-stream")

    async def _events(self, b: FakeBehaviour, chat: bool, model: str, n: int, include_usage: bool,
                      prompt_words: int, arrival: float):
        self.open_streams += 1
        self.peak_streams = max(self.peak_streams, self.open_streams)
        try:
            chunk = _ChunkWriter(chat, model)
            if chat:
                yield chunk.event({"role": "assistant", "content": ""})
            token_event = chunk.event(b.token_text)  # identical for every token: built once
            faulty = b.fault in STREAM_FAULTS
            for i in range(min(b.fault_after, n) if faulty else n):
                await asyncio.sleep(max(0.0, arrival + b.ttft_s + i * b.tpot_s - time.monotonic()))
                yield token_event
            if faulty:
                for event in _fault_events(b.fault):
                    yield event
                return
            yield chunk.event("", finish_reason="length")
            if include_usage:
                completion = n if b.reported_completion_tokens is None else b.reported_completion_tokens
                yield chunk.usage(prompt_words, completion)
            if b.send_done:
                yield b"data: [DONE]\n\n"
        finally:
            self.open_streams -= 1


class _ChunkWriter:
    """Builds the SSE events of one response."""

    def __init__(self, chat: bool, model: str):
        self.chat = chat
        self.head = {"id": "fake-1", "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": int(time.time()), "model": model}

    def event(self, content: str | dict, finish_reason: str | None = None) -> bytes:
        """A chunk with one choice; ``content`` is the text, or the whole chat delta."""
        if self.chat:
            delta = content if isinstance(content, dict) else ({"content": content} if content else {})
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": content, "finish_reason": finish_reason}
        return _sse({**self.head, "choices": [choice]})

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return _sse({**self.head, "choices": [], "usage": {
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}})


def _fault_events(fault: str) -> list[bytes]:
    if fault == "malformed_json":
        return [b'data: {"choices": [{"index": 0, "delta": {"content": " the"\n\n', b"data: [DONE]\n\n"]
    if fault == "error_chunk":
        return [_sse({"error": {"message": FAULT_MESSAGE, "type": "server_error", "code": 500}}),
                b"data: [DONE]\n\n"]
    if fault == "no_done":
        return []
    if fault == "drop_connection":
        raise _DropConnection()
    raise AssertionError(f"not a stream fault: {fault}")


def _sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def _check_key(request: Request, b: FakeBehaviour) -> Response | None:
    if b.api_key is None or request.headers.get("authorization") == f"Bearer {b.api_key}":
        return None
    return _error(401, "invalid API key")


def _word_count(body: dict) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    return len(str(body.get("prompt", "")).split())


def _behaviour_from_json(payload: dict) -> FakeBehaviour:
    known = {f.name for f in fields(FakeBehaviour)}
    values = {k: v for k, v in payload.items() if k in known}
    values["models"] = tuple(values.get("models", ()))
    return FakeBehaviour(**values)


def _serve(fd: int, behaviour: FakeBehaviour) -> None:
    """The child: serve on the inherited listening socket until stdin closes."""
    sock = socket.socket(fileno=fd)
    app = _FakeApp(behaviour)
    config = uvicorn.Config(Starlette(routes=app.routes()), log_config=None, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=1, backlog=_LISTEN_BACKLOG)
    server = uvicorn.Server(config)
    logging.getLogger("uvicorn.error").addFilter(_HideDrops())

    def exit_when_parent_closes_stdin() -> None:
        sys.stdin.buffer.read()  # returns at EOF: the parent called stop() or died
        server.should_exit = True

    threading.Thread(target=exit_when_parent_closes_stdin, daemon=True).start()
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), _behaviour_from_json(json.loads(sys.argv[2])))
