"""The FastAPI app: OpenAI-compatible routes over any EngineClient.

A request's way: route -> protocol validation (protocol.py) -> chat template
and tokenize (state.py) -> engine.generate -> JSON or SSE (generation.py).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tokenmill.engine.client import EngineClient
from tokenmill.serve.chat import create_chat_completion
from tokenmill.serve.completions import create_completion
from tokenmill.serve.errors import install_error_handlers
from tokenmill.serve.middleware import BodyLimitMiddleware, RequestCounterMiddleware
from tokenmill.serve.responses import ModelCard, ModelList
from tokenmill.serve.state import ServerState

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


@public.get("/health")
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@public.get("/metrics")
async def metrics(request: Request) -> Response:
    body, content_type = _state(request).metrics.render()
    return Response(body, media_type=content_type)


def build_app(engine: EngineClient, *, api_key: str | None = None,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_tokens_limit: int | None = None) -> FastAPI:
    """One app per engine; each app owns its metrics registry."""
    app = FastAPI(title="tokenmill", docs_url=None, redoc_url=None, openapi_url=None)
    state = ServerState(engine, api_key=api_key, max_tokens_limit=max_tokens_limit)
    app.state.tokenmill = state
    app.include_router(v1)
    app.include_router(public)
    install_error_handlers(app)
    # Added last = outermost: every answer, 413s included, is counted.
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    app.add_middleware(RequestCounterMiddleware, metrics=state.metrics)
    return app
