"""Errors of the server, all returned in the OpenAI error shape.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "task", "code": "task_too_long"}}

Every status the server returns on purpose is listed in :data:`ERROR_TYPES`; a response never carries a
stack trace (an unexpected exception becomes a 500 naming an id that is also in the server log).
"""

from __future__ import annotations

from typing import Any

from metaagent.errors import MetaAgentError

#: HTTP status -> OpenAI error ``type``
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class ServeError(MetaAgentError):
    """An error with its HTTP status; the message says what was wrong and how to fix it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, code=self.code, param=self.param)


def error_body(status: int, message: str, *, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """The OpenAI error object for ``status``."""
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
            "param": param,
            "code": code,
        }
    }


def bad_request(message: str, *, param: str | None = None, code: str = "invalid_value") -> ServeError:
    return ServeError(400, message, code=code, param=param)


def too_large(message: str, *, param: str | None = None, code: str = "too_large") -> ServeError:
    return ServeError(413, message, code=code, param=param)


def unavailable(message: str, *, code: str, retry_after_s: int = 5) -> ServeError:
    return ServeError(503, message, code=code, headers={"Retry-After": str(retry_after_s)})
