"""A minimal OpenAI-compatible chat server on 127.0.0.1 for the OpenAIPolicy tests (stdlib only).

The ``model`` field of a request picks the behaviour:

- ``echo``: vLLM-style answer ``echo:<last message>`` with token ids, prompt ids and log-probs;
- ``plain``: text only (no log-probs, no token ids), like a hosted API;
- ``flaky``: per message text, 429 (Retry-After: 0), then 500, then the ``echo`` answer;
- ``down``: always 503;
- ``slow``: sleeps 1 s before answering;
- ``reject``: 400 with an error message; ``auth``: 401;
- ``sleepy``: sleeps 0.1 s; the server records the peak number of these requests in flight.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StubState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self.active = 0
        self.peak = 0


def _echo_response(body: dict[str, Any]) -> dict[str, Any]:
    text = "echo:" + body["messages"][-1]["content"]
    ids = list(text.encode("utf-8"))
    prompt_ids = list("".join(m["content"] for m in body["messages"]).encode("utf-8"))
    finish = "stop"
    if len(ids) > body.get("max_tokens", 10**9):
        ids = ids[: body["max_tokens"]]
        text = bytes(ids).decode("utf-8", errors="ignore")
        finish = "length"
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish,
    }
    extra = body.get("return_token_ids")
    if body.get("logprobs"):
        as_ids = body.get("return_tokens_as_token_ids")
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{t}" if as_ids else chr(t),
                    "logprob": -0.25 * (k + 1),
                    "bytes": [t],
                    "top_logprobs": [],
                }
                for k, t in enumerate(ids)
            ]
        }
    out: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids) + 7,
            "completion_tokens": len(ids),
            "total_tokens": len(prompt_ids) + 7 + len(ids),
        },
    }
    if extra:
        choice["token_ids"] = ids
        out["prompt_token_ids"] = prompt_ids
    return out


def make_handler(state: StubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, message: str, headers: dict[str, str] | None = None) -> None:
            self._send(code, {"error": {"message": message, "type": "stub", "code": code}}, headers)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if not self.path.endswith("/chat/completions"):
                return self._error(404, f"no route {self.path}")
            counted = body.get("model") == "sleepy"
            with state.lock:
                state.bodies.append(body)
                if counted:
                    state.active += 1
                    state.peak = max(state.peak, state.active)
            try:
                self._answer(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)
            finally:
                if counted:
                    with state.lock:
                        state.active -= 1

        def _answer(self, body: dict[str, Any]) -> None:
            model = body.get("model")
            if model == "flaky":
                key = body["messages"][-1]["content"]
                with state.lock:
                    state.attempts[key] = n = state.attempts.get(key, 0) + 1
                if n == 1:
                    return self._error(429, "rate limited", {"Retry-After": "0"})
                if n == 2:
                    return self._error(500, "internal error")
                return self._send(200, _echo_response(body))
            if model == "down":
                return self._error(503, "overloaded")
            if model == "reject":
                return self._error(400, "unknown field return_token_ids")
            if model == "auth":
                return self._error(401, "bad key")
            if model == "slow":
                time.sleep(1.0)
            if model == "sleepy":
                time.sleep(0.1)
            if model == "plain":
                out = _echo_response({**body, "logprobs": False, "return_token_ids": False})
                return self._send(200, out)
            return self._send(200, _echo_response(body))

    return Handler


class StubServer:
    """Runs the stub in a daemon thread; ``base_url`` is its ``/v1`` root. Use as a context manager."""

    def __init__(self) -> None:
        self.state = StubState()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self.state))
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
