"""The OpenAI face of the server: chat requests -> team specs, team results -> chat completions and chunks.

Task text: the last message must come from the user; it is the task. Earlier messages (system/developer
instructions, previous turns) are put before it as context::

    Context:
    Instructions: <system message>
    User: <earlier user message>
    Assistant: <earlier reply>

    Task:
    <last user message>

Domain: ``metaagent.domain`` when given, else :func:`~metaagent.domain.guess_domain` on the last user
message. Sampling: ``temperature``, ``top_p`` and ``max_completion_tokens``/``max_tokens`` (per agent turn)
apply to the team's agents; the designer keeps the server's defaults.

Streaming (``stream: true``): Server-Sent Events in OpenAI's ``chat.completion.chunk`` format, ended by
``data: [DONE]``. The first chunk carries ``delta.role``; then, as they happen, one chunk per team event
with a readable line in ``delta.reasoning_content`` (the field reasoning models use, which chat UIs show as
"thinking") and the event itself in the extension field ``metaagent``:

- ``{"event": "design", "design": {...}}`` — the script, structure, roles and check report;
- ``{"event": "turn", "turn": {"role", "response", "delivery", "finish_reason", ...}}`` — one agent reply;
- ``{"event": "execution", "design": i, "execution": {"index", "status", "answer", "error", ...}}``.

Then the answer in ``delta.content``, a last chunk with ``finish_reason: "stop"`` and
``metaagent: {"event": "team", "team": <the /v1/teams response>}``, a usage chunk (``choices: []``) when
``stream_options.include_usage`` is set, and ``data: [DONE]``. An error after the stream started is sent
as ``data: {"error": {...}}`` followed by ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from metaagent.domain import guess_domain

from .errors import ServeError, bad_request, error_body
from .protocol import (
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatResponseMessage,
    ChatUsage,
    SamplingSpec,
    TeamOptions,
)
from .request_policy import RequestBudget
from .service import Admission, TeamService
from .team import ClientGone, TeamResult, TeamSpec
from .validation import RequestValidator

log = logging.getLogger("metaagent.serve")

CONTEXT_LABELS = {"system": "Instructions", "developer": "Instructions", "user": "User", "assistant": "Assistant"}
#: extra request fields that would change the answer and cannot be honoured -> when they are "on"
UNSUPPORTED = {
    "tools": lambda v: bool(v),
    "functions": lambda v: bool(v),
    "tool_choice": lambda v: v not in (None, "none"),
    "logprobs": lambda v: bool(v),
    "top_logprobs": lambda v: v not in (None, 0),
    "response_format": lambda v: isinstance(v, dict) and v.get("type") not in (None, "text"),
    "echo": lambda v: bool(v),
    "best_of": lambda v: v not in (None, 1),
}
DONE_LINE = b"data: [DONE]\n\n"


# ---- request -> team spec ---------------------------------------------------------------------------------


def _text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise bad_request(
                f"messages[{index}] has a {part.type!r} content part; only text is supported",
                param=f"messages[{index}].content",
                code="unsupported_content",
            )
        parts.append(part.text)
    return "".join(parts)


def task_text(req: ChatCompletionRequest) -> tuple[str, str]:
    """``(task text, last user message)`` from the chat messages (see the module docstring)."""
    messages = req.messages
    for i, m in enumerate(messages):
        if m.role == "tool":
            raise bad_request(f"messages[{i}] is a tool message; this model does not call tools",
                              param=f"messages[{i}].role", code="unsupported_role")  # fmt: skip
    last = messages[-1]
    if last.role != "user":
        raise bad_request(
            f"the last message must be from the user (it is the task the team answers), got {last.role!r}",
            param="messages",
        )
    question = _text(last.content, len(messages) - 1)
    context = [f"{CONTEXT_LABELS[m.role]}: {_text(m.content, i)}" for i, m in enumerate(messages[:-1])]
    if not context:
        return question, question
    return "Context:\n" + "\n".join(context) + f"\n\nTask:\n{question}", question


def chat_spec(req: ChatCompletionRequest, rules: RequestValidator) -> TeamSpec:
    """Validate an OpenAI chat request and turn it into a team spec."""
    rules.check_model(req.model)
    if req.n not in (None, 1):
        raise bad_request("n must be 1: one team answers each request", param="n", code="unsupported_value")
    if req.stop:
        raise bad_request("stop is not supported: the reply is a team's final answer, not one generation",
                          param="stop", code="unsupported_value")  # fmt: skip
    for name, is_on in UNSUPPORTED.items():
        value = (req.model_extra or {}).get(name)
        if value is not None and is_on(value):
            raise bad_request(f"{name} is not supported by a meta-agent team", param=name, code="unsupported_value")
    options = req.metaagent or TeamOptions()
    rules.check_counts(options.n_designs, options.n_executions, "metaagent.")
    text, question = task_text(req)
    rules.check_text_length(text, "messages", "the conversation")
    domain = options.domain or guess_domain(question)
    executor = SamplingSpec(
        temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_completion_tokens or req.max_tokens
    )
    return TeamSpec(
        task=rules.make_task(text, domain),
        n_designs=options.n_designs,
        n_executions=options.n_executions,
        select=options.select,
        designer_sampling=rules.sampling("designer", None),
        executor_sampling=rules.sampling("executor", executor),
        seed=req.seed,
        return_trace=options.return_trace,
    )


# ---- team result -> chat completion -----------------------------------------------------------------------


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def chat_response(result: TeamResult, model: str, return_trace: bool) -> ChatCompletionResponse:
    u = result.usage
    return ChatCompletionResponse(
        id=completion_id(),
        created=result.created,
        model=model,
        choices=[ChatChoice(index=0, message=ChatResponseMessage(content=result.answer or ""), finish_reason="stop")],
        usage=ChatUsage(
            prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, total_tokens=u.total_tokens
        ),
        metaagent=result.response(model, return_trace=return_trace),
    )


def event_text(event: dict[str, Any]) -> str:
    """One readable line (or block) per team event, for ``delta.reasoning_content``."""
    kind = event.get("event")
    if kind == "design":
        d = event["design"]
        if not d["valid"]:
            errors = "; ".join(f"line {e['line']}: [{e['code']}] {e['message']}" for e in d["check"]["errors"])
            return f"Design {d['index']} is invalid: {errors}\n\n"
        pattern = (d.get("structure") or {}).get("pattern", "?")
        roles = ", ".join(r["name"] for r in d["roles"]) or "no agents"
        return f"Design {d['index']} ({pattern}; agents: {roles}):\n```python\n{d['script']}\n```\n\n"
    if kind == "turn":
        t = event["turn"]
        return f"[{t['role']}] {t['response'].strip()}\n\n"
    if kind == "execution":
        e = event["execution"]
        error = f" ({e['error']['type']}: {e['error']['message']})" if e.get("error") else ""
        return f"Execution {e['index']} of design {event['design']} ended {e['status']}{error}.\n\n"
    return ""


class ChunkWriter:
    """Builds the SSE lines of one streamed completion (same id, created and model on every chunk)."""

    def __init__(self, model: str) -> None:
        self.id = completion_id()
        self.created = int(time.time())
        self.model = model

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **extra,
        }
        return sse(body)

    def usage(self, result: TeamResult) -> bytes:
        u = result.usage
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                      "total_tokens": u.total_tokens},
        }  # fmt: skip
        return sse(body)


def sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


_END = object()


def stream_chat(
    service: TeamService, spec: TeamSpec, admission: Admission, model: str, include_usage: bool
) -> AsyncIterator[bytes]:
    """Start the team now and return the SSE body of its streamed completion (see the module docstring).

    Starting before the body is iterated means ``admission`` is always released (when the team's thread
    ends), even if the client disconnects before the first byte.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def emit(event: dict[str, Any]) -> None:  # called from the team's threads
        loop.call_soon_threadsafe(queue.put_nowait, event)

    budget = RequestBudget(service.config.request_timeout_s)
    future = service.submit(spec, budget, admission, emit)
    future.add_done_callback(lambda _: queue.put_nowait(_END))
    return _sse_body(ChunkWriter(model), queue, future, budget, spec, include_usage)


async def _sse_body(
    out: ChunkWriter,
    queue: asyncio.Queue[Any],
    future: asyncio.Future[TeamResult],
    budget: RequestBudget,
    spec: TeamSpec,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    try:
        yield out.chunk({"role": "assistant", "content": ""})
        while (event := await queue.get()) is not _END:
            yield out.chunk({"reasoning_content": event_text(event)}, metaagent=event)
        try:
            result = future.result()
        except ServeError as e:
            yield sse(e.body())
            yield DONE_LINE
            return
        except ClientGone:
            return
        except Exception:
            error_id = uuid.uuid4().hex[:12]
            log.exception("internal error %s while streaming a team", error_id)
            yield sse(error_body(500, f"internal server error (id {error_id}); see the server log"))
            yield DONE_LINE
            return
        yield out.chunk({"content": result.answer or ""})
        team = result.response(out.model, return_trace=spec.return_trace).model_dump()
        yield out.chunk({}, "stop", metaagent={"event": "team", "team": team})
        if include_usage:
            yield out.usage(result)
        yield DONE_LINE
    finally:
        if not future.done():  # the client went away mid-stream: stop the team's model calls
            budget.cancel("the client disconnected")
