"""ASGI middleware: API-key check, request-size limit, and per-route request metrics.

Written as plain ASGI callables (not ``BaseHTTPMiddleware``) so streaming responses pass through untouched.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from .errors import error_body
from .metrics import Metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: paths that answer without an API key (load balancers and probes cannot send one)
OPEN_PATHS = ("/healthz",)
#: route labels of the request metrics; anything else is counted as "other"
ROUTES = ("/v1/teams", "/v1/chat/completions", "/v1/models", "/healthz", "/metrics")


async def send_error(send: Send, status: int, message: str, *, code: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(error_body(status, message, code=code)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value
    return None


class SecurityMiddleware:
    """Refuse requests without the API key (401) and bodies above ``max_body_bytes`` (413).

    The key is read from ``Authorization: Bearer <key>`` (what the ``openai`` client sends) and compared
    with :func:`hmac.compare_digest`, in time independent of where the strings differ.
    """

    def __init__(self, app: ASGIApp, *, api_key: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    def _authorized(self, scope: Scope) -> bool:
        assert self.api_key is not None
        value = _header(scope, b"authorization") or b""
        scheme, _, token = value.partition(b" ")
        if scheme.lower() != b"bearer":
            token = b""
        return hmac.compare_digest(token.strip(), self.api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.api_key is not None and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
            await send_error(
                send, 401, "invalid or missing API key: send the header 'Authorization: Bearer <key>'",
                code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"},
            )  # fmt: skip
            return
        limit = self.max_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > limit
            except ValueError:
                await send_error(send, 400, "the Content-Length header is not a number", code="bad_content_length")
                return
            if too_big:
                await send_error(
                    send, 413, f"the request body has {int(declared)} bytes; this server accepts at most {limit} "
                    "(--max-request-bytes)", code="request_too_large",
                )  # fmt: skip
                return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:  # a chunked body without Content-Length
                    raise HTTPException(413, f"the request body is larger than {limit} bytes (--max-request-bytes)")
            return message

        await self.app(scope, limited_receive, send)


class MetricsMiddleware:
    """Count requests by route and status, and time them to the last byte (streams included)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in ROUTES else "other"
        start = time.perf_counter()
        status = 500

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            self.metrics.requests.labels(route=route, status=str(status)).inc()
            self.metrics.latency.labels(route=route).observe(time.perf_counter() - start)
