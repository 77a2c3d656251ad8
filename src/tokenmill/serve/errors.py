"""OpenAI error bodies and the exception handlers that produce them.

Every failure the server answers looks like
``{"error": {"message", "type", "param", "code"}}``; input problems are 4xx
and never 500, and none of them stops the server.
"""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from tokenmill.errors import EngineUnavailableError, QueueFullError, RequestError
from tokenmill.serve.protocol import param_from_loc

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
          500: "server_error", 503: "server_error"}


class ApiError(Exception):
    """An error answered as an OpenAI error body with ``status``."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(err.status, err.message, err.param, err.code),
                        status_code=err.status, headers=err.headers)


def from_validation_errors(errors: list[dict]) -> ApiError:
    """pydantic errors -> a 400 naming the first offending field."""
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    if loc and loc[0] == "body":  # FastAPI prefixes body fields with 'body'
        loc = loc[1:]
    param = param_from_loc(loc)
    if first.get("type") == "json_invalid":
        return ApiError(400, f"the request body is not valid JSON: {first.get('msg')}")
    detail = "; ".join(f"{param_from_loc(tuple(e.get('loc', ()))) or 'body'}: {e.get('msg')}"
                       for e in errors[:3])
    return ApiError(400, detail, param=param)


def from_request_error(exc: ValueError, rename: dict[str, str] | None = None) -> ApiError:
    """A RequestError, or any ValueError the engine raises for its input (the
    EngineClient contract: 'field: message'), as a 400 naming the field."""
    message = str(exc)
    param = getattr(exc, "param", None)
    if param is None:
        match = re.match(r"([a-z_]+): ", message)
        param = match.group(1) if match else None
    renamed = (rename or {}).get(param, param)
    if renamed != param and message.startswith(f"{param}: "):
        message = f"{renamed}: {message[len(param) + 2:]}"
    return ApiError(400, message, param=renamed)


def queue_full(exc: QueueFullError) -> ApiError:
    return ApiError(429, f"the server is at capacity: {exc}; retry later", code="rate_limit_exceeded",
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(_: Request, exc: ApiError):
        return error_response(exc)

    async def on_request_error(_: Request, exc: RequestError):
        return error_response(from_request_error(exc))

    async def on_queue_full(_: Request, exc: QueueFullError):
        return error_response(queue_full(exc))

    async def on_unavailable(_: Request, exc: EngineUnavailableError):
        return error_response(ApiError(503, f"the engine is unavailable: {exc}; retry later",
                                       code="engine_unavailable",
                                       headers={"Retry-After": str(RETRY_AFTER_SECONDS)}))

    async def on_validation(_: Request, exc: RequestValidationError | ValidationError):
        return error_response(from_validation_errors(list(exc.errors())))

    async def on_http(_: Request, exc: StarletteHTTPException):
        return error_response(ApiError(exc.status_code, str(exc.detail), headers=exc.headers))

    async def on_unexpected(_: Request, exc: Exception):
        log.exception("unhandled error while serving a request")
        return error_response(ApiError(500, f"internal server error: {type(exc).__name__}"))

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestError, on_request_error)
    app.add_exception_handler(QueueFullError, on_queue_full)
    app.add_exception_handler(EngineUnavailableError, on_unavailable)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
