"""The HTTP routes of ``metaagent-serve`` (FastAPI). Thin: validate, admit, hand over to the service.

    GET  /healthz               200 {"status": "ok", ...} when ready; 503 while loading / shutting down
    GET  /metrics               Prometheus text format
    GET  /v1/models             the served meta-agent (OpenAI format)
    POST /v1/teams              a task in, a designed team out (see :mod:`.protocol`)
    POST /v1/chat/completions   OpenAI-compatible; the team is in the ``metaagent`` extension field

Errors are JSON in the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``: 400 malformed
JSON or an unsupported value, 401 wrong key, 404 unknown model or path, 413 body or task too large, 422 a
well-formed body with invalid fields, 429 too many requests in flight, 500 an internal error (an id to find
in the server log, never a stack trace), 503 loading / shutting down / backend down, 504 time budget spent.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import ServeError, error_body
from .metrics import CONTENT_TYPE
from .middleware import MetricsMiddleware, SecurityMiddleware
from .openai_compat import chat_response, chat_spec, stream_chat
from .protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ModelCard,
    ModelList,
    TeamRequest,
    TeamResponse,
)
from .service import READY, TeamService
from .team import ClientGone

log = logging.getLogger("metaagent.serve")
CLIENT_CLOSED = 499  # nginx's "client closed request": only ever seen in metrics and logs


def create_app(
    service: TeamService, *, start_loading: bool = True, on_load_failure: Callable[[BaseException], None] | None = None
) -> FastAPI:
    """The ASGI app over ``service``. With ``start_loading`` the models load in the background at start-up
    (requests get 503 meanwhile); the service is closed at shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if start_loading:
            service.start(on_failure=on_load_failure)
        yield
        service.begin_drain()
        await asyncio.get_running_loop().run_in_executor(None, service.close)

    app = FastAPI(
        title="metaagent-serve",
        summary="A trained meta-agent behind HTTP: a task in, a designed team out.",
        lifespan=lifespan,
    )
    app.state.service = service
    _install_error_handlers(app)
    model_name = service.config.served_model_name

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        health = service.health()
        return JSONResponse(health, status_code=200 if service.state == READY else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return PlainTextResponse(service.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models", response_model=ModelList)
    async def models() -> ModelList:
        info: dict[str, Any] = {"state": service.state, "backend": service.config.backend}
        if service.models is not None:
            info["models"] = service.models.describe()
        if service.frozen is not None:
            info["frozen_designer"] = service.frozen.name
        return ModelList(data=[ModelCard(id=model_name, created=service.created, metaagent=info)])

    @app.post("/v1/teams", response_model=TeamResponse)
    async def teams(body: TeamRequest, request: Request) -> TeamResponse:
        spec = service.validator.team_spec(body)
        admission = service.admit()
        result = await service.run(spec, admission, is_disconnected=request.is_disconnected)
        return result.response(model_name, return_trace=spec.return_trace)

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
        spec = chat_spec(body, service.validator)
        admission = service.admit()
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                stream_chat(service, spec, admission, body.model, include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        result = await service.run(spec, admission, is_disconnected=request.is_disconnected)
        return chat_response(result, body.model, spec.return_trace)

    # the middleware added last is the outermost: metrics see every response, 401/413 included
    app.add_middleware(SecurityMiddleware, api_key=service.config.api_key, max_body_bytes=service.config.max_request_bytes)
    app.add_middleware(MetricsMiddleware, metrics=service.metrics)
    return app


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str | None]:
    """``(status, message, param)``: 400 for JSON that does not parse, 422 for fields that do not validate."""
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        e = next(e for e in errors if e.get("type") == "json_invalid")
        detail = (e.get("ctx") or {}).get("error", "JSON decode error")
        pos = e["loc"][1] if len(e.get("loc", ())) > 1 else "?"
        return 400, f"the request body is not valid JSON ({detail} at character {pos})", None
    parts, first = [], None
    for e in errors[:5]:
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        where = ".".join(loc) or "body"
        first = first or where
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "invalid request: " + "; ".join(parts) + more, first


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message, param = _validation_message(exc)
        code = "invalid_json" if status == 400 else "invalid_fields"
        return JSONResponse(error_body(status, message, code=code, param=param), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        messages = {404: f"no route {request.method} {request.url.path}; see /docs",
                    405: f"{request.method} is not allowed on {request.url.path}"}  # fmt: skip
        message = messages.get(exc.status_code, str(exc.detail))
        return JSONResponse(error_body(exc.status_code, message, code=f"http_{exc.status_code}"),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))  # fmt: skip

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        error_id = uuid.uuid4().hex[:12]
        log.error("internal error %s on %s %s", error_id, request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            error_body(500, f"internal server error (id {error_id}); see the server log", code="internal_error"),
            status_code=500,
        )
