"""The FastAPI app: OpenAI-compatible routes over any EngineClient.

A request's way: route -> protocol validation (protocol.py) -> chat template
and tokenize (state.py) -> engine.generate -> JSON or SSE (generation.py).
"""

from __future__ import annotations

import os
import socket

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tokenmill.engine.client import EngineClient
from tokenmill.serve.chat import create_chat_completion
from tokenmill.serve.completions import create_completion
from tokenmill.serve.errors import install_error_handlers
from tokenmill.serve.middleware import BodyLimitMiddleware, RequestCounterMiddleware
from tokenmill.serve.responses import ModelCard, ModelList
from tokenmill.serve.state import ServerState
from tokenmill.serve.tools import ToolConfig

DEFAULT_MAX_BODY_BYTES = 1 << 20


def _state(request: Request) -> ServerState:
    return request.app.state.tokenmill


def _require_api_key(request: Request) -> None:
    _state(request).check_api_key(request.headers.get("authorization"))


v1 = APIRouter(prefix="/v1", dependencies=[Depends(_require_api_key)])
public = APIRouter()


@v1.post("/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await create_chat_completion(request, _state(request))


@v1.post("/completions")
async def completions(request: Request) -> Response:
    return await create_completion(request, _state(request))


@v1.get("/models")
async def models(request: Request) -> JSONResponse:
    s = _state(request)
    card = ModelCard(id=s.model_name, created=s.created, max_model_len=s.max_model_len)
    return JSONResponse(ModelList(data=[card]).model_dump(mode="json"))


@v1.get("/workers")
async def workers(request: Request) -> JSONResponse:
    """The engine workers behind this server (one, in-process, without --workers);
    with prefill workers, also the disaggregation's decisions and transfers."""
    s = _state(request)
    body = {"object": "list", "data": describe_workers(s.engine)}
    describe_disagg = getattr(s.engine, "describe_disagg", None)
    if describe_disagg is not None and s.engine.disagg is not None:
        body["disaggregation"] = describe_disagg()
    return JSONResponse(body)


@public.get("/health")
async def health(request: Request) -> JSONResponse:
    """503 when no engine worker is alive (a cluster whose workers are all down)."""
    if not any(w["alive"] for w in describe_workers(_state(request).engine)):
        return JSONResponse({"status": "unavailable", "reason": "no engine worker is alive"}, status_code=503)
    return JSONResponse({"status": "ok"})


def describe_workers(engine) -> list[dict]:
    describe = getattr(engine, "describe_workers", None)  # a ClusterEngine
    if describe is not None:
        return describe()
    s = engine.stats()
    return [{"id": "in-process", "node": socket.gethostname(), "pid": os.getpid(), "alive": True,
             "role": "aggregated", "load": {"running": s.num_running, "waiting": s.num_waiting},
             "kv_blocks_used": s.kv_blocks_used, "kv_blocks_total": s.kv_blocks_total, "kv_usage": s.kv_usage,
             "prefix_cache_hit_rate": s.prefix_hit_rate}]


@public.get("/metrics")
async def metrics(request: Request) -> Response:
    body, content_type = _state(request).metrics.render()
    return Response(body, media_type=content_type)


def build_app(engine: EngineClient, *, api_key: str | None = None,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_tokens_limit: int | None = None,
              stream_interval: int = 1, tool_config: ToolConfig | None = None,
              reasoning_parser: str | None = None) -> FastAPI:
    """One app per engine; each app owns its metrics registry."""
    app = FastAPI(title="tokenmill", docs_url=None, redoc_url=None, openapi_url=None)
    state = ServerState(engine, api_key=api_key, max_tokens_limit=max_tokens_limit,
                        stream_interval=stream_interval, tool_config=tool_config,
                        reasoning_parser=reasoning_parser)
    app.state.tokenmill = state
    app.include_router(v1)
    app.include_router(public)
    install_error_handlers(app)
    # Added last = outermost: every answer, 413s included, is counted.
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    app.add_middleware(RequestCounterMiddleware, metrics=state.metrics)
    return app
