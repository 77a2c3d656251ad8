"""Any OpenAI-compatible endpoint as the system under test: ``tokenmill serve``,
llama.cpp's ``llama-server``, vLLM...

One query is one streamed request (``stream: true``). The clock that matters is
the caller's: ``on_first_token()`` runs the moment the first chunk with content
text is parsed, and the query ends when ``run()`` returns. Output tokens are
counted on the client side, by re-encoding the whole streamed text with the
model's tokenizer once at the end, so every target is counted the same way
whatever its ``usage`` says; the server's own count is kept beside it so that a
mismatch shows in the report, and TPOT is taken over it where it exists
(results.py ``QueryRecord.generated_tokens``).

Every request asks for greedy decoding with ``ignore_eos`` (an extension that
tokenmill, vLLM and llama.cpp honour): a benchmark needs each query to produce
exactly ``max_tokens`` tokens.

The HTTP client is aiohttp (its HTTP parser is C): the bench runs on the same
machine as the server it measures, and every streamed token it parses is CPU
taken from that server. Measured against ``tokenmill serve``, 256 streams of
128 tokens: ~50 us of client CPU per event vs ~130 us with httpx
(docs/PERFORMANCE.md, "The server path").
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import aiohttp

from tokenmill.bench.backend import BackendError, QueryOutcome
from tokenmill.bench.workload import Sample

if TYPE_CHECKING:
    from tokenmill.model.tokenizer import Tokenizer

ROUTES = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
# Keys of the request that each sample or the stream parser depends on: extra_body may not set them.
_RESERVED_KEYS = frozenset({"model", "messages", "prompt", "stream", "max_tokens"})
_CLIP_CHARS = 120  # longest piece of a server's reply quoted in an error line
_DRAIN_TIMEOUT_S = 0.5  # longest wait after [DONE] for the end of the response body
_READ_BUFSIZE = 1 << 20  # aiohttp's line limit follows its read buffer: room for large chunks (logprobs)
KEEPALIVE_S = 2.0
"""Seconds an idle pooled connection is kept: below the 5 s after which uvicorn-based
servers close theirs, so no request goes out on a connection the server is closing."""
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
"""What a request can raise for reasons of the network or the server's connection."""


@dataclass
class _Stream:
    """What one streamed response has delivered so far."""

    pieces: list[str] = field(default_factory=list)
    """Content text of each chunk that carried some, in order."""
    usage_completion_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    finished: bool = False
    """A choice carried finish_reason: the answer is complete."""


class OpenAIBackend:
    """Backend for an OpenAI-compatible HTTP server.

    ``url``: the server base, e.g. ``http://127.0.0.1:8000``; a trailing ``/v1``
    is accepted and dropped. ``api``: ``"chat"`` (``/v1/chat/completions``) or
    ``"completions"`` (``/v1/completions``). ``model``: the model id to ask for;
    None takes the first one ``/v1/models`` lists. ``tokenizer``: the model's
    tokenizer, for counting output tokens; without one, ``output_tokens`` is the
    number of stream chunks that carried content text, which equals the token
    count only on servers that send one token per chunk. ``timeout_s``: the
    longest wait to connect or for the next bytes of a response (an idle
    stream), not a cap on a whole query; waiting for a free connection from
    the pool is never timed out (the pool is the client's own limit).
    ``max_connections``: size of the connection pool, i.e. the most requests
    in flight at once; size it above the benchmark's concurrency. ``extra_body``:
    merged into every request body over the defaults; a key set to None is
    removed from the request (e.g. ``{"ignore_eos": None}`` for a server that
    rejects unknown fields).
    """

    def __init__(self, url: str, api: str = "chat", model: str | None = None, api_key: str | None = None,
                 tokenizer: Tokenizer | None = None, timeout_s: float = 600.0, max_connections: int = 512,
                 extra_body: dict | None = None):
        if api not in ROUTES:
            raise ValueError(f"openai backend: api must be one of {sorted(ROUTES)}, got {api!r}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"openai backend: url must start with http:// or https://, got {url!r}")
        if timeout_s <= 0:
            raise ValueError(f"openai backend: timeout_s must be > 0, got {timeout_s}")
        if max_connections < 1:
            raise ValueError(f"openai backend: max_connections must be >= 1, got {max_connections}")
        reserved = sorted(_RESERVED_KEYS.intersection(extra_body or {}))
        if reserved:
            raise ValueError(f"openai backend: extra_body may not set {reserved} (set per sample or by the backend)")
        self.label = url.rstrip("/").removesuffix("/v1")
        self.api = api
        self.model = model or ""
        """The model id requested; after start(), the one the server lists."""
        self.api_key = api_key
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.extra_body = dict(extra_body or {})
        self._requested_model = model
        self._route = ROUTES[api]
        self._session: aiohttp.ClientSession | None = None
        self._body_base: dict = {}

    # ---- Backend --------------------------------------------------------------------

    async def start(self) -> None:
        """Check the server: list its models and pick ours. Raises BackendError."""
        if self._session is None:
            self._session = self._make_session()
        try:
            listed = await self._list_models()
            self.model = self._pick_model(listed)
        except BackendError:
            await self.close()
            raise
        body = {"model": self.model, "stream": True, "stream_options": {"include_usage": True},
                "temperature": 0, "ignore_eos": True, **self.extra_body}
        self._body_base = {k: v for k, v in body.items() if v is not None}

    async def run(self, sample: Sample, on_first_token: Callable[[], None]) -> QueryOutcome:
        """Stream one sample. A failed query returns an outcome with ``error`` set
        (one line) and the output counted up to the failure; it never raises."""
        if self._session is None:
            raise RuntimeError("openai backend: run() before start()")
        stream = _Stream()
        try:
            async with self._session.post(self.label + self._route, json=self._request_body(sample)) as resp:
                if resp.status != 200:
                    error = f"HTTP {resp.status}: {_error_message(await resp.read())}"
                else:
                    error = await self._read_events(resp, stream, on_first_token)
        except TRANSPORT_ERRORS as exc:
            error = describe_http_error(self.label, exc, self.timeout_s)
            if stream.pieces:
                error += f" after {len(stream.pieces)} content chunks"
        return self._outcome(sample, stream, error)

    async def close(self) -> None:
        """Close the connection pool; safe to call twice."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # ---- start ----------------------------------------------------------------------

    def _make_session(self) -> aiohttp.ClientSession:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        # Connections are kept alive and reused back to back; waiting for a free one
        # from the pool is never timed out (connect=None). An idle connection is
        # dropped after KEEPALIVE_S, before servers close theirs (uvicorn's default,
        # tokenmill's and vLLM's servers: 5 s): reusing one the server had just closed
        # failed queries with "connection reset" at 1-2 QPS in Server runs.
        connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)
        timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=self.timeout_s,
                                        sock_read=self.timeout_s)
        return aiohttp.ClientSession(headers=headers, connector=connector, timeout=timeout,
                                     read_bufsize=_READ_BUFSIZE)

    async def _list_models(self) -> list[str]:
        where = f"{self.label}/v1/models"
        try:
            async with self._session.get(where) as resp:
                status, body = resp.status, await resp.read()
        except TRANSPORT_ERRORS as exc:
            raise BackendError(describe_http_error(self.label, exc, self.timeout_s)) from exc
        text = body.decode(errors="replace")
        if status in (401, 403):
            hint = "pass the server's key with --api-key" if not self.api_key else "check --api-key"
            raise BackendError(f"{where} refused the request (HTTP {status}: {_error_message(body)}); {hint}")
        if status != 200:
            raise BackendError(f"{where}: HTTP {status}: {_error_message(body)} "
                               "(is this an OpenAI-compatible server?)")
        try:
            payload = json.loads(body)
        except ValueError:
            raise BackendError(f"{where} did not return JSON (got {_clip(text)!r}); "
                               "is this an OpenAI-compatible server?") from None
        ids = _model_ids(payload)
        if ids is None:
            raise BackendError(f"{where} is not an OpenAI model list (expected {{\"data\": [{{\"id\": ...}}]}}, "
                               f"got {_clip(text)!r})")
        return ids

    def _pick_model(self, listed: list[str]) -> str:
        wanted = self._requested_model
        if wanted is None:
            if not listed:
                raise BackendError(f"{self.label}/v1/models lists no models; name one with --served-model-name")
            return listed[0]
        # Some servers list nothing yet serve a pinned model (HF `transformers
        # serve <dir>`): an empty list cannot contradict the name asked for.
        if listed and wanted not in listed:
            raise BackendError(f"model {wanted!r} is not served by {self.label}; "
                               f"it lists: {', '.join(listed) or '(none)'}")
        return wanted

    # ---- run ------------------------------------------------------------------------

    def _request_body(self, sample: Sample) -> dict:
        body = {**self._body_base, "max_tokens": sample.max_tokens}
        if self.api == "completions":
            body["prompt"] = sample.prompt
        elif sample.messages is not None:
            body["messages"] = list(sample.messages)
        else:
            body["messages"] = [{"role": "user", "content": sample.prompt}]
        return body

    async def _read_events(self, resp: aiohttp.ClientResponse, stream: _Stream,
                           on_first_token: Callable[[], None]) -> str | None:
        """Consume the SSE stream into ``stream``. Returns None when it ends with
        ``[DONE]``, else a one-line error. Hot path: one json.loads per event,
        on the line's bytes."""
        chat = self.api == "chat"
        pieces = stream.pieces
        try:
            async for line in resp.content:  # one line per item, its b"\n" included
                if not line.startswith(b"data:"):
                    continue  # blank event separators, ": keep-alive" comments, "event:"/"id:" fields
                data = line[5:].strip()
                if data == b"[DONE]":
                    await _drain(resp)
                    return None
                error = self._take_event(data, stream, chat, on_first_token)
                if error is not None:
                    return error
        except ValueError:  # aiohttp: a line longer than its read buffer
            return f"stream line longer than {_READ_BUFSIZE} bytes after {len(pieces)} content chunks"
        if stream.finished:  # HF `transformers serve` closes the stream after its last chunk, sending no [DONE]
            return None
        return f"stream ended without [DONE] after {len(pieces)} content chunks"

    @staticmethod
    def _take_event(data: bytes, stream: _Stream, chat: bool, on_first_token: Callable[[], None]) -> str | None:
        """One SSE event's JSON into ``stream``; a one-line error when it is not a
        chunk of an answer."""
        pieces = stream.pieces
        try:
            chunk = json.loads(data)
        except ValueError:
            return f"malformed JSON in stream chunk after {len(pieces)} content chunks: {_clip_bytes(data)!r}"
        if not isinstance(chunk, dict):
            return f"unexpected stream chunk (not a JSON object): {_clip_bytes(data)!r}"
        if "error" in chunk:
            return f"server error mid-stream after {len(pieces)} content chunks: {_error_text(chunk)}"
        try:
            text = _chunk_text(chunk, chat)
            if any(c.get("finish_reason") for c in chunk.get("choices") or ()):
                stream.finished = True
            usage = chunk.get("usage")
            if usage:
                stream.usage_completion_tokens = usage.get("completion_tokens")
                stream.usage_prompt_tokens = usage.get("prompt_tokens")
        except (AttributeError, LookupError, TypeError):
            return f"unexpected stream chunk shape: {_clip_bytes(data)!r}"
        if text:
            if not pieces:
                on_first_token()
            pieces.append(text)
        return None

    def _outcome(self, sample: Sample, stream: _Stream, error: str | None) -> QueryOutcome:
        text = "".join(stream.pieces)
        if self.tokenizer is None:
            output_tokens = len(stream.pieces)
        else:
            output_tokens = len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0
        usage_out = stream.usage_completion_tokens
        usage_prompt = stream.usage_prompt_tokens
        return QueryOutcome(
            output_tokens=output_tokens, text=text,
            usage_output_tokens=usage_out if isinstance(usage_out, int) else None,
            # The server's count when it reports one (its template may differ), else the workload's.
            prompt_tokens=usage_prompt if isinstance(usage_prompt, int) else len(sample.prompt_token_ids),
            error=error)


# ---- helpers --------------------------------------------------------------------------

async def _drain(resp: aiohttp.ClientResponse) -> None:
    """Read what follows [DONE] (normally just the end of the chunked body) so that the
    connection goes back to the pool: a response closed unread costs a new TCP connection
    for the next query. A server that keeps the body open past [DONE] only loses that
    reuse: the query has succeeded, so a slow or failed drain is not an error."""
    try:
        await asyncio.wait_for(resp.content.read(), _DRAIN_TIMEOUT_S)
    except TRANSPORT_ERRORS:
        return  # the connection is closed instead of reused; nothing is lost


def _chunk_text(chunk: dict, chat: bool) -> str | None:
    """Content text of a stream chunk's first choice; None for role-only, finish and usage chunks."""
    choices = chunk.get("choices")
    if not choices:
        return None
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
    return text if isinstance(text, str) else None


def _model_ids(payload) -> list[str] | None:
    """Ids of an OpenAI model list ``{"data": [{"id": ...}, ...]}``; None when it is not one."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        return None
    return [m["id"] for m in data]


def describe_http_error(target: str, exc: BaseException, timeout_s: float) -> str:
    """One line for a transport failure (one of TRANSPORT_ERRORS) talking to ``target`` (a base URL)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"cannot connect to {target}: timed out after {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {target}: {_connect_reason(exc)}"
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return f"timed out: no data from {target} for {timeout_s:g} s"
    if isinstance(exc, asyncio.TimeoutError):
        return f"timed out talking to {target} ({type(exc).__name__}, {timeout_s:g} s)"
    if isinstance(exc, aiohttp.ClientPayloadError):  # its text nests the parser's exception: say it plainly
        return f"connection to {target} dropped (the response body ended before its end)"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        return f"connection to {target} dropped ({_one_line(str(exc)) or type(exc).__name__})"
    return f"{type(exc).__name__} talking to {target}: {_one_line(str(exc))}"


def _connect_reason(exc: BaseException) -> str:
    """The OS-level reason under a connect error (aiohttp's text repeats the address)."""
    cause: BaseException | None = getattr(exc, "os_error", None) or exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve host ({cause.strerror})"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    return _one_line(str(exc)) or type(exc).__name__


def _error_message(body: bytes) -> str:
    """The message of an error response: OpenAI's ``{"error": {"message": ...}}``,
    FastAPI's ``{"detail": ...}``, or the raw text, clipped to one line."""
    try:
        payload = json.loads(body)
    except ValueError:
        return _clip(body.decode(errors="replace")) or "(empty body)"
    if isinstance(payload, dict) and ("error" in payload or "detail" in payload):
        return _error_text(payload)
    return _clip(json.dumps(payload))


def _error_text(payload: dict) -> str:
    error = payload.get("error", payload.get("detail"))
    if isinstance(error, dict) and "message" in error:
        error = error["message"]
    return _clip(error if isinstance(error, str) else json.dumps(error))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _clip_bytes(data: bytes) -> str:
    return _clip(data.decode(errors="replace"))


def _clip(text: str) -> str:
    text = _one_line(text)
    return text if len(text) <= _CLIP_CHARS else text[:_CLIP_CHARS] + "..."
